"""Retention policies: how a persistent region forgets.

Every policy knows three things:

* its stock semantics on a tensor (``apply``): the reference concatenation/cut that the
  carry must reproduce elementwise;
* its extent arithmetic (``extent_after``): how long the region is after a call that
  attended ``attended`` frames, which gives the extent trajectory a_r(t);
* the tensor extent a signature sees (``shape_extent``): a ring is always allocated at
  capacity, so its signature never changes.

Layouts: ``chronological`` stores the oldest frame first; ``newest_first`` prepends each
call's frames (``cat([new, cache])``), the layout of the Token2wav estimator cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import DeclarationError

LAYOUTS = ("chronological", "newest_first")


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


@dataclass(frozen=True)
class SlidingWindow:
    """Keep the newest ``window`` frames."""

    window: int
    layout: str = "chronological"
    kind = "sliding_window"
    bounded = True

    def validate(self, where: str) -> None:
        _check_int(f"{where}.window", self.window, 1)
        _check_layout(f"{where}.layout", self.layout)

    def extent_after(self, attended: int) -> int:
        return min(attended, self.window)

    def shape_extent(self, live: int) -> int:
        return live

    def segments(self, n: int) -> list[tuple[int, int]]:
        """(start, length) runs of a length-``n`` cache that survive, in order."""
        if n <= self.window:
            return [(0, n)]
        return [(n - self.window, self.window)] if self.layout == "chronological" else [(0, self.window)]

    def apply(self, x, dim: int):
        n = x.shape[dim]
        if n <= self.window:
            return x
        (start, length), = self.segments(n)
        return x.narrow(dim, start, length)

    def describe(self) -> str:
        return f"sliding window of {self.window} ({self.layout})"


@dataclass(frozen=True)
class Ring:
    """A ring of fixed ``capacity``: always allocated at capacity, written modulo capacity."""

    capacity: int
    layout: str = "chronological"
    kind = "ring"
    bounded = True

    def validate(self, where: str) -> None:
        _check_int(f"{where}.capacity", self.capacity, 1)
        _check_layout(f"{where}.layout", self.layout)

    def extent_after(self, attended: int) -> int:
        return min(attended, self.capacity)

    def shape_extent(self, live: int) -> int:
        return self.capacity

    def segments(self, n: int) -> list[tuple[int, int]]:
        raise NotImplementedError("a ring is written modulo its capacity; it has no compaction segments")

    def apply(self, x, dim: int):
        """Ring contents after writing the chronological history ``x``: frame i sits at i % capacity."""
        import torch

        n = x.shape[dim]
        shape = list(x.shape)
        shape[dim] = self.capacity
        out = torch.zeros(shape, dtype=x.dtype, device=x.device)
        first = max(0, n - self.capacity)
        for i in range(first, n):
            out.narrow(dim, i % self.capacity, 1).copy_(x.narrow(dim, i, 1))
        return out

    def describe(self) -> str:
        return f"ring of capacity {self.capacity}"


@dataclass(frozen=True)
class PromptRetained:
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
    bounded = True

    def validate(self, where: str) -> None:
        _check_int(f"{where}.prompt", self.prompt, 0)
        _check_int(f"{where}.retained", self.retained, 1)
        _check_layout(f"{where}.layout", self.layout)

    @property
    def bound(self) -> int:
        return self.prompt + self.retained

    def extent_after(self, attended: int) -> int:
        return self.bound if attended > self.bound else attended

    def shape_extent(self, live: int) -> int:
        return live

    def segments(self, n: int) -> list[tuple[int, int]]:
        """(start, length) runs of a length-``n`` cache that survive, in order."""
        if n <= self.bound:
            return [(0, n)]
        return [(0, self.prompt), (n - self.retained, self.retained)]

    def apply(self, x, dim: int):
        import torch

        n = x.shape[dim]
        if n <= self.bound:
            return x
        return torch.cat([x.narrow(dim, 0, self.prompt), x.narrow(dim, n - self.retained, self.retained)], dim=dim)

    def describe(self) -> str:
        return f"prompt {self.prompt} + retained {self.retained} ({self.layout})"


@dataclass(frozen=True)
class Unbounded:
    """No retention: the region grows for the stream's life. Declared explicitly; fails C2."""

    layout: str = "chronological"
    kind = "unbounded"
    bounded = False

    def validate(self, where: str) -> None:
        _check_layout(f"{where}.layout", self.layout)

    def extent_after(self, attended: int) -> int:
        return attended

    def shape_extent(self, live: int) -> int:
        return live

    def segments(self, n: int) -> list[tuple[int, int]]:
        return [(0, n)]

    def apply(self, x, dim: int):
        return x

    def describe(self) -> str:
        return "unbounded (no retention)"


@dataclass(frozen=True)
class Fixed:
    """A region whose extent never changes (conv left-context, a constant table).

    It holds ``extent`` frames at all times: zero-filled at a turn's start (the kit's base, unless ``init``
    gives it), and after each call it keeps the newest ``extent`` frames of (old frames + the call's new
    frames): the last ones in the chronological layout, the first ones in the newest-first layout."""

    extent: int
    layout: str = "chronological"
    kind = "fixed"
    bounded = True

    def validate(self, where: str) -> None:
        _check_int(f"{where}.extent", self.extent, 1)  # a fixed region of 0 frames holds nothing
        _check_layout(f"{where}.layout", self.layout)

    def extent_after(self, attended: int) -> int:
        return self.extent

    def shape_extent(self, live: int) -> int:
        return self.extent

    def segments(self, n: int) -> list[tuple[int, int]]:
        if n <= self.extent:
            return [(0, n)]
        return [(n - self.extent, self.extent)] if self.layout == "chronological" else [(0, self.extent)]

    def apply(self, x, dim: int):
        if x.shape[dim] <= self.extent:
            return x
        (start, n), = self.segments(x.shape[dim])
        return x.narrow(dim, start, n)

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


POLICIES = (SlidingWindow, Ring, PromptRetained, Unbounded, Fixed, Counter)
