"""A refused call leaves no trace: every stateful surface (lane pools, session managers, the runtime,
replay engines) is called wrongly, then rightly, and gives what the right calls give alone --
the same PCM and mel, the same bookkeeping (pending work, loads, resident sessions, counters).

Teaching config on the CPU, eager replay backend.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from cadencelab.adapters.token2wav import TEACHING, build_token2wav, make_prompt
from cadencelab.serving.lanes import LaneExecutor, LanePool
from cadencelab.adapters.token2wav.runtime import Token2wavRuntime, runtime_envelope
from cadencelab.serving.sessions import RngState, Session, SessionManager
from cadencelab.state.alloc import AllocationRefused, check_copies_fit

VOCAB = TEACHING.vocab_size
SEEDS = (11, 12)


def _tokens(i: int, k: int) -> list[int]:
    g = torch.Generator().manual_seed(200 + i)
    buf = [4218] * 3 + torch.randint(0, VOCAB, (25 * 3,), generator=g).tolist()
    return buf[25 * k: 25 * k + 28]


def _digest(pcm: bytes, mel: torch.Tensor) -> tuple[str, str]:
    return hashlib.sha256(pcm).hexdigest(), hashlib.sha256(mel.detach().float().cpu().numpy().tobytes()).hexdigest()


#: wrong chunk arguments: (tokens, last_chunk, what the one line names)
BAD_CHUNKS = [
    ([VOCAB] * 28, False, f"token 0 is {VOCAB}"),
    ([5, -1, 7], False, "token 1 is -1"),
    ([5, 2.5], False, "token 1 is 2.5"),
    ([5, True], False, "token 1 is True"),
    ([5, float("nan")], False, "token 1 is nan"),
    ("abc", False, "sequence of token ids, got str"),
    (None, False, "got NoneType"),
    ([], False, "no tokens"),
    (torch.zeros(28), False, "1-D integer tensor"),
    (torch.zeros(2, 28, dtype=torch.long), False, "1-D integer tensor"),
    (np.full(28, 0.5), False, "1-D integer array"),
    (list(range(28)), "no", "last_chunk must be True or False"),
    (list(range(28)), None, "last_chunk must be True or False"),
]


@pytest.fixture(scope="module")
def prompts():
    return [make_prompt(TEACHING, 40 + p) for p in range(2)]


@pytest.fixture(scope="module")
def weights():
    return build_token2wav(TEACHING, 0, envelope=runtime_envelope("SRc"))


def _pool(weights, lanes=2) -> LanePool:
    return LanePool(*weights, "cpu", lanes, "SRc", cfg=TEACHING, backend="eager")


def _book(pool: LanePool) -> tuple:
    """Everything a refused call might leave behind in a pool."""
    c = pool.counters()
    return (dict(pool._pending), list(pool._loads), dict(pool._resident), sorted(pool.sessions),
            [ln.chunks for ln in pool.lanes], c.to_dict("records") if len(c) else [], pool.captures(),
            torch.get_rng_state().clone().numpy().tobytes())


def _serve(pool: LanePool, prompts, wrong=None) -> dict:
    """Two sessions, two chunks each, on lanes 0 and 1 (the second session moves); ``wrong(pool, sessions)``
    runs before every right call and must raise, changing nothing."""
    t = [pool.open(-1 - p, pr, 0) for p, pr in enumerate(prompts)]
    ss = [pool.fork(t[i], i, seed) for i, seed in enumerate(SEEDS)]
    got = {}
    for k in range(2):
        for i, s in enumerate(ss):
            if wrong is not None:
                before = _book(pool)
                wrong(pool, ss)
                assert _book(pool) == before
            r = pool.stream(s, _tokens(i, k), lane=(i + k) % 2)
            got[i, k] = _digest(r.output, r.mel)
    return got


@pytest.fixture(scope="module")
def right_alone(weights, prompts):
    return _serve(_pool(weights), prompts)


# -- lane pools ------------------------------------------------------------------------------------------


#: wrong lanes on a 2-lane pool, and what the one line names
BAD_LANES = [(5, "lane 5"), (2, "lane 2"), (-1, "lane -1"), (True, "lane True"), (1.0, "lane 1.0"),
             ("0", "lane '0'"), (10**30, "lane 1000")]


def _stranger(prompts) -> Session:
    """A session with id 0 that belongs to no pool or manager here (another one's, as far as they know)."""
    return Session(0, prompts[0], SEEDS[0], RngState.seeded(SEEDS[0], torch.device("cpu")))


def test_lane_pool_wrong_calls_leave_no_trace(weights, prompts, right_alone):
    stranger = _stranger(prompts)

    def wrong(pool, ss):
        for lane, names in BAD_LANES:
            with pytest.raises(ValueError, match=names) as e:
                pool.stream(ss[0], _tokens(0, 0), lane=lane)
            assert "0..1" in str(e.value) and "\n" not in str(e.value)
        for tokens, last, names in BAD_CHUNKS:
            with pytest.raises(ValueError, match=names):
                pool.stream(ss[1], tokens, last_chunk=last)
        with pytest.raises(ValueError, match="not an open session of this pool"):
            pool.stream(stranger, _tokens(0, 0))
        with pytest.raises(ValueError, match="not an open session of this pool"):
            pool.stream("session 0", _tokens(0, 0))
        for sid, seed, prompt, names in [(0, 1, prompts[0], "already open"), (7, 1.5, prompts[0], "seed must be an integer"),
                                         (7, float("nan"), prompts[0], "seed must be an integer"),
                                         (7, 2**64, prompts[0], "seed must be in"), (7.0, 1, prompts[0], "session id"),
                                         (7, 1, None, "prompt must be a PromptState"), (7, "1", prompts[0], "seed")]:
            with pytest.raises(ValueError, match=names):
                pool.open(sid, prompt, seed)
        with pytest.raises(ValueError, match="fork from a freshly primed|not an open session"):
            pool.fork(stranger, 9, 1)
        with pytest.raises(ValueError, match="not an open session of this pool"):
            pool.park(stranger)
        with pytest.raises(ValueError, match="not an open session of this pool"):
            pool.close(stranger)

    assert _serve(_pool(weights), prompts, wrong) == right_alone
    assert not stranger.closed and stranger.chunks == 0  # the other session is untouched


def test_lane_executor_refuses_before_queueing(weights, prompts):
    pool = _pool(weights)
    s = pool.fork(pool.open(-1, prompts[0], 0), 0, SEEDS[0])
    with LaneExecutor(pool) as ex:
        before = _book(pool)
        for tokens, last, names in BAD_CHUNKS[:4]:
            with pytest.raises(ValueError, match=names):
                ex.submit(s, tokens, last)
        assert _book(pool) == before
        assert ex.submit(s, _tokens(0, 0)).result(timeout=120).sid == 0


@pytest.mark.parametrize("lanes, error, names", [
    (100_000, AllocationRefused, "LanePool: lanes=100000 need at least 100000 x"),
    (10**12, AllocationRefused, "at most"),
    (0, ValueError, "integer >= 1, got 0"), (-3, ValueError, "got -3"), (True, ValueError, "got True"),
    (2.5, ValueError, "got 2.5"), ("2", ValueError, "got '2'"),
])
def test_lane_pool_size_is_bounded_before_any_lane_is_built(weights, monkeypatch, lanes, error, names):
    import cadencelab.serving.lanes as lanes_mod

    def no_build(*a, **k):
        raise AssertionError("a lane was built")

    monkeypatch.setattr(lanes_mod, "share_weights", no_build)
    with pytest.raises(error, match=names) as e:
        LanePool(*weights, "cpu", lanes, "SRc", cfg=TEACHING, backend="eager")
    assert "\n" not in str(e.value)


def test_lane_bound_comes_from_free_memory(weights, monkeypatch):
    import cadencelab.state.alloc as alloc

    per_lane = sum(b.numel() * b.element_size() for m in weights for b in m.buffers())
    monkeypatch.setattr(alloc, "free_bytes", lambda device: 3 * per_lane + 1)
    check_copies_fit(weights, "cpu", 3, "LanePool: lanes")
    with pytest.raises(AllocationRefused, match="lanes=4 need at least 4 x .*at most 3 fit"):
        check_copies_fit(weights, "cpu", 4, "LanePool: lanes")


# -- session managers and the runtime ----------------------------------------------------------------------


def _manager_run(weights, prompts, wrong=None) -> tuple[dict, list]:
    m = SessionManager(Token2wavRuntime(*weights, "cpu", "SRc", cfg=TEACHING, backend="eager"))
    ss = [m.open(i, prompts[i], seed) for i, seed in enumerate(SEEDS)]
    got = {}
    for k in range(2):
        for i, s in enumerate(ss):
            if wrong is not None:
                before = (m.resident.sid if m.resident else None, len(m.swaps), [x.chunks for x in ss],
                          m.rt.counters().to_dict("records"), torch.get_rng_state().numpy().tobytes())
                wrong(m, ss)
                assert (m.resident.sid if m.resident else None, len(m.swaps), [x.chunks for x in ss],
                        m.rt.counters().to_dict("records"), torch.get_rng_state().numpy().tobytes()) == before
            got[i, k] = _digest(m.stream(s, _tokens(i, k)), s.last_mel)
    return got, m.rt.counters().to_dict("records")


def test_session_manager_wrong_calls_leave_no_trace(weights, prompts):
    alone = _manager_run(weights, prompts)
    stranger = _stranger(prompts)

    def wrong(m, ss):
        for tokens, last, names in BAD_CHUNKS:
            with pytest.raises(ValueError, match=names):
                m.stream(ss[0] if m.resident is ss[1] else ss[1], tokens, last_chunk=last)  # one that would swap
        with pytest.raises(ValueError, match="not a session of this manager"):
            m.stream(stranger, _tokens(0, 0))
        with pytest.raises(ValueError, match="already open"):
            m.open(1, prompts[0], 5)
        with pytest.raises(ValueError, match="prompt must be a PromptState"):
            m.open(9, "prompt", 5)
        with pytest.raises(ValueError, match="seed must be an integer"):
            m.open(9, prompts[0], 0.5)
        with pytest.raises(ValueError, match="not a session of this manager"):
            m.close(stranger)

    assert _manager_run(weights, prompts, wrong) == alone
    assert not stranger.closed


def test_runtime_stream_refuses_bad_tokens_before_any_work(weights, prompts):
    def run(wrong: bool):
        rt = Token2wavRuntime(*weights, "cpu", "SRc", cfg=TEACHING, backend="eager")
        torch.manual_seed(SEEDS[0])
        rt.set_stream_cache(prompts[0])
        got = []
        for k in range(2):
            if wrong:
                carries = [(c.length, c.cursor, c.buffer.clone()) for c in rt.carries()]
                for tokens, last, names in BAD_CHUNKS:
                    with pytest.raises(ValueError, match=names):
                        rt.stream(tokens, last_chunk=last)
                assert all(c.length == n and c.cursor == cur and torch.equal(c.buffer, b)
                           for c, (n, cur, b) in zip(rt.carries(), carries))
            got.append(_digest(rt.stream(_tokens(0, k)), rt.last_mel))
        return got, rt.counters().to_dict("records")

    assert run(True) == run(False)


# -- replay engines ---------------------------------------------------------------------------------------


def test_engine_call_that_raises_leaves_no_trace():
    from cadencelab.replay import ExactShapeReplay

    def fn(x, scale):
        if not isinstance(scale, float):
            raise TypeError(f"scale must be a float, got {scale!r}")
        return x * scale

    def run(wrong: bool):
        e = ExactShapeReplay(fn, name="toy", backend="eager")
        outs = []
        for i in range(3):
            x = torch.arange(4.0) + i
            if wrong:
                for bad in ("2", None, [2.0]):
                    with pytest.raises(TypeError):
                        e(x, bad)
                with pytest.raises(TypeError):
                    e(torch.arange(6.0), "new class")  # a class that would be born of a failing call
            outs.append(e(x, 2.0))
        return [o.tolist() for o in outs], e.calls, e.counters().to_dict("records"), sorted(map(str, e.classes))

    assert run(True) == run(False)
