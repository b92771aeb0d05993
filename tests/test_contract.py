"""The native-clock contract: declarations, their validation, and every number derived from them.

The numbers asserted here are the paper's (DuplexCadence §3): the Token2wav operating point
f_prompt 302, f_retained 100, f_chunk 50, f_call 56, 10 solver steps, 2 frames per token.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cadencelab.contract import (
    CLASS_BUDGET, Admission, Clock, Declaration, DeclarationError, DeviceConstant, Fixed, Operator, PromptRetained,
    Region, Ring, SlidingWindow, Unbounded, admitted_labels, catalog, catalog_width, checks, demand_shape, derive,
    envelope, region_table, rho_table, stock_shape, trajectory, verdict,
)
from cadencelab.adapters.duplex.models import backbone_declaration, unbounded_backbone_declaration
from cadencelab.adapters.freeze_style import freeze_style_declaration
from cadencelab.adapters.mimi import moshi_mimi_declaration
from cadencelab.adapters.token2wav.clocks import token2wav_declaration

HYP = settings(max_examples=200, deadline=None)


@pytest.fixture(scope="module")
def t2w() -> Declaration:
    return token2wav_declaration()


def _row(df, column, value):
    rows = df[df[column] == value]
    assert len(rows) == 1, f"expected one row with {column}={value!r}, got {len(rows)}"
    return rows.iloc[0]


# ---------------------------------------------------------------------------------------
# Token2wav: the paper's numbers
# ---------------------------------------------------------------------------------------


def test_token2wav_params_are_the_operating_point(t2w):
    p = t2w.params
    assert (p["f_prompt"], p["f_retained"], p["f_chunk"], p["f_call"], p["n_steps"]) == (302, 100, 50, 56, 10)
    assert p["frames_per_token"] == 2
    assert t2w.admission == Admission("frames", 50)
    assert [c.name for c in t2w.constants] == ["timestep_freqs", "harmonic_multiplier", "stft_window"]


def test_estimator_cache_trajectory_locks_at_the_retention_bound(t2w):
    traj = trajectory(t2w, "estimator_att_cache", calls=4)
    assert traj["cached"].tolist() == [302, 352, 402, 402]
    assert traj["attended"].tolist() == [352, 402, 452, 452]
    assert traj["retained"].tolist() == [352, 402, 402, 402]
    assert traj["shape_extent"].tolist() == [302, 352, 402, 402]
    assert traj["call"].tolist() == [0, 1, 2, 3]
    assert set(traj["region"]) == {"estimator_att_cache"}


def test_trajectory_defaults_to_the_declared_horizon(t2w):
    traj = trajectory(t2w, "estimator_att_cache")
    assert len(traj) == t2w.horizon == 64
    assert traj["cached"].iloc[-1] == 402


def test_estimator_cache_envelope_and_catalog_width(t2w):
    assert envelope(t2w, "estimator_att_cache") == (302, 402, 458)
    assert catalog_width(t2w, "estimator_att_cache") == dict(W=100, s=50, K=3, K_enumerated=3)


def test_flow_chunk_steady_classes_are_302_352_402(t2w):
    cat = catalog(t2w, "flow_chunk")
    steady = cat[cat["kind"] == "steady"]
    assert len(steady) == 3
    assert steady["ext_estimator_att_cache"].astype(int).tolist() == [302, 352, 402]
    assert steady["ext_conformer_att_cache"].astype(int).tolist() == [302, 352, 402]
    assert steady["f"].astype(int).tolist() == [50, 50, 50]
    assert steady["admitted"].all()
    assert (steady["q_n_timesteps"] == 10).all()
    assert cat["class_id"].is_unique and cat["class_id"].iloc[0] == "flow_chunk:0"


def test_flow_chunk_partial_flush_classes_are_bounded_by_f_chunk(t2w):
    cat = catalog(t2w, "flow_chunk")
    flush = cat[cat["kind"] == "flush"]
    # flush sizes 2*3 .. 2*27 in steps of 2 frames, for each of the 3 steady extents
    assert sorted(set(flush["f"].astype(int))) == list(range(6, 55, 2))
    assert len(flush) == 25 * 3
    admitted = flush[flush["admitted"].astype(bool)]
    rejected = flush[~flush["admitted"].astype(bool)]
    assert len(admitted) == 69
    assert (admitted["f"] <= 50).all()
    assert len(rejected) == 6
    assert sorted(set(rejected["f"].astype(int))) == [52, 54]
    for reason in rejected["reason"]:
        assert "f_chunk=50" in reason and "eager" in reason
    assert set(rejected["ext_estimator_att_cache"].astype(int)) == {302, 352, 402}


def test_flow_chunk_has_a_priming_row_eager_by_construction(t2w):
    cat = catalog(t2w, "flow_chunk")
    priming = cat[cat["kind"] == "priming"]
    assert len(priming) == 1
    row = priming.iloc[0]
    assert not row["admitted"]
    assert "eager by construction" in row["reason"]
    assert cat["kind"].tolist()[0] == "priming"


def test_admitted_labels_of_flow_chunk(t2w):
    labels = admitted_labels(t2w, "flow_chunk")
    assert {(302, 302, 50), (352, 352, 50), (402, 402, 50)} <= labels  # the steady classes
    assert (402, 402, 6) in labels and (402, 402, 52) not in labels  # flushes only up to f_chunk
    # 3 steady + 69 admitted flush rows, of which the three f=50 flushes coincide with the steady classes
    assert len(labels) == 69
    assert all(len(label) == 3 for label in labels)


def test_solver_workspace_demand_versus_stock(t2w):
    table = region_table(t2w)
    ws = _row(table, "region", "solver_workspace")
    assert ws["A"] == 402
    assert ws["A_steady_attended"] == 402 + 50  # steady calls attend A + f_chunk
    assert ws["A_attended"] == 402 + 56  # allocated at A + f_call
    assert ws["envelope"] == "attended"
    assert stock_shape(t2w, "solver_workspace") == (16, 16, 2, 8, 1000, 128)
    assert demand_shape(t2w, "solver_workspace") == (10, 16, 2, 8, 458, 128)
    assert ws["stock_shape"] == (16, 16, 2, 8, 1000, 128)
    assert ws["demand_shape"] == (10, 16, 2, 8, 458, 128)
    per_cell = 16 * 2 * 8 * 128 * 4  # depth x (K|V) x heads x (2 x head_dim) x float32
    assert ws["stock_bytes"] == 16 * 1000 * per_cell
    assert ws["demand_bytes"] == 10 * 458 * per_cell
    assert ws["rho"] == pytest.approx(16 * 1000 / (10 * 458))


def test_rho_table_ranks_regions(t2w):
    rho = rho_table(t2w)
    assert list(rho.columns[:7]) == ["region", "role", "stock_shape", "demand_shape", "stock_bytes", "demand_bytes", "rho"]
    assert rho["rho"].is_monotonic_decreasing
    ws = _row(rho, "region", "solver_workspace")
    assert ws["rho"] == pytest.approx(16000 / 4580)
    assert ws["stock_MiB"] == pytest.approx(2000.0)
    assert ws["demand_MiB"] == pytest.approx(572.5)
    # the estimator's retained cache only over-reserves the solver-step slots: 16 / 10
    assert _row(rho, "region", "estimator_att_cache")["rho"] == pytest.approx(1.6)
    assert _row(rho, "region", "conformer_att_cache")["rho"] == pytest.approx(1.0)


def test_token2wav_checks_pass_with_readable_reasons(t2w):
    c = checks(t2w)
    assert c["check"].tolist() == ["C1", "C2", "C3"]
    assert c["passed"].all()
    c1, c2, c3 = (c.iloc[i]["reason"] for i in range(3))
    assert c1.startswith("6 clocks with configuration-fixed rates")
    for clock in ("tokens", "frames", "samples", "steps"):
        assert clock in c1
    assert "estimator_att_cache" in c2 and "conformer_att_cache" in c2
    assert "one interactive session" in c3


def test_token2wav_verdict_counts_flush_classes_against_the_engine_budget(t2w):
    v = verdict(t2w)
    flow = _row(v, "operator", "flow_chunk")
    assert (flow["K"], flow["flush_admitted"], flow["flush_rejected"], flow["bindings"]) == (3, 69, 6, 3)
    # 3 steady + 69 admitted flush rows, the three f=50 flushes sharing the steady labels
    assert flow["admitted_classes"] == len(admitted_labels(t2w, "flow_chunk")) == 69
    assert flow["class_budget"] == CLASS_BUDGET and flow["affordable"]
    # a budget below the admitted classes makes it unaffordable, naming how many would run eagerly
    tight = _row(verdict(t2w, class_budget=64), "operator", "flow_chunk")
    assert not tight["affordable"] and "5 would run eagerly (catalog_full)" in tight["reason"]
    step = _row(v, "operator", "estimator_step")
    assert step["bindings"] == 30  # 3 classes x 10 solver steps
    voc = _row(v, "operator", "vocoder_core")
    assert voc["K"] == 2 and voc["admitted_classes"] == 46 and voc["affordable"]
    # with a budget that holds every admitted class, every operator is affordable
    assert verdict(t2w, class_budget=69)["affordable"].all()


def test_the_replay_engine_budget_is_the_contracts():
    import inspect

    from cadencelab.replay.engine import ExactShapeReplay

    assert inspect.signature(ExactShapeReplay).parameters["max_classes"].default == CLASS_BUDGET


def test_derive_bundles_everything_and_reports(t2w):
    d = derive(t2w)
    assert d.declaration is t2w
    assert len(d.regions) == len(t2w.regions)
    assert set(d.catalog["operator"]) == {o.name for o in t2w.operators}
    text = d.report()
    assert text.startswith("# token2wav: derived from the declaration")
    assert "C1 PASS" in text and "C2 PASS" in text and "C3 PASS" in text
    assert "solver_workspace" in text and "3.49" in text


# ---------------------------------------------------------------------------------------
# other models
# ---------------------------------------------------------------------------------------


def test_moshi_ring_has_catalog_width_one():
    d = moshi_mimi_declaration()
    kv = catalog_width(d, "decoder_kv_0")
    assert kv["K"] == 1 and kv["K_enumerated"] == 1
    traj = trajectory(d, "decoder_kv_0", calls=300)
    assert set(traj["shape_extent"]) == {250}  # a ring is always allocated at capacity
    v = verdict(d)
    assert v["K"].tolist() == [1, 1]
    assert v["affordable"].all()
    assert checks(d)["passed"].all()


def test_backbone_is_too_wide_and_speech_decoder_query_dependent():
    d = backbone_declaration()
    assert catalog_width(d, "kv_cache")["K"] == 2001
    assert catalog_width(d, "kv_cache")["K_enumerated"] == 2001
    v = verdict(d)
    bb = _row(v, "operator", "backbone_decode")
    assert bb["K"] == 2001
    assert not bb["affordable"]
    assert "too wide" in bb["reason"]
    sp = _row(v, "operator", "speech_token_decode")
    assert sp["K"] == 1
    assert not sp["affordable"]
    assert "query" in sp["reason"] and "traffic" in sp["reason"]


def test_backbone_affordable_under_a_large_enough_budget():
    v = verdict(backbone_declaration(), k_max=5000)
    row = _row(v, "operator", "backbone_decode")
    assert not row["affordable"] and "2001 admitted classes" in row["reason"]  # steady fits, the engine does not
    v = verdict(backbone_declaration(), k_max=5000, class_budget=2001)
    assert bool(_row(v, "operator", "backbone_decode")["affordable"])


def test_unbounded_backbone_fails_c2_and_has_an_infinite_catalog():
    d = unbounded_backbone_declaration()
    c = checks(d)
    assert not _row(c, "check", "C2")["passed"]
    assert "kv_cache" in _row(c, "check", "C2")["reason"]
    assert _row(c, "check", "C1")["passed"]
    w = catalog_width(d, "kv_cache")
    assert math.isinf(w["K"]) and math.isinf(w["W"])
    assert envelope(d, "kv_cache") == (0.0, math.inf, math.inf)
    v = _row(verdict(d), "operator", "backbone_decode")
    assert math.isinf(v["K"]) and not v["affordable"]
    assert "infinite" in v["reason"]
    traj = trajectory(d, "kv_cache", calls=5)
    assert traj["cached"].tolist() == [0, 1, 2, 3, 4]
    assert math.isnan(_row(region_table(d), "region", "kv_cache")["rho"])


def test_freeze_style_catalog_width_two():
    d = freeze_style_declaration()
    assert catalog_width(d, "left_context")["K"] == 2
    assert trajectory(d, "left_context", calls=3)["cached"].tolist() == [0, 20, 20]
    v = _row(verdict(d), "operator", "decode_chunk")
    assert v["K"] == 2 and v["affordable"]
    assert v["flush_admitted"] == 2 * 20 and v["flush_rejected"] == 0
    assert _row(region_table(d), "region", "left_context")["rho"] == pytest.approx(2.0)


def test_checks_fail_c1_c3_with_reasons():
    clocks = (Clock("frames", "frame"), Clock("steps", "step", fixed=False))
    r = Region("kv", clock="frames", shape=("frames", 4), policy=SlidingWindow(8), growth=2)
    c = checks(Declaration("m", clocks, (r,), single_session=False))
    assert c["passed"].tolist() == [False, True, False]
    assert _row(c, "check", "C1")["reason"] == "traffic-dependent clock rates: steps"
    assert "batched" in _row(c, "check", "C3")["reason"]
    one = checks(Declaration("m", (Clock("frames", "frame"),), (r,)))
    assert not _row(one, "check", "C1")["passed"]
    assert "only 1 fixed clock" in _row(one, "check", "C1")["reason"]


# ---------------------------------------------------------------------------------------
# derivation properties
# ---------------------------------------------------------------------------------------


@HYP
@given(
    prompt=st.integers(0, 400),
    retained=st.integers(1, 300),
    growth=st.integers(0, 120),
    layout=st.sampled_from(["chronological", "newest_first"]),
)
def test_prompt_retained_width_formula_matches_enumeration(prompt, retained, growth, layout):
    clocks = (Clock("tokens", "token"), Clock("frames", "frame", parent="tokens", ratio=2))
    r = Region("kv", clock="frames", shape=(2, "frames"), policy=PromptRetained(prompt, retained, layout),
               growth=growth, initial=prompt, lifetime="turn")
    d = Declaration("m", clocks, (r,), (Operator("op", reads=("kv",), clock="frames", call=max(growth, 1)),))
    a_minus, a, a_att = envelope(d, "kv")
    w = catalog_width(d, "kv")
    assert w["K"] == w["K_enumerated"]
    assert a_minus == prompt
    assert a == (prompt + retained if growth else prompt)
    assert a_att == a + growth
    traj = trajectory(d, "kv")
    assert traj["cached"].max() == a and traj["cached"].iloc[-1] == a
    assert (traj["retained"] <= prompt + retained).all()
    steady = catalog(d, "op").query("kind == 'steady'")
    assert len(steady) == w["K"]


@HYP
@given(window=st.integers(1, 500), growth=st.integers(0, 80))
def test_sliding_window_width_formula_matches_enumeration(window, growth):
    clocks = (Clock("tokens", "token"), Clock("frames", "frame", parent="tokens", ratio=2))
    r = Region("kv", clock="frames", shape=("frames", 3), policy=SlidingWindow(window), growth=growth)
    d = Declaration("m", clocks, (r,))
    w = catalog_width(d, "kv")
    assert w["K"] == w["K_enumerated"]
    expected = 1 if growth == 0 else math.ceil(window / growth) + 1
    assert w["K"] == expected
    assert region_table(d).iloc[0]["demand_bytes"] == 4 * 3 * (window if growth else 0)


# ---------------------------------------------------------------------------------------
# declaration errors: DeclarationError naming the field, never another exception type
# ---------------------------------------------------------------------------------------

CLOCKS = (Clock("tokens", "token", rate_hz=25.0), Clock("frames", "frame", parent="tokens", ratio=2))


def _region(**kw) -> Region:
    base = dict(name="kv", clock="frames", shape=("n_steps", "frames", 4), policy=PromptRetained(6, 4),
                growth=2, initial=6, lifetime="turn")
    base.update(kw)
    return Region(**base)


def _operator(**kw) -> Operator:
    base = dict(name="op", reads=("kv",), clock="frames", call=2, flush=(1, 2, 1))
    base.update(kw)
    return Operator(**base)


def _declare(clocks=CLOCKS, regions=None, operators=None, **kw) -> Declaration:
    regions = (_region(),) if regions is None else regions
    operators = (_operator(),) if operators is None else operators
    kw.setdefault("dims", {"n_steps": 3})
    kw.setdefault("admission", Admission("frames", 2))
    return Declaration("m", clocks, regions, operators, **kw)


def test_the_valid_base_declaration_builds():
    d = _declare()
    assert d.region("kv").clock_axis == 1
    assert catalog_width(d, "kv")["K"] == 3
    with pytest.raises(KeyError):
        d.region("nope")
    with pytest.raises(KeyError):
        d.operator("nope")


INVALID = [
    # clocks
    ("clocks not a tuple", lambda: _declare(clocks=list(CLOCKS)), "clocks"),
    ("no clocks", lambda: _declare(clocks=()), "clocks"),
    ("clock not a Clock", lambda: _declare(clocks=(CLOCKS[0], "frames")), "clocks[1]"),
    ("clock without name", lambda: _declare(clocks=(Clock("", "token"),)), "clocks[0].name"),
    ("clock without unit", lambda: _declare(clocks=(Clock("tokens", ""),) + CLOCKS[1:]), "clocks[0].unit"),
    ("root clock with ratio", lambda: _declare(clocks=(Clock("tokens", "t", ratio=2),) + CLOCKS[1:]), "clocks[0].ratio"),
    ("non-integer ratio", lambda: _declare(clocks=(CLOCKS[0], Clock("frames", "f", parent="tokens", ratio=2.5))),
     "clocks[1].ratio"),
    ("zero ratio", lambda: _declare(clocks=(CLOCKS[0], Clock("frames", "f", parent="tokens", ratio=0))), "clocks[1].ratio"),
    ("bool ratio", lambda: _declare(clocks=(CLOCKS[0], Clock("frames", "f", parent="tokens", ratio=True))),
     "clocks[1].ratio"),
    ("negative offset", lambda: _declare(clocks=(CLOCKS[0], Clock("frames", "f", parent="tokens", ratio=2, offset=-1))),
     "clocks[1].offset"),
    ("negative rate", lambda: _declare(clocks=(Clock("tokens", "t", rate_hz=-25.0),) + CLOCKS[1:]), "clocks[0].rate_hz"),
    ("duplicate clock", lambda: _declare(clocks=CLOCKS + (Clock("frames", "again"),)), "clocks[2].name"),
    ("unknown parent", lambda: _declare(clocks=(CLOCKS[0], Clock("frames", "f", parent="beats", ratio=2))),
     "clocks[1].parent"),
    ("clock cycle", lambda: _declare(clocks=(Clock("tokens", "t", parent="frames", ratio=1),
                                             Clock("frames", "f", parent="tokens", ratio=2))), "clocks.tokens.parent"),
    ("self-driven clock", lambda: _declare(clocks=(CLOCKS[0], Clock("frames", "f", parent="frames", ratio=2))),
     "clocks.frames.parent"),
    # dims
    ("dims not a mapping", lambda: _declare(dims=[("n_steps", 3)]), "dims"),
    ("dim size zero", lambda: _declare(dims={"n_steps": 0}), "dims.n_steps"),
    ("dim named like a clock", lambda: _declare(dims={"n_steps": 3, "frames": 4}), "dims.frames"),
    # regions
    ("regions not a tuple", lambda: _declare(regions=[_region()]), "regions"),
    ("region not a Region", lambda: _declare(regions=("kv",)), "regions[0]"),
    ("region without name", lambda: _declare(regions=(_region(name=""),)), "regions[0].name"),
    ("unknown clock in region", lambda: _declare(regions=(_region(clock="beats"),)), "regions[0](kv).clock"),
    ("shape not a tuple", lambda: _declare(regions=(_region(shape=["n_steps", "frames", 4]),)), "regions[0](kv).shape"),
    ("shape not naming its clock", lambda: _declare(regions=(_region(shape=("n_steps", 4)),)), "regions[0](kv).shape"),
    ("shape naming its clock twice", lambda: _declare(regions=(_region(shape=("frames", "frames")),)),
     "regions[0](kv).shape"),
    ("undeclared symbolic dim", lambda: _declare(regions=(_region(shape=("slots", "frames")),)),
     "regions[0](kv).shape[0]"),
    ("non-positive dim", lambda: _declare(regions=(_region(shape=(0, "frames")),)), "regions[0](kv).shape[0]"),
    ("float dim", lambda: _declare(regions=(_region(shape=("frames", 4.0)),)), "regions[0](kv).shape[1]"),
    ("unknown policy object", lambda: _declare(regions=(_region(policy=object()),)), "regions[0](kv).policy"),
    ("policy given as a string", lambda: _declare(regions=(_region(policy="sliding_window"),)), "regions[0](kv).policy"),
    ("bad layout string", lambda: _declare(regions=(_region(policy=PromptRetained(6, 4, layout="oldest_first")),)),
     "regions[0](kv).policy.layout"),
    ("zero window", lambda: _declare(regions=(_region(policy=SlidingWindow(0), initial=0),)),
     "regions[0](kv).policy.window"),
    ("zero retained", lambda: _declare(regions=(_region(policy=PromptRetained(6, 0)),)), "regions[0](kv).policy.retained"),
    ("negative prompt", lambda: _declare(regions=(_region(policy=PromptRetained(-1, 4), initial=0),)),
     "regions[0](kv).policy.prompt"),
    ("float prompt", lambda: _declare(regions=(_region(policy=PromptRetained(6.0, 4)),)), "regions[0](kv).policy.prompt"),
    ("zero ring", lambda: _declare(regions=(_region(policy=Ring(0), initial=0),)), "regions[0](kv).policy.capacity"),
    ("negative fixed", lambda: _declare(regions=(_region(policy=Fixed(-1), initial=0),)), "regions[0](kv).policy.extent"),
    ("negative growth", lambda: _declare(regions=(_region(growth=-2),)), "regions[0](kv).growth"),
    ("float growth", lambda: _declare(regions=(_region(growth=2.0),)), "regions[0](kv).growth"),
    ("negative initial", lambda: _declare(regions=(_region(initial=-1),)), "regions[0](kv).initial"),
    ("initial > prompt", lambda: _declare(regions=(_region(initial=7),)), "regions[0](kv).initial"),
    ("max_call < growth", lambda: _declare(regions=(_region(max_call=1),)), "regions[0](kv).max_call"),
    ("unknown lifetime", lambda: _declare(regions=(_region(lifetime="session"),)), "regions[0](kv).lifetime"),
    ("unknown mutability", lambda: _declare(regions=(_region(mutability="frozen"),)), "regions[0](kv).mutability"),
    ("unknown role", lambda: _declare(regions=(_region(role="cache"),)), "regions[0](kv).role"),
    ("unknown envelope", lambda: _declare(regions=(_region(envelope="peak"),)), "regions[0](kv).envelope"),
    ("unknown dtype", lambda: _declare(regions=(_region(dtype="float8"),)), "regions[0](kv).dtype"),
    ("stock not a mapping", lambda: _declare(regions=(_region(stock=[("frames", 10)]),)), "regions[0](kv).stock"),
    ("stock key not in shape", lambda: _declare(regions=(_region(stock={"slots": 16}),)), "regions[0](kv).stock.slots"),
    ("stock value zero", lambda: _declare(regions=(_region(stock={"frames": 0}),)), "regions[0](kv).stock.frames"),
    ("immutable region with growth", lambda: _declare(regions=(_region(mutability="immutable"),)),
     "regions[0](kv).growth"),
    ("duplicate region names", lambda: _declare(regions=(_region(), _region())), "regions[1](kv).name"),
    ("resident in unknown region", lambda: _declare(regions=(_region(resident_in="workspace"),)),
     "regions[0](kv).resident_in"),
    ("nested residency", lambda: _declare(regions=(_region(name="a", resident_in="b"), _region(name="b", resident_in="c"),
                                                   _region(name="c")), operators=()), "regions[0](a).resident_in"),
    # operators
    ("operators not a tuple", lambda: _declare(operators=[_operator()]), "operators"),
    ("operator not an Operator", lambda: _declare(operators=("op",)), "operators[0]"),
    ("operator without name", lambda: _declare(operators=(_operator(name=""),)), "operators[0].name"),
    ("reads not a tuple", lambda: _declare(operators=(_operator(reads="kv"),)), "operators[0](op).reads"),
    ("operator reading unknown region", lambda: _declare(operators=(_operator(reads=("kv", "ghost")),)),
     "operators[0](op).reads[1]"),
    ("operator on unknown clock", lambda: _declare(operators=(_operator(clock="beats"),)), "operators[0](op).clock"),
    ("operator call zero", lambda: _declare(operators=(_operator(call=0),)), "operators[0](op).call"),
    ("flush min > max", lambda: _declare(operators=(_operator(flush=(6, 2, 2)),)), "operators[0](op).flush"),
    ("flush of two", lambda: _declare(operators=(_operator(flush=(6, 54)),)), "operators[0](op).flush"),
    ("flush as list", lambda: _declare(operators=(_operator(flush=[6, 54, 2]),)), "operators[0](op).flush"),
    ("flush zero step", lambda: _declare(operators=(_operator(flush=(6, 54, 0)),)), "operators[0](op).flush"),
    ("flush zero min", lambda: _declare(operators=(_operator(flush=(0, 54, 2)),)), "operators[0](op).flush"),
    ("flush float", lambda: _declare(operators=(_operator(flush=(6, 54.0, 2)),)), "operators[0](op).flush"),
    ("per_chunk zero", lambda: _declare(operators=(_operator(per_chunk=0),)), "operators[0](op).per_chunk"),
    ("scalars not a mapping", lambda: _declare(operators=(_operator(scalars=[1]),)), "operators[0](op).scalars"),
    ("scalar not plain", lambda: _declare(operators=(_operator(scalars={"w": [1, 2]}),)), "operators[0](op).scalars.w"),
    ("duplicate operator names", lambda: _declare(operators=(_operator(), _operator())), "operators[1].name"),
    # admission, constants, flags
    ("admission not an Admission", lambda: _declare(admission=("frames", 2)), "admission"),
    ("admission on unknown clock", lambda: _declare(admission=Admission("beats", 2)), "admission.clock"),
    ("admission zero", lambda: _declare(admission=Admission("frames", 0)), "admission.max_call"),
    ("admission float", lambda: _declare(admission=Admission("frames", 2.5)), "admission.max_call"),
    ("constants not a tuple", lambda: _declare(constants=[DeviceConstant("c", (1,))]), "constants"),
    ("constant not a DeviceConstant", lambda: _declare(constants=("c",)), "constants[0]"),
    ("single_session not bool", lambda: _declare(single_session="yes"), "single_session"),
    ("horizon one", lambda: _declare(horizon=1), "horizon"),
    ("no model name", lambda: Declaration("", CLOCKS, (_region(),), dims={"n_steps": 3}), "model"),
]


@pytest.mark.parametrize("build,field", [(b, f) for _, b, f in INVALID], ids=[n for n, _, _ in INVALID])
def test_invalid_declaration_names_the_field(build, field):
    with pytest.raises(DeclarationError) as info:
        build()
    assert type(info.value) is DeclarationError
    assert info.value.field == field, info.value
    assert info.value.reason
    assert f"'{field}'" in str(info.value)


def test_declaration_error_is_a_value_error():
    e = DeclarationError("regions[0].growth", "must be >= 0")
    assert isinstance(e, ValueError)
    assert (e.field, e.reason) == ("regions[0].growth", "must be >= 0")


# An unhashable value where a name is expected (a list instead of a string) must still be
# reported as a DeclarationError on that field: the lookups `x in dict` raise TypeError today.
UNHASHABLE = [
    ("region clock", lambda: _declare(regions=(_region(clock=["frames"]),)), "regions[0](kv).clock"),
    ("region dtype", lambda: _declare(regions=(_region(dtype=["float32"]),)), "regions[0](kv).dtype"),
    ("region resident_in", lambda: _declare(regions=(_region(resident_in=["kv2"]),)), "regions[0](kv).resident_in"),
    ("operator reads element", lambda: _declare(operators=(_operator(reads=(["kv"],)),)), "operators[0](op).reads[0]"),
    ("operator clock", lambda: _declare(operators=(_operator(clock=["frames"]),)), "operators[0](op).clock"),
    ("admission clock", lambda: _declare(admission=Admission(["frames"], 2)), "admission.clock"),
    ("clock parent", lambda: _declare(clocks=(CLOCKS[0], Clock("frames", "f", parent=["tokens"], ratio=2))),
     "clocks[1].parent"),
]


@pytest.mark.parametrize("build,field", [(b, f) for _, b, f in UNHASHABLE], ids=[n for n, _, _ in UNHASHABLE])
def test_unhashable_names_raise_declaration_error(build, field):
    """BUG (core): these raise TypeError('unhashable type: list') instead of DeclarationError."""
    with pytest.raises(DeclarationError) as info:
        build()
    assert info.value.field == field


# Fuzz: any hashable junk in any field gives a valid declaration or a DeclarationError.
_JUNK = st.sampled_from([None, -1, 0, 1, 2, 3, 2.5, True, "", "frames", "tokens", "kv", "beats", (), ("kv",),
                         ("frames",), (2, "frames"), (1, 3, 1), "newest_first", "immutable"])
_FIELDS = {
    "region": ["name", "clock", "shape", "growth", "max_call", "initial", "lifetime", "mutability", "role",
               "envelope", "dtype", "resident_in"],
    "operator": ["name", "reads", "clock", "call", "flush", "per_chunk"],
    "decl": ["horizon", "single_session"],
    "clock": ["name", "unit", "parent", "ratio", "offset", "rate_hz"],
}


@HYP
@given(where=st.sampled_from(sorted(_FIELDS)), data=st.data())
def test_fuzzed_declarations_only_raise_declaration_error(where, data):
    name = data.draw(st.sampled_from(_FIELDS[where]))
    value = data.draw(_JUNK)
    try:
        if where == "region":
            _declare(regions=(_region(**{name: value}),))
        elif where == "operator":
            _declare(operators=(_operator(**{name: value}),))
        elif where == "clock":
            kw = dict(name="frames", unit="frame", parent="tokens", ratio=2)
            kw[name] = value
            _declare(clocks=(CLOCKS[0], Clock(**kw)))
        else:
            _declare(**{name: value})
    except DeclarationError as e:
        assert e.field and isinstance(e.field, str)


def test_policies_report_their_semantics():
    assert PromptRetained(302, 100).bound == 402
    assert PromptRetained(302, 100).extent_after(452) == 402
    assert PromptRetained(302, 100).extent_after(352) == 352
    assert SlidingWindow(8).extent_after(58) == 8
    assert Ring(250).shape_extent(3) == 250
    assert Fixed(6).extent_after(100) == 6
    assert Unbounded().extent_after(10_000) == 10_000 and not Unbounded().bounded
    assert PromptRetained(302, 100).segments(452) == [(0, 302), (352, 100)]
    assert SlidingWindow(8, "newest_first").segments(20) == [(0, 8)]
    assert SlidingWindow(8).segments(20) == [(12, 8)]


def test_a_changed_declaration_is_derived_again():
    """``with_clocks`` / ``replace`` / ``dataclasses.replace``: what the clocks derived (a region's growth and
    max_call, an operator's call and flush, the admission) follows the new clocks; declared values stay."""
    import dataclasses

    d = token2wav_declaration()
    tokens = dataclasses.replace(d.clock("tokens"), ratio=20)
    for changed in (d.with_clocks(tokens), d.replace(clocks=tuple(tokens if c.name == "tokens" else c
                                                                  for c in d.clocks))):
        assert changed.region("estimator_att_cache").max_call == 46  # 20 tokens + the 3-token lookahead, x 2
        assert changed.region("estimator_att_cache").growth == 40 and changed.operator("flow_chunk").call == 40
        assert changed.admission.max_call == 40 and changed.region("cfm_noise").growth == 0
    assert d.replace() == d and d.replace(model="renamed").model == "renamed"
    fixed = dataclasses.replace(d.regions[0], growth=50, max_call=56)  # given explicitly: declared, kept
    with pytest.raises(DeclarationError, match="grows 50"):  # ... so the new clocks' 40 frames contradict it
        d.replace(regions=(fixed, *d.regions[1:])).with_clocks(tokens)
    with pytest.raises(DeclarationError):
        d.with_clocks(dataclasses.replace(d.clock("frames"), ratio=0))
