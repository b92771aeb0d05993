"""The factorial driver: rounds of fresh arm processes, their blocks interleaved, until the stop rule says so.

Every factorial study (``bench token2wav``, ``bench kit``) measures the same way (:mod:`cadencelab.bench.measure`);
this module is that loop, once. A study hands :func:`run_rounds` a :class:`Rounds`: its arms, its method, how to
start an arm's process, and small callables for what only it knows (keeping a block's answer, the headline's
interval, writing its files, an arm's failure, a profiled first round). The driver

* starts each round's processes (or takes the ones staged on spare cores while the last round was timed) and
  waits until every one is ready; an arm that fails to start or to answer a block is recorded in
  ``Tally.failures`` and left out from then on (``Rounds.failed`` may raise instead: the run then stops, its
  processes stopped);
* runs ``blocks`` blocks per process in :func:`~cadencelab.bench.measure.round_orders`;
* after every round asks the study for the headline's interval half-width, applies
  :func:`~cadencelab.bench.measure.stop_reason` and has the study write its results (a run cut short keeps
  what it measured).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .common import ArmProcess
from .measure import Method, round_orders, stop_reason

__all__ = ["Rounds", "Tally", "run_rounds", "staging_pending"]


@dataclass
class Tally:
    """Where the rounds stand, as the study's callables see it."""

    failures: dict = field(default_factory=dict)   # arm -> the end of its error (the arm runs no more)
    processes: list = field(default_factory=list)  # per started process: {"arm", what it reported ready, "process"}
    round: int = 0                # the round running (from 0)
    round_s: float = 0.0          # the last finished round's seconds
    elapsed_s: float = 0.0        # since the study's start
    halfwidth: float = math.nan   # the headline's interval half-width over its point, after the last round
    stopped: str | None = None    # the stop rule's reason, None while the rounds go on


@dataclass
class Rounds:
    """One study's part of the loop. ``spawn(arms, staging)`` -> {arm: ArmProcess or InlineArm} (with staging
    cores the processes prepare there and wait for the go); ``keep(tally, arm, block, answer, overlapped)``
    records a block (block 0 is the warm-up); ``headline(tally)`` -> the headline's half-width after a round;
    ``finish(tally)`` analyses and writes (``tally.stopped`` set); ``failed(tally, arm, block, error)`` hears of
    an arm's failure (block None: its set-up) and may raise; ``first_round(tally, procs)`` runs after round 0's
    blocks (a profiled block). ``extend``: the arms given processes past ``min_processes`` (None: every arm);
    the rounds end when none of them is left."""

    arms: Sequence[str]
    method: Method
    blocks: int
    spawn: Callable[[list, tuple], dict]
    keep: Callable[[Tally, str, int, dict, bool], Any]
    headline: Callable[[Tally], float]
    finish: Callable[[Tally], Any]
    extend: Sequence[str] | None = None
    staging: tuple = ()
    timeout_s: float = 300.0
    first_extra_s: dict = field(default_factory=dict)  # arm -> more seconds for its set-up and its first block
    failed: Callable[[Tally, str, int | None, str], Any] | None = None
    first_round: Callable[[Tally, dict], Any] | None = None

    def round_arms(self, r: int, failures: dict) -> list:
        """The arms of round ``r``: every arm up to ``min_processes``, then the ``extend`` arms."""
        return [a for a in self.arms if a not in failures
                and (r < self.method.min_processes or self.extend is None or a in self.extend)]

    def goes_on(self, failures: dict) -> bool:
        return any(a not in failures for a in (self.arms if self.extend is None else self.extend) if a in self.arms)


