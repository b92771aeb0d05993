"""The shadow auditor: the stock concatenation beside every retention, compared elementwise.

Two ways to watch a carry against its declaration (and :class:`DifferentialAuditor`, which
watches it against the model's own stock step instead):

* ``retain(carry, call)`` -- for an operator that writes its full cache into the carry
  itself (an in-buffer carry): snapshot the attended cache, compute the stock cut
  (``policy.apply``, a ``torch.cat``), run the carry's in-place retention, compare.
* ``step(carry, new, call)`` -- for a carry that appends new frames itself: the auditor
  keeps its own shadow of the stock cache under the *declared* layout and policy, applies
  the stock concat and cut to it, and compares with the carry.

``compare="elementwise"`` (default) demands identical tensors in identical order: the
product's bar, since key order changes reduction order. ``compare="frames"`` compares the
retained frames as a multiset along the clock dimension: an attention layer without
positional terms cannot tell the order apart, which is how a wrong-layout carry passes
value checks until eviction first reaches the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import pandas as pd
import torch

from .carry import Carry
from .equal import bitwise_equal


@dataclass
class Divergence:
    call: int
    region: str
    index: tuple
    detail: str


def _first_difference(got: torch.Tensor, want: torch.Tensor, dim: int) -> tuple:
    """The first index at which two caches of different extents differ: inside their common extent
    along ``dim`` when they differ there, else the first frame one has and the other lacks."""
    if got.dim() != want.dim() or any(a != b for i, (a, b) in enumerate(zip(got.shape, want.shape)) if i != dim):
        return ()
    n = min(got.shape[dim], want.shape[dim])
    a, b = got.narrow(dim, 0, n), want.narrow(dim, 0, n)
    diff = (a != b) | (torch.isnan(a) ^ torch.isnan(b))
    if diff.any():
        return tuple(int(i) for i in diff.nonzero()[0].tolist())
    return tuple(n if i == dim else 0 for i in range(got.dim()))


def _frames(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Frames of ``x`` along ``dim`` as rows, sorted lexicographically (order-insensitive form)."""
    import numpy as np

    rows = x.movedim(dim, 0).reshape(x.shape[dim], -1).detach().cpu().double().numpy()
    order = np.lexsort(rows.T[::-1]) if rows.shape[1] else np.arange(rows.shape[0])
    return torch.from_numpy(rows[order])


