"""Moshi's Mimi adapter on the CPU: declaration, eager stream, replay bookkeeping, the rebinding flag."""

import sys

import pytest
import torch

from cadencelab.adapters import mimi as M
from cadencelab.contract import admitted_labels, derive


def test_absent_moshi_names_the_install_command(monkeypatch):
    monkeypatch.setattr(M, "_MOSHI", None)
    for name in [n for n in sys.modules if n == "moshi" or n.startswith("moshi.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "moshi", None)  # import moshi -> ImportError
    with pytest.raises(M.MimiUnavailable) as e:
        M.load_moshi()
    assert "pip install --no-deps moshi==0.2.13" in str(e.value)
    assert not M.moshi_available()


def test_declaration_catalog_width_one():
    d = M.declaration()
    v = derive(d).verdict.set_index("operator")
    assert set(v.index) == {"encoder_transformer", "decoder_transformer", "encode_frame", "decode_frame"}
    assert (v["K"] == 1).all() and v["affordable"].all()
    assert d.clock("samples").ratio == 1920 and d.clock("steps").ratio == 2 and d.clock("frames").rate_hz == 12.5
    assert admitted_labels(d, "encode_frame") == {(250,) * 8 + (1,)}
    assert admitted_labels(d, "decode_frame") == {(250,) * 8 + (6, 1)}


moshi = pytest.importorskip("moshi", reason=f"moshi not installed: {M.INSTALL_HINT}")


@pytest.fixture(scope="module")
def mimi():
    return M.build_mimi(0)


@pytest.fixture(scope="module")
def pcm():
    return M.pcm_stream(4, seed=0)


def _run(mimi, pcm, arm, **kw):
    with M.MimiStream(mimi, arm, **kw) as s:
        res = M.run_stream(s, pcm)
    return s, res, M.stream_hashes(res)


@pytest.fixture(scope="module")
def eager(mimi, pcm):
    return _run(mimi, pcm, "eager")


def test_eager_stream_deterministic_and_codes_vary(mimi, pcm, eager):
    _, res, h = eager
    assert _run(mimi, pcm, "eager")[2] == h
    codes = torch.cat(res.codes, dim=-1)
    assert codes.shape == (1, 8, 4) and codes.dtype == torch.int64
    assert codes.any() and len(set(codes.flatten().tolist())) > 8
    assert torch.cat(res.pcm, dim=-1).shape == (1, 1, 4 * 1920)


def test_audit_finds_the_one_rebinding_tensor(mimi):
    a = M.audit_state_addresses(mimi)
    assert len(a) == 182 and int(a["stable"].sum()) == 181
    assert a.loc[~a["stable"], "name"].tolist() == ["downsample.conv.first"]
    assert mimi._streaming_state is None  # the audit's stream is thrown away


def test_audit_sees_a_rebinding_that_returns_to_its_first_address(mimi, monkeypatch):
    # On CUDA the caching allocator can hand a rebound field its first block back after an even
    # number of frames (seen on an H200): comparing the first and last address calls it stable.
    # Here a normally stable field is swapped to a copy on odd frames and back on even ones.
    decode, name, frame = mimi.decode, None, [0]

    def ping_pong_decode(codes):
        out = decode(codes)
        ref = [r for r in M.state_tensors(mimi) if r.name == name][0]
        frame[0] += 1
        if frame[0] % 2:
            ping_pong_decode.home = ref.get()
            ref.set(ref.get().clone())
        else:
            ref.set(ping_pong_decode.home.copy_(ref.get()))
        return out

    name = M.audit_state_addresses(mimi).query("stable")["name"].iloc[0]
    monkeypatch.setattr(mimi, "decode", ping_pong_decode)
    a = M.audit_state_addresses(mimi, frames=2).set_index("name")
    assert not a.loc[name, "stable"] and a.loc[name, "rebinds"] == 1
    assert not a.loc["downsample.conv.first", "stable"]


def test_replay_bookkeeping_exact_vs_eager(mimi, pcm, eager):
    with M.MimiStream(mimi, "replay", backend="eager") as s:
        ptrs = s.pointers()
        res = M.run_stream(s, pcm)
        assert M.stream_hashes(res) == eager[2]
        assert s.pointers() == ptrs  # the anchor keeps downsample.conv.first at one address
        c = s.counters()
        assert set(c["engine"]) == {"encode_frame", "decode_frame"}
        assert (c["status"] == "captured").all() and (c["invalidations"] == 0).all()
        assert (c["replays"] == 3).all()  # frame 1 is the probe, frames 2-4 replay
        s.reset()
        again = M.run_stream(s, pcm)
        assert M.stream_hashes(again) == eager[2]  # in-place reset: a fresh stream, same addresses
        assert s.pointers() == ptrs


def test_the_replay_arm_is_the_kit_on_moshis_own_state(mimi):
    from cadencelab.adapters.kit import StreamingRuntime

    with M.MimiStream(mimi, "replay", backend="eager") as s:
        rt = s.runtime
        assert isinstance(rt, StreamingRuntime) and rt.form == "inplace" and set(rt.engines) == {M.ENCODE, M.DECODE}
        for name, v in M.region_tensors(mimi).items():  # the carries are moshi's tensors, not copies
            cache, end = v if isinstance(v, tuple) else (v, None)
            assert rt.carries[name].buffer is cache and (end is None or rt.ends[name].buffer is end)
        assert len(rt.carries) == 17 and len(rt.held) == 182 - 33
        assert "downsample.conv.first" in {h.name for h in rt.held}
        assert rt.ops[M.ENCODE].classifier.catalog == admitted_labels(rt.decl, M.ENCODE)


def test_unpinned_rebinding_fails_closed(mimi):
    pcm8 = M.pcm_stream(8, seed=0)
    ref = _run(mimi, pcm8, "eager")[2]
    s, _, h = _run(mimi, pcm8, "replay", backend="eager", pin_rebound=False, max_invalidations=1)
    assert h == ref  # every drifted call ran eagerly: outputs stay exact
    c = s.counters().set_index("engine")
    assert c.loc["encode_frame", "invalidations"] >= 1
    assert c.loc["encode_frame", "status"] == "capture_failed" and c.loc["encode_frame", "reason"] == "unstable_addresses"
    assert any("downsample.conv.first" in e["detail"] for e in s.engines["encode_frame"].events)


def test_vendor_graph_arm_on_cpu_is_the_eager_path(mimi, pcm, eager):
    s, _, h = _run(mimi, pcm, "vendor_graph")
    assert h == eager[2] and s.vendor_graphs_captured() == 0