def run_rounds(plan: Rounds, t_start: float | None = None) -> Tally:
    """Run ``plan``'s rounds (``t_start``: the study's start, for the time budget); the final tally."""
    t_start = time.perf_counter() if t_start is None else t_start
    tally, method, upcoming = Tally(), plan.method, None  # upcoming: the next round's processes, staging
    try:
        for r in range(method.max_processes):
            tally.round, t_round = r, time.perf_counter()
            live = plan.round_arms(r, tally.failures)
            if upcoming is not None and list(upcoming) != live:
                drop(upcoming)
                upcoming = None
            procs, upcoming = upcoming or plan.spawn(live, plan.staging), None
            try:
                procs = _start_round(plan, tally, procs)
                following = plan.round_arms(r + 1, tally.failures)
                if plan.staging and following and r + 1 < method.max_processes:
                    upcoming = plan.spawn(following, plan.staging)
                _run_blocks(plan, tally, procs, upcoming)
                if r == 0 and plan.first_round is not None:
                    plan.first_round(tally, procs)
            finally:
                for p in procs.values():
                    p.request_stop()
                for p in procs.values():
                    p.stop()
            tally.halfwidth = plan.headline(tally)
            tally.elapsed_s, tally.round_s = time.perf_counter() - t_start, time.perf_counter() - t_round
            following = plan.round_arms(r + 1, tally.failures)
            next_s = tally.round_s * len(following) / max(1, len(live))  # the next round's arms, at this pace
            tally.stopped = stop_reason(method, r + 1, tally.halfwidth, tally.elapsed_s, next_s)
            plan.finish(tally)  # after every round: a run cut short keeps what it measured
            if tally.stopped or not plan.goes_on(tally.failures):
                break
    finally:
        drop(upcoming)
    return tally


def _fail(plan: Rounds, tally: Tally, arm: str, block: int | None, error) -> None:
    tally.failures[arm] = str(error)[-2000:]
    if plan.failed is not None:
        plan.failed(tally, arm, block, str(error))


def _start_round(plan: Rounds, tally: Tally, procs: dict) -> dict:
    """The round's processes finish their set-up together (staged ones get the go once all have staged;
    nothing is timed yet); each ready one is recorded in ``tally.processes``. The live ones."""
    answers = {}
    for a, p in procs.items():
        staged = getattr(p, "staged", {})
        if staged is None:
            kind, info = p.wait(plan.timeout_s)
            staged = p.staged = info if kind == "staged" else {"early": (kind, info)}
        if "early" in staged:
            answers[a] = staged["early"]
    for a, p in procs.items():
        if a not in answers and getattr(p, "staged", {}):
            p.go()
    live = {}
    for a, p in procs.items():
        kind, info = answers.get(a) or p.wait(plan.timeout_s + plan.first_extra_s.get(a, 0))
        if kind == "ready":
            tally.processes.append({"arm": a, **info, "process": tally.round})
            live[a] = p
        else:
            p.stop()
            _fail(plan, tally, a, None, info)
    return live


def _run_blocks(plan: Rounds, tally: Tally, procs: dict, upcoming: dict | None) -> None:
    for b, order in enumerate(round_orders(list(procs), tally.round, plan.blocks)):
        for a in order:
            if a in tally.failures:
                continue
            timeout = plan.timeout_s + (plan.first_extra_s.get(a, 0) if b == 0 else 0)
            overlap = staging_pending(upcoming)
            kind, res = procs[a].ask(("block", b), timeout)
            if kind != "ok":
                _fail(plan, tally, a, b, res)
                continue
            plan.keep(tally, a, b, res, overlap)


def staging_pending(procs: dict | None) -> bool:
    """Whether any of a staged round's processes is still preparing (their reports are read as they come)."""
    pending = False
    for p in (procs or {}).values():
        if getattr(p, "staged", {}) is None and not p.dead:
            msg = p.poll()
            if msg is None:
                pending = not p.dead or pending
            else:
                p.staged = msg[1] if msg[0] == "staged" else {"early": msg}
    return pending


def drop(procs: dict | None) -> None:
    """End processes not needed (staged for a round that will not run)."""
    for p in (procs or {}).values():
        p.kill("not needed") if isinstance(p, ArmProcess) else p.stop()
