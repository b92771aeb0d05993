"""Solutions of the course's graded exercises, and the mistakes planted in each.

Kept outside the installed package (a notebook cannot import them): the tests load this file by path, and the
tour types ``answers/<notebook>.py`` into the notebooks' answer cells.

:func:`solution` answers an exercise the way a student is meant to, through the library calls the
notebook shows (``trajectory``, ``verdict``, ``region_table``, the recorded files, a run of the
teaching model); :func:`planted` lists, per exercise, each diagnosable mistake with the answer it
produces. The tour and tests/test_exercises.py use both: every solution must pass its checker and
every planted mistake must fire its own hint, so every exercise is solvable and every hint reachable.

For notebook 8 the planted mistakes are whole declaration functions (:data:`PLANTED_DECLARATIONS`).
"""

from __future__ import annotations

from typing import Callable

import pandas as pd

from cadencelab.adapters.token2wav.clocks import token2wav_declaration
from cadencelab.contract import (
    Admission,
    Clock,
    Declaration,
    Fixed,
    Operator,
    PromptRetained,
    Region,
    Ring,
    SlidingWindow,
    region_table,
    trajectory,
    verdict,
)
from cadencelab.course import exercises as ex
from cadencelab.course import sample_encoder as se

__all__ = ["solution", "planted", "SOLVERS", "PLANTED_DECLARATIONS", "declaration_solution", "solutions_table",
           "ADAPTER_SOLUTIONS", "PLANTED_CODEC_ADAPTERS"]


def _data():
    from cadencelab.course import data

    return data


def _t2w(f_prompt=None, f_retained=None, f_chunk=None, n_steps=None):
    return token2wav_declaration(f_prompt=f_prompt, f_retained=f_retained, f_chunk=f_chunk, n_steps=n_steps)


def _solve_launch_cost(condition: str = "exact") -> dict:
    from cadencelab.course.anatomy import profiled_window

    w = profiled_window(condition).set_index(["arm", "range"])
    b0, src = w.loc[("B0", "synthesis")], w.loc[("SRc", "synthesis")]
    idle = b0["wall_ms"] * b0["slack_frac"]
    per_us = idle * 1e3 / b0["launches"]
    return dict(b0_idle_ms=idle, per_launch_us=per_us, src_predicted_idle_ms=src["launches"] * per_us / 1e3)


def _solve_extents(regions=None, **clocks) -> dict:
    decl = _t2w(**clocks)
    return {r: sorted(trajectory(decl, r)["shape_extent"].unique().tolist()) for r in (regions or ex.EXTENT_REGIONS)}


def _solve_K(regions=None, **clocks) -> dict:
    v = verdict(_t2w(**clocks))
    return dict(zip(v["operator"], v["K"].astype(int)))


def _solve_rho(regions=None, **clocks) -> dict:
    t = region_table(_t2w(**clocks)).set_index("region")
    return {r: round(float(t.loc[r, "rho"]), 2) for r in (regions or ex.RHO_REGIONS)}


def _solve_interval(arm: str = "S", condition: str = "exact") -> dict:
    r = _data().factorial(condition).set_index("arm").loc[arm]
    return dict(lo=r["latency_delta_lo"], hi=r["latency_delta_hi"])


def _solve_verdict(arm: str = "S", condition: str = "exact") -> dict:
    r = _data().factorial(condition).set_index("arm").loc[arm]
    lo, hi = r["latency_delta_lo"], r["latency_delta_hi"]
    return dict(verdict="faster" if hi < 0 else ("slower" if lo > 0 else ex.NO_CLEAR_DIFFERENCE))


def _solve_capacity(arm: str = "SRc", workload: str = "speak_heavy", dataset: str = "sessions") -> dict:
    cap = _data().sessions_capacity(workload, dataset=dataset)
    mine = cap[cap["arm"] == arm]
    return dict(sessions=int(mine.loc[mine["all_hold"].astype(bool), "sessions"].max()),
                plateau=float(mine["goodput"].max()))


def _solve_slack() -> dict:
    s = ex.recorded_summary().set_index("variant")
    return {v: 1 - r["busy_us"] / r["wall_us"] for v, r in s.iterrows()}


