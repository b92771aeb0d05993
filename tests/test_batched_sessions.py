"""EXPERIMENTAL cross-session batched Token2wav: batched replay vs the batched eager path.

CPU tests use the teaching config at small sizes (a 26-token prompt, 3 solver steps) and the
eager replay backend; the CUDA test (``@pytest.mark.cuda``, skipped without a device) checks
CUDA graphs against the batched eager path bit for bit.
"""

from __future__ import annotations

import pytest
import torch

from cadencelab.adapters.token2wav import TEACHING, build_token2wav, make_prompt
from cadencelab.serving.batched import BatchedToken2wav, batched_catalog, compare_to_solo
from cadencelab.adapters.token2wav.runtime import Token2wavRuntime
from sizes import CPU_STEPS as STEPS
from sizes import PROMPT_TOKENS

CHUNKS = 2
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


# --- the experimental SRb arm of the sessions study ---------------------------------------------


def test_split_and_batches_follow_the_declared_sizes():
    from cadencelab.bench import session_serving as serving
    from cadencelab.bench import sessions as study
    from cadencelab.bench.sessions_batched import batches, by_chunk, split

    assert [len(b) for b in split(list(range(15)), (1, 2, 4, 8))] == [8, 4, 2, 1]
    assert [len(b) for b in split(list(range(3)), (1, 4))] == [1, 1, 1]
    with pytest.raises(ValueError, match="include 1"):
        split([0, 1], (2, 4))
    cfg = study.SessionsConfig(device="cpu", config="teaching", mixed_seconds=3, turn_seconds=1,
                               batch_sizes=(1, 2, 4))
    plan = batches(cfg, "mixed", 6, by_chunk)
    served = [m for _, b in plan for m in b]
    assert sorted(served) == sorted((i, k) for _, i, k in serving.schedule(cfg, "mixed", 6))  # every chunk once
    assert all(len({k for _, k in b}) == 1 for _, b in plan)  # one shape class (chunk position) per batch
    assert all(len(b) in cfg.batch_sizes for _, b in plan)
    with pytest.raises(ValueError, match="batch_sizes"):
        study.SessionsConfig(arms=("SRb", "B0"), batch_sizes=(2, 4))
    with pytest.raises(ValueError, match="unknown arm"):
        study.SessionsConfig(arms=("SRx", "B0"))


def test_sessions_study_with_the_batched_arm_cpu(tmp_path):
    """SRb in the study: gated on the batched eager path, compared (not gated) with solo B0."""
    import pandas as pd

    from cadencelab.bench import sessions as study

    cfg = study.SessionsConfig(config="teaching", device="cpu", arms=("SRb", "B0"), sessions=(1, 2), max_sessions=2,
                               cadence_s=1e6,  # every point holds: the sweep runs 1 and 2 and stops at the cap
                               workloads=("speak_heavy",), speak_seconds=1, prompts=1, processes=False,
                               time_budget_s=900.0, batch_sizes=(1, 2), n_timesteps=STEPS, out=str(tmp_path))
    res = study.run_study(cfg, progress=lambda m: None)
    assert not res["failures"], res["failures"]
    s = res["summary"]
    assert s["all_checked_chunks_exact"] and s["chunks_checked"] == s["chunks"], s
    assert s["exactness_reference"] == {"B0": ["solo_B0"], "SRb": ["batched_eager"]}
    assert s["experimental_arms"] == ["SRb"] and s["recaptures_after_warmup"]["SRb"] == 0
    chunks = pd.read_csv(tmp_path / "sessions_chunks.csv")
    srb = chunks[chunks["arm"] == "SRb"]
    assert set(srb["batch_size"]) == {1, 2}
    # a batch's chunks complete together
    assert (srb.groupby(["workload", "sessions", "batch"])["completion_s"].nunique() == 1).all()
    # batches of one restate the vendor flow op for op: the mel equals the session run alone; the PCM
    # differs (a batch draws HiFT's noise from its batch seed, a solo session from its own seed)
    ones = srb[srb["batch_size"] == 1]
    assert len(ones) and ones["exact_solo_mel"].astype(bool).all()
    assert s["identical_to_solo_B0"]["SRb"]["compared"] == len(srb)
    assert s["identical_to_solo_B0"]["B0"]["mel_and_pcm"] == s["identical_to_solo_B0"]["B0"]["compared"]
    info = res["arms"]["SRb"]
    assert info["experimental"] and info["calls"] and set(info["batch_sizes"]) == {1, 2} and info["replays"] > 0
    assert "SRb" in study.table(res)


@pytest.mark.cuda
def test_sessions_study_with_the_batched_arm_cuda(tmp_path):
    """SRb on CUDA graphs in the study: every chunk equals the batched eager path; graphs replay, none re-captured."""
    from cadencelab.bench import sessions as study

    cfg = study.SessionsConfig(config="teaching", device="cuda", arms=("SRb", "B0"), sessions=(1, 3, 4), max_sessions=4,
                               speak_seconds=2, mixed_seconds=2, turn_seconds=1, prompts=2, processes=False,
                               time_budget_s=240.0, batch_sizes=(1, 2, 4), out=str(tmp_path))
    res = study.run_study(cfg, progress=print)
    assert not res["failures"], res["failures"]
    s = res["summary"]
    assert s["all_checked_chunks_exact"] and s["chunks_checked"] == s["chunks"], s
    assert s["recaptures_after_warmup"]["SRb"] == 0 and s["invalidations"]["SRb"] == 0
    info = res["arms"]["SRb"]
    assert info["replays"] > 0 and all(" 0 of " not in v for v in info["summaries"].values()), info["summaries"]
    assert all(r["peak_bytes"] for r in res["capacity"] if not r["skipped"])


