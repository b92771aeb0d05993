"""One declared operator of a kit runtime: its step, where its frames are, its classifier and engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from ...replay import At, Classifier

__all__ = ["Bound", "per_op", "options_per_op"]


@dataclass
class Bound:
    """One declared operator of a runtime: its step (and stock step), where its frames are, the regions it
    touches (reads, then writes, in declaration order), its classifier and its engine."""

    name: str
    op: object
    step: Callable | None
    stock: Callable | None
    frames: At
    writes: tuple
    touches: tuple
    classifier: Classifier | None = None
    engine: object = None
    takes_frames: bool = False
    stock_frames: bool = False
    ring_written: dict = field(default_factory=dict)
    appended: set = field(default_factory=set)  # regions the step appended to itself (Caches.append)
    label: tuple | None = None  # the label of the operator's latest call


def per_op(value, names: Sequence[str], what: str) -> dict:
    """``value`` for each operator: a mapping keyed by operator name, or one value for the only operator."""
    if isinstance(value, Mapping):
        extra = sorted(set(value) - set(names))
        if extra:
            raise ValueError(f"{what}: {extra} are not operators this runtime runs ({list(names)})")
        return {n: value.get(n) for n in names}
    if len(names) > 1 and value is not None and what in ("step", "stock"):
        raise ValueError(f"{what}: this runtime runs {list(names)}: give a dict operator -> {what}")
    return {n: value for n in names}


def options_per_op(engine_options: Mapping | None, names: Sequence[str], known: Sequence[str]) -> dict:
    """Each operator's engine options: one dict for all, or a dict keyed by operator names (each a dict of
    options); every option one of ``known``."""
    given = dict(engine_options or {})
    per = bool(given) and all(k in names for k in given)
    if per:
        bad = [k for k, v in given.items() if not isinstance(v, Mapping)]
        if bad:
            raise ValueError(f"engine_options: {bad} must each map engine options ({list(known)})")
    out = {n: dict(given.get(n) or {}) if per else dict(given) for n in names}
    for n, o in out.items():
        bad = sorted(set(o) - set(known))
        if bad:
            raise ValueError(f"engine_options{f'[{n!r}]' if per else ''}: {bad} are not engine options ({list(known)})")
    return out