@dataclass
class ShadowAuditor:
    """Counts agreements and records the first divergence (call, region, index)."""

    compare: str = "elementwise"
    applications: int = 0
    agreements: int = 0
    divergences: list = field(default_factory=list)
    records: list = field(default_factory=list)
    _shadow: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.compare not in ("elementwise", "frames"):
            raise ValueError(f"compare must be 'elementwise' or 'frames', got {self.compare!r}")

    @property
    def first_divergence(self) -> Divergence | None:
        return self.divergences[0] if self.divergences else None

    @property
    def ok(self) -> bool:
        return not self.divergences

    # -- comparisons ------------------------------------------------------------------
    def _check(self, call: int, region: str, got: torch.Tensor, want: torch.Tensor, dim: int, addr_ok: bool) -> bool:
        self.applications += 1
        if got.shape != want.shape:
            same, index, detail = False, _first_difference(got, want, dim), f"extent {tuple(got.shape)} != stock {tuple(want.shape)}"
        elif self.compare == "elementwise":
            same = bitwise_equal(got, want)  # the same bytes: identical NaNs agree
            index, detail = (), ""
            if not same:
                diff = ((got != want) | (torch.isnan(got) ^ torch.isnan(want))).nonzero()
                index = tuple(int(i) for i in diff[0].tolist()) if len(diff) else ()
                detail = f"first differing element at {index}" if len(diff) else \
                    f"equal values in other bytes ({got.dtype} vs stock {want.dtype}, a signed zero or a NaN payload)"
        else:
            a, b = _frames(got, dim), _frames(want, dim)
            same = bitwise_equal(a, b)
            index, detail = (), ""
            if not same:
                rows = (a != b).any(dim=1).nonzero()
                index = (int(rows[0]),) if len(rows) else ()
                detail = f"retained frame sets differ (first at sorted row {index})"
        if not addr_ok:
            same = False
            detail = (detail + "; " if detail else "") + "carry storage moved"
        self.records.append(dict(call=call, region=region, agreed=same, extent=got.shape[dim], detail=detail))
        if same:
            self.agreements += 1
        else:
            self.divergences.append(Divergence(call, region, index, detail))
        return same

    def compare_with(self, carry: Carry, want: torch.Tensor, call: int) -> bool:
        """Compare the carry's live extent with a reference cache ``want`` (a shadow the caller keeps)."""
        return self._check(call, carry.name, carry.view(), want, carry.dim, carry.address_ok())

    # -- watching an in-buffer carry ----------------------------------------------------
    def retain(self, carry: Carry, call: int) -> bool:
        """Stock cut of the carry's current content beside its in-place retention."""
        h = carry.view().clone()
        want = carry.policy.apply(h, carry.dim)
        carry.retain_in_place()
        return self._check(call, carry.name, carry.view(), want, carry.dim, carry.address_ok())

    # -- watching an appending carry ----------------------------------------------------
    def watch(self, carry: Carry, policy, base: torch.Tensor | None = None) -> None:
        """Start a shadow stock cache for ``carry`` under the declared ``policy`` (its layout is the truth)."""
        self._shadow[carry.name] = (policy, None if base is None else base.clone())

    def step(self, carry: Carry, new: torch.Tensor, call: int, appended: bool = False) -> bool:
        """Append ``new`` and retain, both in the carry and in the stock shadow, then compare.

        ``appended``: the call already wrote ``new`` into the carry (a model that attends over
        its new frames in place); the carry then only retains.
        """
        if carry.name not in self._shadow:
            raise KeyError(f"auditor is not watching carry '{carry.name}': call watch() first")
        policy, shadow = self._shadow[carry.name]
        d = carry.dim
        written = carry.position - (new.shape[d] if appended else 0)  # the turn's frames before the call
        shadow = policy.stock_next(shadow, new, d, written).clone()
        self._shadow[carry.name] = (policy, shadow)
        if not appended:
            carry.append_in_place(new)
        carry.retain_in_place()
        return self._check(call, carry.name, carry.view(), shadow, d, carry.address_ok())

    def reset(self, carry: Carry, base: torch.Tensor | None) -> None:
        """A turn boundary: the carry is reset in place and the shadow restarts from ``base``."""
        carry.reset_in_place(base)
        if carry.name in self._shadow:
            policy, _ = self._shadow[carry.name]
            self._shadow[carry.name] = (policy, None if base is None else base.clone())

    def summary(self) -> pd.DataFrame:
        """One row per region: applications, agreements, first divergent call."""
        df = pd.DataFrame(self.records, columns=["call", "region", "agreed", "extent", "detail"])
        if df.empty:
            return pd.DataFrame(columns=["region", "applications", "agreements", "first_divergent_call"])
        g = df.groupby("region")
        out = pd.DataFrame({"applications": g.size(), "agreements": g["agreed"].sum()})
        bad = df[~df["agreed"].astype(bool)].groupby("region")["call"].min()
        out["first_divergent_call"] = [int(bad[r]) if r in bad.index else None for r in out.index]
        return out.reset_index()


@dataclass
class DifferentialAuditor(ShadowAuditor):
    """The model's own stock step run in shadow; its actual caches compared with the carries.

    :class:`ShadowAuditor` checks a carry against the cut its declaration states, so a declaration
    that misstates the model (a wrong layout, a forgotten attention sink, a short window) agrees with
    itself. This auditor checks against the model instead: ``stock(x, caches, *args) -> (out,
    caches')`` is the model's own streaming step (its own concatenation and cut, plain tensors);
    after every call it advances its stock caches by one step and compares each carry, elementwise,
    with the stock cache of the same name, recording the first (call, region, index) that differs.
    """

    stock: Callable | None = None
    caches: dict = field(default_factory=dict)
    outputs: list = field(default_factory=list)

    def __post_init__(self):
        super().__post_init__()
        if not callable(self.stock):
            raise ValueError("DifferentialAuditor needs stock=the model's own step (x, caches, ...) -> (out, caches)")

    def start(self, caches: Mapping[str, torch.Tensor]) -> None:
        """A turn boundary: the stock caches restart from ``caches`` (copied)."""
        self.caches = {k: v.clone() for k, v in caches.items()}

    @torch.inference_mode()
    def check(self, call: int, carries: Mapping[str, Carry], x, *args) -> bool:
        """Run the stock step on ``x`` in shadow, then compare every carry with its stock cache."""
        out, self.caches = self.stock(x, self.caches, *args)
        self.outputs.append(out)
        ok = True
        for name, carry in carries.items():
            if name not in self.caches:
                raise KeyError(f"the stock step returned no cache named '{name}' (it returned {sorted(self.caches)})")
            ok = self.compare_with(carry, self.caches[name], call) and ok
        return ok
