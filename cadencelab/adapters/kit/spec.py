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

__all__ = ["KitModel"]


@dataclass(repr=False)
class KitModel:
    """A declared streaming model as the kit runs it: what the user wrote, typed once.

    decl, step, stock: the declaration; the step in the kit's ``form`` (one callable, or a dict operator -> step,
        whose ``stock``, ``frames`` and ``modules`` may be dicts too; ``writes`` names what each returns); the
        model's own stock step (what B0 and R run, what the differential audit compares against).
    traffic, reference: what to stream, and what a certificate is checked against: the model's own loop
        ``reference(traffic)`` or its recorded outputs (default: its stock step from the model's own start).
    frames: where a call's frames are in ``x``: a dim, an :class:`~cadencelab.replay.At`, or
        :class:`~.steps.Committed` where ``x`` carries committed frames only.
    init: ``init(prompt) -> {region: base}``, priming at a turn's start; the others start empty (or ``initial``).
    modules, device: the modules whose parameters the engines guard; where tensors and carries live.
    adopt, held: carries on tensors the model allocated (:mod:`.adopt`); undeclared state every engine guards.
    inner, granularity: operators a step calls through a module's method (:mod:`.inner`); where the per-step
        arms (R, SR) replay each operator: "step" (default), "call" or "inner".
    audits, audit_regions: what :func:`certify` audits (a stock step that writes adopted buffers cannot run the
        differential audit in shadow), over which regions.
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

