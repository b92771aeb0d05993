"""One session protocol: the verbs every runtime of a stream speaks, whatever model it serves.

A session starts a turn (``start(prompt)``: priming, caches to their base in place), takes one call
(``session(x, last)``: ``last`` marks the turn's final call, which commits its lookahead) and reports its
replay counters (``counters()``: one DataFrame, empty without replay). Serving code (lanes, the session
manager, benches) drives any model through these three; a runtime keeps its model-shaped verbs beside them
where a caller outside the project uses those (Token2wav's ``set_stream_cache``/``stream`` are the vendor's).
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import pandas as pd

__all__ = ["Session", "run_turns", "engine_counters"]


@runtime_checkable
class Session(Protocol):
    def start(self, prompt=None): ...

    def __call__(self, x, last: bool = False): ...

    def counters(self) -> pd.DataFrame: ...


def run_turns(session: Session, turns: Sequence[Sequence], prompts: Sequence | None = None) -> list:
    """Every turn through ``session``: started from its prompt, its last call marked final; the outputs."""
    if not isinstance(session, Session):
        raise ValueError(f"run_turns: a {type(session).__name__} does not speak the session protocol "
                         f"(start, __call__(x, last), counters)")
    outs = []
    for t, turn in enumerate(turns):
        session.start(None if prompts is None else prompts[t])
        outs += [session(x, last=i == len(turn) - 1) for i, x in enumerate(turn)]
    return outs


def engine_counters(engines) -> pd.DataFrame:
    """The counters of ``engines`` (an iterable of replay engines) in one frame; empty for none."""
    frames = [e.counters() for e in engines]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
