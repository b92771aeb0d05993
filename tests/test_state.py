"""The state rule: the carry at one address, demand-sized allocation, and the shadow auditor.

The reference for every carry operation is the stock path: ``torch.cat`` of the new
frames and the cache in the declared layout, then ``policy.apply`` (a fresh tensor per
call). The carry must match it elementwise (``torch.equal``) while its ``data_ptr`` never
moves, turn resets included.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cadencelab.contract import DeclarationError, Fixed, PromptRetained, Ring, SlidingWindow, Unbounded
from cadencelab.adapters.token2wav.clocks import token2wav_declaration
from cadencelab.state import Carry, ShadowAuditor, allocate, allocation_plan, move_frames

HYP = settings(max_examples=200, deadline=None)
LAYOUTS = ("chronological", "newest_first")
FEAT = 3  # features per frame (kept tiny: these are value tests)


def _stock(policy, cache: torch.Tensor | None, new: torch.Tensor, dim: int) -> torch.Tensor:
    """The stock runtime: concatenate in the declared layout, then cut (a new tensor every call)."""
    if cache is None or cache.shape[dim] == 0:
        full = new
    elif policy.layout == "newest_first":
        full = torch.cat([new, cache], dim=dim)
    else:
        full = torch.cat([cache, new], dim=dim)
    return policy.apply(full, dim).clone()


def _frames(g: torch.Generator, n: int, dim: int, ndim: int) -> torch.Tensor:
    """``n`` random frames along ``dim`` of an ``ndim``-d tensor (other dims 2 or FEAT)."""
    shape = [2] * ndim
    shape[-1 if dim != ndim - 1 else 0] = FEAT
    shape[dim] = n
    return torch.randn(shape, generator=g, dtype=torch.float64)


def _carry_for(policy, capacity: int, dim: int, ndim: int) -> Carry:
    shape = list(_frames(torch.Generator().manual_seed(0), 1, dim, ndim).shape)
    shape[dim] = capacity
    return Carry.allocate("kv", policy, tuple(shape), dim, dtype=torch.float64)


# ---------------------------------------------------------------------------------------
# random streams: policy, chunk sizes (partial flushes included), turn resets
# ---------------------------------------------------------------------------------------


@st.composite
def streams(draw):
    kind = draw(st.sampled_from(["prompt_retained", "sliding_window", "fixed"]))
    layout = draw(st.sampled_from(LAYOUTS))
    if kind == "prompt_retained":
        policy = PromptRetained(draw(st.integers(0, 12)), draw(st.integers(1, 12)), layout)
        bound = policy.bound
    elif kind == "sliding_window":
        policy = SlidingWindow(draw(st.integers(1, 16)), layout)
        bound = policy.window
    else:
        policy = Fixed(draw(st.integers(1, 8)), layout)
        bound = policy.extent
    f_max = draw(st.integers(1, 8))

    def base_len():
        # a Fixed region always holds its extent (a conv left context starts as zeros of it)
        return st.just(bound) if kind == "fixed" else st.integers(0, bound)

    first = draw(base_len())
    events = draw(
        st.lists(
            st.one_of(st.integers(1, f_max).map(lambda f: ("call", f)), base_len().map(lambda n: ("reset", n))),
            min_size=1,
            max_size=24,
        )
    )
    ndim = draw(st.integers(1, 3))
    dim = draw(st.integers(0, ndim - 1))
    seed = draw(st.integers(0, 2**31 - 1))
    return policy, bound + f_max, first, events, ndim, dim, seed


def _run(stream, write):
    """Drive a carry and the stock reference through ``stream``; ``write(carry, new)`` does one call."""
    policy, capacity, first, events, ndim, dim, seed = stream
    g = torch.Generator().manual_seed(seed)
    carry = _carry_for(policy, capacity, dim, ndim)
    ptr = carry.buffer.data_ptr()
    base = _frames(g, first, dim, ndim)
    carry.reset_in_place(base)
    ref = base.clone()
    assert torch.equal(carry.view(), ref)
    for i, (what, n) in enumerate(events):
        if what == "reset":
            base = _frames(g, n, dim, ndim)
            carry.reset_in_place(base if n else None)
            ref = base.clone()
        else:
            new = _frames(g, n, dim, ndim)
            ref = _stock(policy, ref, new, dim)
            write(carry, new)
        assert carry.length == ref.shape[dim], f"event {i}: extent {carry.length} != stock {ref.shape[dim]}"
        assert torch.equal(carry.view(), ref), f"event {i} ({what} {n}): carry != stock cut"
        assert carry.buffer.data_ptr() == ptr and carry.address_ok(), f"event {i}: the carry moved"
    return carry


def _in_buffer_write(carry: Carry, new: torch.Tensor) -> None:
    """An operator that writes its whole attended cache H into the carry's own storage."""
    d = carry.dim
    old = carry.view()
    h = torch.cat([new, old], dim=d) if carry.layout == "newest_first" else torch.cat([old, new], dim=d)
    carry.buffer.narrow(d, 0, h.shape[d]).copy_(h)
    carry.adopt(carry.buffer.narrow(d, 0, h.shape[d]))
    carry.retain_in_place()