def _by_running(name: str) -> Callable:
    """Exercises whose answer is read off a run the notebook shows: the run, done as the checker does."""
    def solve(**inputs):
        e = ex.EXERCISES[name]
        return e.expected(e.context(**inputs))

    return solve


#: exercise name -> inputs -> a correct answer
SOLVERS: dict[str, Callable] = {
    "own_profile": _by_running("own_profile"),
    "launch_cost": _solve_launch_cost,
    "t2w_extents": _solve_extents,
    "t2w_K": _solve_K,
    "t2w_rho": _solve_rho,
    "audit_catch": _by_running("audit_catch"),
    "graph_breaks": _by_running("graph_breaks"),
    "paired_interval": _solve_interval,
    "paired_interval_verdict": _solve_verdict,
    "capacity": _solve_capacity,
    "slack": _solve_slack,
}


def solution(name: str, **inputs):
    """A correct answer to exercise ``name`` (``declaration``: the right declaration function; ``wrapper``:
    the capture task's ``make_wrapper``; ``adapter``: the capstone's declaration function)."""
    if name == "declaration":
        return declaration_solution
    if name == "wrapper":
        return wrapper_solution
    if name == "adapter":
        return ADAPTER_SOLUTIONS[inputs.get("model", "window")]
    if name not in SOLVERS:
        raise KeyError(f"no exercise {name!r}; known: {sorted([*SOLVERS, 'declaration'])}")
    return SOLVERS[name](**inputs)


def planted(name: str) -> list[tuple[str, dict, object]]:
    """(mistake, inputs, wrong answer) for each mistake planted in exercise ``name``."""
    if name == "declaration":
        return [(m, {}, f) for m, f in PLANTED_DECLARATIONS.items()]
    if name == "wrapper":
        return [(m, {}, f) for m, f in PLANTED_WRAPPERS.items()]
    if name == "adapter":
        return [(m, {}, a) for m, a in PLANTED_ADAPTERS.items()]
    if name == "codec_adapter":
        return [(m, {"model": "codec"}, a) for m, a in PLANTED_CODEC_ADAPTERS.items()]
    e = ex.EXERCISES[name]
    return [(m.name, dict(m.plant), e.planted(m.name)) for m in e.mistakes]


# ---------------------------------------------------------------------------------------
# notebook 8: the declaration and its planted slips
# ---------------------------------------------------------------------------------------


