"""The derivation is exact or says it cannot be; contradictory declarations name their field; lookahead is declared once.

Each case is one of the reported repros (issue 16's declaration surface, issue 13 item 3 and 7).
"""

from __future__ import annotations

import math
import time

import pytest

from cadencelab.contract import (
    ROW_LIMIT, Admission, Clock, Declaration, DeclarationError, DerivationLimitError, Fixed, Operator, PromptRetained,
    Region, Ring, SlidingWindow, admitted_labels, catalog, catalog_counts, catalog_width, derive, envelope, per_call,
    region_table, trajectory, verdict,
)
from cadencelab.adapters.duplex.models import backbone_declaration
from cadencelab.adapters.token2wav.clocks import token2wav_declaration
from cadencelab.contract.clocks import validate_clocks

CLOCKS = (Clock("tokens", "token", rate_hz=25.0), Clock("frames", "frame", parent="tokens", ratio=2))


def _decl(region=None, operator=None, admission=None, clocks=CLOCKS, **kw):
    region = region or dict(name="kv", clock="frames", shape=("frames", 4), policy=SlidingWindow(8), growth=4)
    ops = () if operator is False else (Operator(**(operator or dict(name="op", reads=("kv",), clock="frames", call=4))),)
    return Declaration("m", clocks, (Region(**region),), ops, admission=admission, **kw)


# ---------------------------------------------------------------------------------------
# exact, closed-form, bounded
# ---------------------------------------------------------------------------------------


def test_a_three_million_window_is_exact_and_fast():
    t0 = time.perf_counter()
    d = backbone_declaration(window=3_000_000)
    assert envelope(d, "kv_cache")[:2] == (0, 3_000_000)
    w = catalog_width(d, "kv_cache")
    assert w["K"] == w["K_enumerated"] == 3_000_001
    v = verdict(d).set_index("operator").loc["backbone_decode"]
    assert v["K"] == 3_000_001 and not v["affordable"]
    der = derive(d)
    assert der.not_enumerated == {"backbone_decode": 3_000_001}
    assert "not enumerated" in der.report()
    assert time.perf_counter() - t0 < 5


def test_tables_too_long_to_enumerate_raise_naming_the_field():
    d = backbone_declaration(window=3_000_000)
    with pytest.raises(DerivationLimitError) as info:
        trajectory(d, "kv_cache")  # to its fixed point: 3,000,001 rows
    assert info.value.field == "regions[0](kv_cache).policy" and info.value.needed == 3_000_001
    assert isinstance(info.value, ValueError)
    assert trajectory(d, "kv_cache", calls=5)["cached"].tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(DerivationLimitError) as info:
        trajectory(d, "kv_cache", calls=ROW_LIMIT + 1)
    assert info.value.field == "calls"
    with pytest.raises(DerivationLimitError) as info:
        catalog(d, "backbone_decode")
    assert info.value.field == "operators[0](backbone_decode)"
    with pytest.raises(DerivationLimitError):
        admitted_labels(d, "backbone_decode")


def test_an_unbounded_flush_range_is_counted_not_enumerated():
    region = dict(name="kv", clock="frames", shape=("frames",), policy=SlidingWindow(8), growth=4, max_call=3_000_000)
    d = _decl(region, dict(name="op", reads=("kv",), clock="frames", call=4, flush=(1, 3_000_000, 1)))
    c = catalog_counts(d, "op")
    assert (c["steady"], c["flush"], c["rows"]) == (3, 9_000_000, 9_000_003)
    with pytest.raises(DerivationLimitError) as info:
        catalog(d, "op")
    assert info.value.field == "operators[0](op)" and info.value.needed == 9_000_003


def test_token2wav_huge_retained_returns_quickly():
    t0 = time.perf_counter()
    der = derive(token2wav_declaration(f_retained=10_000_000))
    flow = der.verdict.set_index("operator").loc["flow_chunk"]
    assert flow["K"] == 10_000_000 // 50 + 1 and not flow["affordable"]
    assert set(der.not_enumerated) == {"flow_chunk", "estimator_step", "flow_encoder"}
    assert time.perf_counter() - t0 < 5