def _append_write(carry: Carry, new: torch.Tensor) -> None:
    carry.append_in_place(new)
    carry.retain_in_place()


def _separate_write(carry: Carry, new: torch.Tensor) -> None:
    """The stock operator hands back a separate full cache; the carry keeps what survives."""
    d = carry.dim
    old = carry.view().clone()
    h = torch.cat([new, old], dim=d) if carry.layout == "newest_first" else torch.cat([old, new], dim=d)
    carry.retain_from(h)


@HYP
@given(streams())
def test_in_buffer_write_then_retain_equals_stock_cut(stream):
    _run(stream, _in_buffer_write)


@HYP
@given(streams())
def test_append_then_retain_equals_stock_concat(stream):
    _run(stream, _append_write)


@HYP
@given(streams())
def test_retain_from_a_separate_cache_equals_stock_cut(stream):
    _run(stream, _separate_write)


@HYP
@given(
    policy=st.one_of(
        st.builds(PromptRetained, st.integers(0, 10), st.integers(1, 10), st.sampled_from(LAYOUTS)),
        st.builds(SlidingWindow, st.integers(1, 16), st.sampled_from(LAYOUTS)),
    ),
    n=st.integers(0, 30),
    seed=st.integers(0, 2**31 - 1),
)
def test_write_retained_from_equals_policy_apply(policy, n, seed):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(2, n, FEAT, generator=g)
    carry = Carry.allocate("kv", policy, (2, 30, FEAT), 1)
    ptr = carry.buffer.data_ptr()
    length = carry.write_retained_from(h)
    carry.commit(length)
    assert torch.equal(carry.view(), policy.apply(h, 1))
    assert carry.buffer.data_ptr() == ptr


@HYP
@given(
    length=st.integers(1, 40),
    data=st.data(),
    ndim=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
)
def test_move_frames_equals_a_clone_based_copy(length, data, ndim, seed):
    dim = data.draw(st.integers(0, ndim - 1))
    n = data.draw(st.integers(0, length))
    src = data.draw(st.integers(0, length - n))
    dst = data.draw(st.integers(0, length - n))
    shape = [3] * ndim
    shape[dim] = length
    buf = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    want = buf.clone()
    want.narrow(dim, dst, n).copy_(buf.narrow(dim, src, n).clone())
    ptr = buf.data_ptr()
    move_frames(buf, dim, src, dst, n)
    assert torch.equal(buf, want)
    assert buf.data_ptr() == ptr


@pytest.mark.parametrize("src,dst,n", [(2, 0, 8), (0, 2, 8), (1, 0, 9), (0, 1, 9), (5, 0, 5), (0, 5, 5), (3, 3, 4)])
def test_move_frames_overlapping_shifts(src, dst, n):
    buf = torch.arange(10.0)
    want = buf.clone()
    want[dst:dst + n] = buf[src:src + n].clone()
    move_frames(buf, 0, src, dst, n)
    assert buf.tolist() == want.tolist()


# ---------------------------------------------------------------------------------------
# the carry at the paper's operating point
# ---------------------------------------------------------------------------------------


