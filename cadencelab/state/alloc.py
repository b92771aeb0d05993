"""Demand-sized allocation: every contract-managed region at the extent its clocks imply."""

from __future__ import annotations

import pandas as pd
import torch

from ..contract.derivation import demand_shape, region_table


def allocation_plan(decl) -> pd.DataFrame:
    """One row per region: the shape and bytes the state rule allocates, and where it lives.

    Regions ``resident_in`` another region take no storage of their own (an in-buffer carry).
    """
    t = region_table(decl)
    plan = t[["region", "role", "demand_shape", "demand_bytes", "stock_shape", "stock_bytes", "resident_in"]].copy()
    plan["allocated_bytes"] = [0.0 if isinstance(r, str) else b for r, b in zip(plan["resident_in"], plan["demand_bytes"])]
    return plan


def allocate(decl, device="cpu", dtype=None, regions=None) -> dict[str, torch.Tensor]:
    """Zeroed tensors at demand shape for ``regions`` (default: all not resident elsewhere)."""
    out = {}
    for r in decl.regions:
        if regions is not None and r.name not in regions:
            continue
        if regions is None and r.resident_in is not None:
            continue
        dt = dtype or getattr(torch, r.dtype)
        out[r.name] = torch.zeros(demand_shape(decl, r.name), dtype=dt, device=device)
    return out