def test_closed_forms_match_the_enumerated_catalog():
    d = token2wav_declaration(f_retained=150)
    for op in d.operators:
        cat = catalog(d, op.name)
        c = catalog_counts(d, op.name)
        assert c["rows"] == len(cat)
        assert c["steady"] == int((cat["kind"] == "steady").sum())
        assert c["flush_admitted"] == int(((cat["kind"] == "flush") & cat["admitted"].astype(bool)).sum())
        labels = {tuple(int(r[f"ext_{n}"]) for n in op.reads) + (int(r["f"]),)
                  for _, r in cat[cat["admitted"].astype(bool)].iterrows()}
        assert admitted_labels(d, op.name) == labels and c["admitted_classes"] == len(labels)


# ---------------------------------------------------------------------------------------
# consistency rules: the field named
# ---------------------------------------------------------------------------------------

RULES = [
    ("child rate contradicts the parent's ratio",
     lambda: _decl(clocks=(CLOCKS[0], Clock("frames", "frame", parent="tokens", ratio=2, rate_hz=40.0))),
     "clocks[1].rate_hz"),
    ("infinite rate", lambda: _decl(clocks=(Clock("tokens", "t", rate_hz=math.inf), CLOCKS[1])), "clocks[0].rate_hz"),
    ("ring smaller than the growth per call",
     lambda: _decl(dict(name="kv", clock="frames", shape=("frames",), policy=Ring(4), growth=50), False),
     "regions[0](kv).policy.capacity"),
    ("ring smaller than max_call",
     lambda: _decl(dict(name="kv", clock="frames", shape=("frames",), policy=Ring(4), growth=4, max_call=6), False),
     "regions[0](kv).policy.capacity"),
    ("operator call 7 on a region growing 4", lambda: _decl(operator=dict(name="op", reads=("kv",), clock="frames", call=7)),
     "operators[0](op).call"),
    ("call on a parent clock contradicting the growth",
     lambda: _decl(operator=dict(name="op", reads=("kv",), clock="tokens", call=3)), "operators[0](op).call"),
    ("admission below the steady call", lambda: _decl(admission=Admission("frames", 3)), "admission.max_call"),
    ("window shorter than the initial extent",
     lambda: _decl(dict(name="kv", clock="frames", shape=("frames",), policy=SlidingWindow(8), growth=4, initial=100)),
     "regions[0](kv).initial"),
    ("flush larger than max_call",
     lambda: _decl(operator=dict(name="op", reads=("kv",), clock="frames", call=4, flush=(1, 5, 1))),
     "operators[0](op).flush"),
    ("call left unset without a call clock", lambda: _decl(operator=dict(name="op", reads=("kv",), clock="frames")),
     "operators[0](op).call"),
    ("lookahead flush without lookahead",
     lambda: _decl(operator=dict(name="op", reads=("kv",), clock="frames", flush="lookahead"), call_clock="tokens"),
     "operators[0](op).flush"),
    ("unknown call clock", lambda: _decl(call_clock="chunks"), "call_clock"),
    ("token2wav f_chunk not a whole number of tokens", lambda: token2wav_declaration(f_chunk=41), "f_chunk"),
    ("token2wav f_chunk contradicting tokens_per_chunk",
     lambda: token2wav_declaration(f_chunk=40, tokens_per_chunk=25), "f_chunk"),
]


@pytest.mark.parametrize("build,field", [(b, f) for _, b, f in RULES], ids=[n for n, _, _ in RULES])
def test_contradictory_declarations_name_the_field(build, field):
    with pytest.raises(DeclarationError) as info:
        build()
    assert info.value.field == field, info.value


VALID = [
    ("child rate equal to parent x ratio",
     lambda: _decl(clocks=(CLOCKS[0], Clock("frames", "frame", parent="tokens", ratio=2, rate_hz=50.0)))),
    ("ring that holds a call", lambda: _decl(dict(name="kv", clock="frames", shape=("frames",), policy=Ring(6),
                                                  growth=4, max_call=6), False)),
    ("call on the parent clock in its own units",
     lambda: _decl(operator=dict(name="op", reads=("kv",), clock="tokens", call=2))),
    ("admission at the steady call", lambda: _decl(admission=Admission("frames", 4))),
    ("window shorter than the growth (an overlap tail)",
     lambda: _decl(dict(name="kv", clock="frames", shape=("frames",), policy=SlidingWindow(2), growth=4), False)),
    ("flush up to max_call", lambda: _decl(dict(name="kv", clock="frames", shape=("frames",), policy=SlidingWindow(8),
                                                growth=4, max_call=6),
                                           dict(name="op", reads=("kv",), clock="frames", call=4, flush=(1, 6, 1)))),
]


