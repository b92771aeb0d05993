"""Native clocks: counters whose rates are fixed by configuration.

A clock either is a root (its rate is given in Hz of audio or per call) or is driven by a
parent clock: ``frames`` advance ``ratio`` per ``tokens`` tick, a ``chunk`` is ``ratio`` tokens
plus ``offset`` lookahead tokens, and so on.

Lookahead: when a declaration names its call clock (one tick = one call), a call
*commits* ``ticks_per(clock, call_clock)`` ticks of every clock it drives and reads
``lookahead`` more that it does not commit: the ``offset`` of each clock on the drive
chain, scaled by the ratios below it (:func:`per_call`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import DeclarationError, check_name


@dataclass(frozen=True)
class Clock:
    """One native clock.

    name:    identifier used by regions and operators ("tokens", "frames", "steps"...).
    unit:    what one tick is ("token", "mel frame", "solver step", "sample", "turn").
    parent:  the clock that drives this one, or None for a root clock.
    ratio:   ticks of this clock per tick of ``parent`` (positive integer).
    offset:  extra ticks added per parent tick that do not advance the stream
             (e.g. the lookahead tokens carried with every Token2wav chunk).
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
        check_name(f"{where}.name", self.name, "a clock")
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
            isinstance(self.rate_hz, bool)
            or not isinstance(self.rate_hz, (int, float))
            or not math.isfinite(self.rate_hz)
            or not self.rate_hz > 0
        ):
            raise DeclarationError(f"{where}.rate_hz", f"must be a positive finite number, got {self.rate_hz!r}")
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
    for i, c in enumerate(clocks):
        parent = by_name[c.parent] if c.parent is not None else None
        if parent is not None and c.rate_hz is not None and parent.rate_hz is not None:
            want = parent.rate_hz * c.ratio
            if not math.isclose(c.rate_hz, want, rel_tol=1e-9):
                raise DeclarationError(
                    f"clocks[{i}].rate_hz",
                    f"{c.rate_hz!r} Hz contradicts its parent '{parent.name}': {parent.rate_hz!r} Hz x ratio {c.ratio} "
                    f"= {want!r} Hz (give the child no rate, or the product)",
                )
    return by_name


def drive_chain(clocks: dict[str, Clock], child: str, ancestor: str) -> list[Clock] | None:
    """The clocks from ``ancestor`` down to ``child`` (both included), or None if ``ancestor`` does not drive it."""
    chain = []
    c = clocks[child]
    while True:
        chain.append(c)
        if c.name == ancestor:
            return chain[::-1]
        if c.parent is None:
            return None
        c = clocks[c.parent]


def common_ancestor(clocks: dict[str, Clock], a: str, b: str) -> str | None:
    """The nearest clock that drives both ``a`` and ``b`` (a clock drives itself), or None."""
    up = set()
    c: str | None = a
    while c is not None:
        up.add(c)
        c = clocks[c].parent
    c = b
    while c is not None:
        if c in up:
            return c
        c = clocks[c].parent
    return None


def in_units_of(clocks: dict[str, Clock], n: int, frm: str, to: str) -> tuple[int, int] | None:
    """``n`` ticks of ``frm`` as the exact fraction (numerator, denominator) of ticks of ``to``.

    None when no clock drives both (the two clocks are unrelated).
    """
    lca = common_ancestor(clocks, frm, to)
    if lca is None:
        return None
    return n * ticks_per(clocks, to, lca), ticks_per(clocks, frm, lca)


def scale(clocks: dict[str, Clock], frm: str, to: str, where: str = "clocks") -> tuple[int, int]:
    """(multiply, divide), in lowest terms, taking ticks of ``frm`` to ticks of ``to``: the one clock conversion.

    A DeclarationError naming ``where`` when either clock is unknown or no clock drives both.
    """
    for c in (frm, to):
        if c not in clocks:
            raise DeclarationError(where, f"unknown clock {c!r} (declared: {sorted(clocks)})")
    q = in_units_of(clocks, 1, frm, to)
    if q is None:
        raise DeclarationError(where, f"clock '{frm}' and clock '{to}' share no driving clock")
    g = math.gcd(*q)
    return q[0] // g, q[1] // g


def convert(clocks: dict[str, Clock], n: int, frm: str, to: str, where: str = "clocks") -> int:
    """``n`` ticks of ``frm`` as whole ticks of ``to`` (see :func:`scale`); a ValueError when not whole."""
    return scaled(n, scale(clocks, frm, to, where), frm, to, where)


def scaled(n: int, ratio: tuple[int, int], frm: str, to: str, where: str = "clocks") -> int:
    """``n`` ticks of ``frm`` through a :func:`scale` already taken (``ratio``) as whole ticks of ``to``: what a
    caller converting every call does with the ratio it keeps; a ValueError when not whole."""
    mul, div = ratio
    if (n * mul) % div:
        raise ValueError(f"{where}: {n} '{frm}' ticks are not whole '{to}' ticks ({div} '{frm}' per {mul} '{to}')")
    return n * mul // div


@dataclass(frozen=True)
class PerCall:
    """What one call does to a clock driven by the call clock.

    committed: ticks the call advances (the stride s_r of a region on this clock).
    lookahead: ticks it reads beyond them without committing (carried by clock offsets).
    unit:      ticks per tick of the clock that carries the lookahead (a flush commits whole
               lookahead ticks, e.g. 2 frames per token); 1 when there is no lookahead.
    """

    committed: int
    lookahead: int
    unit: int

    @property
    def frames(self) -> int:
        """Ticks one call consumes, committed + lookahead (f_call: the most a final flush commits)."""
        return self.committed + self.lookahead

    def flush(self) -> tuple[int, int, int] | None:
        """(min, max, step) of a partial final call: from the lookahead to committed + lookahead - unit.

        A final call commits whatever remains: at least the lookahead it was carrying, at most one
        unit short of a whole call with its lookahead (that many would have made a steady call).
        None without lookahead.
        """
        if self.lookahead == 0:
            return None
        return self.lookahead, self.committed + self.lookahead - self.unit, self.unit


def per_call(clocks: dict[str, Clock], clock: str, call_clock: str) -> PerCall | None:
    """Committed and lookahead ticks of ``clock`` per tick of ``call_clock``; None if it is not driven by it."""
    chain = drive_chain(clocks, clock, call_clock)
    if chain is None:
        return None
    look, unit = 0, 1
    for c in chain[1:]:  # the call clock's own offset is relative to its parent, not to a call
        look = look * c.ratio + c.offset
        unit = 1 if c.offset else unit * c.ratio
    committed = ticks_per(clocks, clock, call_clock)
    return PerCall(committed, look, unit if look else 1)


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
