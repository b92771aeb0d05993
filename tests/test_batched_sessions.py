"""EXPERIMENTAL cross-session batched Token2wav: batched replay vs the batched eager path.

CPU tests use the teaching config at small sizes (a 26-token prompt, 3 solver steps) and the
eager replay backend; the CUDA test (``@pytest.mark.cuda``, skipped without a device) checks
CUDA graphs against the batched eager path bit for bit.
"""

from __future__ import annotations

import pytest
import torch

from cadencelab.adapters.token2wav import TEACHING, build_token2wav, make_prompt
from cadencelab.adapters.token2wav.batched import BatchedToken2wav, batched_catalog, compare_to_solo
from cadencelab.adapters.token2wav.runtime import Token2wavRuntime

PROMPT_TOKENS, STEPS, CHUNKS = 26, 3, 2
P = 2 * PROMPT_TOKENS


def _tokens(i: int, k: int) -> list[int]:
    g = torch.Generator().manual_seed(300 + i)
    buf = [4218] * 3 + torch.randint(0, 6561, (25 * CHUNKS,), generator=g).tolist()
    return buf[25 * k: 25 * k + 28]


@pytest.fixture(scope="module")
def modules():
    return build_token2wav(TEACHING, 0)


@pytest.fixture(scope="module")
def prompts():
    return [make_prompt(TEACHING, 40 + i, n_tokens=PROMPT_TOKENS) for i in range(8)]


def _batched(modules, replay: bool, device="cpu", **kw) -> BatchedToken2wav:
    flow, hift = modules
    return BatchedToken2wav(flow, hift, device, replay=replay, backend="eager" if device == "cpu" else "cuda",
                            n_timesteps=STEPS, cfg=TEACHING, prompt_frames=P, **kw)


def _run(bt: BatchedToken2wav, prompts, groups: list[list[int]], seed: int = 7) -> dict:
    """Stream CHUNKS chunks for each group of sessions (one batched call per group per chunk)."""
    torch.manual_seed(seed)
    ss = {i: bt.open(i, prompts[i]) for g in groups for i in g}
    out = {}
    for k in range(CHUNKS):
        for g in groups:
            pcm = bt.stream([ss[i] for i in g], [_tokens(i, k) for i in g])
            for i, b in zip(g, pcm):
                out[i, k] = (b, ss[i].last_mel)
    return out


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k][0] == b[k][0] and torch.equal(a[k][1], b[k][1]) for k in a)


@pytest.mark.parametrize("B", [1, 2, 4])
def test_batched_replay_equals_batched_eager(B, modules, prompts):
    groups = [list(range(B)), list(range(B, 2 * B))]  # two batches of the same class: the second replays
    ref = _run(_batched(modules, replay=False), prompts, groups)
    bt = _batched(modules, replay=True)
    got = _run(bt, prompts, groups)
    assert _equal(got, ref)
    c = bt.counters()
    flow = c[c.engine == "batched_flow_chunk"]
    assert set(flow.label.map(lambda lab: lab[0])) == {B}
    assert (flow.status == "captured").all() and flow.replays.sum() == CHUNKS  # one replay per chunk (2nd group)
    voc = c[c.engine == "batched_vocoder_core"]
    assert set(voc.reason) == {"host_rng"}  # HiFT draws from the host generator on CPU: eager, counted


def test_batch_size_outside_declared_set_runs_eagerly(modules, prompts):
    groups = [[0, 1, 2]]
    ref = _run(_batched(modules, replay=False), prompts, groups)
    bt = _batched(modules, replay=True, batch_sizes=(1, 2, 4))
    got = _run(bt, prompts, groups)
    assert _equal(got, ref)
    c = bt.counters()
    assert set(c.reason) == {"outside_catalog"} and c.replays.sum() == 0 and c.eager.sum() == 2 * CHUNKS
    assert all(lab[0] == 3 for lab in c.label)
    assert not any(lab[0] == 3 for lab in batched_catalog(bt.decl, "flow_chunk", bt.batch_sizes))


def test_batch_of_one_is_solo_b0_and_larger_batches_are_reported(modules, prompts):
    """B = 1 restates the vendor path op for op: bit-identical to B0. B > 1: reported, not gated."""
    flow, hift = modules
    rt = Token2wavRuntime(flow, hift, "cpu", "B0", n_timesteps=STEPS, cfg=TEACHING, prompt_frames=P)
    solo = {}
    for i in range(2):
        torch.manual_seed(7)
        rt.set_stream_cache(prompts[i])
        for k in range(CHUNKS):
            solo[i, k] = (rt.stream(_tokens(i, k)), rt.last_mel.clone())
    one = _run(_batched(modules, replay=False), prompts, [[0]])
    assert _equal(one, {k: v for k, v in solo.items() if k[0] == 0})
    two = _run(_batched(modules, replay=False), prompts, [[0, 1]])
    rep = compare_to_solo([two[k][1] for k in sorted(two)], [solo[k][1] for k in sorted(two)])
    # mel agrees to float rounding (GEMM shapes change with the batch); PCM also differs through HiFT's draws
    assert max(rep["max_abs_diff"]) < 1e-4


def test_mixed_shape_classes_are_refused(modules, prompts):
    bt = _batched(modules, replay=False)
    a, b = bt.open(0, prompts[0]), bt.open(1, prompts[1])
    bt.stream([a], [_tokens(0, 0)])
    with pytest.raises(ValueError, match="different shape classes"):
        bt.stream([a, b], [_tokens(0, 1), _tokens(1, 0)])


@pytest.mark.cuda
@pytest.mark.parametrize("B", [1, 2, 4])
def test_batched_cuda_graphs_equal_batched_eager(B, prompts):
    from cadencelab.adapters.token2wav.runtime import pin_determinism

    pin_determinism()
    modules = build_token2wav(TEACHING, 0, device="cuda")
    cuda_prompts = [p.to("cuda") for p in prompts]
    groups = [list(range(B)), list(range(B, 2 * B))]
    ref = _run(_batched(modules, replay=False, device="cuda"), cuda_prompts, groups)
    bt = _batched(modules, replay=True, device="cuda")
    got = _run(bt, cuda_prompts, groups)
    assert _equal(got, ref)
    c = bt.counters()
    assert (c.status == "captured").all() and (c.replays > 0).all()  # device RNG is graph-safe: both engines replay
    again = _run(bt, cuda_prompts, groups, seed=8)
    assert _equal(again, _run(_batched(modules, replay=False, device="cuda"), cuda_prompts, groups, seed=8))
    assert c.captures.sum() == bt.counters().captures.sum()  # no re-capture for new sessions of the same classes