def _declare(s: se.Sizes, kv_policy=None, offset=None, context=None, hop=None) -> Declaration:
    """The sample encoder's declaration as a student writes it; each keyword plants one slip."""
    clocks = (Clock("calls", "encoder call"),
              Clock("frames", "encoder frame", parent="calls", ratio=s.chunk,
                    offset=s.lookahead if offset is None else offset),
              Clock("samples", "audio sample", parent="frames", ratio=s.hop if hop is None else hop))
    kv = Region("kv", clock="frames", shape=(2, s.heads, "frames", s.dim // s.heads),
                policy=kv_policy or PromptRetained(s.sink, s.window), lifetime="turn", address_stable=True)
    ctx = Region("ctx", clock="samples", shape=(1, "samples"), policy=Fixed(s.context if context is None else context),
                 lifetime="turn", address_stable=True)
    op = Operator("encode", reads=("kv",), clock="frames", flush="lookahead")
    return Declaration("sample-encoder", clocks, (kv, ctx), (op,), admission=Admission("frames"), call_clock="calls")


def declaration_solution(s: se.Sizes) -> Declaration:
    """The right answer of notebook 8's exercise: every size read from ``s``."""
    return _declare(s)


#: the literal a student types for the window, read once from the shown sizes
_SHOWN_WINDOW = se.VISIBLE.window

#: mistake name -> a declaration function that makes it
PLANTED_DECLARATIONS: dict[str, Callable] = {
    "forgot_sink": lambda s: _declare(s, kv_policy=SlidingWindow(s.window)),
    "kv_layout": lambda s: _declare(s, kv_policy=PromptRetained(s.sink, s.window, layout="newest_first")),
    "no_lookahead": lambda s: _declare(s, offset=0),
    "context_size": lambda s: _declare(s, context=s.kernel),
    "hop_ratio": lambda s: _declare(s, hop=s.kernel),
    "literal_size": lambda s: _declare(s, kv_policy=PromptRetained(s.sink, _SHOWN_WINDOW)),
}


def solutions_table() -> pd.DataFrame:
    """One row per exercise: its solution's verdict and, per planted mistake, whether its own hint fired."""
    rows = []
    for name in [*SOLVERS, "declaration"]:
        check = ex.check_declaration if name == "declaration" else ex.EXERCISES[name].check
        ok = check(solution(name)).ok
        for mistake, inputs, wrong in planted(name):
            fb = check(wrong, **inputs)
            rows.append(dict(exercise=name, solution_passes=ok, mistake=mistake, inputs=inputs,
                             fired=fb.mistakes, hint_fires=(not fb.ok) and mistake in fb.mistakes))
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------
# the capture task: the wrapper and its planted slips
# ---------------------------------------------------------------------------------------


def _wrapper(model, graphs, copy: bool = True, clone: bool = True, key=lambda x: tuple(x.shape),
             recapture: bool = False, use_graphs: bool = True, warm: bool = True):
    """One captured graph per exact shape (warm-up on the side stream, capture, replay); each keyword plants one
    slip."""
    cache = {}

    def run(x):
        if not use_graphs:
            return model(x)
        k = key(x)
        if k not in cache or recapture:
            static_x = x.clone()
            if warm:
                with graphs.side_stream():  # lazy init, autotuning, the allocator: before the capture
                    for _ in range(3):
                        model(static_x)
            graph = graphs.graph()
            with graph.capture():
                static_y = model(static_x)
            cache[k] = (static_x, graph, static_y)
        static_x, graph, static_y = cache[k]
        if copy:
            static_x.copy_(x)
        graph.replay()
        return static_y.clone() if clone else static_y

    return run


def wrapper_solution(model, graphs):
    """The capture task's answer: per exact shape a warm-up and a capture, then ``copy_`` in, replay, ``clone`` out."""
    return _wrapper(model, graphs)


def slow_wrapper(model, graphs):
    """Exact and replayed, but slow on a GPU: the input and the output each make a round trip through the host (two
    syncs per call, the habit of reading a tensor on the host to check it)."""
    run = wrapper_solution(model, graphs)
    return lambda x: run(x.cpu().to(x.device)).cpu().to(x.device)


#: mistake name -> a make_wrapper that makes it
PLANTED_WRAPPERS: dict[str, Callable] = {
    "stale_input": lambda m, c: _wrapper(m, c, copy=False),
    "aliased_output": lambda m, c: _wrapper(m, c, clone=False),
    "shape_mismatch": lambda m, c: _wrapper(m, c, key=lambda x: "one graph"),
    "recaptured": lambda m, c: _wrapper(m, c, recapture=True),
    "never_replayed": lambda m, c: _wrapper(m, c, use_graphs=False),
    "no_warm_up": lambda m, c: _wrapper(m, c, warm=False),
}


# ---------------------------------------------------------------------------------------
# the capstone: the sliding-window decoder's adapter and its planted slips
# ---------------------------------------------------------------------------------------


def _decoder_declaration(s, kv_policy=None, offset=None, tail_clock="samples", window=None) -> Declaration:
    """The sliding-window decoder's declaration as a student writes it; each keyword plants one slip."""
    clocks = (Clock("calls", "decoder call"),
              Clock("frames", "latent frame", parent="calls", ratio=s.chunk, offset=s.lookahead),
              Clock("samples", "audio sample", parent="frames", ratio=s.hop))
    kv = Region("kv", clock="frames", shape=(2, s.heads, "frames", s.dim // s.heads),
                policy=kv_policy or SlidingWindow(s.window if window is None else window), lifetime="turn",
                address_stable=True)
    tail = Region("tail", clock=tail_clock, shape=(1, tail_clock), policy=Fixed(s.taps - 1), lifetime="turn",
                  address_stable=True)
    op = Operator("decode", reads=("kv",), clock="frames", flush="lookahead")
    d = Declaration("window-decoder", clocks, (kv, tail), (op,), admission=Admission("frames"), call_clock="calls")
    if offset is not None:  # the slip: the lookahead left off the frames clock, after the declaration is built
        d = _replace(d, clocks=tuple(_replace(c, offset=offset) if c.name == "frames" else c for c in d.clocks))
    return d


def _replace(obj, **changes):
    import dataclasses

    return dataclasses.replace(obj, **changes)


def _decoder_step(model, whole_cache: bool = False):
    from cadencelab.course.capstone_models import decode

    def step(x, caches, last):
        out, kv, raw = decode(model, x, caches["kv"], caches["tail"], last)
        if whole_cache:  # the stock habit: hand back the concatenated cache instead of the new frames
            kv = __import__("torch").cat([caches["kv"], kv], dim=2)
        return out, {"kv": kv, "tail": raw}

    return step


#: the capstone's answer: (declare, make_step)
adapter_solution = (_decoder_declaration, _decoder_step)

#: mistake name -> an adapter that makes it
PLANTED_ADAPTERS: dict[str, tuple] = {
    "sink_assumed": (lambda s: _decoder_declaration(s, kv_policy=PromptRetained(2, s.window - 2)), _decoder_step),
    "no_lookahead": (lambda s: _decoder_declaration(s, offset=0), _decoder_step),
    "literal_size": (lambda s: _decoder_declaration(s, window=9), _decoder_step),
    "whole_cache_returned": (_decoder_declaration, lambda m: _decoder_step(m, whole_cache=True)),
}


# ---------------------------------------------------------------------------------------
# the capstone's second model: the causal codec decoder with a ring cache, written as a student would
# ---------------------------------------------------------------------------------------


def _codec_declaration(s, kv_policy=None, flush: bool = True, ctx: bool = True) -> Declaration:
    clocks = (Clock("calls", "decoder call"), Clock("frames", "codec frame", parent="calls", ratio=s.chunk))
    regions = [Region("kv", clock="frames", shape=(1, "frames", s.dim), policy=kv_policy or Ring(s.capacity),
                      lifetime="turn")]
    if ctx:  # the convolution's left context: the newest kernel - 1 input frames
        regions.append(Region("ctx", clock="frames", shape=(1, "frames", s.dim), policy=Fixed(s.kernel - 1),
                              lifetime="turn"))
    op = Operator("decode", reads=tuple(r.name for r in regions), clock="frames",
                  flush=(1, s.chunk - 1, 1) if flush else None)
    return Declaration("codec-decoder", clocks, tuple(regions), (op,), admission=Admission("frames"),
                       call_clock="calls")


def _codec_step(model, ctx_on_model: bool = False):
    import torch

    from cadencelab.course.capstone_models import attend_ring, front, to_samples

    def step(x, caches, last):
        ring = caches["kv"]
        if ctx_on_model:  # the slip: the context kept on the model, outside the declared regions
            ctx = getattr(model, "_ctx", None)
            ctx = torch.zeros(1, model.s.kernel - 1, model.s.dim, device=x.device) if ctx is None else ctx
        else:
            ctx = caches["ctx"]
        h = front(model, x, ctx)
        k = model.key(h)
        ring.write(k)  # the call's keys at the ring's next slots, on the device
        out = to_samples(model, attend_ring(model, h, ring.buffer, ring.filled(k.shape[1])))
        if ctx_on_model:
            model._ctx = torch.cat([ctx, x], dim=1)[:, -(model.s.kernel - 1):]
        return out, {"kv": k, "ctx": x}

    return step


#: the codec decoder's answer: (declare, make_step)
codec_adapter_solution = (_codec_declaration, _codec_step)

#: the capstone's answer per model
ADAPTER_SOLUTIONS = {"window": adapter_solution, "codec": codec_adapter_solution}


def _slow_decoder_step(model, repeats: int = 24):
    """Exact and replayed, but slow: the call's work done ``repeats`` times (the last result kept)."""
    step = _decoder_step(model)

    def slow(x, caches, last):
        for _ in range(repeats - 1):
            step(x, caches, last)
        return step(x, caches, last)

    return slow


#: an adapter of the sliding-window decoder that is certified but not faster than the stock loop on a GPU
slow_adapter = (_decoder_declaration, _slow_decoder_step)

#: mistake name -> an adapter of the codec decoder that makes it
PLANTED_CODEC_ADAPTERS: dict[str, tuple] = {
    "window_for_ring": (lambda s: _codec_declaration(s, kv_policy=SlidingWindow(s.capacity)), _codec_step),
    "no_flush": (lambda s: _codec_declaration(s, flush=False), _codec_step),
    "literal_size": (lambda s: _codec_declaration(s, kv_policy=Ring(10)), _codec_step),
    "ctx_not_declared": (lambda s: _codec_declaration(s, ctx=False), _codec_step),
    "ctx_kept_on_the_model": (_codec_declaration, lambda m: _codec_step(m, ctx_on_model=True)),
}


# ---------------------------------------------------------------------------------------
# notebook 3: the carry's retention, written in place, and its planted slips
# ---------------------------------------------------------------------------------------


def retain_solution(buf, n, new, sink, window):
    """PromptRetained(sink, window) in place: append while it fits; else keep the sink, slide the newest frames."""
    k, cap = new.shape[0], sink + window
    if n + k <= cap:
        buf[n:n + k] = new
        return n + k
    keep = window - k  # the held frames after the sink that stay
    buf[sink:sink + keep] = buf[n - keep:n].clone()  # out first: source and destination overlap
    buf[sink + keep:cap] = new
    return cap


def _retain_cat(buf, n, new, sink, window):
    """The stock habit: a new tensor (the carry moves)."""
    c = __import__("torch").cat([buf[:n], new])
    return __import__("torch").cat([c[:sink], c[c.shape[0] - window:]]) if c.shape[0] > sink + window else c


def _retain_no_sink(buf, n, new, sink, window):
    k, cap = new.shape[0], sink + window
    if n + k <= cap:
        buf[n:n + k] = new
        return n + k
    keep = cap - k
    buf[:keep] = buf[n - keep:n].clone()
    buf[keep:cap] = new
    return cap


def _retain_miscount(buf, n, new, sink, window):
    retain_solution(buf, n, new, sink, window)
    return n + new.shape[0]


#: mistake name -> a retain that makes it
PLANTED_RETAINS = {"rebound": _retain_cat, "forgot_sink": _retain_no_sink, "count": _retain_miscount}


# ---------------------------------------------------------------------------------------
# notebook 0: busy and slack as a function, and its planted slips
# ---------------------------------------------------------------------------------------


def busy_slack_solution(starts_ns, ends_ns, window_start_ns, window_end_ns):
    """The union of the intervals clipped to the window, in ms, and the window's idle share."""
    spans = sorted(zip(starts_ns.clip(window_start_ns, window_end_ns), ends_ns.clip(window_start_ns, window_end_ns)))
    busy_ns, cur = 0, None
    for a, b in spans:
        if cur is None or a > cur[1]:
            busy_ns += 0 if cur is None else cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    busy_ns += 0 if cur is None else cur[1] - cur[0]
    wall = window_end_ns - window_start_ns
    return dict(busy_ms=busy_ns / 1e6, slack=(wall - busy_ns) / wall)


def _summed(starts_ns, ends_ns, ws, we):
    busy = int((ends_ns.clip(ws, we) - starts_ns.clip(ws, we)).sum())
    return dict(busy_ms=busy / 1e6, slack=(we - ws - busy) / (we - ws))


def _share(starts_ns, ends_ns, ws, we):
    r = busy_slack_solution(starts_ns, ends_ns, ws, we)
    return dict(busy_ms=r["busy_ms"], slack=1 - r["slack"])


#: mistake name -> a busy_and_slack that makes it
PLANTED_BUSY_SLACK = {"durations_summed": _summed, "busy_share": _share}
