"""ExactShapeReplay on the eager backend: the admission logic, guards and counters, on a CPU.

The eager backend keeps the CUDA backend's bookkeeping (catalog, signature keys, aliasing,
pointer guards, RNG effect classification, counters) but executes every call eagerly, so
every output must be identical to calling ``fn`` directly.
"""

from __future__ import annotations

import random

import pytest
import torch

import toys
from cadencelab.replay import (
    CAPTURED,
    FAILED,
    REJECTED,
    ExactShapeReplay,
    ReplayError,
    Unkeyable,
    describe,
    replay_disabled,
    signature,
)
from cadencelab.state import Carry
from toys import POLICY, F, P, one_row

COUNTER_COLUMNS = ["engine", "backend", "label", "signature", "status", "reason", "rng", "hits", "replays", "eager",
                   "captures", "invalidations", "capture_s", "staging_bytes", "pool_bytes", "misses", "miss_reasons"]


@pytest.fixture(autouse=True)
def _replay_enabled(monkeypatch):
    monkeypatch.delenv("CADENCELAB_NO_REPLAY", raising=False)


def scale(x, k):
    return x * k + 1


# ---------------------------------------------------------------------------------------
# a streaming operator over a carry (the shape of the Token2wav CFM call, in miniature)
# ---------------------------------------------------------------------------------------

D = 8


def _model():
    return toys.Attend(D, seed=0)


def _stream():
    return toys.Stream(D, prompt=torch.linspace(-1, 1, P * D).reshape(P, D), from_declaration=False)


def _inputs(n, f=F, seed=5):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(f, D, generator=g) for _ in range(n)]


def test_streaming_carry_classes_and_outputs():
    model = _model()
    plain, replayed = _stream(), _stream()
    eng = ExactShapeReplay(model, "tiny_attention", backend="eager", owners=lambda: [replayed.carry.buffer],
                           modules=[model])
    lengths = []
    for x in _inputs(12):
        lengths.append(replayed.carry.length)
        assert torch.equal(replayed.call(eng, x), plain.call(model, x))
    assert torch.equal(replayed.carry.view(), plain.carry.view())
    assert lengths == [6, 8, 10] + [10] * 9  # extents lock at the retention bound
    c = eng.counters()
    assert len(c) == 3
    assert c["status"].tolist() == [CAPTURED] * 3
    assert c["replays"].tolist() == [0, 0, 9]
    assert c["eager"].tolist() == [1, 1, 1]  # one probe per class
    assert set(c["backend"]) == {"eager"}
    assert set(c["rng"]) == {"none"}
    # the carry is aliased (no staging); only x is staged: 2 x 8 float32
    assert c["staging_bytes"].tolist() == [2 * D * 4] * 3
    assert all("A(owner 0+0)" in s for s in c["signature"])
    assert eng.summary() == "tiny_attention: 9 of 12 admitted (eager backend), 3 misses: probe 3"


# ---------------------------------------------------------------------------------------
# catalog admission
# ---------------------------------------------------------------------------------------


def test_catalog_miss_runs_eagerly_and_is_counted():
    eng = ExactShapeReplay(scale, "scale", backend="eager", catalog={4, 8}, classify=lambda x, k: x.shape[0])
    calls = [(torch.arange(4.0), 2), (torch.arange(4.0), 2), (torch.arange(5.0), 2), (torch.arange(5.0), 2),
             (torch.arange(8.0), 3), (torch.arange(4.0), 2)]
    for x, k in calls:
        assert torch.equal(eng(x, k), scale(x, k))
    c = eng.counters()
    four = one_row(c, label=4)
    assert (four["status"], four["hits"], four["replays"], four["eager"], four["captures"]) == (CAPTURED, 3, 2, 1, 1)
    five = one_row(c, label=5)
    assert (five["status"], five["reason"], five["hits"], five["replays"], five["eager"]) == (
        REJECTED, "outside_catalog", 2, 0, 2)
    assert five["miss_reasons"] == {"outside_catalog": 2}
    eight = one_row(c, label=8)
    assert (eight["status"], eight["replays"]) == (CAPTURED, 0)
    m = eng.misses()
    assert list(m.columns) == ["engine", "label", "reason", "count"]
    assert int(m.loc[m["reason"] == "outside_catalog", "count"].sum()) == 2
    assert int(m.loc[m["reason"] == "probe", "count"].sum()) == 2
    assert eng.calls == 6