def test_staggered_batcher_serves_what_has_arrived_and_keeps_each_session_in_order():
    from cadencelab.bench.sessions_batched import by_chunk, next_batch

    pending = [(0.0, 0, 0), (0.25, 1, 0), (0.5, 2, 0), (0.75, 3, 1), (1.0, 0, 1), (1.25, 1, 1)]
    # an idle device at t = 0 serves the lone arrival
    assert next_batch(pending, 0.0, (1, 2, 4), by_chunk, aligned=False) == [(0.0, 0, 0)]
    # busy until 1.3: chunks 0 of sessions 0-2 are the oldest class; session 0's chunk 1 waits for its chunk 0
    assert next_batch(pending, 1.3, (1, 2, 4), by_chunk, aligned=False) == [(0.0, 0, 0), (0.25, 1, 0)]
    assert next_batch(pending[1:], 1.3, (1, 2, 4, 8), by_chunk, aligned=False) == [(0.25, 1, 0), (0.5, 2, 0)]
    # aligned arrivals: only the earliest second is eligible
    aligned = [(0.0, 0, 0), (0.0, 1, 0), (1.0, 0, 1)]
    assert next_batch(aligned, 5.0, (1, 2), by_chunk, aligned=True) == [(0.0, 0, 0), (0.0, 1, 0)]


def test_staggered_study_cpu(tmp_path):
    """Staggered arrivals through SRb and B0: every chunk exact against its reference, batches never start
    before their last member arrived, latency measured from each chunk's own arrival."""
    import pandas as pd

    from cadencelab.bench import sessions as study

    cfg = study.SessionsConfig(config="teaching", device="cpu", arms=("SRb", "B0"), sessions=(2,), max_sessions=2, cadence_s=1e6,
                               workloads=("speak_heavy",), speak_seconds=2, prompts=1, processes=False,
                               time_budget_s=900.0, batch_sizes=(1, 2), stagger=True, n_timesteps=STEPS,
                               out=str(tmp_path))
    res = study.run_study(cfg, progress=lambda m: None)
    assert not res["failures"], res["failures"]
    assert res["summary"]["all_checked_chunks_exact"] and res["summary"]["chunks_checked"] == res["summary"]["chunks"]
    c = pd.read_csv(tmp_path / "sessions_chunks.csv")
    assert (c["arrival_s"] % 1 != 0).any()  # staggered
    assert (c["start_s"] >= c["arrival_s"] - 1e-9).all()
    assert ((c["latency_ms"] / 1e3 - (c["completion_s"] - c["arrival_s"])).abs() < 1e-6).all()
    srb = c[c["arm"] == "SRb"]
    last = srb.groupby(["workload", "sessions", "batch"])["arrival_s"].transform("max")
    assert (srb["start_s"] >= last - 1e-9).all()
    for _, g in c.groupby(["arm", "workload", "sessions", "session"]):
        assert g.sort_values("start_s")["chunk"].tolist() == sorted(g["chunk"])  # each session in order


def test_simulated_plan_batches_under_load_and_not_when_idle():
    from cadencelab.bench import sessions as study
    from cadencelab.bench.sessions_batched import by_chunk, simulate

    cfg = study.SessionsConfig(device="cpu", config="teaching", speak_seconds=2, stagger=True, batch_sizes=(1, 2, 4, 8))
    idle = simulate(cfg, "speak_heavy", 8, by_chunk)  # instant service: every chunk alone, at its arrival
    assert [len(b) for _, b in idle] == [1] * 16 and all(start == b[0][0] for start, b in idle)
    busy = simulate(cfg, "speak_heavy", 32, by_chunk, service=lambda b: 0.1 + 0.01 * len(b))
    assert max(len(b) for _, b in busy) > 1 and sum(len(b) for _, b in busy) == 64
    assert all(start >= max(a for a, _, _ in b) for start, b in busy)


def test_an_undeclared_batch_size_keeps_no_workspace(modules, prompts):
    bt = _batched(modules, replay=True, batch_sizes=(1, 2))
    ss = [bt.open(i, prompts[i]) for i in range(3)]
    bt.stream(ss, [_tokens(i, 0) for i in range(3)])
    assert set(bt.workspace_bytes()) == set()  # B = 3 ran eagerly on a workspace for that call only
    bt.stream(ss[:2], [_tokens(i, 1) for i in range(2)])
    assert set(bt.workspace_bytes()) == {2}


def test_a_refused_batched_call_leaves_no_trace(modules, prompts):
    """Wrong tokens or last_chunk for one session of a batch are refused (naming the session) before anything
    is counted or run; the right calls after them give what they give alone, with the same counters."""
    bad = [([TEACHING.vocab_size] * 28, False, "session 1: token 0"), ([1, -1], False, "session 1: token 1 is -1"),
           ([], False, "session 1: no tokens"), ("ab", False, "session 1: tokens must be a sequence"),
           (list(range(28)), "yes", "last_chunk must be True or False")]

    def run(wrong: bool):
        bt = _batched(modules, replay=True)
        torch.manual_seed(7)
        ss = [bt.open(i, prompts[i]) for i in range(2)]
        out = []
        for k in range(2):
            if wrong:
                for tokens, last, says in bad:
                    with pytest.raises(ValueError, match=says):
                        bt.stream(ss, [_tokens(0, k), tokens], last_chunk=last)
            out += [(b, s.last_mel) for b, s in zip(bt.stream(ss, [_tokens(i, k) for i in range(2)]), ss)]
        return out, dict(bt.calls), bt.counters().to_dict("records")

    (got, calls, counters), (ref, ref_calls, ref_counters) = run(True), run(False)
    assert calls == ref_calls and counters == ref_counters
    assert all(a[0] == b[0] and torch.equal(a[1], b[1]) for a, b in zip(got, ref))
