"""Retention policies as a protocol: a new policy is one class, and every policy's in-place write rule
reproduces its own stock cut.

``Head`` below is a policy the package does not ship (keep a turn's first ``size`` frames: a fixed memory of
the turn's opening). It is declared, derived and certified through the kit with no change outside this file.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from kit_models import ConformerSizes, StreamingConformer
from test_kit import conformer_declaration, conformer_traffic

from cadencelab.adapters.kit import KitModel, certify
from cadencelab.contract import (
    DeclarationError,
    Fixed,
    PromptRetained,
    RetentionPolicy,
    Ring,
    SlidingWindow,
    Unbounded,
    catalog_counts,
    region_table,
    trajectory,
)
from cadencelab.state import Carry, ShadowAuditor


# ---- a new policy: one class ------------------------------------------------------------------ policy begins
@dataclass(frozen=True)
class Head(RetentionPolicy):
    """Keep the turn's first ``size`` frames; later frames are attended once, then dropped."""

    size: int
    layout: str = "chronological"
    kind = "head"

    def validate(self, where: str) -> None:
        if not isinstance(self.size, int) or self.size < 1:
            raise DeclarationError(f"{where}.size", f"must be an integer >= 1, got {self.size!r}")

    @property
    def bound(self) -> int:
        return self.size

    def segments(self, n: int) -> list[tuple[int, int]]:
        keep = min(n, self.size)  # the oldest frames: first in a chronological cache, last in a newest-first one
        return [(0, keep)] if self.layout == "chronological" else [(n - keep, keep)]

    def describe(self) -> str:
        return f"head of {self.size} ({self.layout})"
# ------------------------------------------------------------------------------------------------- policy ends


HEAD = 24  # not a multiple of the 16-frame call: the call that fills it keeps part of its frames


def head_stock(model, size=HEAD):
    """The conformer's stock step with its own cut written for a head cache (``torch.cat``, then a slice)."""
    k = model.s.kernel - 1

    def stock(x, caches, last):  # None at a turn's start: the model starts its own state
        kv0, conv0 = model.start(x)
        kv_cache = kv0 if caches.get("kv") is None else caches["kv"]
        conv_cache = conv0 if caches.get("conv") is None else caches["conv"]
        out, kv_new, conv_new = model.chunk(x, kv_cache, conv_cache, last)
        kv = torch.cat([kv_cache, kv_new], dim=2)[:, :, :size]
        conv = torch.cat([conv_cache, conv_new], dim=2)
        return out, {"kv": kv, "conv": conv[:, :, conv.shape[2] - k:]}

    return stock


def head_step(model):
    def step(x, caches, last):  # the frames the call adds; the runtime keeps what the policy retains
        out, kv, conv = model.chunk(x, caches["kv"], caches["conv"], last)
        return out, {"kv": kv, "conv": conv}

    return step


def test_a_new_policy_is_one_class_and_is_certified():
    s, model = ConformerSizes(), StreamingConformer()
    decl = conformer_declaration(s, kv_policy=Head(HEAD))
    assert trajectory(decl, "kv")["cached"].tolist()[:4] == [0, 16, HEAD, HEAD]  # derived from the class alone
    assert region_table(decl).set_index("region").loc["kv", "A_attended"] == HEAD + s.chunk + s.lookahead
    assert catalog_counts(decl, "encode")["steady"] == 3
    cert = certify(KitModel(decl, head_step(model), head_stock(model), conformer_traffic(), modules=[model]),
                   backend="eager")
    assert cert.ok, cert.table
    steady = cert.catalog[cert.catalog["kind"] == "steady"]
    assert sorted(steady["label"]) == [(0, 16), (16, 16), (HEAD, 16)] and (steady["observed"] > 0).all()
    assert (cert.addresses["distinct"] == 1).all() and cert.addresses["address_ok"].all()
    assert cert.exact["equal"].all() and len(cert.exact) == conformer_traffic().calls
    assert cert.runtime.carries["kv"].length == HEAD


