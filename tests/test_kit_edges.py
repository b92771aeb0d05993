"""The kit's sharp edges, each tried as a user would: every wrong call or declaration is refused with one line
naming the region, clock or frame count, before anything changes (the same call done right afterwards gives
what it gives alone); bind/At are checked at bind time. CPU, eager backend, tiny sizes."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from cadencelab.adapters.kit import KitModel, StreamingRuntime, Traffic, certify, run_stock
from cadencelab.contract import Fixed
from cadencelab.adapters.freeze_style import freeze_style_declaration
from cadencelab.adapters.token2wav.clocks import token2wav_declaration
from cadencelab.replay import At, bind, preflight
from kit_models import ConformerSizes, StreamingConformer
from test_kit import conformer_declaration, conformer_steps, conformer_traffic

S = ConformerSizes()
CALL = S.chunk + S.lookahead


def _runtime(decl=None, arm="S", audit=(), **spec):
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    spec = KitModel(decl or conformer_declaration(), step, stock, modules=[model], **spec)
    return StreamingRuntime(spec, arm, backend="eager", audit=audit), model


def _x(n, seed=0):
    return torch.randn(1, n, S.dim, generator=torch.Generator().manual_seed(seed))


def _replace_region(decl, name, **changes):
    regions = tuple(dataclasses.replace(r, **changes) if r.name == name else r for r in decl.regions)
    return dataclasses.replace(decl, regions=regions)


def test_a_refused_call_leaves_no_trace():
    alone, _ = _runtime(arm="SRc", audit=("declared", "differential"))
    alone.reset()
    want = [alone(_x(CALL, i)) for i in range(3)]
    rt, _ = _runtime(arm="SRc", audit=("declared", "differential"))
    rt.reset()
    got = []
    for i in range(3):
        for bad in (_x(2), _x(CALL - 1), _x(CALL + 3), "x"):
            with pytest.raises(ValueError):
                rt(bad)
        got.append(rt(_x(CALL, i)))
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    assert rt.calls == alone.calls == 3 and rt.carries["kv"].length == alone.carries["kv"].length
    assert rt.differential.ok and rt.declared.ok


def test_a_steady_call_shorter_than_the_lookahead_is_refused():
    rt, _ = _runtime()
    rt.reset()
    with pytest.raises(ValueError, match=r"shorter than the lookahead: x dim 1 holds 2 'frames' ticks.*4 of lookahead"):
        rt(_x(2))
    assert rt.carries["kv"].length == 0
    rt(_x(CALL))  # the next valid call runs
    assert rt.carries["kv"].length == S.chunk
    assert rt(_x(2), last=True).shape[1] == 2  # as the final call it commits its 2 frames


def test_frames_counted_on_the_feature_dim_is_refused():
    rt, _ = _runtime(frames=2)
    rt.reset()
    with pytest.raises(ValueError, match=r"steady call commits 16 'frames'.*20 'frames' ticks.*x dim 2 holds 8"):
        rt(_x(CALL))
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    with pytest.raises(ValueError, match="x dim 2 holds 8"):
        certify(KitModel(conformer_declaration(), step, stock, conformer_traffic(), frames=2), backend="eager")
    with pytest.raises(ValueError, match="dim 3 is outside x's 3 dims"):
        _runtime(frames=3)[0].frames_of(_x(CALL), False)


def test_a_final_call_longer_than_a_call_is_refused():
    rt, _ = _runtime()
    rt.reset()
    with pytest.raises(ValueError, match=r"final call commits at most 19 'frames'.*holds 55"):
        rt(_x(55), last=True)


def test_traffic_stream_refuses_the_call_clock_and_bad_signals():
    decl = conformer_declaration()
    sig = torch.randn(1, 55, S.dim)
    with pytest.raises(ValueError, match=r"clock 'chunks' is the call clock.*one of \['frames'\]"):
        Traffic.stream(decl, [sig], clock="chunks")
    with pytest.raises(ValueError, match="non-empty list of tensors"):
        Traffic.stream(decl, sig, clock="frames")
    with pytest.raises(ValueError, match="non-empty list of tensors"):
        Traffic.stream(decl, [], clock="frames")
    with pytest.raises(ValueError, match="signal 1 is a list"):
        Traffic.stream(decl, [sig, [1, 2]], clock="frames")
    with pytest.raises(ValueError, match="dim 3 is outside signal 0's 3 dims"):
        Traffic.stream(decl, [sig], clock="frames", dim=3)
    with pytest.raises(ValueError, match="dim must be an int"):
        Traffic.stream(decl, [sig], clock="frames", dim=1.0)
    # cut along the feature dim: the one final call carries all 55 frames, which the runtime refuses
    (turn,) = Traffic.stream(decl, [sig], clock="frames", dim=2).turns
    rt, _ = _runtime()
    rt.reset()
    with pytest.raises(ValueError, match="at most 19"):
        rt(turn[0], last=True)


@pytest.mark.parametrize("turns, prompts, match", [
    ([], None, "non-empty list of turns"),
    ("abc", None, "non-empty list of turns"),
    ([[]], None, "turn 0 must be a non-empty list"),
    ([torch.zeros(2)], None, "turn 0 must be a non-empty list"),
    ([[torch.zeros(2)], [torch.zeros(2), 3]], None, "turn 1, call 1 is a int"),
    ([[torch.zeros(2)]], [1, 2], "one per turn"),
])
def test_empty_or_mistyped_traffic_is_refused(turns, prompts, match):
    with pytest.raises(ValueError, match=match):
        Traffic(turns, prompts)


def test_region_dims_declared_in_another_order_name_the_region_and_the_declaration():
    decl = conformer_declaration()
    swapped = _replace_region(decl, "kv", shape=(2, "frames", S.heads, S.dim // S.heads))
    rt, _ = _runtime(swapped)
    rt.reset()
    with pytest.raises(RuntimeError, match=r"streaming-conformer regions 'kv' \(2, 0, 2, 4\) \(declared \(2, 'frames', 2, 4\)\)"):
        rt(_x(CALL))
    assert rt.calls == 0 and rt.carries["kv"].length == 0
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    with pytest.raises(RuntimeError, match=r"stock step of 'encode'.*'kv'"):
        run_stock(KitModel(swapped, stock=stock, traffic=conformer_traffic()))


def test_a_step_returning_other_dims_names_the_region_and_the_declaration():
    model = StreamingConformer()
    step, _ = conformer_steps(model)

    def transposed(x, caches, last):
        out, new = step(x, caches, last)
        return out, dict(new, conv=new["conv"].transpose(1, 2))

    rt = StreamingRuntime(KitModel(conformer_declaration(), transposed), backend="eager")
    rt.reset()
    before = rt.carries["conv"].buffer.clone()
    with pytest.raises(ValueError, match=r"region 'conv' has shape \(1, 16, 8\); the streaming-conformer declaration's "
                                         r"Region\('conv', shape=\(1, 8, 'frames'\)\) wants \(1, 8, 'n'\)"):
        rt(_x(CALL))
    assert torch.equal(rt.carries["conv"].buffer, before)  # checked before any write


def test_initial_without_init_is_refused():
    decl = _replace_region(conformer_declaration(), "conv", initial=S.kernel - 1)
    with pytest.raises(ValueError, match=r"region 'conv' declares initial=14 frames.*no init="):
        _runtime(decl)
    rt, _ = _runtime(decl, init=lambda prompt: {"conv": torch.ones(1, S.dim, S.kernel - 1)})
    assert torch.equal(rt.reset()["conv"], torch.ones(1, S.dim, S.kernel - 1))
    bad, _ = _runtime(decl, init=lambda prompt: {"kv": torch.zeros(2, S.heads, 0, S.dim // S.heads)})
    with pytest.raises(ValueError, match=r"'conv' declares initial=14.*returned \['kv'\]"):
        bad.reset()
    short, _ = _runtime(decl, init=lambda prompt: {"conv": torch.ones(1, S.dim, 3)})
    with pytest.raises(ValueError, match="init gave region 'conv' 3 frames"):
        short.reset()


def test_fixed_regions_start_zero_filled_and_keep_the_newest_frames():
    rt, _ = _runtime()
    base = rt.reset()["conv"]
    assert base.shape == (1, S.dim, S.kernel - 1) and not base.any()
    x = _x(CALL)
    rt(x)
    assert torch.equal(rt.carries["conv"].view(), x.transpose(1, 2)[:, :, S.chunk - (S.kernel - 1):S.chunk])
    assert "zero-filled at a turn's start" in Fixed.__doc__ and "newest" in Fixed.__doc__


def test_the_differential_audit_ignores_what_a_final_call_leaves_behind():
    model = StreamingConformer()
    step, stock = conformer_steps(model)

    def stock_dropping_caches_at_the_end(x, caches, last):  # nothing reads them after the final call
        out, new = stock(x, caches, last)
        return out, ({} if last else new)

    cert = certify(KitModel(conformer_declaration(), step, stock_dropping_caches_at_the_end, conformer_traffic(),
                            modules=[model]), backend="eager")
    assert cert.ok, cert.table
    rt = cert.runtime
    with pytest.raises(ValueError, match=r"turn ended .*reset\(\)"):
        rt(_x(CALL))  # after a final call the carry is not read: a new turn must start


def test_certification_keeps_the_outputs():
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    traffic = conformer_traffic()
    spec = KitModel(conformer_declaration(), step, stock, traffic, modules=[model])
    cert = certify(spec, backend="eager")
    want, _ = run_stock(spec)
    assert len(cert.outputs) == len(cert.stock_outputs) == traffic.calls
    assert all(torch.equal(a, b) for a, b in zip(cert.outputs, want))
    assert all(torch.equal(a, b) for a, b in zip(cert.stock_outputs, want))


@pytest.mark.parametrize("hazard", ["item", "assert"])
def test_certify_runs_the_preflight_and_fails_on_a_hazard(hazard):
    model = StreamingConformer()
    step, stock = conformer_steps(model)

    def item_step(x, caches, last):
        return step(x / float(x.abs().max()), caches, last)

    def assert_step(x, caches, last):
        assert torch.isfinite(x).all()
        return step(x, caches, last)

    bad = {"item": item_step, "assert": assert_step}[hazard]
    cert = certify(KitModel(conformer_declaration(), bad, stock, conformer_traffic(), modules=[model]), backend="eager")
    assert not cert.ok
    row = cert.table.set_index("clause").loc["preflight: no capture hazard in the step"]
    assert not row["passed"] and "host_sync" in row["detail"] and "test_kit_edges.py" in row["detail"]
    assert cert.preflight is not None and (cert.preflight.hazards()["kind"] == "host_sync").any()
    good = certify(KitModel(conformer_declaration(), step, stock, conformer_traffic(), modules=[model]),
                   backend="eager")
    assert good.table.set_index("clause").loc["preflight: no capture hazard in the step", "passed"]


def test_the_step_gets_the_committed_frame_count_from_the_kit():
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    seen, seen_stock = [], []

    def counted(x, caches, last, frames):
        seen.append(frames)
        return step(x, caches, last)

    def counted_stock(x, caches, last, frames):
        seen_stock.append(frames)
        return stock(x, caches, last)

    traffic = conformer_traffic()
    spec = KitModel(conformer_declaration(), counted, counted_stock, traffic)
    rt = StreamingRuntime(spec, backend="eager", audit="differential")
    rt.run(traffic)
    want = [S.chunk] * 6 + [12] + [S.chunk] * 5 + [CALL - 1] + [S.chunk] * 2 + [S.lookahead]
    assert seen == want and seen_stock == [f for f, (_, _, _, last) in zip(want, traffic.calls_of()) if not last]
    _, observed = run_stock(spec)
    assert [lab[-1] for lab in observed["label"]] == want


def test_a_sync_reported_through_a_warning_is_attributed_to_the_user_line():
    def step(x):
        warnings.warn("called a synchronizing CUDA operation")  # what set_sync_debug_mode('warn') emits
        return x * 2

    pf = preflight(step, torch.ones(3), device="cuda")
    (row,) = pf.hazards().itertuples()
    assert row.kind == "host_sync" and row.where.endswith("test_kit_edges.py:" + str(step.__code__.co_firstlineno + 1))


# ---- bind / At: checked at bind time -----------------------------------------------------------------
T2W = token2wav_declaration()


def _flow(**reads):
    return bind(T2W, "flow_chunk", lambda token, est, conf, last_chunk: token, backend="eager",
                reads=reads or {"estimator_att_cache": At("est"), "conformer_att_cache": At("conf")},
                frames=At("token", dim=1, clock="tokens", last="last_chunk"))


@pytest.mark.parametrize("at, match", [
    (At(7), "no argument at position 7"),
    (At(-1), "no argument at position -1"),
    (At(True), "a name, a position or a callable"),
    (At(1.5), "a name, a position or a callable"),
    (At("est", dim=1.0), "dim: an int"),
    (At("est", dim=9), "outside the region's 6 declared dims"),
    (At("est", key=["a"]), "key: a key of a dict argument"),
    ("est", "expected an At"),
])
def test_a_bad_at_fails_at_bind_time(at, match):
    with pytest.raises((ValueError, TypeError), match=match):
        _flow(estimator_att_cache=at, conformer_att_cache=At("conf"))


def test_bad_frames_and_last_fail_at_bind_time():
    with pytest.raises(ValueError, match="frames.dim: an int"):
        bind(T2W, "flow_encoder", lambda xs: xs, frames=At("xs", dim="1"))
    with pytest.raises(ValueError, match="frames.last: no argument at position 4"):
        bind(T2W, "flow_encoder", lambda xs: xs, frames=At("xs", dim=1, last=4))
    with pytest.raises(TypeError, match="frames"):
        bind(T2W, "flow_encoder", lambda xs: xs)


def test_a_missing_key_or_dim_names_the_argument_when_called():
    flow = bind(T2W, "flow_chunk", lambda token, cache, last_chunk: token, backend="eager",
                reads={r: At("cache", key=r) for r in ("estimator_att_cache", "conformer_att_cache")},
                frames=At("token", dim=1, clock="tokens", last="last_chunk"))
    with pytest.raises(ValueError, match=r"argument 'cache' has no key 'conformer_att_cache' \(its keys: \['estimator"):
        flow.classifier(torch.zeros(1, 28), {"estimator_att_cache": torch.zeros(10, 1, 2, 1, 402, 1)}, False)
    with pytest.raises(ValueError, match="needs a dict argument 'cache', got a Tensor"):
        flow.classifier(torch.zeros(1, 28), torch.zeros(2), False)
    est = bind(T2W, "estimator_step", lambda x, att_cache=None: x, backend="eager",
               reads={"estimator_att_cache": At("att_cache", dim=3)}, frames=At("x", dim=2))
    cache = torch.zeros(1, 2, 1, 302, 1)
    with pytest.raises(ValueError, match=r"frames: dim 2 is outside the argument's 2 dims \(1, 28\)"):
        est.classifier(torch.zeros(1, 28), att_cache=cache)
    with pytest.raises(ValueError, match="expected a tensor in the call, got list"):
        est.classifier([1, 2], att_cache=cache)


def test_bind_takes_the_carries():
    from cadencelab.state import Carry

    decl = freeze_style_declaration()
    ctx = Carry.for_region(decl, "left_context")
    eng = bind(decl, "decode_chunk", lambda tokens, ctx0: tokens, backend="eager", reads={"left_context": At("ctx0")},
               frames=At("tokens", dim=1), carries=[ctx])
    assert eng.owners() == [ctx.buffer] and eng.write_through()["left_context"] is ctx.buffer
    with pytest.raises(TypeError, match="do not pass them too"):
        bind(decl, "decode_chunk", lambda tokens: tokens, frames=At("tokens", dim=1), carries=[ctx], owners=lambda: [])
    with pytest.raises(ValueError, match="takes Carry objects"):
        bind(decl, "decode_chunk", lambda tokens: tokens, frames=At("tokens", dim=1), carries=[torch.zeros(2)])


def test_the_runtime_builds_one_classifier_and_labels_each_call_once(monkeypatch):
    import importlib

    bind_module = importlib.import_module("cadencelab.replay.binding")

    built, labelled = [], []
    init, call = bind_module.Classifier.__init__, bind_module.Classifier.__call__
    monkeypatch.setattr(bind_module.Classifier, "__init__", lambda self, *a, **k: (built.append(1), init(self, *a, **k))[1])
    monkeypatch.setattr(bind_module.Classifier, "__call__", lambda self, *a, **k: (labelled.append(1), call(self, *a, **k))[1])
    rt, _ = _runtime(arm="SRc")
    traffic = conformer_traffic()
    rt.run(traffic)
    assert len(built) == 1 and len(labelled) == traffic.calls
    assert rt.engine.classifier is rt.classifier and len(rt.engine.classes) > 1


@pytest.mark.cuda
def test_a_clean_step_has_no_hazard_on_cuda():
    """No false host_sync (e.g. sited in warnings.py) for a step that does not sync."""
    model = StreamingConformer().cuda()
    step, stock = conformer_steps(model)
    rt = StreamingRuntime(KitModel(conformer_declaration(), step, device="cuda"))
    caches = rt.reset()
    x = _x(CALL).cuda()
    pf = preflight(step, x, caches, False, device="cuda", modules=[model])
    assert pf.hazards().empty, pf
    assert not pf["where"].str.contains("warnings").any()
    traffic = Traffic([[t.cuda() for t in turn] for turn in conformer_traffic().turns])
    cert = certify(KitModel(conformer_declaration(), step, stock, traffic, modules=[model], device="cuda"),
                   backend="cuda")
    assert cert.table.set_index("clause").loc["preflight: no capture hazard in the step", "passed"], cert.table


def test_traffic_stream_gives_each_call_its_own_contiguous_chunk():
    """A client receives each chunk as its own tensor: no view into the turn, whose offsets would put every call
    at another pointer residue (a new signature class per call on CUDA) and every turn at other strides."""
    decl = conformer_declaration()
    sigs = [torch.randn(1, 55, S.dim), torch.randn(1, 31, S.dim)]
    t = Traffic.stream(decl, sigs, clock="frames")
    for turn, sig in zip(t.turns, sigs):
        at = []
        for x in turn:
            assert x.is_contiguous() and x.storage_offset() == 0
            assert x.untyped_storage().data_ptr() != sig.untyped_storage().data_ptr()
            at.append(next(a for a in range(sig.shape[1] - x.shape[1] + 1)
                           if torch.equal(x, sig.narrow(1, a, x.shape[1]))))
        assert at == sorted(at) and at[0] == 0 and at[-1] + turn[-1].shape[1] == sig.shape[1]
    steady = [x.stride() for turn in t.turns for x in turn if x.shape == t.turns[0][0].shape]
    assert len(set(steady)) == 1, "every turn's steady calls share one stride"
