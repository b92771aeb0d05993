"""The capture task: write the capture-and-replay wrapper of a small model, graded like a leaderboard problem.

The student writes ``make_wrapper(model, graphs)``: it returns a function ``x -> model(x)`` that keeps one
captured graph per exact input shape and replays it, warm-up, capture and replay written by the student with the
:class:`~cadencelab.course.graph_kit.GraphKit` it is given (``graphs.side_stream()`` to warm up in,
``graphs.graph()`` with ``capture()`` and ``replay()``). :func:`grade_wrapper`
runs it on traffic the student never sees (hidden shapes, fresh values every call, shapes that come back),
compares every output with eager bit for bit (``torch.equal``), checks that earlier outputs were not
overwritten afterwards, counts captures and replays, and times both: one leaderboard row. The traffic is drawn
when the grader runs (its shapes and values differ from run to run), and the output must come from the replayed
graph: every call the model runs outside a capture or a replay is counted, and a wrapper that replays and then
returns ``model(x)`` anyway fails (``side_call``). On CUDA the wrapper must also be faster than eager: the
speedup's interval over paired passes (the course's hierarchical bootstrap, one level) must lie above
:data:`TARGET_SPEEDUP`; on a CPU the grade is for correctness only, and says so.

On CUDA the kit is the real thing (a side stream, ``torch.cuda.graph``; notebook 4's recipe). On a CPU it is a
stand-in with a CUDA graph's semantics, so the grader stays meaningful there: replay reads the static input's
*current values* (forget the ``copy_`` and you get a stale answer) and writes into the *same* static output
(return it without ``clone`` and the next call overwrites it), and a graph only fits the shape it was captured at.
"""

from __future__ import annotations

import gc
import time
from typing import Callable

import pandas as pd
import torch

from .exercises.machinery import FEEDBACK_COLUMNS, HIDDEN, Feedback, is_blank
from .graph_kit import GraphKit

__all__ = ["TaskModel", "GraphKit", "make_model", "shown_traffic", "grade_wrapper", "check_wrapper",
           "leaderboard", "mistakes_table", "speed_row", "WRAPPER_MISTAKES", "TARGET_SPEEDUP", "eager_wrapper",
           "LEADERBOARD_COLUMNS"]

#: the mistakes the grader names, each with its hint (never the right outputs)
WRAPPER_MISTAKES = {
    "stale_input": "replay reads the static input's current values: copy_ each call's x into it before replay "
                   "(a graph does not see a new tensor you pass, only the buffer it was captured on).",
    "aliased_output": "an earlier output changed after a later call: replay writes into the same static output, "
                      "so return a clone of it.",
    "shape_mismatch": "a graph fits only the shape it was captured at: keep one (graph, static input, static "
                      "output) per exact shape, keyed by x.shape.",
    "recaptured": "more captures than distinct shapes: capture once per shape and replay afterwards (a capture "
                  "costs many eager calls).",
    "never_replayed": "no graph was replayed: the wrapper ran eagerly; capture per shape, then replay.",
    "uncaptured": "some shapes were never captured and ran eagerly every call: capture each exact shape once.",
    "no_warm_up": "a shape was captured without a warm-up: run the model at that shape in graphs.side_stream() "
                  "first (lazy initialisation, autotuning and the allocator must not be captured).",
    "side_call": "the model ran eagerly outside its captures and replays: the output must come from the replayed "
                 "graph's static output, not from a call to the model beside it.",
    "slow": "exact, but not faster than eager by the target on this GPU (the interval of the speedup must lie "
            "above it): look for a sync, a capture or an allocation on the hot path.",
}
#: on CUDA, the speedup over eager whose interval's lower end a submission must exceed
TARGET_SPEEDUP = 1.3
#: timed paired passes (eager, then the wrapper) on CUDA, the speedup's interval drawn over them
CUDA_PASSES = 12
#: timed passes over the hidden traffic per submission (the best one counts)
REPEATS = 3
LEADERBOARD_COLUMNS = ["submission", "exact", "calls", "hidden_shapes", "captures", "replays", "side_calls",
                       "us_per_call", "eager_us_per_call", "speedup", "speedup_lo", "speedup_hi", "device", "graded"]


class TaskModel(torch.nn.Module):
    """The task's model: a pre-norm two-layer MLP block over (batch, frames, dim), residual added."""

    def __init__(self, dim: int = 64, hidden: int = 256):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.up = torch.nn.Linear(dim, hidden)
        self.down = torch.nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def make_model(device: str = "cpu", seed: int = 0, dim: int = 64) -> TaskModel:
    """The task's model with seeded weights, in eval mode, on ``device``."""
    torch.manual_seed(seed)
    return TaskModel(dim).to(device).eval()


