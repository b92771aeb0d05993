"""The one spec of a streaming model: every fact the kit needs about it, typed once.

The runtime (:class:`~.runtime.StreamingRuntime`, any arm), :func:`~.certify.certify`, the factorial, the catalog
and profile commands all take the same :class:`KitModel`; what differs between them (the arm, the backend, the
audits, engine options) is their own few options, never a second copy of the model's fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import torch

from ...contract import Declaration
from .certify import Certification, certify, model_reference
from .runtime import AUDITS, FORMS, StreamingRuntime
from .traffic import Traffic

__all__ = ["KitModel", "Spec"]


@dataclass(repr=False)
class KitModel:
    """A declared streaming model as the kit runs it: what the user wrote, in one object.

    decl:     the :class:`~cadencelab.contract.Declaration`.
    step:     the model's step in the kit's ``form`` (see the package docstring): one callable (the only operator,
              or the one ``operator`` names) or a dict operator -> step (each operator its own catalog and engine;
              ``stock``, ``frames``, ``modules`` may then be dicts too, and ``writes`` names the regions each step
              returns). A step with a ``frames`` parameter is given the call's committed frames.
    stock:    the model's own stock step (same shape as ``step``): what B0 and R run, what the differential audit
              and the certificate compare against. A stock-only spec (no ``step``) runs the stock arms.
    traffic:  what to stream (a :class:`Traffic`); only certify and the factorial need it.
    reference: what a certificate is checked against: the model's own loop ``reference(traffic)`` or its
              recorded outputs (default: the stock step from the model's own start).
    frames:   where a call's frames are in ``x``: its dim (an int), or an :class:`~cadencelab.replay.At` whose
              ``dim`` and ``clock`` say so (its ``arg`` is ignored: the runtime passes ``x`` first); both count the
              lookahead a steady call carries. :class:`~.steps.Committed` ``(dim, clock)``: ``x`` counts committed
              frames only (an operator fed by another operator of the same stream call).
    init:     ``init(prompt) -> {region: base tensor}``: cache-free priming at a turn's start (eager, counted as
              priming); regions it leaves out start empty, or zero-filled at a constant extent (a region declared
              with ``initial`` frames must be given them).
    modules:  modules whose parameters the steps read (guarded by the engines); a dict gives each operator its own.
    device:   where the model's tensors and the carries live.
    adopt:    ``{region: tensor}`` (a ring also ``(tensor, end)``): carries on tensors the model allocated itself;
              used by the arms with the state rule (see :mod:`.adopt`). ``held``: ``{name: tensor or getter}``,
              state the model keeps that the declaration does not name, guarded by every engine.
    inner:    ``{operator: Inner(module, frames=...)}``: declared operators a step calls through a module's method,
              replayed on their own where ``granularity`` says "inner" (see :mod:`.inner`).
    granularity: where the per-step arms (R, SR) replay each operator: "step" (default), "call", or "inner"
              (the ``inner`` operators its step calls); one for all or a dict by operator. Per-call arms replay
              every operator whole.
    audits:   the audits :func:`certify` runs (default both; a stock step that writes the buffers the carries
              adopt cannot run the differential audit in shadow). ``audit_regions``: the regions they compare.
    """

    decl: Declaration
    step: Callable | Mapping | None = None
    stock: Callable | Mapping | None = None
    traffic: Traffic | None = None
    frames: object = 1
    form: str = "views"
    operator: str | None = None
    writes: Mapping | None = None
    init: Callable | None = None
    modules: Sequence[torch.nn.Module] | Mapping = field(default_factory=tuple)
    device: str | torch.device = "cpu"
    adopt: Mapping | None = None
    held: Mapping | None = None
    inner: Mapping | None = None
    granularity: str | Mapping | None = None
    audits: tuple = AUDITS
    audit_regions: Sequence[str] | None = None
    reference: Callable | list | None = None

    def __post_init__(self):
        if not isinstance(self.decl, Declaration):
            raise ValueError(f"KitModel: decl must be a Declaration, got {type(self.decl).__name__}")
        if self.traffic is not None and not isinstance(self.traffic, Traffic):
            raise ValueError(f"KitModel: traffic must be a Traffic, got {type(self.traffic).__name__}")
        if self.form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {self.form!r}")

    @property
    def name(self) -> str:
        return self.decl.model

    def __repr__(self) -> str:  # the fields a reader checks, not every tensor and module in them
        calls = f"{len(self.traffic.turns)} turns, {self.traffic.calls} calls" if self.traffic is not None else "none"
        given = [f for f in ("stock", "init", "adopt", "held", "inner", "reference") if getattr(self, f) is not None]
        return (f"KitModel({self.name!r}: operators {[o.name for o in self.decl.operators]}, regions "
                f"{[r.name for r in self.decl.regions]}, form {self.form!r}, frames {self.frames!r}, traffic {calls}, "
                f"device {str(self.device)!r}; given: {', '.join(given) or 'step only'})")

    def runtime(self, arm: str = "S", backend: str = "auto", **options) -> StreamingRuntime:
        """The runtime of one arm (see :class:`~.runtime.StreamingRuntime` for ``options``)."""
        return StreamingRuntime(self, arm, backend=backend, **options)

    def certify(self, backend: str = "auto") -> Certification:
        return certify(self, backend=backend)

    def reference_outputs(self) -> tuple[list, str]:
        """The model's reference over the traffic (what every arm must equal) and which reference it is."""
        return model_reference(self)


#: the one spec object a user types once: the runtime, certify, the factorial, catalog and profile take it
Spec = KitModel
