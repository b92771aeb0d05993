"""Notebook 3's second exercise: write a carry's retention yourself, in place, at one address.

The student writes ``retain(buf, n, new, sink, window) -> n``: ``buf`` is the carry, a ``(sink + window, dim)``
tensor allocated once, whose first ``n`` rows hold the retained frames (chronological); ``new`` is a call's
``(k, dim)`` frames, ``k <= window``. After the call the first rows of ``buf`` must equal, bit for bit, what the
stock loop keeps (``torch.cat`` of the cache and the new frames, then the attention sink, the first ``sink``
frames, and the newest ``window``: ``PromptRetained(sink, window)``), written into ``buf`` itself (never a new
tensor), and the function returns how many rows that is. :func:`check_carry` grades it on streams drawn when it
runs (sizes and values never the same twice): every call compared with the stock cut (``torch.equal``), the
buffer's address and shape checked after every call. A failure names the call, its sizes and the slip it looks
like, never the values.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import torch

from .machinery import FEEDBACK_COLUMNS, FILL_IN, HIDDEN, Feedback, is_blank

__all__ = ["CARRY_MISTAKES", "CARRY_SHOWN", "check_carry", "stock_retain"]

#: the sizes the notebook shows (the grader draws others)
CARRY_SHOWN = dict(sink=2, window=6, dim=4)
#: streams per grading, calls per stream
STREAMS, CALLS = 4, 14

CARRY_MISTAKES = {
    "rebound": "the carry must stay where it is: write into buf (slice assignment or copy_), never bind a new "
               "tensor (torch.cat, a slice's clone returned) or move buf's storage.",
    "forgot_sink": "the stock cut keeps the attention sink: the first `sink` frames stay for the whole turn; only "
                   "the frames after them slide.",
    "count": "return how many frames buf holds after the call (n plus the new frames, at most sink + window).",
    "slide": "the sink is right, the sliding part is not: after the sink come the newest window frames of the held "
             "frames and the new ones, in order. Shifting in place copies a slice onto an overlapping one (not "
             "defined): copy the kept frames out first (a clone), then write them back.",
}


def stock_retain(cache: torch.Tensor, new: torch.Tensor, sink: int, window: int) -> torch.Tensor:
    """The stock loop's retention: concatenate, then keep the sink and the newest ``window`` frames (a new tensor)."""
    c = torch.cat([cache, new])
    return torch.cat([c[:sink], c[c.shape[0] - window:]]) if c.shape[0] > sink + window else c


def _forgot_sink(cache, new, sink, window):
    c = torch.cat([cache, new])
    return c[c.shape[0] - (sink + window):]


def _streams(generator: torch.Generator) -> list[dict]:
    """Configurations and calls drawn now: sizes unlike the shown ones, k from 1 to window, fresh values."""
    out = []
    for _ in range(STREAMS):
        sink = int(torch.randint(1, 5, (1,), generator=generator))
        window = int(torch.randint(3, 11, (1,), generator=generator))
        dim = int(torch.randint(2, 9, (1,), generator=generator))
        ks = torch.randint(1, window + 1, (CALLS,), generator=generator).tolist()
        out.append(dict(sink=sink, window=window, dim=dim,
                        chunks=[torch.randn(k, dim, generator=generator) for k in ks]))
    return out


def _row(part, ok, mistake="", hint="", answer=None) -> dict:
    return dict(part=part, answer=answer if answer is not None else ("ok" if ok else mistake or "wrong"),
                expected=HIDDEN, correct=ok, mistake=mistake, hint=hint)


def _grade_stream(retain: Callable, st: dict) -> tuple[dict, dict]:
    """(exact row, address row) for one stream."""
    sink, window, dim = st["sink"], st["window"], st["dim"]
    buf = torch.full((sink + window, dim), float("nan"))  # never-written rows read as NaN
    ptr, n, cache = buf.data_ptr(), 0, torch.empty(0, dim)
    where = f"sink {sink}, window {window}, dim {dim}"
    for i, new in enumerate(st["chunks"]):
        want = stock_retain(cache, new, sink, window)
        try:
            got_n = retain(buf, n, new.clone(), sink, window)
        except Exception as e:  # the student's function raised: say what, on which call
            said = f"exact: your retain raised {type(e).__name__} at call {i} ({where}, {n} frames held, " \
                   f"{new.shape[0]} new): {e}"
            return _row("exact", False, "", said), _row("address", False)
        if isinstance(got_n, torch.Tensor) and got_n.dim() > 0:
            return (_row("exact", False, "rebound", "exact: " + CARRY_MISTAKES["rebound"]),
                    _row("address", False, "rebound", "address: " + CARRY_MISTAKES["rebound"]))
        moved = buf.data_ptr() != ptr or tuple(buf.shape) != (sink + window, dim)
        if moved:
            return (_row("exact", False), _row("address", False, "rebound", "address: " + CARRY_MISTAKES["rebound"]
                                                + f" (buf moved at call {i})"))
        try:
            got_n = int(got_n)
        except (TypeError, ValueError):
            return (_row("exact", False, "count", f"exact: retain returned {type(got_n).__name__} at call {i}: "
                                                  + CARRY_MISTAKES["count"]), _row("address", True))
        if got_n != want.shape[0]:
            return (_row("exact", False, "count", f"exact: call {i} ({where}, {n} held, {new.shape[0]} new): "
                                                  + CARRY_MISTAKES["count"]), _row("address", True))
        if not torch.equal(buf[:got_n], want):
            held, cut = buf[:got_n], n + new.shape[0] > sink + window
            if torch.equal(held, _forgot_sink(cache, new, sink, window)):
                slip = "forgot_sink"
            elif cut and torch.equal(held[:sink], want[:sink]):
                slip = "slide"  # the sink kept, the sliding part wrong
            else:
                slip = ""
            hint = (f"exact: call {i} ({where}, {n} frames held, {new.shape[0]} new) differs from the stock cut. "
                    + (CARRY_MISTAKES[slip] if slip else "Work the cut through by hand for these sizes."))
            return _row("exact", False, slip, hint), _row("address", True)
        n, cache = got_n, want
    return _row("exact", True), _row("address", True)


def check_carry(retain: Callable, streams: list | None = None) -> Feedback:
    """Grade ``retain(buf, n, new, sink, window) -> n`` on streams drawn now (or ``streams``, for tests): bit-exact
    against the stock cut on every call, and the carry at one address throughout."""
    if is_blank(retain) or (callable(retain) and _returns_blank(retain)):
        return Feedback("carry", pd.DataFrame([_row(p, False, "", FILL_IN.format(part=p), answer=None)
                                               for p in ("exact", "address")], columns=FEEDBACK_COLUMNS))
    if not callable(retain):
        raise TypeError(f"check_carry: expected a function retain(buf, n, new, sink, window), got "
                        f"{type(retain).__name__}")
    if streams is None:
        g = torch.Generator()
        g.seed()  # drawn when the grader runs
        streams = _streams(g)
    exact, address = _row("exact", True), _row("address", True)
    for st in streams:
        e, a = _grade_stream(retain, st)
        exact = e if exact["correct"] else exact
        address = a if address["correct"] else address
        if not (exact["correct"] and address["correct"]):
            break
    return Feedback("carry", pd.DataFrame([exact, address], columns=FEEDBACK_COLUMNS))


def _returns_blank(retain: Callable) -> bool:
    try:
        return is_blank(retain(torch.zeros(3, 1), 0, torch.zeros(1, 1), 1, 2))
    except Exception:  # a half-written function: graded, and what it raised is said there
        return False
