"""The adapter kit: two models the package does not ship, adapted in a few lines each (declaration + step),
certified against their own stock code; the differential audit catching wrong declarations that the
declared-cut audit passes. CPU, eager replay backend, tiny sizes."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

from cadencelab.adapters.kit import KitModel, StreamingRuntime, Traffic, adapter_lines, certify, exact_table, run_stock
from cadencelab.contract import PromptRetained, SlidingWindow
from cadencelab.state import ShadowAuditor
from kit_models import ConformerSizes, DecoderSizes, StreamingConformer, TokenDecoder


# ---- adapter 1: the streaming Conformer (declaration + step) -------------------------------- adapter begins
def conformer_declaration(s=ConformerSizes(), kv_policy=None):
    from cadencelab.contract import Admission, Clock, Declaration, Fixed, Operator, PromptRetained, Region

    clocks = (Clock("chunks", "encoder call", rate_hz=6.25),  # one call: 16 committed + 4 lookahead frames
              Clock("frames", "feature frame", parent="chunks", ratio=s.chunk, offset=s.lookahead))
    kv = Region("kv", clock="frames", shape=(2, s.heads, "frames", s.dim // s.heads),
                policy=kv_policy or PromptRetained(s.sink, s.window), lifetime="turn", address_stable=True)
    conv = Region("conv", clock="frames", shape=(1, s.dim, "frames"), policy=Fixed(s.kernel - 1), lifetime="turn",
                  address_stable=True)
    encode = Operator("encode", reads=("kv",), clock="frames", flush="lookahead")
    return Declaration("streaming-conformer", clocks, (kv, conv), (encode,), admission=Admission("frames"),
                       call_clock="chunks")


def conformer_steps(model):
    def step(x, caches, last):  # region views -> (output, the frames this call adds)
        out, kv, conv = model.chunk(x, caches["kv"], caches["conv"], last)
        return out, {"kv": kv, "conv": conv}

    def stock(x, caches, last):  # the model's own step: its caches after its own cut
        out, kv, conv = model.forward_chunk(x, caches.get("kv"), caches.get("conv"), last)
        return out, {"kv": kv, "conv": conv}

    return step, stock
# -------------------------------------------------------------------------------------------- adapter ends


# ---- adapter 2: a token-to-samples decoder (two clocks, newest-first history, stock form) --- adapter begins
def decoder_declaration(s=DecoderSizes()):
    from cadencelab.contract import Admission, Clock, Declaration, Fixed, Operator, Region, SlidingWindow

    clocks = (Clock("calls", "decoder call", rate_hz=12.5),  # one call: 4 committed + 1 lookahead token
              Clock("tokens", "token", parent="calls", ratio=s.tokens, offset=s.lookahead),
              Clock("samples", "sample", parent="tokens", ratio=s.samples_per_token))
    hist = Region("history", clock="tokens", shape=(1, "tokens", s.dim), policy=SlidingWindow(s.history, "newest_first"),
                  lifetime="turn")
    tail = Region("tail", clock="samples", shape=(1, "samples"), policy=Fixed(s.taps - 1), lifetime="turn")
    op = Operator("decode", reads=("history",), clock="tokens", flush="lookahead")
    return Declaration("token-decoder", clocks, (hist, tail), (op,), admission=Admission("tokens"), call_clock="calls")


def decoder_steps(model):
    def step(x, caches, last):  # the stock step, uncut: the runtime keeps what the declaration retains
        out, hist, tail = model.decode(x, caches["history"], caches["tail"], last, cut=False)
        return out, {"history": hist, "tail": tail}

    def stock(x, caches, last):
        out, hist, tail = model.decode(x, caches.get("history"), caches.get("tail"), last)
        return out, {"history": hist, "tail": tail}

    return step, stock
# -------------------------------------------------------------------------------------------- adapter ends


def _adapter_lines(begin: str) -> int:
    src = inspect.getsource(inspect.getmodule(_adapter_lines)).splitlines()
    i = next(k for k, line in enumerate(src) if begin in line and "adapter begins" in line)
    j = next(k for k in range(i, len(src)) if "adapter ends" in src[k])
    return sum(1 for line in src[i + 1:j] if line.strip() and not line.strip().startswith("#"))


def conformer_traffic(s=ConformerSizes(), seed=2):
    g = torch.Generator().manual_seed(seed)
    call = s.chunk + s.lookahead

    def turn(steady, final):
        return [torch.randn(1, call, s.dim, generator=g) for _ in range(steady)] + [torch.randn(1, final, s.dim, generator=g)]

    return Traffic([turn(6, 12), turn(5, call - 1), turn(2, s.lookahead)])  # a final call of 20 would be steady


def decoder_traffic(s=DecoderSizes(), seed=3):
    g = torch.Generator().manual_seed(seed)

    def turn(steady, final):
        return [torch.randint(0, s.vocab, (1, n), generator=g) for n in [s.tokens + s.lookahead] * steady + [final]]

    return Traffic([turn(5, 3), turn(4, s.tokens)])


def test_adapters_fit_in_forty_lines():
    assert adapter_lines(conformer_declaration, conformer_steps) == _adapter_lines("adapter 1") <= 40
    assert adapter_lines(decoder_declaration, decoder_steps) == _adapter_lines("adapter 2") <= 40
    with pytest.raises(ValueError, match="no source"):
        adapter_lines(len)


def test_traffic_streams_a_signal_as_a_client_calls():
    s = ConformerSizes()
    decl = conformer_declaration(s)
    call = s.chunk + s.lookahead
    sig = torch.arange(3 * s.chunk + 7, dtype=torch.float32).reshape(1, -1, 1)  # 55 frames
    (turn,) = Traffic.stream(decl, [sig], clock="frames").turns
    assert [t.shape[1] for t in turn] == [call, call, call, 7]  # the rest (7 >= lookahead 4) is the final call
    assert [int(t[0, 0, 0]) for t in turn] == [0, s.chunk, 2 * s.chunk, 3 * s.chunk]  # each starts at the uncommitted
    assert torch.equal(torch.cat([t[:, :s.chunk] for t in turn[:-1]] + [turn[-1]], dim=1), sig)  # nothing lost
    short = Traffic.stream(decl, [sig[:, :call - 1]], clock="frames").turns[0]
    assert [t.shape[1] for t in short] == [call - 1]  # shorter than a call: one final call
    with pytest.raises(ValueError, match="turn 0 has 3 'frames' ticks"):
        Traffic.stream(decl, [sig[:, :3]], clock="frames")
    with pytest.raises(ValueError, match="not driven"):
        Traffic.stream(decl, [sig], clock="nope")


def test_exact_table_names_the_first_unequal_call():
    a = [torch.zeros(2), torch.ones(2), torch.ones(3)]
    t = exact_table(a, [torch.zeros(2), torch.tensor([1.0, 1.5]), torch.ones(2)])
    assert t["equal"].tolist() == [True, False, False]
    assert t["max_abs_diff"].tolist()[1:] == [0.5, float("inf")]


def test_conformer_is_certified():
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    spec = KitModel(conformer_declaration(), step, stock, conformer_traffic(), modules=[model])
    cert = certify(spec, backend="eager")
    assert cert.ok, cert.table
    cat = cert.catalog
    steady = cat[cat["kind"] == "steady"]
    assert sorted(steady["label"]) == [(0, 16), (16, 16), (32, 16), (48, 16), (56, 16)]  # sink 8 + window 48 = 56
    assert (steady["observed"] > 0).all() and steady["derived"].all()
    flush = cat[(cat["kind"] == "flush") & (cat["observed"] > 0)]
    assert sorted(flush["label"]) == [(32, 4), (56, 12), (56, 19)] and flush["derived"].all()
    assert not flush.set_index("label").loc[[(56, 19)], "admitted"].any()  # 19 > f_chunk 16: eager by admission
    reasons = cert.counters.set_index("reason")["count"]
    assert reasons["replayed"] > 0 and reasons["outside_catalog"] == 1 and reasons["probe"] == 7
    assert cert.exact["equal"].all() and len(cert.exact) == 16
    assert (cert.addresses["distinct"] == 1).all()
    assert set(cert.audit["audit"]) == {"declared", "differential"}


def test_decoder_is_certified_across_two_clocks():
    model = TokenDecoder()
    step, stock = decoder_steps(model)
    decl = decoder_declaration()
    cert = certify(KitModel(decl, step, stock, decoder_traffic(), form="stock", modules=[model]), backend="eager")
    assert cert.ok, cert.table
    assert sorted(cert.catalog.loc[cert.catalog["kind"] == "steady", "label"]) == [(0, 4), (4, 4), (8, 4), (12, 4)]
    rt = cert.runtime
    assert rt.carries["tail"].length == 3 and rt.carries["history"].length == 12


def _first_output_divergence(decl, traffic, model):
    step, stock = conformer_steps(model)
    spec = KitModel(decl, step, stock, traffic, modules=[model])
    want, _ = run_stock(spec)
    rt = StreamingRuntime(spec, "SRc", backend="eager", audit=("declared", "differential"))
    got = rt.run(traffic)
    diverged = [i for i, (a, b) in enumerate(zip(want, got.outputs)) if not (a.shape == b.shape and torch.equal(a, b))]
    return rt, (diverged[0] if diverged else None)


@pytest.mark.parametrize("wrong", ["newest_first layout", "forgotten sink", "short window"])
def test_differential_audit_catches_a_wrong_declaration_before_the_output_diverges(wrong):
    s, model, traffic = ConformerSizes(), StreamingConformer(), conformer_traffic()
    policy = {"newest_first layout": PromptRetained(s.sink, s.window, layout="newest_first"),
              "forgotten sink": SlidingWindow(s.window),
              "short window": PromptRetained(s.sink, s.window - 8)}[wrong]
    decl = conformer_declaration(s, kv_policy=policy)
    rt, diverged = _first_output_divergence(decl, traffic, model)
    assert rt.declared.ok and rt.declared.agreements == rt.declared.applications == 2 * traffic.calls  # passes
    first = rt.differential.first_divergence
    assert first is not None and first.region == "kv" and first.index != ()
    assert diverged is not None and first.call < diverged  # caught before any output differs
    want_call = {"newest_first layout": 1, "forgotten sink": 3, "short window": 3}[wrong]
    assert first.call == want_call


def test_differential_audit_agrees_with_the_right_declaration():
    rt, diverged = _first_output_divergence(conformer_declaration(), conformer_traffic(), StreamingConformer())
    traffic = conformer_traffic()  # every call but each turn's final one (nothing reads what it leaves)
    assert diverged is None and rt.differential.ok
    assert rt.differential.applications == 2 * (traffic.calls - len(traffic.turns))
    summary = rt.differential.summary().set_index("region")
    assert summary.loc["kv", "first_divergent_call"] is None


def test_carries_keep_their_address_across_turns():
    model = StreamingConformer()
    step, _ = conformer_steps(model)
    rt = StreamingRuntime(KitModel(conformer_declaration(), step, modules=[model]), "SRc", backend="eager")
    ptrs = rt.pointers()
    run = rt.run(conformer_traffic())
    assert rt.pointers() == ptrs and run.table["ptr_kv"].nunique() == 1
    assert run.table["ext_kv"].tolist()[:7] == [16, 32, 48, 56, 56, 56, 56]
    assert rt.carries["kv"].capacity == 56  # chronological: the retained envelope suffices


def test_a_step_that_disagrees_with_the_declaration_fails_loudly():
    model = StreamingConformer()
    step, _ = conformer_steps(model)
    s = ConformerSizes()
    bad = conformer_declaration(dataclasses.replace(s, chunk=12, lookahead=8))  # the model commits 16 per call, not 12
    rt = StreamingRuntime(KitModel(bad, step), backend="eager", audit="declared")
    rt.reset()
    with pytest.raises(ValueError, match="region 'kv'"):
        rt(torch.randn(1, s.chunk + s.lookahead, s.dim))


def test_kit_refuses_what_it_cannot_run():
    model = StreamingConformer()
    step, _ = conformer_steps(model)
    with pytest.raises(ValueError, match="stock="):
        StreamingRuntime(KitModel(conformer_declaration(), step), audit="differential")
    with pytest.raises(ValueError, match="form"):
        StreamingRuntime(KitModel(conformer_declaration(), step, form="other"))
    with pytest.raises(ValueError, match=r"takes the model's spec, KitModel\(decl, step, ...\), got a Declaration"):
        StreamingRuntime(conformer_declaration(), step)
    with pytest.raises(ValueError, match=r"unknown arm 'SRC'; arms: \['B0', 'S', 'R', 'Rc', 'SR', 'SRc'\]"):
        StreamingRuntime(KitModel(conformer_declaration(), step), "SRC")


def test_the_teaching_model_on_the_kit_equals_its_stock_loop():
    from cadencelab.adapters import teaching, teaching_kit

    cfg = teaching.TeachingConfig()
    model, stream = teaching.TinyStreamer(cfg), teaching.make_stream(cfg)
    m = teaching_kit.kit_model(model, stream)
    cert = m.certify(backend="eager")
    assert cert.ok, cert.table
    stock = teaching.TeachingRuntime(model, state_rule=False).run(stream)
    assert all(torch.equal(a, b) for a, b in zip(stock.outputs, cert.runtime.run(m.traffic).outputs))
    reasons = cert.counters.set_index("reason")["count"]
    assert reasons["priming"] == 2 and reasons["outside_catalog"] == 1


def test_the_step_may_append_in_place_where_its_carry_has_room():
    """Caches.append: the step attends over its carry after writing the new frames where the carry's layout puts
    them (the teaching model's K|V, newest first, sized to the attended envelope); the runtime then only retains.
    A carry without the room is refused by name."""
    from cadencelab.adapters import teaching

    cfg = teaching.TeachingConfig()
    model, stream = teaching.TinyStreamer(cfg), teaching.make_stream(cfg)
    rt = teaching.TeachingRuntime(model, auditor=ShadowAuditor())
    run = rt.run(stream)
    assert rt.kit.ops[teaching.OPERATOR].appended == {teaching.KV} and rt.auditor.ok
    assert run.table["cache_ptr"].nunique() == 1 and rt.kv.capacity == cfg.prompt + cfg.retained + cfg.f_call

    def step(x, caches, last):  # the conformer's conv context is Fixed(14): no room for a call's frames
        caches.append("conv", x.transpose(1, 2))
        return x, {}

    bad = StreamingRuntime(KitModel(conformer_declaration(), step))
    bad.reset()
    with pytest.raises(ValueError, match=r"region 'conv' holds 14 frames in a carry of 14: no room for 20 more"):
        bad(conformer_traffic().turns[0][0])


@pytest.mark.cuda
def test_conformer_is_certified_with_cuda_graphs():
    """The kit's runtime captured for real (notebook 8 takes this path when LIVE)."""
    model = StreamingConformer().cuda()
    step, stock = conformer_steps(model)
    traffic = Traffic([[x.cuda() for x in turn] for turn in conformer_traffic().turns])
    cert = certify(KitModel(conformer_declaration(), step, stock, traffic, modules=[model], device="cuda"),
                   backend="cuda")
    assert cert.ok, cert.table
    assert cert.runtime.engine.backend == "cuda" and int(cert.runtime.engine.counters()["captures"].sum()) > 0