def test_the_kit_catches_a_stock_step_that_keeps_something_else():
    """The same declaration over a stock step that keeps the newest frames: not certified (exactness is the gate)."""
    model = StreamingConformer()
    window = SlidingWindow(HEAD)

    def newest(x, caches, last):
        kv0, conv0 = model.start(x)
        kv_cache = kv0 if caches.get("kv") is None else caches["kv"]
        conv_cache = conv0 if caches.get("conv") is None else caches["conv"]
        out, kv_new, conv_new = model.chunk(x, kv_cache, conv_cache, last)
        conv = torch.cat([conv_cache, conv_new], dim=2)
        return out, {"kv": window.apply(torch.cat([kv_cache, kv_new], dim=2), 2),
                     "conv": conv[:, :, conv.shape[2] - (model.s.kernel - 1):]}

    cert = certify(KitModel(conformer_declaration(kv_policy=Head(HEAD)), head_step(model), newest,
                            conformer_traffic(), modules=[model]), backend="eager")
    assert not cert.ok
    failed = set(cert.table.loc[~cert.table["passed"], "clause"])
    assert "differential audit agrees on every retention" in failed
    assert any(c.startswith("bit-exact with the stock step") for c in failed), failed


def test_a_policy_missing_a_rule_cannot_be_made_and_a_non_policy_is_refused():
    class NoSegments(RetentionPolicy):
        layout = "chronological"

        def validate(self, where):
            pass

        bound = 4

        def describe(self):
            return "no segments"

    with pytest.raises(TypeError, match="segments"):
        NoSegments()
    with pytest.raises(DeclarationError, match=r"regions\[0\]\(kv\)\.policy.*RetentionPolicy"):
        conformer_declaration(kv_policy=object())
    with pytest.raises(DeclarationError, match="initial extent 30 exceeds the policy's bound 24"):
        Head(HEAD).check_region("regions[0](kv)", initial=30, call_max=16, call_field="growth")


POLICIES = [SlidingWindow(5), SlidingWindow(5, "newest_first"), PromptRetained(2, 3), PromptRetained(2, 3, "newest_first"),
            Fixed(4), Fixed(4, "newest_first"), Ring(5), Head(6), Head(6, "newest_first")]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.describe())
def test_every_policy_writes_in_place_what_its_stock_cut_keeps(policy):
    """Calls of 1..4 frames over three turns: the carry (at one address) equals the policy's own stock cache
    (``stock_next``) after every call, written as append + retain (the shadow auditor) or in one pass
    (``write_append_retained``, the kit's views form)."""
    room = policy.bound if policy.ring_order else policy.bound + 4
    two, one = (Carry.allocate(n, policy, (room, 2), 0) for n in ("two", "one"))
    ptrs, aud, g = [c.buffer.data_ptr() for c in (two, one)], ShadowAuditor(), torch.Generator().manual_seed(0)
    for turn in range(3):
        base = torch.randn(policy.base_extent, 2, generator=g)
        aud.reset(two, base)
        aud.watch(two, policy, base)
        one.reset_in_place(base)
        shadow = base.clone()
        for call, f in enumerate((3, 1, 4, 2, 4, 1)):
            new = torch.randn(f, 2, generator=g)
            assert aud.step(two, new, call)
            shadow = policy.stock_next(shadow, new, 0, one.position)
            one.commit(one.write_append_retained(new, one.position))
            assert torch.equal(one.view(), shadow), (turn, call)
            assert one.length == two.length == policy.extent_after(len(shadow) if not policy.ring_order else one.cursor)
    assert aud.ok and aud.applications == 18 and [c.buffer.data_ptr() for c in (two, one)] == ptrs


def test_a_policy_is_data_too():
    """Kinds stay names for tables and recorded data; the shipped policies all honour the protocol."""
    shipped = [SlidingWindow(3), Ring(3), PromptRetained(1, 2), Unbounded(), Fixed(3)]
    assert all(isinstance(p, RetentionPolicy) for p in shipped)
    assert [p.kind for p in shipped] == ["sliding_window", "ring", "prompt_retained", "unbounded", "fixed"]
    assert [p.bounded for p in shipped] == [True, True, True, False, True]
    assert [p.bounds_growth for p in shipped] == [True, True, True, False, False]
    assert [p.base_extent for p in shipped] == [0, 3, 0, 0, 3]