def test_token2wav_in_buffer_carry_reproduces_the_stock_cut_across_turns():
    """P=302, R=100, f=50 chunks with 56-frame and 6-frame flushes, three turns, newest first."""
    policy = PromptRetained(302, 100, layout="newest_first")
    carry = Carry.allocate("estimator_att_cache", policy, (2, 458, 4), 1)
    ptr = carry.buffer.data_ptr()
    g = torch.Generator().manual_seed(1)
    extents = []
    for turn in range(3):
        prompt = torch.randn(2, 302, 4, generator=g)
        carry.reset_in_place(prompt)
        ref = prompt.clone()
        for f in (50, 50, 50, 50, 56 if turn % 2 else 6):
            new = torch.randn(2, f, 4, generator=g)
            ref = _stock(policy, ref, new, 1)
            _in_buffer_write(carry, new)
            assert torch.equal(carry.view(), ref)
            extents.append(carry.length)
    assert carry.buffer.data_ptr() == ptr
    assert extents[:5] == [352, 402, 402, 402, 402]
    assert max(extents) == 402
    assert carry.writes == 3 * 5 * 2 + 3  # adopt + retain per call, one commit per reset


def test_for_region_sizes_the_carry_from_the_declaration():
    d = token2wav_declaration(depth=1, heads=1, head_dim=2)
    retained = Carry.for_region(d, "estimator_att_cache")
    assert retained.buffer.shape == (10, 1, 2, 1, 402, 4) and retained.dim == 4 and retained.capacity == 402
    in_buffer = Carry.for_region(d, "estimator_att_cache", envelope="attended")
    assert in_buffer.capacity == 458  # A + f_call
    ws = Carry.for_region(d, "solver_workspace")
    assert ws.capacity == 458 and ws.layout == "newest_first"
    assert ws.buffer.dtype == torch.float32 and ws.length == 0


def test_carry_refuses_to_overflow_and_to_adopt_foreign_storage():
    carry = Carry.allocate("kv", PromptRetained(4, 2), (8, 2), 0)
    with pytest.raises(ValueError, match="capacity is 8"):
        carry.append_in_place(torch.ones(9, 2))
    with pytest.raises(ValueError, match="capacity"):
        carry.view(9)
    with pytest.raises(ValueError, match="own storage"):
        carry.adopt(torch.ones(3, 2))
    assert carry.owns(carry.buffer.narrow(0, 0, 3))
    assert not carry.owns(carry.buffer.narrow(0, 1, 3))


def test_carry_rejects_an_unbounded_policy():
    with pytest.raises(DeclarationError) as info:
        Carry.allocate("kv", Unbounded(), (8, 2), 0)
    assert info.value.field == "regions.kv.policy"


def test_reset_to_nothing_keeps_the_address():
    carry = Carry.allocate("kv", SlidingWindow(4), (6,), 0)
    ptr = carry.buffer.data_ptr()
    carry.append_in_place(torch.arange(1.0, 4.0))
    carry.reset_in_place(None)
    assert carry.length == 0 and carry.view().numel() == 0
    carry.reset_in_place(torch.empty(0))
    assert carry.length == 0
    assert carry.buffer.data_ptr() == ptr


def test_ring_carry_matches_ring_apply_after_wrapping():
    """BUG (core): a Ring carry cannot be appended past its capacity.

    ``Carry.write_appended`` returns ``length + f`` for a ring (carry.py, the Ring branch),
    which ``commit`` then refuses once the ring wraps ("commit needs 6 frames but capacity
    is 4"), so a Moshi-style ring carry dies on its first wrap-around.
    """
    ring = Ring(4)
    carry = Carry.allocate("kv", ring, (4,), 0)
    history = []
    for chunk in ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0]):
        new = torch.tensor(chunk)
        history.append(new)
        carry.append_in_place(new)
        carry.retain_in_place()
        assert torch.equal(carry.buffer, ring.apply(torch.cat(history), 0))


def test_fixed_policy_apply_agrees_with_its_segments_below_the_extent():
    """BUG (core): ``Fixed.apply`` raises on a history shorter than the extent.

    ``Fixed.segments(n)`` keeps everything when ``n <= extent`` (what ``Carry.move_retained``
    does), but ``Fixed.apply`` narrows ``extent`` frames unconditionally and raises
    ``RuntimeError: start (0) + length (4) exceeds dimension size (2)``; the stock
    ``x[..., -extent:]`` would return the whole ``x``.
    """
    for layout in LAYOUTS:
        policy = Fixed(4, layout)
        x = torch.arange(2.0)
        assert policy.segments(2) == [(0, 2)]
        assert torch.equal(policy.apply(x, 0), x)