def test_scalar_arguments_are_part_of_the_signature():
    eng = ExactShapeReplay(scale, backend="eager")
    x = torch.ones(3)
    for k in (2, 2, 3, 2.0, True):
        assert torch.equal(eng(x, k), scale(x, k))
    c = eng.counters()
    assert len(c) == 4  # int 2, int 3, float 2.0 and bool True are distinct classes
    assert c["hits"].tolist() == [2, 1, 1, 1]


def test_catalog_needs_classify():
    with pytest.raises(ValueError, match="classify"):
        ExactShapeReplay(scale, backend="eager", catalog={1})
    with pytest.raises(ValueError, match="backend"):
        ExactShapeReplay(scale, backend="tpu")


def test_max_classes_rejects_new_classes_as_catalog_full():
    eng = ExactShapeReplay(scale, backend="eager", max_classes=2)
    for n in (2, 3, 4, 4, 2):
        x = torch.arange(float(n))
        assert torch.equal(eng(x, 2), scale(x, 2))
    c = eng.counters()
    full = c[c["reason"] == "catalog_full"]
    assert len(full) == 1 and full.iloc[0]["status"] == REJECTED and full.iloc[0]["eager"] == 2
    assert (c["status"] == CAPTURED).sum() == 2
    assert one_row(c, reason="catalog_full")["miss_reasons"] == {"catalog_full": 2}


# ---------------------------------------------------------------------------------------
# address guards
# ---------------------------------------------------------------------------------------


def test_pointer_drift_of_an_aliased_owner_invalidates_then_recaptures():
    model = _model()
    plain, replayed = _stream(), _stream()
    eng = ExactShapeReplay(model, "tiny_attention", backend="eager", owners=lambda: [replayed.carry.buffer])
    xs = _inputs(10)
    for i, x in enumerate(xs):
        if i == 5:  # someone swaps the carry for a new tensor mid-stream (same values, new address)
            old = replayed.carry
            replayed.carry = Carry("kv", POLICY, 0, old.buffer.clone(), length=old.length)
        assert torch.equal(replayed.call(eng, x), plain.call(model, x))
    locked = one_row(eng.counters(), hits=8)  # the class at the retention bound (length 10)
    assert locked["invalidations"] == 1
    assert locked["captures"] == 2  # the class is captured again at the new address
    assert locked["miss_reasons"] == {"probe": 2, "invalidated": 1}
    assert locked["replays"] == 8 - 3
    assert locked["status"] == CAPTURED
    inval = [e for e in eng.events if e["kind"] == "invalidation"]
    assert len(inval) == 1 and inval[0]["call"] == 6 and inval[0]["detail"] == "aliased input moved"
    assert [e["call"] for e in eng.events if e["kind"] == "capture"] == [1, 2, 3, 7]


def test_repeated_drift_gives_up_on_the_class():
    state = {"buf": torch.zeros(4)}
    eng = ExactShapeReplay(lambda x, b: x + b, "add", backend="eager", owners=lambda: [state["buf"]],
                           max_invalidations=1)
    x = torch.ones(4)
    for i in range(6):
        if i in (2, 4):
            state["buf"] = torch.full((4,), float(i))
        assert torch.equal(eng(x, state["buf"]), x + state["buf"])
    row = eng.counters().iloc[0]
    assert (row["status"], row["reason"], row["invalidations"]) == (FAILED, "unstable_addresses", 2)
    assert row["miss_reasons"] == {"probe": 2, "invalidated": 2, "unstable_addresses": 1}


def test_write_through_region_swap_invalidates():
    ws = {"t": torch.zeros(4)}

    def into_workspace(x):
        ws["t"].copy_(x * 2)
        return ws["t"] + 1

    eng = ExactShapeReplay(into_workspace, backend="eager", write_through={"workspace": lambda: ws["t"]})
    x = torch.arange(4.0)
    outs = [eng(x), eng(x)]
    ws["t"] = torch.zeros(4)  # the region moved
    outs += [eng(x), eng(x), eng(x)]
    assert all(torch.equal(o, x * 2 + 1) for o in outs)
    row = eng.counters().iloc[0]
    assert (row["invalidations"], row["captures"], row["replays"]) == (1, 2, 2)
    ev = [e for e in eng.events if e["kind"] == "invalidation"]
    assert ev[0]["detail"] == "write-through/parameter moved: workspace"
    report = eng.memory_report()
    assert report.attrs["write_through_bytes"] == 16
    assert report.attrs["reserved_bytes_eq6"] == 16 + 16  # x staged (4 float32) + the frozen region