def _traffic(lengths, dim: int, device, seed: int | None) -> list[torch.Tensor]:
    g = torch.Generator()
    if seed is None:
        g.seed()  # drawn now, from the operating system's entropy
    else:
        g.manual_seed(seed)
    return [torch.randn(1, int(t), dim, generator=g).to(device) for t in lengths]


def shown_traffic(device: str = "cpu", dim: int = 64) -> list[torch.Tensor]:
    """The traffic the notebook shows: three frame counts, each seen twice with new values."""
    return _traffic([8, 8, 12, 8, 16, 12], dim, torch.device(device), seed=1)


def _hidden(device, dim: int) -> list[torch.Tensor]:
    """The grader's traffic, drawn when it runs (never the same twice): five frame counts between 3 and 40 not
    shown, shapes that come back, fresh values every call."""
    g = torch.Generator()
    g.seed()
    shown = {8, 12, 16}
    sizes = [s for s in torch.randperm(38, generator=g).add(3).tolist() if s not in shown][:5]
    order = list(range(len(sizes))) + torch.randint(0, len(sizes), (11,), generator=g).tolist()
    order = [order[i] for i in torch.randperm(len(order), generator=g).tolist()]
    return _traffic([sizes[i] for i in order], dim, device, seed=None)


def eager_wrapper(model, graphs):
    """The reference submission: no graphs at all (what a wrapper must equal, and beat on a GPU)."""
    return model


def _pass_us(fn: Callable, xs: list, device) -> float:
    """µs per call of one pass of ``fn`` over ``xs``."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for x in xs:
        fn(x)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) * 1e6 / max(1, len(xs))


def _race(eager: Callable, fn: Callable, xs: list, device, repeats: int | None = None):
    """(eager, fn) µs per call and the speedup (point, lo, hi): passes alternated so both see the same machine,
    the best of the passes each (the least disturbed, as timeit does); the speedup's 95% interval is the
    hierarchical bootstrap (:mod:`cadencelab.profile.intervals`) over the paired passes' ratios. On a CPU with one
    intra-op thread, so a shared machine's other processes do not stall the thread pool."""
    import numpy as np

    from ..profile.intervals import CONFIDENCE, hierarchical_bootstrap, point

    repeats = repeats or (CUDA_PASSES if device.type == "cuda" else REPEATS)
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        with torch.no_grad():
            passes = [[_pass_us(f, xs, device) for f in (eager, fn)] for _ in range(repeats)]
    finally:
        torch.set_num_threads(threads)
    ratios = [e / max(w, 1e-9) for e, w in passes]
    boot = hierarchical_bootstrap([ratios], 2000, np.random.default_rng(0))
    a = (1 - CONFIDENCE) / 2
    speed = (point([ratios]), float(np.quantile(boot, a)), float(np.quantile(boot, 1 - a)))
    return min(p[0] for p in passes), min(p[1] for p in passes), speed