# ---------------------------------------------------------------------------------------
# allocation
# ---------------------------------------------------------------------------------------


def test_allocate_gives_demand_shaped_zeros_and_skips_resident_regions():
    d = token2wav_declaration(depth=1, heads=1, head_dim=2, enc_layers=1, enc_heads=1, enc_head_dim=2)
    out = allocate(d)
    assert "estimator_att_cache" not in out  # it lives inside the solver workspace
    assert out["solver_workspace"].shape == (10, 1, 2, 1, 458, 4)
    assert out["conformer_att_cache"].shape == (1, 1, 1, 402, 4)
    assert out["cfm_noise"].shape == (1, 80, 458)
    assert all(not t.any() for t in out.values())
    only = allocate(d, regions=["estimator_att_cache"])
    assert list(only) == ["estimator_att_cache"] and only["estimator_att_cache"].shape == (10, 1, 2, 1, 402, 4)


def test_allocation_plan_charges_resident_regions_nothing():
    """BUG (core): ``allocation_plan`` reports 0 allocated bytes for every region.

    alloc.py builds ``allocated_bytes`` as ``0.0 if resident_in else demand_bytes``, but in the
    region table the non-resident rows hold NaN (pandas turns None into NaN in a string
    column), and NaN is truthy -- so every region is charged 0.
    """
    d = token2wav_declaration()
    plan = allocation_plan(d).set_index("region")
    assert plan.loc["estimator_att_cache", "allocated_bytes"] == 0.0
    assert plan.loc["solver_workspace", "allocated_bytes"] == plan.loc["solver_workspace", "demand_bytes"]
    assert plan.loc["conformer_att_cache", "allocated_bytes"] == plan.loc["conformer_att_cache", "demand_bytes"]
    assert plan["allocated_bytes"].sum() == plan["demand_bytes"].sum() - plan.loc["estimator_att_cache", "demand_bytes"]


def test_allocation_plan_columns():
    plan = allocation_plan(token2wav_declaration())
    assert list(plan.columns) == ["region", "role", "demand_shape", "demand_bytes", "stock_shape", "stock_bytes",
                                  "resident_in", "allocated_bytes"]
    assert len(plan) == 10


# ---------------------------------------------------------------------------------------
# the shadow auditor
# ---------------------------------------------------------------------------------------

P, R, F = 302, 100, 50
DECLARED = PromptRetained(P, R, layout="newest_first")


def test_auditor_in_buffer_carry_agrees_on_every_call_including_turns():
    carry = Carry.allocate("estimator_att_cache", DECLARED, (P + R + 56, 4), 0)
    ptr = carry.buffer.data_ptr()
    audit = ShadowAuditor()
    g = torch.Generator().manual_seed(2)
    call = 0
    for turn in range(3):
        carry.reset_in_place(torch.randn(P, 4, generator=g))
        for f in (50, 50, 50, 50, 56, 6)[: 4 + turn]:
            new = torch.randn(f, 4, generator=g)
            h = torch.cat([new, carry.view()])
            carry.buffer.narrow(0, 0, h.shape[0]).copy_(h)
            carry.adopt(carry.buffer.narrow(0, 0, h.shape[0]))
            assert audit.retain(carry, call)
            call += 1
    assert audit.applications == call == 4 + 5 + 6
    assert audit.agreements == audit.applications
    assert audit.ok and audit.first_divergence is None
    assert carry.buffer.data_ptr() == ptr
    assert [r["extent"] for r in audit.records[:4]] == [352, 402, 402, 402]


def test_auditor_step_agrees_with_a_correct_appending_carry():
    carry = Carry.allocate("kv", DECLARED, (P + R + F, 4), 0)
    audit = ShadowAuditor(compare="elementwise")
    g = torch.Generator().manual_seed(3)
    for turn in range(2):
        base = torch.randn(P, 4, generator=g)
        if turn == 0:
            carry.reset_in_place(base)
            audit.watch(carry, DECLARED, base)
        else:
            audit.reset(carry, base)
        for i in range(5):
            assert audit.step(carry, torch.randn(F, 4, generator=g), turn * 5 + i)
    assert audit.applications == audit.agreements == 10


