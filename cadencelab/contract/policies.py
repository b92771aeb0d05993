"""Retention policies: how a persistent region forgets.

Every policy is a :class:`RetentionPolicy`, the one place that knows how its kind keeps frames, as a cache
layer of transformers' ``cache_utils`` honours ``update``. Nothing outside this module asks which kind a
policy is (``tests/test_layers.py`` checks): the declaration, the derivations, the carry and the kit ask
the protocol. A new policy is one subclass giving ``validate``, ``bound``, ``segments`` and ``describe``;
every other rule has a default that keeps the ``segments`` runs (a ``torch.cat`` of narrows for the stock
cut, in-place moves for the carry).

Layouts: ``chronological`` stores the oldest frame first; ``newest_first`` prepends each call's frames
(``cat([new, cache])``), the layout of the Token2wav estimator cache.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .errors import DeclarationError

LAYOUTS = ("chronological", "newest_first")

#: ``need(frames, what)``: the carry's check that ``frames`` fit its capacity (raises, naming the region)
Need = Callable[[int, str], None]


def _check_int(where: str, value, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise DeclarationError(where, f"must be an integer >= {minimum}, got {value!r}")


def _check_layout(where: str, layout: str) -> None:
    if layout not in LAYOUTS:
        raise DeclarationError(where, f"unknown layout {layout!r}; expected one of {LAYOUTS}")


def canonical(x, dim: int, layout: str):
    """``x`` in chronological frame order (oldest first), whatever its layout."""
    _check_layout("layout", layout)
    return x if layout == "chronological" else x.flip(dim)


def move_frames(buf, dim: int, src: int, dst: int, n: int) -> None:
    """``buf[dst:dst+n] = buf[src:src+n]`` along ``dim`` for overlapping ranges, without a scratch.

    Copies blocks no larger than the shift, in the order that never overwrites a source
    before it is read (left-to-right for a left shift, right-to-left for a right shift).
    """
    if n <= 0 or src == dst:
        return
    shift = abs(src - dst)
    if shift >= n:
        buf.narrow(dim, dst, n).copy_(buf.narrow(dim, src, n))
        return
    if dst < src:
        for off in range(0, n, shift):
            m = min(shift, n - off)
            buf.narrow(dim, dst + off, m).copy_(buf.narrow(dim, src + off, m))
    else:
        for end in range(n, 0, -shift):
            m = min(shift, end)
            buf.narrow(dim, dst + end - m, m).copy_(buf.narrow(dim, src + end - m, m))


# ---------------------------------------------------------------------------------------
# the protocol
# ---------------------------------------------------------------------------------------


class RetentionPolicy(ABC):
    """What every retention policy answers. Subclasses are frozen dataclasses with a ``layout`` field.

    Class facts: ``kind`` (a name for tables and recorded data, never switched on), ``bounded`` (the region
    stops growing: a carry of fixed capacity), ``bounds_growth`` (a growing history the policy stops at its
    bound: what C2 counts), ``constant_extent`` (every signature sees the same extent; zero-filled at a
    turn's start), ``ring_order`` (frame i of a turn sits at slot i % capacity, written at a position the
    device keeps), ``bound_name`` (the field errors name for ``bound``).
    """

    kind: ClassVar[str] = "policy"
    bounded: ClassVar[bool] = True
    bounds_growth: ClassVar[bool] = True
    constant_extent: ClassVar[bool] = False
    ring_order: ClassVar[bool] = False
    bound_name: ClassVar[str] = "bound"

    # -- declaration -------------------------------------------------------------------
    @abstractmethod
    def validate(self, where: str) -> None:
        """Raise :class:`DeclarationError` at ``where`` for a field out of range."""

    @property
    @abstractmethod
    def bound(self) -> int | None:
        """The extent the region stops at (its capacity); None for a region that never stops."""

    @abstractmethod
    def segments(self, n: int) -> list[tuple[int, int]]:
        """(start, length) runs of a length-``n`` cache (in its layout) that survive, in order."""

    @abstractmethod
    def describe(self) -> str:
        """One line for tables and errors."""

    @property
    def pinned(self) -> int:
        """Frames at a turn's start the policy never evicts (a prompt, an attention sink)."""
        return 0

    def check_region(self, where: str, initial: int, call_max: int, call_field: str) -> None:
        """Refuse a region whose ``initial`` frames (or one call's ``call_max`` frames, named ``call_field``)
        the policy cannot hold."""
        if self.bound is not None and initial > self.bound:
            raise DeclarationError(f"{where}.initial",
                                   f"initial extent {initial} exceeds the policy's {self.bound_name} {self.bound}")

    # -- extents ---------------------------------------------------------------------------
    def extent_after(self, attended: int) -> int:
        """The live extent after a call that attended ``attended`` frames."""
        return attended if self.bound is None else min(attended, self.bound)

    def cached_at(self, initial: int, growth: int, t):
        """The live extent entering call ``t`` (an int or a numpy array of calls) of a region that starts a
        turn at ``initial`` frames and gains ``growth`` per call: a closed form, whatever the horizon."""
        grown = initial + np.asarray(t, dtype=np.int64) * growth if np.ndim(t) else initial + t * growth
        if self.bound is None:
            return grown
        return np.minimum(grown, self.bound) if np.ndim(t) else min(grown, self.bound)

    def settle_calls(self, initial: int, growth: int) -> float:
        """Calls until the cached extent stops changing (its fixed point is entered at this call); inf if never."""
        if self.bound is None:
            return 0 if growth == 0 else math.inf
        gap = self.bound - initial
        return 0 if (growth == 0 or gap <= 0) else -(-gap // growth)

    def shape_extent(self, live):
        """The extent a tensor signature sees at live extent ``live`` (an int or a numpy array)."""
        if not self.constant_extent:
            return live
        return np.full_like(live, self.bound) if np.ndim(live) else self.bound

    def attended_extent(self, retained: float, call: int) -> float:
        """Frames a call of ``call`` frames attends at ``retained`` cached frames: appended before the cut,
        unless the extent is constant (then written in place)."""
        return retained if self.constant_extent else retained + call

    @property
    def base_extent(self) -> int:
        """Frames at a turn's start when nothing primes the region: the constant extent (zero-filled) or none."""
        return self.shape_extent(0) if self.constant_extent else 0

    # -- the stock cut (the audits' reference) --------------------------------------------
    def apply(self, x, dim: int):
        """The stock cut of the cache ``x`` (in its layout): a ``torch.cat`` of the surviving runs."""
        import torch

        runs = self.segments(x.shape[dim])
        if runs == [(0, x.shape[dim])]:
            return x
        if len(runs) == 1:
            return x.narrow(dim, *runs[0])
        return torch.cat([x.narrow(dim, s, n) for s, n in runs], dim=dim)

    def stock_next(self, old, new, dim: int, written: int = 0):
        """The stock cache after a call adds ``new`` to the cache ``old`` (None: nothing yet): concatenated
        where the layout puts new frames, then cut. ``written``: frames of the turn before the call."""
        import torch

        if old is None:
            full = new
        else:
            full = torch.cat([new, old] if self.layout == "newest_first" else [old, new], dim=dim)
        return self.apply(full, dim)

    # -- in-place retention: the carry's write rule ---------------------------------------
    def position(self, length: int, cursor: int) -> int:
        """Where the next write continues, given a carry's live ``length`` and its ``cursor``."""
        return length

    def committed(self, position: int, capacity: int, cursor: int) -> tuple[int, int]:
        """(live length, cursor) of a carry once device work returned ``position``."""
        return position, cursor

    def settle(self, buf, dim: int, attended: int) -> int:
        """Retain in place in ``buf`` holding ``attended`` frames; return the new position (no host read)."""
        dst = 0
        for src, n in self.segments(attended):
            move_frames(buf, dim, src, dst, n)
            dst += n
        return dst

    def write(self, buf, dim: int, new, at: int, need: Need) -> int:
        """Add ``new`` to ``buf`` holding ``at`` frames where the layout puts them; return the new position."""
        f = new.shape[dim]
        need(at + f, "append")
        if self.layout == "chronological":
            buf.narrow(dim, at, f).copy_(new)
        else:
            move_frames(buf, dim, 0, f, at)
            buf.narrow(dim, 0, f).copy_(new)
        return at + f

    def write_settled(self, buf, dim: int, new, length: int, need: Need) -> int:
        """Append ``new`` to the ``length`` cached frames and retain, in place; return the new position.

        Chronological: each surviving run is moved down from the cache or written from ``new``, in increasing
        order, so no source is overwritten before it is read and only what survives needs room. Newest
        first: append (room for the attended envelope), then settle."""
        if self.layout != "chronological":
            return self.settle(buf, dim, self.write(buf, dim, new, length, need))
        f = new.shape[dim]
        dst = 0
        for src, n in self.segments(length + f):
            old = max(0, min(src + n, length) - src)  # frames of this run that come from the cache
            need(dst + n, "retention")
            if old:
                move_frames(buf, dim, src, dst, old)
            if n > old:
                buf.narrow(dim, dst + old, n - old).copy_(new.narrow(dim, max(src, length) - length, n - old))
            dst += n
        return dst

    def write_retained(self, buf, dim: int, h, need: Need) -> int:
        """Write the frames of a separate full cache ``h`` that survive retention; return the new position."""
        dst = 0
        for src, n in self.segments(h.shape[dim]):
            need(dst + n, "retention")
            buf.narrow(dim, dst, n).copy_(h.narrow(dim, src, n))
            dst += n
        return dst


# ---------------------------------------------------------------------------------------
# the policies
# ---------------------------------------------------------------------------------------


def _newest(n: int, keep: int, layout: str) -> list[tuple[int, int]]:
    """The run holding the newest ``keep`` of ``n`` frames in ``layout``."""
    if n <= keep:
        return [(0, n)]
    return [(n - keep, keep)] if layout == "chronological" else [(0, keep)]


@dataclass(frozen=True)
class SlidingWindow(RetentionPolicy):
    """Keep the newest ``window`` frames."""

    window: int
    layout: str = "chronological"
    kind = "sliding_window"
    bound_name = "window"

    def validate(self, where: str) -> None:
        _check_int(f"{where}.window", self.window, 1)
        _check_layout(f"{where}.layout", self.layout)

    @property
    def bound(self) -> int:
        return self.window

    def segments(self, n: int) -> list[tuple[int, int]]:
        return _newest(n, self.window, self.layout)

    def describe(self) -> str:
        return f"sliding window of {self.window} ({self.layout})"


@dataclass(frozen=True)
class Ring(RetentionPolicy):
    """A ring of fixed ``capacity``: always allocated at capacity, frame i of a turn at slot i % capacity."""

    capacity: int
    layout: str = "chronological"
    kind = "ring"
    constant_extent = True
    ring_order = True
    bound_name = "capacity"

    def validate(self, where: str) -> None:
        _check_int(f"{where}.capacity", self.capacity, 1)
        _check_layout(f"{where}.layout", self.layout)

    @property
    def bound(self) -> int:
        return self.capacity

    def check_region(self, where: str, initial: int, call_max: int, call_field: str) -> None:
        super().check_region(where, initial, call_max, call_field)
        if call_max > self.capacity:  # frames of one call would overwrite each other before the call attends
            raise DeclarationError(
                f"{where}.policy.capacity",
                f"a ring of capacity {self.capacity} cannot hold one call's {call_max} frames ({call_field}); the "
                f"capacity must be >= {call_max}")

    def segments(self, n: int) -> list[tuple[int, int]]:
        raise NotImplementedError("a ring is written modulo its capacity; it has no compaction segments")

    def describe(self) -> str:
        return f"ring of capacity {self.capacity}"

    @staticmethod
    def _write_at(out, dim: int, x, written: int) -> None:
        """Frame ``written + i`` of the turn (``x``'s i-th) at slot ``(written + i) % len(out)``."""
        slots = out.shape[dim]
        for i in range(x.shape[dim]):
            out.narrow(dim, (written + i) % slots, 1).copy_(x.narrow(dim, i, 1))

    def apply(self, x, dim: int):
        """Ring contents after writing the chronological history ``x``: frame i sits at i % capacity."""
        import torch

        n = x.shape[dim]
        shape = list(x.shape)
        shape[dim] = self.capacity
        out = torch.zeros(shape, dtype=x.dtype, device=x.device)
        first = max(0, n - self.capacity)
        self._write_at(out, dim, x.narrow(dim, first, n - first), first)
        return out

    def stock_next(self, old, new, dim: int, written: int = 0):
        """The ring ``old`` (capacity frames) with the call's ``new`` frames written from slot ``written``."""
        if old is None:
            return self.apply(new, dim)
        out = old.clone()
        self._write_at(out, dim, new, written)
        return out

    def position(self, length: int, cursor: int) -> int:
        return cursor  # frames ever written this turn

    def committed(self, position: int, capacity: int, cursor: int) -> tuple[int, int]:
        return min(position, capacity), position

    def settle(self, buf, dim: int, attended: int) -> int:
        return attended  # a ring retains by overwriting as it is written: nothing moves

    def write(self, buf, dim: int, new, at: int, need: Need) -> int:
        self._write_at(buf, dim, new, at)
        return at + new.shape[dim]

    def write_settled(self, buf, dim: int, new, length: int, need: Need) -> int:
        return self.write(buf, dim, new, length, need)


@dataclass(frozen=True)
class PromptRetained(RetentionPolicy):
    """An immutable prompt of ``prompt`` frames plus ``retained`` frames of history.

    Stock semantics (both layouts): when the cache is longer than prompt + retained,
    keep ``cat([x[:prompt], x[-retained:]])`` along the clock dimension. With a
    newest-first layout this keeps the newest frames in front and the prompt's tail at
    the back -- the reference is the stock cut, whatever it keeps.
    """

    prompt: int
    retained: int
    layout: str = "chronological"
    kind = "prompt_retained"

    def validate(self, where: str) -> None:
        _check_int(f"{where}.prompt", self.prompt, 0)
        _check_int(f"{where}.retained", self.retained, 1)
        _check_layout(f"{where}.layout", self.layout)

    @property
    def bound(self) -> int:
        return self.prompt + self.retained

    @property
    def pinned(self) -> int:
        return self.prompt

    def check_region(self, where: str, initial: int, call_max: int, call_field: str) -> None:
        if initial > self.prompt:
            raise DeclarationError(f"{where}.initial", f"initial extent {initial} exceeds the declared prompt {self.prompt}")

    def segments(self, n: int) -> list[tuple[int, int]]:
        if n <= self.bound:
            return [(0, n)]
        return [(0, self.prompt), (n - self.retained, self.retained)]

    def describe(self) -> str:
        return f"prompt {self.prompt} + retained {self.retained} ({self.layout})"


@dataclass(frozen=True)
class Unbounded(RetentionPolicy):
    """No retention: the region grows for the stream's life. Declared explicitly; fails C2."""

    layout: str = "chronological"
    kind = "unbounded"
    bounded = False
    bounds_growth = False

    def validate(self, where: str) -> None:
        _check_layout(f"{where}.layout", self.layout)

    @property
    def bound(self) -> None:
        return None

    def segments(self, n: int) -> list[tuple[int, int]]:
        return [(0, n)]

    def describe(self) -> str:
        return "unbounded (no retention)"


@dataclass(frozen=True)
class Fixed(RetentionPolicy):
    """A region whose extent never changes (conv left-context, a constant table).

    It holds ``extent`` frames at all times: zero-filled at a turn's start (the kit's base, unless ``init``
    gives it), and after each call it keeps the newest ``extent`` frames of (old frames + the call's new
    frames): the last ones in the chronological layout, the first ones in the newest-first layout."""

    extent: int
    layout: str = "chronological"
    kind = "fixed"
    bounds_growth = False  # it never grows: no history to bound (C2 does not count it)
    constant_extent = True
    bound_name = "extent"

    def validate(self, where: str) -> None:
        _check_int(f"{where}.extent", self.extent, 1)  # a fixed region of 0 frames holds nothing
        _check_layout(f"{where}.layout", self.layout)

    @property
    def bound(self) -> int:
        return self.extent

    def extent_after(self, attended: int) -> int:
        return self.extent

    def cached_at(self, initial: int, growth: int, t):
        """``initial`` entering the first call, the extent from the second on."""
        return np.where(np.asarray(t) == 0, initial, self.extent) if np.ndim(t) else (initial if t == 0 else self.extent)

    def settle_calls(self, initial: int, growth: int) -> float:
        return 0 if initial == self.extent else 1

    def segments(self, n: int) -> list[tuple[int, int]]:
        return _newest(n, self.extent, self.layout)

    def describe(self) -> str:
        return f"fixed extent {self.extent}"


@dataclass(frozen=True)
class Counter(Fixed):
    """A count on the region's clock (a position, an offset): one integer element, never a cache.

    Its rule: it starts at 0 at a turn's start (the declared base; ``init`` may give another start), and
    after each call it holds ``advance(value, frames)`` = the value plus the frames the call commits on the
    region's clock. The runtime applies the rule itself (:class:`~cadencelab.adapters.kit.StreamingRuntime`):
    a step reads the count (``caches[name]``) and never returns it; the model's own stock step returns its own
    count, so the differential audit checks the rule against the model. Declared on an integer dtype with the
    clock once in its shape, e.g. ``Region("pos", clock="frames", shape=(1, "frames"), policy=Counter(),
    dtype="int64")``. For extents it is a fixed region of one element."""

    extent: int = 1
    counts = True

    def validate(self, where: str) -> None:
        if self.extent != 1:
            raise DeclarationError(f"{where}.extent", f"a counter holds one element, got extent {self.extent!r}")
        _check_layout(f"{where}.layout", self.layout)

    def advance(self, value, frames: int):
        """The count after a call that commits ``frames`` ticks of the region's clock."""
        return value + frames

    def describe(self) -> str:
        return "counter (advanced by the frames a call commits)"


#: the shipped policies (a user's own is any :class:`RetentionPolicy` subclass)
POLICIES = (SlidingWindow, Ring, PromptRetained, Unbounded, Fixed, Counter)

