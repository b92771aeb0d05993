"""Demand-sized allocation: every contract-managed region at the extent its clocks imply, refused
with one line naming the region when it cannot fit in the memory the device has free."""

from __future__ import annotations

import math
import os

import pandas as pd
import torch

from ..contract.derivation import demand_shape, region_table

__all__ = ["AllocationRefused", "device_problem",
           "free_bytes", "format_bytes", "check_fits", "check_copies_fit", "allocation_plan",
           "allocate"]


class AllocationRefused(MemoryError):
    """An allocation larger than the memory free on its device; the message names what asked for it."""


def free_bytes(device="cpu") -> int:
    """Bytes a new allocation can take on ``device`` now: CUDA's free device memory, or the host's
    available memory (``MemAvailable`` in /proc/meminfo, else the free physical pages)."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 2**63 - 1  # unknown: no bound from here


def format_bytes(n: float) -> str:
    if not math.isfinite(n):
        return "unbounded"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def check_fits(need: float, device, what: str) -> None:
    """Raise :class:`AllocationRefused` when ``need`` bytes (for ``what``) exceed what ``device`` has free."""
    free = free_bytes(device)
    if not math.isfinite(need) or need > free:
        raise AllocationRefused(f"{what} needs {format_bytes(need)} ({need:.4g} bytes); "
                                f"{format_bytes(free)} is free on {torch.device(device)}")


def check_copies_fit(modules, device, copies: int, what: str) -> None:
    """Refuse ``copies`` copies of ``modules``' buffers (a lane pool's lanes: each owns the solver caches and
    workspaces, the parameters are shared) before any is made, when they exceed the memory free on
    ``device``; the error names ``what``, the copies asked for, the bytes per copy and how many fit."""
    per = sum(b.numel() * b.element_size() for m in modules for b in m.buffers())
    free = free_bytes(device)
    fit = free // per if per else copies
    if copies > fit:
        raise AllocationRefused(f"{what}={copies} need at least {copies} x {format_bytes(per)} of buffers; "
                                f"{format_bytes(free)} is free on {torch.device(device)}: at most {fit} fit")


def allocation_plan(decl) -> pd.DataFrame:
    """One row per region: the shape and bytes the state rule allocates, and where it lives.

    Regions ``resident_in`` another region take no storage of their own (an in-buffer carry).
    """
    t = region_table(decl)
    plan = t[["region", "role", "demand_shape", "demand_bytes", "stock_shape", "stock_bytes", "resident_in"]].copy()
    plan["allocated_bytes"] = [0.0 if isinstance(r, str) else b for r, b in zip(plan["resident_in"], plan["demand_bytes"])]
    return plan


def allocate(decl, device="cpu", dtype=None, regions=None) -> dict[str, torch.Tensor]:
    """Zeroed tensors at demand shape for ``regions`` (default: all not resident elsewhere).

    Nothing is allocated unless all of it fits: :class:`AllocationRefused` names the largest region,
    its shape and bytes, and the memory free on ``device``; an unknown region name is a KeyError
    naming the declared ones."""
    names = {r.name for r in decl.regions}
    unknown = sorted(set(regions or ()) - names)
    if unknown:
        raise KeyError(f"allocate: no region {', '.join(map(repr, unknown))} in {decl.model} (regions: {sorted(names)})")
    plan = []
    for r in decl.regions:
        if regions is not None and r.name not in regions:
            continue
        if regions is None and r.resident_in is not None:
            continue
        dt = dtype or getattr(torch, r.dtype)
        shape = demand_shape(decl, r.name)
        plan.append((r.name, shape, dt, math.prod(shape) * torch.empty((), dtype=dt).element_size()))
    if plan:
        name, shape, _, biggest = max(plan, key=lambda p: p[3])
        check_fits(sum(p[3] for p in plan), device,
                   f"allocate({decl.model}): {len(plan)} region(s), the largest {name!r} at {tuple(shape)} "
                   f"({format_bytes(biggest)})")
    return {name: torch.zeros(shape, dtype=dt, device=device) for name, shape, dt, _ in plan}


def device_problem(text: str) -> str | None:
    """Why ``text`` is not a device this torch build and machine can use (``cpu``, ``cuda``, ``cuda:N``, and
    ``cpu:0``); None when it is. One source for every entry's ``--device`` check."""
    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError, TypeError):
        return f"not a device: {str(text)[:40]!r} (expected cpu, cuda or cuda:N)"
    if dev.type == "cpu":
        return None
    if dev.type != "cuda":
        return f"device type {dev.type!r} is not supported (expected cpu, cuda or cuda:N)"
    if not torch.cuda.is_available():
        why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA device is visible"
        return f"{text!r} cannot be used: {why} (use --device cpu)"
    n = torch.cuda.device_count()
    if dev.index is not None and dev.index >= n:
        return f"{text!r}: only {n} CUDA device(s) are visible (cuda:0..cuda:{n - 1})"
    return None