@pytest.mark.parametrize("build", [b for _, b in VALID], ids=[n for n, _ in VALID])
def test_consistent_neighbours_are_accepted(build):
    assert isinstance(build(), Declaration)


# ---------------------------------------------------------------------------------------
# lookahead declared once
# ---------------------------------------------------------------------------------------


def conformer() -> Declaration:
    """A streaming encoder call: 16 committed frames + 4 lookahead, an 8-frame sink + 48-frame window."""
    clocks = (Clock("calls", "encoder call", rate_hz=6.25), Clock("frames", "frame", parent="calls", ratio=16, offset=4))
    regions = (
        Region("att_kv", clock="frames", shape=(2, 4, "frames", 16), policy=PromptRetained(8, 48), envelope="attended"),
        Region("conv_ctx", clock="frames", shape=(1, 32, "frames"), policy=Fixed(14)),
    )
    ops = (Operator("encoder_call", reads=("att_kv", "conv_ctx"), clock="frames", flush="lookahead"),)
    return Declaration("conformer", clocks, regions, ops, admission=Admission("frames"), call_clock="calls")


def test_lookahead_derives_growth_max_call_call_flush_and_admission():
    d = conformer()
    kv, ctx = d.region("att_kv"), d.region("conv_ctx")
    assert (kv.growth, kv.max_call) == (16, 20) and (ctx.growth, ctx.max_call) == (16, 20)
    op = d.operator("encoder_call")
    assert op.call == 16 and op.flush == (4, 19, 1)
    assert d.admission == Admission("frames", 16)
    assert envelope(d, "att_kv") == (0, 56, 76)  # attended envelope = A + committed + lookahead
    assert region_table(d).set_index("region").loc["att_kv", "demand_shape"] == (2, 4, 76, 16)
    flush = catalog(d, "encoder_call").query("kind == 'flush'")
    assert sorted(set(flush["f"].astype(int))) == list(range(4, 20))
    assert set(flush.query("admitted")["f"].astype(int)) == set(range(4, 17))


def test_per_call_scales_the_lookahead_down_the_drive_chain():
    clocks = validate_clocks(token2wav_declaration().clocks)
    frames, samples, tokens = (per_call(clocks, n, "chunks") for n in ("frames", "samples", "tokens"))
    assert (frames.committed, frames.lookahead, frames.unit, frames.frames) == (50, 6, 2, 56)
    assert frames.flush() == (6, 54, 2)
    assert (samples.committed, samples.frames) == (24_000, 56 * 480)
    assert (tokens.committed, tokens.lookahead, tokens.unit) == (25, 3, 1)
    assert per_call(clocks, "turns", "chunks") is None


def test_token2wav_is_declared_through_the_lookahead():
    d = token2wav_declaration()
    assert d.call_clock == "chunks"
    assert (d.params["f_chunk"], d.params["f_call"]) == (50, 56)
    for name in ("estimator_att_cache", "conformer_att_cache", "vocoder_mel_cache"):
        assert (d.region(name).growth, d.region(name).max_call) == (50, 56)
    assert (d.region("vocoder_source_cache").growth, d.region("vocoder_source_cache").max_call) == (24_000, 26_880)
    assert {o.call for o in d.operators} == {50} and {o.flush for o in d.operators} == {(6, 54, 2)}
    assert d.region("cfm_noise").growth == 0  # immutable: never grows


@pytest.mark.parametrize("f_chunk", [10, 20, 40, 50, 60, 120])
def test_f_chunk_alone_and_with_tokens_give_one_declaration(f_chunk):
    """The CLI passes f_chunk alone; notebook 2's slider passes f_chunk with tokens_per_chunk = f_chunk / 2."""
    alone = token2wav_declaration(f_chunk=f_chunk)
    both = token2wav_declaration(f_chunk=f_chunk, tokens_per_chunk=f_chunk // 2)
    assert alone == both
    assert alone.params["f_call"] == f_chunk + 6
    assert catalog(alone, "flow_chunk").equals(catalog(both, "flow_chunk"))
