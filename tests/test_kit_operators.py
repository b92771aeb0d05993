"""The kit beyond one operator and growing regions: a ring region (written modulo its capacity at a device
position, so its signature never changes), a model of two operators (each its own catalog and engine), and
the arms (state rule and replay switched, replay at call or step granularity), all bit-exact with the
model's own stock code. CPU, eager backend, tiny sizes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cadencelab.adapters.kit import ARMS, KitModel, StreamingRuntime, Traffic, certify, run_stock
from kit_models import ConformerSizes, RingSizes, RingStreamer, StreamingConformer
from test_kit import conformer_declaration, conformer_steps, conformer_traffic


# ---- a ring region ------------------------------------------------------------------------------------
def ring_declaration(s=RingSizes()):
    from cadencelab.contract import Admission, Clock, Declaration, Operator, Region, Ring

    clocks = (Clock("calls", "call", rate_hz=12.5), Clock("frames", "frame", parent="calls", ratio=s.chunk))
    kv = Region("kv", clock="frames", shape=(1, "frames", s.dim), policy=Ring(s.capacity), lifetime="turn",
                address_stable=True)
    return Declaration("ring-streamer", clocks, (kv,), (Operator("attend", reads=("kv",), clock="frames"),),
                       admission=Admission("frames"), call_clock="calls")


def ring_steps(model):
    def step(x, caches, last):  # the ring as a RingView: write the keys, attend over the ring as written
        ring, k = caches["kv"], model.key(x)
        ring.write(k)
        return model.attend(x, ring.buffer, ring.filled(k.shape[1])), {"kv": k}

    def stock(x, caches, last):
        return model.forward_chunk(x, caches, last)

    return step, stock


def ring_traffic(s=RingSizes(), seed=5):
    g = torch.Generator().manual_seed(seed)
    return Traffic([[torch.randn(1, s.chunk, s.dim, generator=g) for _ in range(n)] for n in (7, 3)])


def test_a_ring_model_is_certified():
    s, model = RingSizes(), RingStreamer()
    step, stock = ring_steps(model)
    traffic = ring_traffic()
    cert = certify(KitModel(ring_declaration(s), step, stock, traffic, modules=[model]), backend="eager")
    assert cert.ok, cert.table
    steady = cert.catalog[cert.catalog["kind"] == "steady"]
    assert steady["label"].tolist() == [(s.capacity, s.chunk)]  # one class: the ring's extent is its capacity
    assert cert.exact["equal"].all() and len(cert.exact) == traffic.calls
    reasons = cert.counters.set_index("reason")["count"]
    assert reasons["probe"] == 2 and reasons["replayed"] == traffic.calls - 2  # one label; steady and final calls
    rt = cert.runtime
    assert rt.ends["kv"].host == 3 * s.chunk and int(rt.ends["kv"].buffer) == 3 * s.chunk  # the second turn's 3 calls
    assert rt.declared.ok and rt.differential.ok and rt.differential.applications == traffic.calls - 2


def test_the_ring_is_written_by_the_runtime_when_the_step_does_not():
    s, model = RingSizes(), RingStreamer()
    _, stock = ring_steps(model)

    def step(x, caches, last):  # returns its keys only: the runtime writes them (attends over the old ring)
        ring = caches["kv"]
        return model.attend(x, ring.buffer, ring.filled(0) | (torch.arange(s.capacity) == 0)), {"kv": model.key(x)}

    rt = StreamingRuntime(KitModel(ring_declaration(s), step, stock), "SRc", backend="eager",
                          audit=("declared", "differential"))
    rt.run(ring_traffic())
    assert rt.declared.ok and rt.differential.ok and rt.differential.applications > 0


def test_a_ring_needs_the_views_form():
    with pytest.raises(ValueError, match=r"ring regions \['kv'\] need form='views'"):
        StreamingRuntime(KitModel(ring_declaration(), lambda x, c, last: (x, {}), form="stock"))


# ---- two operators ------------------------------------------------------------------------------------
def two_way_declaration(s=ConformerSizes()):
    from cadencelab.contract import Admission, Declaration, Operator

    one = conformer_declaration(s)
    regions = tuple(dataclasses.replace(r, name=f"{side}_{r.name}") for side in ("enc", "dec") for r in one.regions)
    ops = tuple(Operator(f"{side}ode", reads=(f"{side}_kv",), clock="frames", flush="lookahead") for side in ("enc", "dec"))
    return Declaration("two-way", one.clocks, regions, ops, admission=Admission("frames"), call_clock="chunks")


def two_way(models):
    steps, stocks = {}, {}
    for side, m in zip(("enc", "dec"), models):
        step, stock = conformer_steps(m)

        def renamed(fn, side=side):
            def call(x, caches, last):
                out, new = fn(x, {"kv": caches.get(f"{side}_kv"), "conv": caches.get(f"{side}_conv")}, last)
                return out, {f"{side}_{k}": v for k, v in new.items()}
            return call

        steps[f"{side}ode"], stocks[f"{side}ode"] = renamed(step), renamed(stock)
    writes = {f"{side}ode": (f"{side}_kv", f"{side}_conv") for side in ("enc", "dec")}
    return steps, stocks, writes


def two_way_traffic():
    a, b = conformer_traffic(seed=2), conformer_traffic(seed=3)
    turns = []
    for ta, tb in zip(a.turns, b.turns):
        calls = [("encode", x) for x in ta]
        for i, y in enumerate(tb):
            calls.insert(min(2 * i + 1, len(calls)), ("decode", y))
        turns.append(calls)
    return Traffic(turns)


def test_two_operators_each_with_its_own_catalog_and_engine():
    models = [StreamingConformer(seed=0), StreamingConformer(seed=1)]
    steps, stocks, writes = two_way(models)
    traffic = two_way_traffic()
    cert = certify(KitModel(two_way_declaration(), steps, stocks, traffic, writes=writes, modules=models),
                   backend="eager")
    assert cert.ok, cert.table
    rt = cert.runtime
    assert set(rt.engines) == {"encode", "decode"} and rt.engines["encode"] is not rt.engines["decode"]
    assert set(cert.counters["engine"]) == {"encode", "decode"}
    for op in ("encode", "decode"):
        steady = cert.catalog[(cert.catalog["operator"] == op) & (cert.catalog["kind"] == "steady")]
        assert sorted(steady["label"]) == [(0, 16), (16, 16), (32, 16), (48, 16), (56, 16)]
    table = cert.runtime.run(traffic).table
    assert table["operator"].tolist() == [op for turn in traffic.turns for op, _ in turn]
    assert table.groupby("operator")["last"].sum().to_dict() == {"decode": 3, "encode": 3}  # each its own final call
    with pytest.raises(ValueError, match="name the operator of the call"):
        rt(torch.zeros(1, 20, 8))


def test_several_operators_need_their_writes_and_steps_named():
    models = [StreamingConformer(seed=0), StreamingConformer(seed=1)]
    steps, stocks, writes = two_way(models)
    with pytest.raises(ValueError, match="say which regions each step returns"):
        StreamingRuntime(KitModel(two_way_declaration(), steps))
    with pytest.raises(ValueError, match="give a dict operator -> step"):
        StreamingRuntime(KitModel(two_way_declaration(), steps["encode"]))
    with pytest.raises(ValueError, match=r"\['nope'\] are not operators of the two-way declaration"):
        StreamingRuntime(KitModel(two_way_declaration(), {**steps, "nope": steps["encode"]}, writes=writes))
    with pytest.raises(ValueError, match="operator 'x' is not one this runtime runs"):
        StreamingRuntime(KitModel(two_way_declaration(), steps, writes=writes))(torch.zeros(1, 20, 8), operator="x")


# ---- the arms -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("arm", list(ARMS))
def test_every_arm_is_bit_exact_with_the_stock_step(arm):
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    traffic = conformer_traffic()
    spec = KitModel(conformer_declaration(), step, stock, traffic, modules=[model])
    want, _ = run_stock(spec)
    rt = StreamingRuntime(spec, arm, backend="eager")
    got = rt.run(traffic)
    assert all(torch.equal(a, b) for a, b in zip(want, got.outputs)) and len(got.outputs) == len(want)
    assert (rt.engine is not None) == ("R" in arm)
    if "R" in arm:
        assert got.table["path"].str.startswith("replay").sum() > 0
    assert bool(rt.carries) == arm.startswith("S")


def test_audits_need_the_state_rule():
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    with pytest.raises(ValueError, match="turn the state rule on"):
        StreamingRuntime(KitModel(conformer_declaration(), step, stock), "B0", audit="declared")
    with pytest.raises(ValueError, match="pass stock="):
        StreamingRuntime(KitModel(conformer_declaration(), step), "B0")


@pytest.mark.cuda
def test_a_ring_model_is_certified_with_cuda_graphs():
    """The ring's write position lives on the device and advances inside the captured call: one graph per
    label serves every position."""
    model = RingStreamer().cuda()
    step, stock = ring_steps(model)
    traffic = Traffic([[x.cuda() for x in turn] for turn in ring_traffic().turns])
    cert = certify(KitModel(ring_declaration(), step, stock, traffic, modules=[model], device="cuda"), backend="cuda")
    assert cert.ok, cert.table
    engine = cert.runtime.engine
    assert engine.backend == "cuda" and int(engine.counters()["captures"].sum()) == 2  # steady and final calls
    assert int(cert.runtime.ends["kv"].buffer) == cert.runtime.ends["kv"].host


@pytest.mark.cuda
@pytest.mark.parametrize("arm", list(ARMS))
def test_every_arm_is_bit_exact_on_cuda(arm):
    model = StreamingConformer().cuda()
    step, stock = conformer_steps(model)
    traffic = Traffic([[x.cuda() for x in turn] for turn in conformer_traffic().turns])
    spec = KitModel(conformer_declaration(), step, stock, traffic, modules=[model], device="cuda")
    want, _ = run_stock(spec)
    rt = StreamingRuntime(spec, arm, backend="cuda")
    got = rt.run(traffic)
    assert all(torch.equal(a, b) for a, b in zip(want, got.outputs)) and len(got.outputs) == len(want)
