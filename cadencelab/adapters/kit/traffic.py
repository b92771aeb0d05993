"""What a kit runtime streams: turns of calls, each turn optionally primed from a prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pandas as pd
import torch

from ...contract import Declaration
from ...contract.clocks import per_call

__all__ = ["Traffic", "KitRun", "what_of"]


@dataclass
class Traffic:
    """What to stream: ``turns[i]`` is the list of inputs of turn i (its last input is the turn's final
    call); ``prompts[i]`` (optional) is what the turn is primed from (passed to ``init``). For a model of
    several operators a call is an ``(operator, input)`` pair; each operator's last call is its final one.
    ``signals[i]`` (set by :meth:`stream`): turn i's whole signal, for a reference loop that cuts it the model's
    own way (a declared lookahead or call size the model does not have then shows)."""

    turns: list
    prompts: list | None = None
    signals: list | None = None

    def __post_init__(self):
        if not isinstance(self.turns, (list, tuple)) or not self.turns:
            raise ValueError(f"Traffic: turns must be a non-empty list of turns (each a list of input tensors), "
                             f"got {what_of(self.turns)}")
        for t, turn in enumerate(self.turns):
            if not isinstance(turn, (list, tuple)) or not turn:
                raise ValueError(f"Traffic: turn {t} must be a non-empty list of input tensors, got {what_of(turn)}")
            for i, x in enumerate(turn):
                if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str):
                    x = x[1]  # (operator, input): a call of one operator of several
                if not isinstance(x, torch.Tensor):
                    raise ValueError(f"Traffic: turn {t}, call {i} is a {type(x).__name__}, not a tensor (or an "
                                     f"(operator, tensor) pair)")
        if self.prompts is not None and (not isinstance(self.prompts, (list, tuple))
                                         or len(self.prompts) != len(self.turns)):
            raise ValueError(f"Traffic: prompts must be None or one per turn ({len(self.turns)}), got {what_of(self.prompts)}")

    @property
    def calls(self) -> int:
        return sum(len(t) for t in self.turns)

    def prompt(self, i: int):
        return None if self.prompts is None else self.prompts[i]

    @classmethod
    def stream(cls, decl: Declaration, signals: Sequence[torch.Tensor], *, clock: str, dim: int = 1,
               prompts: list | None = None) -> "Traffic":
        """Each signal (one turn) cut into the calls a streaming client makes, sizes from the declaration.

        ``clock`` is the clock ``dim`` counts (e.g. "samples"); per call it advances the committed ticks
        and reads the lookahead ticks beyond them (:func:`~cadencelab.contract.per_call` of ``clock`` on
        the declaration's ``call_clock``). Steady calls are taken while a whole call's ticks remain; the
        turn's final call carries the rest, committing its lookahead too.
        """
        if getattr(decl, "call_clock", None) is None:
            raise ValueError(f"Traffic.stream: the {decl.model} declaration names no call_clock")
        driven = [c for c in decl.clock_map if c != decl.call_clock and per_call(decl.clock_map, c, decl.call_clock)]
        if clock == decl.call_clock:
            raise ValueError(f"Traffic.stream: clock {clock!r} is the call clock (one tick per call); name the clock "
                             f"dim {dim} counts, one of {driven}")
        pc = per_call(decl.clock_map, clock, decl.call_clock) if clock in decl.clock_map else None
        if pc is None:
            raise ValueError(f"Traffic.stream: clock {clock!r} is not driven by the call clock '{decl.call_clock}' "
                             f"(clocks it drives: {driven})")
        if isinstance(signals, torch.Tensor) or not isinstance(signals, (list, tuple)) or not signals:
            raise ValueError(f"Traffic.stream: signals must be a non-empty list of tensors (one per turn), "
                             f"got {what_of(signals)}")
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise ValueError(f"Traffic.stream: dim must be an int, got {dim!r}")
        width = pc.committed + pc.lookahead
        turns = []
        for i, sig in enumerate(signals):
            if not isinstance(sig, torch.Tensor):
                raise ValueError(f"Traffic.stream: signal {i} is a {type(sig).__name__}, not a tensor")
            if not -sig.dim() <= dim < sig.dim():
                raise ValueError(f"Traffic.stream: dim {dim} is outside signal {i}'s {sig.dim()} dims {tuple(sig.shape)}")
            n = sig.shape[dim]
            if n < max(pc.lookahead, 1):
                raise ValueError(f"Traffic.stream: turn {i} has {n} '{clock}' ticks, fewer than one call commits "
                                 f"on its last call ({max(pc.lookahead, 1)})")
            starts = list(range(0, n - width + 1, pc.committed))
            end = starts[-1] + pc.committed if starts else 0
            # each call's chunk its own contiguous tensor, as a client receives it: a view into the whole turn
            # would put every offset at another pointer residue (and every turn at other strides), a new
            # signature class per call on CUDA (replay/signatures.py: CUDA_ALIGN)
            cut = [(a, width) for a in starts] + ([(end, n - end)] if end < n else [])  # no lookahead: none left
            turns.append([sig.narrow(dim, a, w).clone(memory_format=torch.contiguous_format) for a, w in cut])
        return cls(turns, prompts, list(signals))

    def calls_of(self):
        """(turn, index in turn, input, last) per call, in order."""
        for t, i, _, x, last in self.items_of():
            yield t, i, x, last

    def items_of(self):
        """(turn, index in turn, operator or None, input, last) per call, in order; ``last`` marks each
        operator's final call of the turn (a call given as an ``(operator, tensor)`` pair names its operator)."""
        for t, chunks in enumerate(self.turns):
            calls = [c if isinstance(c, tuple) else (None, c) for c in chunks]
            final = {op: i for i, (op, _) in enumerate(calls)}
            for i, (op, x) in enumerate(calls):
                yield t, i, op, x, final[op] == i


def what_of(v) -> str:
    return f"{type(v).__name__} of {len(v)}" if isinstance(v, (list, tuple)) else f"a {type(v).__name__}"


@dataclass
class KitRun:
    """What a runtime's ``run(traffic)`` gives: per-call outputs and a per-call table (turn, call, operator, last,
    path, carry pointers and extents)."""

    outputs: list
    table: pd.DataFrame