def _wrong_layout_run(compare: str, calls: int = 5) -> ShadowAuditor:
    """An append-ordered (chronological) carry for a cache the declaration says is newest first."""
    carry = Carry.allocate("estimator_att_cache", PromptRetained(P, R, layout="chronological"), (P + R + F, 4), 0)
    audit = ShadowAuditor(compare=compare)
    g = torch.Generator().manual_seed(4)
    prompt = torch.randn(P, 4, generator=g)
    carry.reset_in_place(prompt)
    audit.watch(carry, DECLARED, prompt)
    for call in range(calls):
        audit.step(carry, torch.randn(F, 4, generator=g), call)
    return audit


def test_auditor_frames_compare_catches_the_wrong_layout_on_the_third_call():
    """Calls 0 and 1 hold the same frames (only their order differs); call 2 is the first
    where eviction reaches the prompt, and the two cuts keep different frames."""
    audit = _wrong_layout_run("frames")
    assert [r["agreed"] for r in audit.records] == [True, True, False, False, False]
    assert audit.first_divergence.call == 2
    assert audit.first_divergence.region == "estimator_att_cache"
    assert "frame sets differ" in audit.first_divergence.detail
    assert (audit.applications, audit.agreements) == (5, 2)
    assert not audit.ok


def test_auditor_elementwise_compare_catches_the_wrong_layout_at_once():
    audit = _wrong_layout_run("elementwise")
    assert audit.first_divergence.call == 0
    assert audit.agreements == 0
    assert audit.first_divergence.index == (0, 0)
    assert "first differing element" in audit.first_divergence.detail


def test_auditor_summary_columns_on_divergence():
    s = _wrong_layout_run("frames").summary()
    assert list(s.columns) == ["region", "applications", "agreements", "first_divergent_call"]
    row = s.iloc[0]
    assert (row["region"], row["applications"], row["agreements"], row["first_divergent_call"]) == (
        "estimator_att_cache", 5, 2, 2)


def test_auditor_summary_when_every_call_agrees():
    """BUG (core): ``ShadowAuditor.summary()`` raises when no region diverged.

    audit.py ``summary``: ``g.apply(lambda x: ... else None, include_groups=False)`` returns a
    DataFrame (not a Series) when every group yields None, and assigning it to the column
    raises ``ValueError: Cannot set a DataFrame with multiple columns to the single column
    first_divergent_call`` -- i.e. the summary of a fully verified run (the paper's case) crashes.
    """
    carry = Carry.allocate("kv", DECLARED, (P + R + F, 4), 0)
    audit = ShadowAuditor()
    base = torch.zeros(P, 4)
    carry.reset_in_place(base)
    audit.watch(carry, DECLARED, base)
    for call in range(3):
        audit.step(carry, torch.full((F, 4), float(call + 1)), call)
    s = audit.summary()
    assert s["applications"].tolist() == [3] and s["agreements"].tolist() == [3]
    assert s["first_divergent_call"].isna().all()


def test_auditor_empty_summary_and_argument_checks():
    assert list(ShadowAuditor().summary().columns) == ["region", "applications", "agreements", "first_divergent_call"]
    with pytest.raises(ValueError, match="compare"):
        ShadowAuditor(compare="approx")
    carry = Carry.allocate("kv", DECLARED, (P + R + F, 4), 0)
    with pytest.raises(KeyError, match="watch"):
        ShadowAuditor().step(carry, torch.zeros(F, 4), 0)


def test_auditor_flags_a_carry_whose_storage_moved():
    carry = Carry.allocate("kv", DECLARED, (P + R + F, 4), 0)
    carry.reset_in_place(torch.ones(P, 4))
    audit = ShadowAuditor()
    carry.buffer = carry.buffer.clone()  # someone reallocated the carry behind its back
    carry.append_in_place(torch.zeros(F, 4))
    assert not audit.retain(carry, 0)
    assert "carry storage moved" in audit.first_divergence.detail
