"""The adapter kit: a declaration and the model's step are a streaming runtime, certified in one call.

A new adapter writes two things: its :class:`~cadencelab.contract.Declaration` and the model's
step, in one of two forms:

* ``form="views"``: ``step(x, caches, last) -> (out, new)``: reads each region's cached frames
  (``caches[name]``, a view of its carry in the declared layout) and returns the frames the call
  adds to each region (``new[name]``); the runtime appends them per the declared layout and
  retains per the declared policy, in place;
* ``form="stock"``: ``step(x, caches, last) -> (out, attended)``: the stock step that concatenates
  its caches and returns them uncut; the runtime writes what the declared policy keeps into the
  carry, in place.

``last`` is True on a turn's final call (which commits its lookahead frames). Both go, once, into one
:class:`KitModel` (the spec: with the stock step, the traffic, where frames live, modules, initial state),
which everything below takes. :class:`StreamingRuntime` ``(spec, arm)`` then provides (every shipped model
runs on it: the teaching model, the freeze-style decoder, Mimi and Token2wav's rule arms): one
:class:`~cadencelab.state.Carry` per state region (one allocation, the same address across turn resets),
retention in place, the audits (against the declared cut, and differentially against the model's own stock
step), and replay through :func:`~cadencelab.replay.bind`.

:func:`certify` runs a traffic through the model's own stock step and through the runtime and
returns one :class:`Certification` of DataFrames: the preflight's hazards, the derived catalog against
the labels the stock model was observed to see, the audit verdicts, bit-exactness per call against the
model's reference (its own loop, its recorded outputs, or its stock step from its own start: never
something built from the declaration being certified), replay counters by reason and the carries' addresses. :func:`factorial` runs the paper's arms (B0, S, R, Rc,
SR, SRc) on a :class:`KitModel` and returns one row per arm (latency, state, peak memory, exactness).

A third form, ``form="inplace"``, runs a model that keeps its state itself (Moshi's Mimi): ``step(x, caches,
last) -> out`` is its own streaming code, the declared regions' tensors are adopted as carries (the spec's
``adopt``) and the rest of its state is guarded (``held``); see :mod:`.adopt`.

Modules: :mod:`.spec` (the model's spec), :mod:`.traffic` (what to stream), :mod:`.regions` (bases and shape
checks), :mod:`.steps` (how a step is called), :mod:`.rings` (ring regions), :mod:`.adopt` (state the model
allocates), :mod:`.bound` (one operator), :mod:`.inner` (operators a step calls through its modules),
:mod:`.runtime` (the runtime and its arms), :mod:`.certify`, :mod:`.factorial`.
"""

from __future__ import annotations

from .certify import REFERENCES, Certification, ModelStart, NotStarted, adapter_lines, certify, exact_table, \
    model_reference, run_stock
from .factorial import ARMS, factorial, run_block
from .rings import RingView
from .inner import Inner
from .runtime import AUDITS, FORMS, KitRun, StreamingRuntime
from .session import Session, run_turns
from .spec import KitModel, Spec
from .steps import Committed
from .stream import call_kind, run_traffic
from .traffic import Traffic

__all__ = ["FORMS", "AUDITS", "Traffic", "StreamingRuntime", "Inner", "Committed", "KitRun", "RingView", "Certification", "run_stock",
           "certify", "exact_table", "adapter_lines", "ARMS", "KitModel", "Spec", "factorial", "run_block", "REFERENCES",
           "ModelStart", "NotStarted", "model_reference",
           "Session", "run_turns", "run_traffic", "call_kind"]