def test_module_parameter_replaced_invalidates():
    lin = torch.nn.Linear(3, 2).requires_grad_(False)
    eng = ExactShapeReplay(lin, backend="eager", modules=[lin])
    x = torch.ones(1, 3)
    assert torch.equal(eng(x), lin(x))
    assert torch.equal(eng(x), lin(x))
    lin.weight = torch.nn.Parameter(torch.full((2, 3), 0.5), requires_grad=False)
    assert torch.equal(eng(x), lin(x))
    assert torch.equal(eng(x), torch.full((1, 2), 1.5) + lin.bias)
    row = eng.counters().iloc[0]
    assert (row["invalidations"], row["captures"]) == (1, 2)
    ev = [e for e in eng.events if e["kind"] == "invalidation"]
    assert ev[0]["detail"] == "write-through/parameter moved: module0.weight"


def test_views_of_an_owner_are_aliased_by_offset():
    buf = torch.arange(12.0)
    eng = ExactShapeReplay(lambda v: v * 2, backend="eager", owners=[buf])
    assert torch.equal(eng(buf[4:8]), buf[4:8] * 2)
    assert torch.equal(eng(buf[0:4]), buf[0:4] * 2)
    c = eng.counters()
    assert len(c) == 2  # different offsets inside the owner: different classes
    assert c["staging_bytes"].tolist() == [0, 0]
    assert "A(owner 0+16)[4]" in c.iloc[0]["signature"]


# ---------------------------------------------------------------------------------------
# RNG effects
# ---------------------------------------------------------------------------------------


def noisy_host(x):
    return x + torch.rand(x.shape)


def test_host_rng_callable_is_rejected_and_matches_a_plain_run():
    xs = [torch.full((3,), float(i)) for i in range(5)]
    torch.manual_seed(11)
    want = [noisy_host(x) for x in xs]
    want_next = torch.rand(4)
    torch.manual_seed(11)
    eng = ExactShapeReplay(noisy_host, backend="eager")
    got = [eng(x) for x in xs]
    got_next = torch.rand(4)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    assert torch.equal(got_next, want_next)  # the probe was the real call: the RNG sequence is untouched
    row = eng.counters().iloc[0]
    assert (row["status"], row["reason"], row["rng"], row["replays"], row["eager"]) == (REJECTED, "host_rng", "host", 0, 5)
    assert row["miss_reasons"] == {"probe": 1, "host_rng": 4}
    assert [e["kind"] for e in eng.events] == ["rejected"]


