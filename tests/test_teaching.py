"""The teaching model: its declaration, the carry equal to the stock stream bit for bit, the audit,
replay admission counters and the certificate. CPU (eager replay backend) and CUDA (graphs)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cadencelab.adapters import teaching
from cadencelab.contract import PromptRetained, admitted_labels, catalog, derive, trajectory
from cadencelab.state import ShadowAuditor

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.fixture(scope="module")
def cfg():
    return teaching.TeachingConfig()


def _model(cfg, device="cpu"):
    return teaching.TinyStreamer(cfg).to(device)


def test_declaration_derives_three_classes(cfg):
    decl = teaching.declaration(cfg)
    der = derive(decl)
    assert der.checks["passed"].all()
    assert sorted(trajectory(decl, "kv_cache")["shape_extent"].unique()) == [12, 16, 20]
    t = der.regions.set_index("region")
    assert t.loc["kv_cache", "demand_shape"] == (2, 2, 26, 8)  # prompt 12 + retained 8 + one call of 6
    assert t.loc["kv_cache", "stock_shape"] == (2, 2, 64, 8)
    assert t.loc["kv_cache", "rho"] == pytest.approx(64 / 26)
    assert t.loc["kv_cache", "K"] == 3
    # steady f=4 at 12/16/20; flushes f=2,4 admitted, f=6 (> f_chunk=4) not
    assert admitted_labels(decl, "chunk_step") == {(e, f) for e in (12, 16, 20) for f in (2, 4)}
    cat = catalog(decl, "chunk_step")
    assert int((~cat["admitted"].astype(bool) & (cat["kind"] == "flush")).sum()) == 3


def test_stream_shape(cfg):
    s = teaching.make_stream(cfg)
    assert s.calls == 9
    assert [x.shape[1] for x in s.turns[0]] == [4] * 5 + [6]
    assert [x.shape[1] for x in s.turns[1]] == [4, 4, 2]


@pytest.mark.parametrize("device", DEVICES)
def test_carry_stream_equals_reference_bit_for_bit(cfg, device):
    model, stream = _model(cfg, device), teaching.make_stream(cfg, device=device)
    ref = teaching.TeachingRuntime(model, state_rule=False).run(stream)
    got = teaching.TeachingRuntime(model).run(stream)
    for a, b in zip(ref.outputs, got.outputs):
        assert torch.equal(a, b)
    assert teaching.bit_exact(ref, got)["equal"].all()
    assert got.table["cache_ptr"].nunique() == 1  # one address for the whole stream, turn reset included
    assert got.table["extent"].tolist() == [16, 20, 20, 20, 20, 20, 16, 20, 20]
    assert ref.table["extent"].tolist() == got.table["extent"].tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_replay_stream_equals_reference_and_counts(cfg, device):
    model, stream = _model(cfg, device), teaching.make_stream(cfg, device=device)
    ref = teaching.TeachingRuntime(model, state_rule=False).run(stream)
    rt = teaching.TeachingRuntime(model, replay=True, backend="auto")
    got = rt.run(stream)
    assert teaching.bit_exact(ref, got)["equal"].all()
    assert rt.engine.backend == ("cuda" if device == "cuda" else "eager")
    c = rt.counters().set_index("label")
    # classes met: (12,4) (16,4) (20,4) probed then captured; (20,6) outside the catalog; (20,2) probed
    assert int(c["replays"].sum()) == 4
    assert c.loc[[(12, 4), (16, 4), (20, 4), (20, 2)], "status"].eq("captured").all()
    assert c.loc[[(20, 6)], "reason"].tolist() == ["outside_catalog"]
    misses = {}
    for m in c["miss_reasons"]:
        for k, v in m.items():
            misses[k] = misses.get(k, 0) + v
    assert misses == {"probe": 4, "outside_catalog": 1, "priming": 2}
    assert rt.engine.calls == 11 and int(c["invalidations"].sum()) == 0
    assert got.table["path"].tolist()[:6] == ["eager: probe"] * 3 + [got.table["path"][3]] * 2 + ["eager: outside_catalog"]
    assert got.table["path"][3].startswith("replay")


def test_host_randomness_is_rejected_and_stays_exact(cfg):
    model = teaching.TinyStreamer(cfg.replace(noise_std=0.1))
    stream = teaching.make_stream(cfg)
    ref = teaching.TeachingRuntime(model, state_rule=False).run(stream, seed=3)
    rt = teaching.TeachingRuntime(model, replay=True, backend="eager")
    got = rt.run(stream, seed=3)
    assert teaching.bit_exact(ref, got)["equal"].all()
    c = rt.counters()
    classed = c[c["status"] != "unclassed"]
    assert set(classed.loc[classed["reason"] == "host_rng", "label"]) == {(12, 4), (16, 4), (20, 4), (20, 2)}
    assert int(c["replays"].sum()) == 0
    assert not teaching.certify(model, stream, backend="eager").ok  # nothing admitted: not certified for replay


@pytest.mark.cuda
def test_device_randomness_is_admitted_bit_exactly(cfg):
    model = teaching.TinyStreamer(cfg.replace(noise_std=0.1)).cuda()
    cert = teaching.certify(model, backend="cuda")
    assert cert.ok, cert.table
    classed = cert.counters[cert.counters["status"] == "captured"]
    assert set(classed["rng"]) == {"device"} and int(cert.counters["replays"].sum()) == 4


@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["auto", "cuda"])
def test_a_cpu_model_on_a_gpu_machine_is_never_captured_into_a_cuda_graph(cfg, backend):
    # Found running the notebooks live on an H200: a CPU model with backend "auto" was captured into
    # CUDA graphs that replayed nothing. "auto" now keeps the eager backend's bookkeeping for host
    # tensors, and an explicit "cuda" rejects the class (host_tensors) -- both exact.
    model, stream = _model(cfg), teaching.make_stream(cfg)
    ref = teaching.TeachingRuntime(model, state_rule=False).run(stream)
    rt = teaching.TeachingRuntime(model, replay=True, backend=backend)
    run = rt.run(stream)
    assert teaching.bit_exact(ref, run)["equal"].all()
    c = rt.counters()
    if backend == "auto":
        assert rt.engine.backend == "eager" and int(c["replays"].sum()) > 0
    else:
        assert set(c.loc[c["status"] == "rejected", "reason"]) >= {"host_tensors"}
        assert int(c["replays"].sum()) == 0


def test_audit_agrees_and_a_wrong_layout_is_caught_where_it_diverges(cfg):
    model, stream = _model(cfg), teaching.make_stream(cfg)
    good = ShadowAuditor()
    teaching.TeachingRuntime(model, auditor=good).run(stream)
    assert good.ok and good.applications == good.agreements == 9
    strict, lenient = ShadowAuditor(), ShadowAuditor(compare="frames")
    ref = teaching.TeachingRuntime(model, state_rule=False).run(stream)
    wrong = teaching.TeachingRuntime(model, layout="chronological", auditor=lenient).run(stream)
    teaching.TeachingRuntime(model, layout="chronological", auditor=strict).run(stream)
    assert strict.first_divergence.call == 0  # frames in the wrong order from the first append
    assert lenient.first_divergence.call == 2  # the first cut that reaches the prompt (chunk three)
    diff = teaching.bit_exact(ref, wrong)["max_abs_diff"]
    assert (diff[:3] < 1e-4).all() and diff[3] > 1e-2  # a tolerance check notices one call later


def test_certificate_and_a_wrong_declaration(cfg):
    model = _model(cfg)
    cert = teaching.certify(model, backend="eager")
    assert cert.ok, cert.table
    assert len(cert.table) == 8 and "CERTIFIED" in cert._repr_html_()
    decl = teaching.declaration(cfg)
    kv = dataclasses.replace(decl.region("kv_cache"), policy=PromptRetained(12, 6, layout="newest_first"))
    wrong = dataclasses.replace(decl, regions=(kv, decl.region("conv_context")))
    bad = teaching.certify(model, decl=wrong, backend="eager")
    t = bad.table.set_index("clause")["passed"]
    assert not bad.ok and not t["bit-exact with the stock stream"]
    assert t["shadow audit agrees on every retention"]  # the audit checks the carry against what was declared
    # the carry cuts to 18 after call 1 where the model keeps 20: calls reading the short cache differ
    assert bad.exact["equal"].tolist() == [True] * 2 + [False] * 4 + [True] * 2 + [False]


def test_runtime_refuses_replay_without_the_carry(cfg):
    with pytest.raises(ValueError, match="state rule"):
        teaching.TeachingRuntime(_model(cfg), state_rule=False, replay=True)
    with pytest.raises(ValueError, match="carry"):
        teaching.TeachingRuntime(_model(cfg), state_rule=False, auditor=ShadowAuditor())
    with pytest.raises(ValueError, match="divide"):
        teaching.TeachingConfig(dim=15, heads=2)
