"""The adapter kit: a declaration and the model's step become a streaming runtime, certified in one call.

A new adapter writes its :class:`~cadencelab.contract.Declaration` and its step, in one form:

* ``"views"``: ``step(x, caches, last) -> (out, new)`` reads each region's cached frames (a view of its
  carry) and returns the frames the call adds; the runtime appends and retains per the policy, in place;
* ``"stock"``: ``step(x, caches, last) -> (out, attended)`` is the stock step returning its caches uncut;
  the runtime writes what the policy keeps;
* ``"inplace"``: the model keeps its state itself (Moshi's Mimi); its tensors are adopted as carries.

They go once into a :class:`KitModel` (the spec), which everything takes: :class:`StreamingRuntime`
``(spec, arm)`` (a :class:`~cadencelab.state.Carry` per region at one address, the audits, replay through
:func:`~cadencelab.replay.bind`), :func:`certify` (one :class:`Certification`: hazards, catalog, audits,
bit-exactness against the model's own reference, never against anything built from the declaration it
certifies) and :func:`factorial` (the paper's arms, one row each).

Modules: :mod:`.spec`, :mod:`.traffic`, :mod:`.regions`, :mod:`.steps`, :mod:`.rings`, :mod:`.adopt`,
:mod:`.bound`, :mod:`.inner`, :mod:`.runtime`, :mod:`.certify`, :mod:`.factorial`.
"""

from __future__ import annotations

from .certify import REFERENCES, Certification, ModelStart, NotStarted, adapter_lines, certify, exact_table, \
    model_reference, run_stock
from .factorial import ARMS, factorial, run_block
from .rings import RingView
from .inner import Inner
from .runtime import AUDITS, FORMS, KitRun, StreamingRuntime
from .session import Session, run_turns
from .spec import KitModel
from .steps import Committed
from .stream import call_kind, run_traffic
from .traffic import Traffic

__all__ = ["FORMS", "AUDITS", "Traffic", "StreamingRuntime", "Inner", "Committed", "KitRun", "RingView", "Certification", "run_stock",
           "certify", "exact_table", "adapter_lines", "ARMS", "KitModel", "factorial", "run_block", "REFERENCES",
           "ModelStart", "NotStarted", "model_reference",
           "Session", "run_turns", "run_traffic", "call_kind"]