def test_python_random_is_host_rng_too():
    def jitter(x):
        return x + random.random()

    random.seed(3)
    want = [jitter(torch.zeros(2)) for _ in range(3)]
    random.seed(3)
    eng = ExactShapeReplay(jitter, backend="eager")
    got = [eng(torch.zeros(2)) for _ in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert eng.counters().iloc[0]["reason"] == "host_rng"


def test_a_deterministic_probe_leaves_the_rng_alone():
    torch.manual_seed(0)
    want = torch.rand(3)
    torch.manual_seed(0)
    eng = ExactShapeReplay(scale, backend="eager")
    eng(torch.ones(2), 3)
    eng(torch.ones(2), 3)
    assert torch.equal(torch.rand(3), want)
    assert eng.counters().iloc[0]["rng"] == "none"


# ---------------------------------------------------------------------------------------
# refusals, strict mode, the kill switch
# ---------------------------------------------------------------------------------------


def test_unkeyable_argument_runs_eagerly_and_is_counted():
    def first(x, opts):
        return x + len(opts)

    eng = ExactShapeReplay(first, backend="eager")
    x = torch.zeros(2)
    assert torch.equal(eng(x, {"a", "b"}), x + 2)
    assert torch.equal(eng(x, {1: "non-string key"}), x + 1)
    assert eng.unclassed == {"unkeyable": 2}
    assert len(eng.classes) == 0
    row = one_row(eng.counters(), status="unclassed")
    assert (row["reason"], row["hits"], row["eager"], row["replays"]) == ("unkeyable", 2, 2, 0)
    assert [e["kind"] for e in eng.events] == ["refused", "refused"]
    assert "cannot be keyed" in eng.events[0]["detail"]
    assert eng.summary() == "first: 0 of 2 admitted (eager backend), 2 misses: unkeyable 2"


def test_strict_mode_raises_instead_of_running_eagerly():
    eng = ExactShapeReplay(scale, backend="eager", strict=True, catalog={3}, classify=lambda x, k: x.shape[0])
    assert torch.equal(eng(torch.ones(3), 2), torch.full((3,), 3.0))  # the probe is allowed
    assert torch.equal(eng(torch.ones(3), 2), torch.full((3,), 3.0))
    with pytest.raises(ReplayError, match="outside_catalog"):
        eng(torch.ones(4), 2)
    with pytest.raises(ReplayError, match="unkeyable"):
        eng(torch.ones(3), object())


def test_kill_switch_disables_replay(monkeypatch):
    monkeypatch.setenv("CADENCELAB_NO_REPLAY", "1")
    assert replay_disabled()
    eng = ExactShapeReplay(scale, backend="eager")
    for _ in range(3):
        assert torch.equal(eng(torch.ones(2), 2), torch.full((2,), 3.0))
    assert eng.unclassed == {"disabled": 3}
    assert len(eng.classes) == 0
    row = eng.counters().iloc[0]
    assert (row["status"], row["reason"], row["eager"]) == ("unclassed", "disabled", 3)
    monkeypatch.setenv("CADENCELAB_NO_REPLAY", "0")
    assert not replay_disabled()


def test_eager_by_construction_label_and_external_calls():
    def classify(x, k):
        return ("eager", "priming") if x.shape[0] == 0 else x.shape[0]

    eng = ExactShapeReplay(scale, "flow", backend="eager", catalog={3}, classify=classify)
    assert torch.equal(eng(torch.ones(0), 2), torch.ones(0))
    assert torch.equal(eng(torch.ones(3), 2), torch.full((3,), 3.0))
    assert torch.equal(eng(torch.ones(3), 2), torch.full((3,), 3.0))
    eng.record_external("priming")
    row = one_row(eng.counters(), label=("eager", "priming"))
    assert (row["status"], row["reason"], row["eager"], row["replays"]) == (REJECTED, "priming", 1, 0)
    assert eng.unclassed == {"priming": 1}
    assert eng.calls == 4
    assert eng.summary() == "flow: 1 of 4 admitted (eager backend), 3 misses: priming 2, probe 1"


# ---------------------------------------------------------------------------------------
# reports
# ---------------------------------------------------------------------------------------


def test_reports_columns_and_summary_format():
    eng = ExactShapeReplay(scale, "scale", backend="eager", catalog={4}, classify=lambda x, k: x.shape[0])
    for n in (4, 4, 4, 5):
        eng(torch.ones(n), 2)
    c = eng.counters()
    assert list(c.columns) == COUNTER_COLUMNS
    assert eng.summary() == "scale: 2 of 4 admitted (eager backend), 2 misses: probe 1, outside_catalog 1"
    mem = eng.memory_report()
    assert list(mem.columns) == ["engine", "label", "staging_bytes", "pool_bytes"]
    assert mem["label"].tolist() == [4]  # captured classes only
    assert mem["staging_bytes"].tolist() == [16]
    assert mem.attrs == {"write_through_bytes": 0, "reserved_bytes_eq6": 16}
    eng.reset_counters()
    assert eng.calls == 0 and eng.summary() == "scale: 0 of 0 admitted (eager backend), 0 misses"
    assert eng.classes and one_row(eng.counters(), label=4)["status"] == CAPTURED  # graphs are kept
    empty = ExactShapeReplay(scale, backend="eager")
    assert list(empty.counters().columns) == COUNTER_COLUMNS and empty.counters().empty
    assert list(empty.misses().columns) == ["engine", "label", "reason", "count"]


def test_staging_bytes_count_only_non_aliased_tensor_inputs():
    owner = torch.zeros(1000)  # 4000 bytes, aliased
    eng = ExactShapeReplay(lambda a, b, c, k: a.sum() + b.sum() + c.sum() + k, backend="eager", owners=[owner])
    a = torch.zeros(10, dtype=torch.float64)  # 80 bytes, staged
    c = torch.zeros(3, dtype=torch.int16)  # 6 bytes, staged
    eng(a, owner, c, 7)
    eng(a, owner[:500], c, 7)
    assert eng.counters()["staging_bytes"].tolist() == [86, 86]
    assert int(eng.memory_report()["staging_bytes"].sum()) == 172


# ---------------------------------------------------------------------------------------
# signatures
# ---------------------------------------------------------------------------------------


def test_signature_keys_structure_tensors_and_scalars():
    owner = torch.zeros(8)
    x = torch.zeros(2, 3)
    key, structure, leaves, aliased = signature((x, owner[2:6], [1, 2.5]), {"mode": "fast"}, [owner])
    assert len(leaves) == 5 and aliased == [None, (0, 8), None, None, None]
    assert describe(key) == "T[2, 3]:float32, A(owner 0+8)[4], int=1, float=2.5, str='fast'"
    key2, *_ = signature((x, owner[2:6], [1, 2.5]), {"mode": "fast"}, [owner])
    assert key2 == key and hash(key2) == hash(key)
    key3, *_ = signature((x.t(), owner[2:6], [1, 2.5]), {"mode": "fast"}, [owner])
    assert key3 != key  # strides enter the key
    nan1, *_ = signature((float("nan"),), {}, [])
    nan2, *_ = signature((float("nan"),), {}, [])
    assert nan1 == nan2
    with pytest.raises(Unkeyable):
        signature((object(),), {}, [])


def test_signed_zero_scalars_are_distinct_classes():
    """BUG (core, minor): 0.0 and -0.0 share a signature class.

    signature.py ``scalar_key`` keys a float by value, and ``0.0 == -0.0``: a graph captured
    with ``k=0.0`` would be replayed for ``k=-0.0`` on the CUDA backend (the scalar is baked
    into the graph), giving ``+0.0`` where eager gives ``-0.0`` -- not bit-exact.
    """
    pos, *_ = signature((0.0,), {}, [])
    neg, *_ = signature((-0.0,), {}, [])
    assert pos != neg


def test_cuda_backend_never_captures_host_tensors():
    # A CUDA graph replays device work only; host tensors would be frozen at capture. An engine
    # created with backend "cuda" (simulated here: the flag is flipped on a CPU machine) rejects
    # such a class and runs it eagerly; one created with "auto" falls back to eager bookkeeping.
    x = torch.arange(6.0).reshape(2, 3)

    def f(t):
        return t * 2 + 1

    explicit = ExactShapeReplay(f, "explicit", backend="eager")
    explicit.backend, explicit._auto = "cuda", False
    for _ in range(3):
        assert torch.equal(explicit(x), f(x))
    c = explicit.counters().iloc[0]
    assert c["status"] == "rejected" and c["reason"] == "host_tensors" and c["replays"] == 0

    auto = ExactShapeReplay(f, "auto", backend="eager")
    auto.backend, auto._auto = "cuda", True
    for _ in range(3):
        assert torch.equal(auto(x), f(x))
    assert auto.backend == "eager"
    c = auto.counters().iloc[0]
    assert c["status"] == "captured" and c["replays"] == 2


def test_no_collection_holds_the_cyclic_collector_off_and_restores_it():
    import gc

    from cadencelab.replay import no_collection

    assert gc.isenabled()
    with no_collection():
        assert not gc.isenabled()
        with no_collection():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block leaves it as the outer one set it
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with no_collection():
            raise RuntimeError("inside a capture")
    assert gc.isenabled()
    gc.disable()
    try:
        with no_collection():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


def test_output_storages_name_only_uncloned_graph_outputs():
    cloned = ExactShapeReplay(scale, backend="eager")
    uncloned = ExactShapeReplay(scale, backend="eager", clone_outputs=False)
    for _ in range(3):
        cloned(torch.ones(3), 2.0)
        uncloned(torch.ones(3), 2.0)
    assert cloned.output_storages() == set()
    assert uncloned.output_storages() == set()  # the eager backend hands out fresh tensors: nothing to copy


def test_tensor_key_keys_the_residue_alignment_names():
    """The per-call key computes the pointer residue inline; it must be alignment()'s rule."""
    from cadencelab.replay.signatures import alignment, tensor_key

    base = torch.zeros(64)
    for t in (base, base[3:], base[5:21].view(4, 4)):
        assert tensor_key(t)[-1] == t.data_ptr() % alignment(t)
