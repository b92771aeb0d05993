"""Every arm once: the factorial's cells (state rule x replay) and the controls, by name, with no import beyond
this file (the command line lists them in its help before it imports torch).

Names and the paper: B0, S, R, Rc, SR, SRc are the paper's. The paper's R replays per *solver step* and Rc per
*chunk*; in the kit, ``replay`` is the granularity the runtime replays at: ``"call"`` (one graph per call: the
paper's chunk, since a Token2wav call is one chunk), ``"step"`` (one graph per declared step the call binds: for a
teaching or user model the operator's step, which is the paper's solver step only where the step is one solver
step) or ``"inner"`` (the step's inner operators, e.g. each DiT call of Token2wav's Euler loop). Token2wav's R and
SR run the paper's solver-step granularity (its runtime maps ``"step"`` to the flow chunk's inner operators).
"""

from __future__ import annotations

from dataclasses import dataclass

#: where an arm replays: no replay, once per call, once per bound step, per inner operator
REPLAY = (None, "call", "step", "inner")


@dataclass(frozen=True)
class Arm:
    """One arm: the state rule on or off, where it replays (:data:`REPLAY`), and the variant a control runs
    (None for the factorial's cells and for B0_repeat, which is B0's code in another process)."""

    name: str
    state_rule: bool
    replay: str | None
    control: str | None = None
    description: str = ""

    def __post_init__(self):
        if self.replay not in REPLAY:
            raise ValueError(f"arm {self.name!r}: replay must be one of {REPLAY}, got {self.replay!r}")

    @property
    def granularity(self) -> str | None:
        """The paper's word for where it replays: "step" (solver step) or "chunk" (call); None without replay."""
        return {"call": "chunk", "step": "step", "inner": "step"}.get(self.replay)

    def switches(self) -> dict:
        """This arm as the kit's switches (``state_rule``, ``replay``, ``granularity``): the factorial's columns."""
        kw = dict(state_rule=self.state_rule, replay=self.replay is not None)
        return dict(kw, granularity=self.replay) if self.replay else kw


def _arms(*arms: Arm) -> dict[str, Arm]:
    return {a.name: a for a in arms}


#: the factorial: the stock arm, the state rule, replay per step / per call, both
CELLS = _arms(
    Arm("B0", False, None, description="stock runtime"),
    Arm("S", True, None, description="state rule only: carry + demand sizing"),
    Arm("R", False, "step", description="replay per step (Token2wav: per solver step), stock state"),
    Arm("Rc", False, "call", description="replay per call (the paper's chunk), stock state"),
    Arm("SR", True, "step", description="state rule + replay per step (Token2wav: per solver step)"),
    Arm("SRc", True, "call", description="state rule + replay per call (the paper's chunk)"),
)
#: the controls, each a named variant of the stock arm
CONTROL_ARMS = _arms(
    Arm("B0_repeat", False, None, None, "control: the stock runtime again, in another process "
        "(cross-process determinism of the baseline; the A/A check): the same code as B0"),
    Arm("vendor_graph", False, None, "vendor_graph", "control: the vendor's CUDA-graph branch as shipped "
        "(buckets 30/48/96)"),
    Arm("vendor_graph_50", False, None, "vendor_graph_50", "control: the vendor's graph branch re-bucketed to the "
        "live 50-frame chunk (padded cache)"),
    Arm("compile", False, None, "compile", "control: torch.compile(mode='reduce-overhead') on the estimator"),
)
#: every arm by name
ARMS: dict[str, Arm] = {**CELLS, **CONTROL_ARMS}
#: the factorial's arm names, in the paper's order
FACTORIAL = tuple(CELLS)
#: the controls' names
CONTROLS = tuple(CONTROL_ARMS)
#: the arm every study's change is measured against, and the A/A control of it
BASELINE, REPEAT = "B0", "B0_repeat"


def arm(name: str) -> Arm:
    """The arm called ``name`` (a ValueError naming the arms otherwise)."""
    if name not in ARMS:
        raise ValueError(f"unknown arm {name!r}; arms: {', '.join(ARMS)}")
    return ARMS[name]


def arm_for(state_rule: bool, replay: bool, granularity: str = "chunk") -> str:
    """The factorial arm a combination of rules names (``granularity``: the paper's "step" or "chunk")."""
    if granularity not in ("step", "chunk"):
        raise ValueError(f"granularity must be 'step' or 'chunk', got {granularity!r}")
    want = granularity if replay else None
    return next(a.name for a in CELLS.values() if a.state_rule == bool(state_rule) and a.granularity == want)
