"""The kit's view of a declaration's state regions: shapes, bases at a turn's start, checks naming the region."""

from __future__ import annotations

from typing import Mapping

import torch

from ...contract import Declaration

__all__ = ["state_regions", "constant_extent", "shape_of", "declared_text", "check_shape", "check_initial", "base_of"]


def state_regions(decl: Declaration) -> list:
    return [r for r in decl.regions if r.role == "state" and r.resident_in is None]


def constant_extent(policy) -> bool:
    """Policies whose tensor always has the same extent (zero-filled at a turn's start)."""
    return policy.constant_extent


def shape_of(decl: Declaration, region, ext) -> tuple:
    """The region's declared shape with ``ext`` on its clock axis (``ext`` may be a placeholder such as "n")."""
    return tuple(ext if d == region.clock else (decl.dims[d] if isinstance(d, str) else d) for d in region.shape)


def declared_text(decl: Declaration, region) -> str:
    return f"the {decl.model} declaration's Region('{region.name}', shape={tuple(region.shape)})"


def on_device(t: torch.Tensor, device) -> bool:
    """``t`` lives on ``device`` ("cuda" meaning the current CUDA device, as tensors made there say "cuda:0")."""
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return t.device == d


def check_shape(decl: Declaration, region, t, what: str, device=None) -> None:
    """``t`` has the region's declared dims (any extent on its clock axis), its declared dtype and (``device``
    given) the carries' device, else a one-line error naming the region: nothing is cast into a carry."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{what} for region '{region.name}' is a {type(t).__name__}, not a tensor")
    want = shape_of(decl, region, "n")
    if t.dim() != len(want) or any(w != "n" and w != g for w, g in zip(want, t.shape)):
        fixed = sorted(w for w in want if w != "n")
        reordered = t.dim() == len(want) and all(any(g == w for g in t.shape) for w in fixed)
        raise ValueError(f"{what} for region '{region.name}' has shape {tuple(t.shape)}; {declared_text(decl, region)} "
                         f"wants {want} (n on its clock axis '{region.clock}')"
                         + (": declare the region's dims in the order of the step's tensors" if reordered else ""))
    dtype = getattr(torch, region.dtype)
    if t.dtype != dtype:
        raise ValueError(f"{what} for region '{region.name}' is {t.dtype}; {declared_text(decl, region)} declares "
                         f"dtype='{region.dtype}' and its carry holds {dtype} (nothing is cast): return {dtype}, or "
                         f"declare the dtype the step computes in")
    if device is not None and not on_device(t, device):
        raise ValueError(f"{what} for region '{region.name}' is on {t.device}; the runtime's carries are on "
                         f"{torch.device(device)}: run the step (its modules and inputs) on the runtime's device")


def check_initial(decl: Declaration, regions, init) -> None:
    """A region declared with an initial extent needs ``init`` (nothing else can give its first frames)."""
    need = [r for r in regions if r.initial]
    if need and init is None:
        r = need[0]
        raise ValueError(f"region '{r.name}' declares initial={r.initial} frames at a turn's start, but no init= gives "
                         f"them: pass init=lambda prompt: {{'{r.name}': <its first {r.initial} frames>}}, or declare "
                         f"initial=0")


def base_of(decl: Declaration, region, device, given: Mapping | None) -> torch.Tensor:
    """A region's cache at a turn's start: ``given[name]`` (priming), zeros at a constant extent, else empty.

    A region of constant extent starts zero-filled at it (its policy's ``base_extent``); a region declared
    with ``initial`` frames must be given them."""
    if given and region.name in given:
        t = given[region.name]
        check_shape(decl, region, t, "init")
        if region.initial and t.shape[region.clock_axis] != region.initial:
            raise ValueError(f"init gave region '{region.name}' {t.shape[region.clock_axis]} frames; "
                             f"{declared_text(decl, region)} declares initial={region.initial}")
        return t.to(device)
    if region.initial:
        raise ValueError(f"region '{region.name}' declares initial={region.initial} frames at a turn's start; init "
                         f"returned none for it (it returned {sorted(given or {})})")
    return torch.zeros(shape_of(decl, region, region.policy.base_extent), dtype=getattr(torch, region.dtype), device=device)


