"""Native clocks: counters whose rates are fixed by configuration.

A clock either is a root (its rate is given in Hz of audio or per call) or is driven by a
parent clock: ``frames`` advance ``ratio`` per ``tokens`` tick, a ``chunk`` is 25 tokens
plus ``offset`` lookahead tokens, and so on.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import DeclarationError


@dataclass(frozen=True)
class Clock:
    """One native clock.

    name:    identifier used by regions and operators ("tokens", "frames", "steps"...).
    unit:    what one tick is ("token", "mel frame", "solver step", "sample", "turn").
    parent:  the clock that drives this one, or None for a root clock.
    ratio:   ticks of this clock per tick of ``parent`` (positive integer).
    offset:  extra ticks added per parent tick that do not advance the stream
             (e.g. 3 lookahead tokens carried with every 25-token chunk).
    rate_hz: ticks per second of audio for root clocks, when meaningful.
    fixed:   False declares a traffic-dependent rate, which fails property C1.
    """

    name: str
    unit: str
    parent: str | None = None
    ratio: int | None = None
    offset: int = 0
    rate_hz: float | None = None
    fixed: bool = True

    def validate(self, where: str) -> None:
        if not self.name or not isinstance(self.name, str):
            raise DeclarationError(f"{where}.name", "a clock needs a non-empty string name")
        if not isinstance(self.unit, str) or not self.unit:
            raise DeclarationError(f"{where}.unit", "a clock needs a unit (e.g. 'token')")
        if self.parent is None:
            if self.ratio is not None:
                raise DeclarationError(f"{where}.ratio", "a root clock has no ratio; give a parent")
        else:
            if not isinstance(self.ratio, int) or isinstance(self.ratio, bool) or self.ratio <= 0:
                raise DeclarationError(
                    f"{where}.ratio", f"must be a positive integer ticks per '{self.parent}' tick, got {self.ratio!r}"
                )
        if not isinstance(self.offset, int) or isinstance(self.offset, bool) or self.offset < 0:
            raise DeclarationError(f"{where}.offset", f"must be a non-negative integer, got {self.offset!r}")
        if self.rate_hz is not None and (
            isinstance(self.rate_hz, bool) or not isinstance(self.rate_hz, (int, float)) or not self.rate_hz > 0
        ):
            raise DeclarationError(f"{where}.rate_hz", f"must be a positive number, got {self.rate_hz!r}")
        if not isinstance(self.fixed, bool):
            raise DeclarationError(f"{where}.fixed", f"must be True or False, got {self.fixed!r}")


def validate_clocks(clocks: tuple[Clock, ...]) -> dict[str, Clock]:
    """Check names are unique, parents exist and drives form no cycle; return them by name."""
    by_name: dict[str, Clock] = {}
    for i, c in enumerate(clocks):
        if not isinstance(c, Clock):
            raise DeclarationError(f"clocks[{i}]", f"expected a Clock, got {type(c).__name__}")
        c.validate(f"clocks[{i}]")
        if c.name in by_name:
            raise DeclarationError(f"clocks[{i}].name", f"duplicate clock name '{c.name}'")
        by_name[c.name] = c
    for i, c in enumerate(clocks):
        if c.parent is not None and (not isinstance(c.parent, str) or c.parent not in by_name):
            raise DeclarationError(f"clocks[{i}].parent", f"unknown clock '{c.parent}'")
    for c in clocks:
        seen = {c.name}
        p = c.parent
        while p is not None:
            if p in seen:
                raise DeclarationError(f"clocks.{c.name}.parent", f"clock drive cycle through '{p}'")
            seen.add(p)
            p = by_name[p].parent
    return by_name


def ticks_per(clocks: dict[str, Clock], child: str, ancestor: str) -> int:
    """Ticks of ``child`` per tick of ``ancestor`` (product of ratios along the drive chain)."""
    n = 1
    c = clocks[child]
    while c.name != ancestor:
        if c.parent is None:
            raise DeclarationError(f"clocks.{child}", f"'{ancestor}' does not drive '{child}'")
        n *= c.ratio  # type: ignore[operator]
        c = clocks[c.parent]
    return n


def clocks_table(clocks: tuple[Clock, ...]):
    """The clocks as a DataFrame (name, unit, parent, ratio, offset, rate_hz, fixed)."""
    import pandas as pd

    return pd.DataFrame(
        [
            dict(name=c.name, unit=c.unit, parent=c.parent, ratio=c.ratio, offset=c.offset, rate_hz=c.rate_hz, fixed=c.fixed)
            for c in clocks
        ]
    )
