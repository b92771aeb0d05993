"""Mimi on a GPU: the vendor's CUDA graphs and generic replay, each bit-exact with eager over 24 frames."""

import pytest
import torch

from cadencelab.adapters import mimi as M

pytest.importorskip("moshi", reason=f"moshi not installed: {M.INSTALL_HINT}")

FRAMES = 24


@pytest.fixture(scope="module")
def pcm():
    return M.pcm_stream(FRAMES, seed=0)


def _run(arm, pcm, **kw):
    M.pin_determinism()
    mimi = M.build_mimi(0, device="cuda")
    with M.MimiStream(mimi, arm, backend="cuda", **kw) as s:
        res = M.run_stream(s, pcm)
    return s, res, M.stream_hashes(res)


@pytest.fixture(scope="module")
def eager(pcm):
    return _run("eager", pcm)


@pytest.mark.cuda
def test_eager_codes_vary(eager):
    codes = torch.cat(eager[1].codes, dim=-1)
    assert codes.shape == (1, 8, FRAMES) and len(set(codes.flatten().tolist())) > 8


@pytest.mark.cuda
def test_vendor_graph_bit_exact(pcm, eager):
    _, _, h = _run("vendor_graph", pcm)
    assert h == eager[2]


@pytest.mark.cuda
def test_vendor_graph_captures_its_four_callables(pcm):
    M.pin_determinism()
    mimi = M.build_mimi(0, device="cuda")
    with M.MimiStream(mimi, "vendor_graph") as s:
        M.run_stream(s, M.pcm_stream(3, seed=0))
        assert s.vendor_graphs_captured() == 4


@pytest.mark.cuda
def test_generic_replay_bit_exact(pcm, eager):
    mimi = M.build_mimi(0, device="cuda")
    with M.MimiStream(mimi, "replay", backend="cuda") as s:
        ptrs = s.pointers()
        h = M.stream_hashes(M.run_stream(s, pcm))
        assert h == eager[2]
        assert s.pointers() == ptrs
        c = s.counters()
        assert (c["status"] == "captured").all(), c[["engine", "status", "reason"]]
        assert (c["replays"] == FRAMES - 1).all() and (c["invalidations"] == 0).all()
        assert s.vendor_graphs_captured() == 0
        assert s.runtime.form == "inplace" and all(e.backend == "cuda" for e in s.engines.values())  # the kit's
        s.reset()  # a second stream on the same graphs, in place
        assert M.stream_hashes(M.run_stream(s, pcm)) == eager[2]
