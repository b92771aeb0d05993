"""Which session counts the ``sessions`` study runs, and how its time is shared: pure logic, no device.

A :class:`Sweep` follows one (arm, arrivals, workload) to its break point:

1. **ascent**: the listed counts (``--sessions``) in ascending order, then geometrically (each N ``--growth``
   times the previous, rounded up) until a run breaks (a session misses the cadence, or out of memory) or
   ``--max-sessions`` is reached without a break (the capacity then stays a lower bound). ``extra_points`` more
   points may run above the first break; if one of them holds, the ascent goes on from there.
2. **bisection**: between the largest N that held (``holds``) and the smallest above it that broke (``breaks``),
   until the two are adjacent or ``breaks <= holds * (1 + resolution)``: the bracket ``[holds, breaks]`` is the
   capacity, exact to within the resolution.

``holds`` is the largest N that held anywhere in the sweep and ``breaks`` the smallest break above it, the same
reading as the study's summary, so a noisy point (a hold above a break) never makes the two disagree. An arm
serves all its sweeps in one process (:func:`order_points`): every ascent first, so each reaches a break before
any time goes to tightening a bracket, then the bisections. :func:`arm_deadline` shares the study's time: an arm
may use everything except what the arms after it keep (``--arm-reserve`` each), and each of its points must also
leave the verification it owes (:class:`~cadencelab.bench.sessions_arm.OwedVerification`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["HOLDS", "BREAKS", "OOM", "SKIPPED", "Sweep", "order_points", "arm_deadline"]

HOLDS, BREAKS, OOM, SKIPPED = "holds", "breaks", "oom", "skipped"
_VERDICTS = (HOLDS, BREAKS, OOM)


def check_sweep(owner: str, listed_name: str, listed: tuple, growth: float, resolution: float,
                max_sessions: int) -> None:
    """The bounds a sweep needs, each refusal naming ``owner``'s field: positive ascending listed N, growth
    > 1, resolution >= 0, a cap no lower than the largest listed N."""
    if not listed or min(listed) < 1:
        raise ValueError(f"{owner}.{listed_name} must be positive session counts, got {listed}")
    if not growth > 1.0:
        raise ValueError(f"{owner}.growth must be > 1, got {growth}")
    if not resolution >= 0.0:
        raise ValueError(f"{owner}.resolution must be >= 0, got {resolution}")
    if max_sessions < max(listed):
        raise ValueError(f"{owner}.max_sessions ({max_sessions}) is below the largest of {listed_name} "
                         f"({max(listed)})")


@dataclass
class Sweep:
    """The points of one sweep and what each did; :meth:`next` says which N to run, :meth:`record` takes
    its verdict (:data:`HOLDS`, :data:`BREAKS` or :data:`OOM`), :meth:`stop` ends it early (time budget)."""

    listed: tuple
    growth: float = 2.0
    resolution: float = 0.125
    max_sessions: int = 512
    extra_points: int = 0
    margin: float = 0.25
    verdicts: dict = field(default_factory=dict)
    headroom: dict = field(default_factory=dict)
    stopped: str = ""

    def __post_init__(self):
        self.listed = tuple(sorted({int(n) for n in self.listed}))
        check_sweep("Sweep", "listed", self.listed, self.growth, self.resolution, self.max_sessions)

    # -- what was seen ---------------------------------------------------------------------------
    @property
    def holds(self) -> int:
        """The largest N that held the cadence (0: none did)."""
        return max((n for n, v in self.verdicts.items() if v == HOLDS), default=0)

    @property
    def breaks(self) -> int | None:
        """The smallest N above :attr:`holds` that broke (cadence or memory); None: none did yet."""
        lo = self.holds
        return min((n for n, v in self.verdicts.items() if v != HOLDS and n > lo), default=None)

    @property
    def bracket(self) -> tuple[int, int | None]:
        return self.holds, self.breaks

    @property
    def exact(self) -> bool:
        """Whether the capacity is exact: a run above the largest holding N broke."""
        return self.breaks is not None

    @property
    def ascending(self) -> bool:
        """Whether the sweep is still looking for its break (or for the extra points past it)."""
        if self.stopped:
            return False
        hi = self.breaks
        if hi is None:
            return self._grow() is not None
        above = [n for n, v in self.verdicts.items() if n > hi]
        oom = any(v == OOM for n, v in self.verdicts.items() if n >= hi)
        return not oom and len(above) < self.extra_points and self._grow() is not None

    def cap(self) -> int | None:
        """How far the ascent may jump from the largest N run, ``top``, if it held: to where its load would
        reach the break, ``top * (1 + margin) / h``, with ``h`` the larger of its p95 over the cadence and its
        predicted device load (:meth:`record`'s ``headroom``), but at least ``top * (1 + resolution)`` (a
        break there already gives a bracket within the resolution). None: nothing known, no limit."""
        top = max(self.verdicts, default=0)
        h = self.headroom.get(top)
        if not top or not h or self.verdicts[top] != HOLDS:
            return None
        return max(top + 1, math.ceil(top * (1.0 + self.resolution)), math.ceil(top * (1.0 + self.margin) / h))

    def _grow(self) -> int | None:
        """The next N of the ascent: the next listed one above every point run, else ``growth`` times the
        top, and no further than :meth:`cap`."""
        top = max(self.verdicts, default=0)
        n = next((m for m in self.listed if m > top), None)
        if n is None:
            if top >= self.max_sessions:
                return None
            n = min(self.max_sessions, max(top + 1, math.ceil(top * self.growth)))
        cap = self.cap()
        return n if cap is None else min(n, cap)

    def _bisect(self) -> int | None:
        lo, hi = self.bracket
        if hi is None or hi - lo <= 1 or (lo > 0 and hi <= lo * (1.0 + self.resolution)):
            return None
        return (lo + hi) // 2

    def next(self) -> int | None:
        """The N to run next (None: the sweep is done)."""
        if self.stopped:
            return None
        if self.ascending:
            return self._grow()
        return self._bisect()

    def record(self, n: int, verdict: str, headroom: float | None = None) -> None:
        """Point ``n``'s verdict; ``headroom``: how close it came to breaking, the larger of its worst p95 over
        the cadence and its device load (busy seconds over the seconds simulated); 1 is the break."""
        if verdict not in _VERDICTS:
            raise ValueError(f"Sweep.record: verdict must be one of {_VERDICTS}, got {verdict!r}")
        if n in self.verdicts:
            raise ValueError(f"Sweep.record: N = {n} was already run")
        self.verdicts[int(n)] = verdict
        if headroom is not None and math.isfinite(headroom) and headroom > 0:
            self.headroom[int(n)] = float(headroom)

    def stop(self, why: str) -> None:
        self.stopped = why or "stopped"


def order_points(sweeps: dict, run) -> None:
    """Serve every sweep of one arm: each sweep's ascent, in the order of ``sweeps``, then each one's
    bisection. ``run(key, n)`` runs point ``n`` of ``sweeps[key]`` and returns (verdict, headroom), or None
    when the point did not run (that sweep then stops; the others go on)."""
    for phase in ("ascent", "bisection"):
        for key, sw in sweeps.items():
            while (n := sw.next()) is not None and (phase == "bisection" or sw.ascending):
                got = run(key, n)
                if got is None:
                    if not sw.stopped:
                        sw.stop("not run")
                    break
                sw.record(n, *got)


def arm_deadline(now: float, study_deadline: float, arms_after: int, reserve_s: float) -> float:
    """The deadline of the arm starting at ``now``: the study's, less ``reserve_s`` for each of the
    ``arms_after`` arms still to run (the verification owed is counted point by point). An arm that ends
    early leaves its time to the next; never earlier than ``now``."""
    return max(now, study_deadline - arms_after * reserve_s)
