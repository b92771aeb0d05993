"""Notebook 2's exercises: extents, K and rho on the Token2wav declaration with chosen clocks.

    check_extents    cached extents a region passes through
    check_K          steady shape classes per operator
    check_rho        stock bytes over declared bytes per region
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from ...contract import (
    Declaration, SlidingWindow, cached_at, catalog_counts, catalog_width, envelope, nbytes, region_shape, region_table,
    settle_calls,
)
from ...adapters.token2wav.clocks import token2wav_declaration
from .machinery import Exercise, Mistake

__all__ = ["EXTENTS", "EXTENT_REGIONS", "K_CLASSES", "RHO", "RHO_REGIONS", "check_K", "check_extents", "check_rho"]


# =======================================================================================
# notebook 2: extents, K, rho on the Token2wav declaration with chosen clocks
# =======================================================================================


@dataclass
class _T2W:
    decl: Declaration
    regions: tuple
    hint_fields: dict


def _prepare_t2w(f_prompt: int | None = None, f_retained: int | None = None, f_chunk: int | None = None,
                 n_steps: int | None = None, regions: tuple | None = None) -> _T2W:
    decl = token2wav_declaration(f_prompt=f_prompt, f_retained=f_retained, f_chunk=f_chunk, n_steps=n_steps)
    p = decl.params
    if regions is not None:
        names = {r.name for r in decl.regions}
        bad = [r for r in regions if r not in names]
        if bad:
            raise ValueError(f"unknown region(s) {bad}; the Token2wav declaration has {sorted(names)}")
    return _T2W(decl, tuple(regions) if regions is not None else (),
                dict(f_prompt=p["f_prompt"], f_retained=p["f_retained"], f_chunk=p["f_chunk"], f_call=p["f_call"],
                     n_steps=p["n_steps"], bound=p["f_prompt"] + p["f_retained"],
                     tokens_per_chunk=p["tokens_per_chunk"]))


def _walk(r) -> tuple:
    """The distinct cached shape extents a bounded region passes through (entering each call)."""
    n = int(settle_calls(r)) + 1
    return tuple(sorted({int(r.policy.shape_extent(int(cached_at(r, t)))) for t in range(n)}))


#: regions whose extents the extents exercise asks for by default: a growing prompt cache and a window
EXTENT_REGIONS = ("estimator_att_cache", "vocoder_mel_cache")


def _extent_regions(c: _T2W) -> list:
    return [c.decl.region(n) for n in (c.regions or EXTENT_REGIONS)]


def _extents_with(c: _T2W, change: Callable) -> dict:
    return {r.name: _walk(change(r)) for r in _extent_regions(c)}


def _stop_short(r) -> tuple:
    """The walk without its truncated last step: only whole strides below the bound."""
    walk = _walk(r)
    return tuple(e for e in walk if (e - r.initial) % r.growth == 0) if r.growth else walk


EXTENTS = Exercise(
    "t2w_extents", 2,
    "The cached extents (frames) each region passes through, entering each call, for the chosen clocks.",
    _prepare_t2w, lambda c: _extents_with(c, lambda r: r),
    mistakes=(
        Mistake("lookahead_in_stride", "a steady call commits f_chunk = {f_chunk} frames; its lookahead is read, "
                "not committed (f_call = {f_call} is only a final flush).",
                lambda c: _extents_with(c, lambda r: dataclasses.replace(r, growth=r.call_max)),
                plant=dict(f_retained=110)),
        Mistake("prompt_forgotten", "the cache starts each turn holding the prompt (initial = f_prompt = {f_prompt}), "
                "and the prompt is never evicted.",
                lambda c: _extents_with(c, lambda r: dataclasses.replace(
                    r, initial=0, policy=SlidingWindow(r.policy.bound - r.policy.pinned)) if r.policy.pinned else r)),
        Mistake("no_retention_cap", "the retention cut stops the extent at its bound: nothing grows past it.",
                lambda c: {r.name: _walk(r) + (_walk(r)[-1] + r.growth,) for r in _extent_regions(c)}),
        Mistake("truncation_forgotten", "when the stride does not divide the window, the last step is cut short: "
                "the extent still reaches the bound exactly.",
                lambda c: {r.name: _stop_short(r) for r in _extent_regions(c)}, plant=dict(f_chunk=40)),
        Mistake("attended_not_cached", "a signature sees the extent *entering* the call, before this call's frames "
                "are appended.",
                lambda c: {r.name: tuple(e + r.growth for e in _walk(r)) for r in _extent_regions(c)}),
    ),
    kind="extents",
)


def _widest(c: _T2W, op) -> tuple:
    """(W, s) of the region ``op`` reads with the most steady classes."""
    best = max(dict.fromkeys(op.reads), key=lambda n: catalog_width(c.decl, n)["K"])
    w = catalog_width(c.decl, best)
    return w["W"], w["s"]


def _k_if(c: _T2W, stride: Callable, plus: int = 1, ops: Callable = lambda op: True) -> dict:
    out = {}
    for op in c.decl.operators:
        if not ops(op):
            continue
        W, s = _widest(c, op)
        s2 = stride(op, s)
        out[op.name] = (0 if W == 0 else -(-W // s2)) + plus if s2 > 0 else math.inf
    return out


K_CLASSES = Exercise(
    "t2w_K", 2,
    "Steady shape classes K per operator (K = ceil(W / s) + 1 over the widest region it reads).",
    _prepare_t2w, lambda c: {op.name: int(catalog_counts(c.decl, op.name)["steady"]) for op in c.decl.operators},
    mistakes=(
        Mistake("plus_one_forgotten", "K counts the extents, the first one (A-) included: ceil(W / s) + 1.",
                lambda c: _k_if(c, lambda op, s: s, plus=0)),
        Mistake("per_step_growth", "is growth per call or per solver step? {part} runs n_steps = {n_steps} times per "
                "chunk at the same extent; the cache grows once per chunk, by f_chunk = {f_chunk} frames.",
                lambda c: _k_if(c, lambda op, s: s / op.per_chunk, ops=lambda op: op.per_chunk > 1)),
        Mistake("tokens_not_frames", "growth is counted on the region's clock, mel frames: {tokens_per_chunk} tokens "
                "x frames_per_token = {f_chunk} frames per chunk.",
                lambda c: _k_if(c, lambda op, s: c.hint_fields["tokens_per_chunk"] if s == c.hint_fields["f_chunk"] else s)),
        Mistake("lookahead_in_stride", "the stride is the committed f_chunk = {f_chunk}, not f_call = {f_call} "
                "(the lookahead is read, not committed).",
                lambda c: _k_if(c, lambda op, s: c.hint_fields["f_call"] if s == c.hint_fields["f_chunk"] else s),
                plant=dict(f_chunk=10)),
        Mistake("bindings_not_classes", "that is K x per_chunk, the bindings (graphs captured at step granularity); "
                "K counts shape classes.",
                lambda c: {op.name: int(catalog_counts(c.decl, op.name)["steady"]) * op.per_chunk
                           for op in c.decl.operators if op.per_chunk > 1}),
        Mistake("catalog_size_not_K", "that is the catalog size (steady + admitted flush classes); K counts the "
                "steady classes only.",
                lambda c: {op.name: int(catalog_counts(c.decl, op.name)["admitted_classes"]) for op in c.decl.operators}),
    ),
    kind="integer",
)


#: regions whose rho the rho exercise asks for by default: an attended workspace and a retained cache
RHO_REGIONS = ("solver_workspace", "estimator_att_cache")


def _rho_regions(c: _T2W) -> list:
    return [c.decl.region(n) for n in (c.regions or RHO_REGIONS)]


def _rho_at(c: _T2W, r, extent: float) -> float:
    """Stock bytes over the bytes of ``r`` at clock extent ``extent``."""
    stock = nbytes(region_shape(c.decl, r, _extent(c, r), stock=True), r.dtype)
    return stock / nbytes(region_shape(c.decl, r, extent, stock=False), r.dtype)


def _extent(c: _T2W, r) -> float:
    _, a, a_att = envelope(c.decl, r.name)
    return a_att if r.envelope == "attended" else a


def _rho_expected(c: _T2W) -> dict:
    t = region_table(c.decl).set_index("region")
    return {r.name: float(t.loc[r.name, "rho"]) for r in _rho_regions(c)}


RHO = Exercise(
    "t2w_rho", 2,
    "Over-reservation rho_r = stock bytes / declared bytes per region (two decimals).",
    _prepare_t2w, _rho_expected,
    mistakes=(
        Mistake("retained_for_attended", "{part} is a workspace sized to the attended extent: the retention bound "
                "{bound} plus one largest call f_call = {f_call}.",
                lambda c: {r.name: _rho_at(c, r, envelope(c.decl, r.name)[1]) for r in _rho_regions(c)
                           if r.envelope == "attended"}),
        Mistake("chunk_not_call", "the attended extent adds the largest call, f_call = {f_call} (a final flush keeps "
                "its lookahead), not f_chunk = {f_chunk}.",
                lambda c: {r.name: _rho_at(c, r, envelope(c.decl, r.name)[1] + r.growth) for r in _rho_regions(c)
                           if r.envelope == "attended"}),
        Mistake("inverted", "rho is stock over declared (reserved / live), so it is >= 1 where the stock code "
                "over-reserves.",
                lambda c: {n: 1 / v for n, v in _rho_expected(c).items()}),
        Mistake("one_dim_only", "rho compares bytes: every dim whose stock constant differs counts, the stock "
                "solver slots against n_steps = {n_steps} too.",
                lambda c: {r.name: float(r.stock.get(r.clock, _extent(c, r))) / _extent(c, r) for r in _rho_regions(c)}),
    ),
    abs_tol=0.01,
)


check_extents = EXTENTS.check
check_K = K_CLASSES.check
check_rho = RHO.check
