"""The kit on a model that keeps its state itself (Moshi's Mimi does): the declared regions' tensors adopted as
carries, the rest guarded as held state, the model's own code the step (``form="inplace"``); bit-exact with
the model run alone, and every refusal naming the region. CPU, eager replay backend, tiny sizes."""

from __future__ import annotations

import pytest
import torch

from cadencelab.adapters.kit import KitModel, StreamingRuntime
from kit_models import RingSizes, SelfRing
from test_kit_operators import ring_declaration, ring_traffic


def _runtime(model, arm="S", backend="eager", audit=(), engine_options=None, **spec):
    def reset(prompt):
        model.reset_state()

    spec = dict(dict(form="inplace", adopt={"kv": (model.ring, model.end)}, init=reset, modules=[model],
                     held={"count": lambda: model.count, "first": lambda: model.first}), **spec)
    return StreamingRuntime(KitModel(ring_declaration(), lambda x, caches, last: model(x), **spec), arm,
                            backend=backend, audit=audit, engine_options=engine_options)


def _alone(model, traffic):
    outs = []
    with torch.inference_mode():
        for turn in traffic.turns:
            model.reset_state()
            outs += [model(x).clone() for x in turn]
    return outs


@pytest.mark.parametrize("arm", ["S", "SRc", "SR"])
def test_an_in_place_model_on_adopted_state_is_bit_exact(arm):
    traffic = ring_traffic()
    want = _alone(SelfRing(), traffic)
    model = SelfRing()
    rt = _runtime(model, arm)
    assert rt.carries["kv"].buffer is model.ring and rt.ends["kv"].buffer is model.end  # the model's storage
    got = rt.run(traffic)
    assert len(got.outputs) == len(want) and all(torch.equal(a, b) for a, b in zip(want, got.outputs))
    assert rt.ends["kv"].host == int(model.end) == 3 * RingSizes().chunk  # the model advanced its own position
    assert got.table["ptr_kv"].nunique() == 1
    if arm != "S":
        c = rt.engine.counters()
        assert (c["status"] == "captured").all() and int(c["replays"].sum()) == traffic.calls - 2


def test_held_state_is_guarded_not_aliased():
    """Held state is never a call's argument: each engine checks its address every call (write-through), and
    does not count it among the buffers a call's arguments may alias (owners)."""
    model = SelfRing()
    rt = _runtime(model, "SRc")
    owners = {t.data_ptr() for t in rt.engine.owners()}
    assert {"count", "first", "kv", "kv.end"} <= set(rt.engine.write_through())
    assert model.ring.data_ptr() in owners and model.count.data_ptr() not in owners


def test_the_runtime_advances_a_ring_position_the_model_does_not_keep():
    s, model = RingSizes(), SelfRing()
    traffic = ring_traffic()
    rt = _runtime(model, "SRc", adopt={"kv": model.ring})
    rt.run(traffic)
    assert int(rt.ends["kv"].buffer) == rt.ends["kv"].host == 3 * s.chunk and rt.ends["kv"].buffer is not model.end


def test_a_held_field_the_model_rebinds_fails_closed():
    traffic = ring_traffic()
    want = _alone(SelfRing(rebinds=True), traffic)
    model = SelfRing(rebinds=True)
    rt = _runtime(model, "SRc", engine_options=dict(max_invalidations=1))
    got = rt.run(traffic)
    assert all(torch.equal(a, b) for a, b in zip(want, got.outputs))  # every drifted call ran eagerly
    c = rt.engine.counters()
    assert int(c["invalidations"].sum()) >= 1 and "unstable_addresses" in set(c["reason"])
    assert any("first" in e["detail"] for e in rt.engine.events if e["kind"] == "invalidation")


def test_adoption_refusals_name_the_region():
    model = SelfRing()
    with pytest.raises(ValueError, match=r"adopt: region 'kv' was given a tensor \(1, 9, 8\).*carried as \(1, 10, 8\)"):
        _runtime(model, adopt={"kv": model.ring[:, :9]})
    with pytest.raises(ValueError, match=r"adopt: region 'kv' was given a tensor .*torch.float64"):
        _runtime(model, adopt={"kv": model.ring.double()})
    with pytest.raises(ValueError, match=r"ring region 'kv''s write position must be one int64 element"):
        _runtime(model, adopt={"kv": (model.ring, model.end.int())})
    with pytest.raises(ValueError, match=r"adopt: 'nope' is not a state region"):
        _runtime(model, adopt={"nope": model.ring})
    with pytest.raises(ValueError, match=r"held: \['kv'\] are declared regions"):
        _runtime(model, held={"kv": model.ring})
    with pytest.raises(ValueError, match=r"held: 'count' is a value of type int, not a tensor"):
        _runtime(model, held={"count": 3})
    with pytest.raises(ValueError, match="an in-place step does not return"):
        _runtime(model, audit="declared")
    with pytest.raises(ValueError, match=r"engine_options: \['budget'\] are not engine options"):
        _runtime(model, "SRc", engine_options=dict(budget=2))


@pytest.mark.cuda
def test_an_in_place_model_on_adopted_state_with_cuda_graphs():
    """The model's own position advances inside the captured call: one graph per label serves every position."""
    traffic = ring_traffic()
    ref = SelfRing().cuda()
    ref.start("cuda")
    want = _alone(ref, type(traffic)([[x.cuda() for x in turn] for turn in traffic.turns]))
    model = SelfRing().cuda()
    model.start("cuda")
    rt = _runtime(model, "SRc", backend="cuda", device="cuda")
    got = rt.run(type(traffic)([[x.cuda() for x in turn] for turn in traffic.turns]))
    assert all(torch.equal(a, b) for a, b in zip(want, got.outputs))
    c = rt.engine.counters()
    assert rt.engine.backend == "cuda" and (c["status"] == "captured").all() and int(c["captures"].sum()) == 2
    assert int(model.end) == rt.ends["kv"].host and got.table["ptr_kv"].nunique() == 1


def test_a_stock_arm_of_the_same_spec_leaves_the_adopted_state_to_the_model():
    """The adopted tensors are carries: B0 (no state rule) runs the model's own stock step on them untouched, no
    carry made, bit-exact with the model run alone."""
    traffic = ring_traffic()
    want = _alone(SelfRing(), traffic)
    model = SelfRing()
    rt = _runtime(model, "B0", stock=lambda x, caches, last: (model(x), {}))
    got = rt.run(traffic)
    assert not rt.carries and not rt.ends
    assert len(got.outputs) == len(want) and all(torch.equal(a, b) for a, b in zip(want, got.outputs))
