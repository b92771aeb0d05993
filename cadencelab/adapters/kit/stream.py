"""One pass of a spec's traffic through one arm's runtime, each call inside a named range: what a profile of a
user's model times (``cadencelab profile --model``), with no course helper and no knowledge of the model. It speaks
the session protocol (:mod:`.session`: ``start``, a call with ``last``) and names each call's operator, which a
traffic of several operators needs (:func:`~.session.run_turns` streams one)."""

from __future__ import annotations

import pandas as pd
import torch

from .runtime import StreamingRuntime
from .traffic import Traffic

__all__ = ["call_kind", "run_traffic"]


def call_kind(index: int, last: bool) -> str:
    """A call's place in its turn: "first", "steady" or "flush" (the turn's final call)."""
    return "flush" if last else ("first" if index == 0 else "steady")


def run_traffic(rt: StreamingRuntime, traffic: Traffic, *, window: str = "call", start: str = "turn_start",
                sync: bool = True) -> pd.DataFrame:
    """Run ``traffic`` through ``rt``: each turn's reset inside a ``start`` range, each call inside a ``window``
    range (the device synchronised inside it when ``sync``: the call's window covers its device work). One row
    per call: turn, call (index in the turn), operator, kind (:func:`call_kind`), input and output shapes."""
    cuda = rt.device.type == "cuda"
    rows = []
    for t, i, op, x, last in traffic.items_of():
        if i == 0:
            with torch.profiler.record_function(start):
                rt.start(traffic.prompt(t))
        name = rt.bound(op).name
        with torch.profiler.record_function(window):
            out = rt(x, last, name)
            if sync and cuda:
                torch.cuda.synchronize(rt.device)
        rows.append(dict(turn=t, call=i, operator=name, kind=call_kind(i, last), input_shape=tuple(x.shape),
                         output_shape=tuple(out.shape)))
    return pd.DataFrame(rows)