def grade_wrapper(make_wrapper: Callable, device: str = "cpu", name: str = "your wrapper",
                  traffic: list | None = None) -> Feedback:
    """Grade ``make_wrapper(model, graphs)`` on the hidden traffic: exact, never stale, never aliased, one
    capture per shape, replayed; timed against eager. The Feedback's ``row`` is its leaderboard row."""
    dev = torch.device(device)
    if is_blank(make_wrapper):
        return _feedback([dict(part="wrapper", answer=None, expected=HIDDEN, correct=False, mistake="",
                               hint="wrapper: fill this in (write make_wrapper, then run the cell again).")], None)
    if not callable(make_wrapper):
        raise TypeError(f"grade_wrapper: expected a function make_wrapper(model, graphs), "
                        f"got {type(make_wrapper).__name__}")
    model = make_model(device)
    xs = traffic if traffic is not None else _hidden(dev, model.up.in_features)
    with torch.no_grad():
        want = [model(x.clone()) for x in xs]
    kit = GraphKit(model, dev)
    # a collection of old graphs' reference cycles inside a student's capture would invalidate it (a graph's
    # reset is not permitted while a stream captures): collect before, none while the submission runs
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        fn = make_wrapper(model, kit)
        if is_blank(fn):
            return grade_wrapper(..., device)
        right_now, got = [], []
        with torch.no_grad():
            for x, w in zip(xs, want):  # each output checked when it is returned...
                y = fn(x.clone())
                got.append(y)
                right_now.append(bool(y.shape == w.shape and torch.equal(y, w)))
        captures, side_calls, replays, unwarmed = kit.captures, kit.side_calls, kit.replays, kit.unwarmed
        captured_shapes = len(kit.captured)
        kit.close()
        eager_us, us, speed = _race(model, fn, xs, dev)  # every shape captured by now
    except RuntimeError as e:  # a graph replayed on another shape, a copy_ of the wrong size, a failed capture
        kit.close()
        # more graphs made than shapes met (a capture per call: on CUDA a capture can fail then), a copy_ of the
        # wrong size (one graph for every shape), or a capture that failed without its warm-up
        slip = ("recaptured" if len(kit.graphs) > max(len(kit.captured), 1) else
                "shape_mismatch" if "shape" in str(e) or "size" in str(e) else ("no_warm_up" if kit.unwarmed else ""))
        return _feedback([dict(part="exact", answer=type(e).__name__, expected=HIDDEN, correct=False, mistake=slip,
                               hint=f"exact: the wrapper raised {type(e).__name__}: {str(e)[:120]}. "
                                    + (WRAPPER_MISTAKES[slip] if slip else ""))], None)
    finally:
        if was:
            gc.enable()
    later = [bool(torch.equal(g, w)) for g, w in zip(got, want)]  # ...and again after every call ran
    shapes = len({tuple(x.shape) for x in xs})
    exact = all(right_now) and all(later)
    rows = [_row("exact", True, "") if exact else _row("exact", False, "stale_input" if not all(right_now)
                                                       else "aliased_output")]
    if captures > shapes:
        rows.append(_row("captures", False, "recaptured"))
    elif captures == 0 or replays == 0:
        rows.append(_row("captures", False, "never_replayed"))
    elif side_calls:
        rows.append(_row("captures", False, "side_call"))
    elif captured_shapes < shapes:
        rows.append(_row("captures", False, "uncaptured"))
    elif unwarmed:
        rows.append(_row("captures", False, "no_warm_up"))
    else:
        rows.append(_row("captures", True, ""))
    if dev.type == "cuda":  # graded for speed too: the interval of the speedup above the target
        rows.append(speed_row(exact, speed))
    row = dict(submission=name, exact=exact, calls=len(xs), hidden_shapes=shapes, captures=captures,
               replays=replays, us_per_call=us, eager_us_per_call=eager_us, speedup=eager_us / us,
               speedup_lo=speed[1], speedup_hi=speed[2], side_calls=side_calls, device=str(dev),
               graded=("exactness and speed" if dev.type == "cuda" else "exactness only (CPU: no speed grade)"))
    return _feedback(rows, row)


def mistakes_table() -> pd.DataFrame:
    """The slips the grader names, each with what it tells the student (no submission ships with the course)."""
    return pd.DataFrame([dict(mistake=k, hint=v) for k, v in WRAPPER_MISTAKES.items()])


def check_wrapper(make_wrapper: Callable, device: str = "cpu") -> Feedback:
    """The capture task's checker (what a notebook grades through ``grading.grade``): :func:`grade_wrapper`."""
    return grade_wrapper(make_wrapper, device)


def speed_row(exact: bool, speed: tuple) -> dict:
    """The speed part: ``speed`` (point, low, high) of the speedup over eager passes when its low end is above
    the target; an inexact wrapper is not graded for speed (no mistake named, its figure still shown)."""
    fast = exact and speed[1] > TARGET_SPEEDUP
    r = _row("speed", fast, "" if fast or not exact else "slow")
    if not exact:
        r["hint"] = "speed: graded once every output is exact."
    r["answer"] = f"{speed[0]:.2f}x [{speed[1]:.2f}, {speed[2]:.2f}] (target above {TARGET_SPEEDUP}x)"
    return r


def _row(part: str, ok: bool, mistake: str) -> dict:
    hint = "" if ok or not mistake else f"{part}: " + WRAPPER_MISTAKES[mistake]
    return dict(part=part, answer="ok" if ok else mistake, expected=HIDDEN, correct=ok, mistake=mistake, hint=hint)


def _feedback(rows: list, row: dict | None) -> Feedback:
    fb = Feedback("capture_wrapper", pd.DataFrame(rows, columns=FEEDBACK_COLUMNS))
    fb.row = row
    return fb


def leaderboard(*feedbacks: Feedback, device: str = "cpu") -> pd.DataFrame:
    """The eager reference and each graded submission, fastest exact one first (a row per submission)."""
    ref = grade_wrapper(eager_wrapper, device, name="eager (reference)").row
    rows = [ref] + [fb.row for fb in feedbacks if getattr(fb, "row", None)]
    df = pd.DataFrame(rows, columns=LEADERBOARD_COLUMNS)
    return df.sort_values(["exact", "us_per_call"], ascending=[False, True], kind="stable").reset_index(drop=True)
