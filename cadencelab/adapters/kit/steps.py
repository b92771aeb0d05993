"""How the kit calls a step: where a call's frames are, the ``frames=`` it may take, errors naming the regions."""

from __future__ import annotations

import inspect
import os
import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import torch

from ...contract import Declaration
from ...replay import At
from .regions import shape_of

__all__ = ["Caches", "Committed", "StepFailed", "before_label", "call_step", "committed", "frames_at", "merged", "pair",
           "step_failed", "takes_frames", "user_frame"]


@dataclass(frozen=True)
class Committed:
    """``frames=Committed(dim)``: ``x``'s ``dim`` counts committed frames only. The call carries no lookahead:
    an operator given what an earlier operator of the same stream call committed (Token2wav's vocoder, given
    the flow's mel)."""

    dim: int
    clock: str | None = None


def frames_at(frames, last: int) -> At:
    """The call's frames in ``x`` (argument 0), its final-call flag at position ``last`` (none for
    :class:`Committed` frames: nothing to strip)."""
    if isinstance(frames, Committed):
        if isinstance(frames.dim, bool) or not isinstance(frames.dim, int):
            raise ValueError(f"frames: Committed.dim must be an int (the dim of x that counts the call's frames), "
                             f"got {frames.dim!r}")
        return At(0, dim=frames.dim, clock=frames.clock)
    if isinstance(frames, At):
        at = frames
    elif isinstance(frames, int) and not isinstance(frames, bool):
        at = At(0, dim=frames)
    else:
        raise ValueError(f"frames must be the dim of x that counts the call's frames (an int) or an At(0, dim=..., "
                         f"clock=...), got {frames!r}")
    if isinstance(at.dim, bool) or not isinstance(at.dim, int):
        raise ValueError(f"frames: At.dim must be an int (the dim of x that counts the call's frames), got {at.dim!r}")
    return At(0, dim=at.dim, clock=at.clock, last=last)


def _ahead(b) -> int:
    """The lookahead operator ``b``'s call carries on its frames clock (none for Committed frames)."""
    return b.classifier.lookahead if b.frames.last is not None else 0


def _counts(b, x) -> tuple:
    """(ticks of a steady call, where the call's ticks are) of operator ``b``'s call on ``x``: error text only."""
    at, cls, op = b.frames, b.classifier, b.op
    mul, div = cls.scale
    return op.call * div // mul + _ahead(b), f"x dim {at.dim} holds {x.shape[at.dim]} '{cls.clock}' ticks"


def before_label(b, x, last: bool) -> None:
    """A call's frames checked before it is labelled: ``x`` has the dim, a steady call holds its lookahead."""
    at, cls, op = b.frames, b.classifier, b.op
    if not -x.dim() <= at.dim < x.dim():
        raise ValueError(f"frames: dim {at.dim} is outside x's {x.dim()} dims {tuple(x.shape)}")
    ahead = _ahead(b)
    if not last and x.shape[at.dim] < ahead:
        width, where = _counts(b, x)
        raise ValueError(f"a steady call shorter than the lookahead: {where}, fewer than the {ahead} of "
                         f"lookahead a steady call reads beyond the {op.call} '{op.clock}' it commits ({width} "
                         f"'{cls.clock}' ticks); a turn's final call passes last=True")


def committed(model: str, b, x, last: bool, label) -> int:
    """The frames a labelled call commits on the operator's clock; a steady call must commit the declared
    frames per call, a final one at most the larger of a call and a flush (a ValueError names the counts)."""
    cls, op = b.classifier, b.op
    if not isinstance(label[-1], int):
        raise ValueError(f"call of {tuple(x.shape)}: {label[1]}")
    f, most = label[-1], max(op.call, op.flush[1] if op.flush else 0)
    if last and f > most:
        _, where = _counts(b, x)
        raise ValueError(f"a turn's final call commits at most {most} "
                         f"'{op.clock}' per the {model} declaration; {where} ({f} committed): check frames= (the dim "
                         f"of x counting '{cls.clock}') and how the turn was cut")
    if not last and f != op.call:
        width, where = _counts(b, x)
        raise ValueError(f"a steady call commits {op.call} '{op.clock}' per the {model} declaration "
                         f"({width} '{cls.clock}' ticks with the lookahead); {where} ({f} committed): check frames= "
                         f"(the dim of x counting '{cls.clock}') or pass last=True for a turn's final call")
    return f


class StepFailed(RuntimeError):
    """A user's step raised: the message names the operator, the call and turn, the inputs and the regions it
    was given, and the cause in full with the user's line; the original is chained as ``__cause__``."""


def user_frame(e: BaseException) -> str:
    """Where ``e`` was raised in the user's code: the innermost frame outside torch, this package and Python's
    own library (else the innermost frame), as 'file:line in function'."""
    frames = traceback.extract_tb(e.__traceback__) if e.__traceback__ else []
    mine = [f for f in frames if not any(f.filename.startswith(d) for d in _LIBRARY)]
    f = (mine or frames or [None])[-1]
    return f"{f.filename}:{f.lineno} in {f.name}" if f is not None else ""


_KIT = Path(__file__).resolve().parents[2]
_LIBRARY = tuple(str(Path(p).parent) + os.sep for p in (torch.__file__, os.__file__)) + \
    tuple(str(_KIT / d) + os.sep for d in ("adapters/kit", "replay", "state", "contract"))


def _shapes_in(text: str) -> set:
    """Shapes a torch error message quotes: '[2, 2, 8, 4]', '(2, 2, 8, 4)', 'torch.Size([2, 2, 8, 4])'."""
    found = re.findall(r"[\[(]((?:\s*\d+\s*,)+\s*\d+\s*)[\])]", text)
    return {tuple(int(d) for d in m.split(",") if d.strip()) for m in found}


def step_failed(decl: Declaration, regions, caches: Mapping, e: Exception, what: str, x=None, at: str = ""):
    """The exception to raise for a step that raised ``e``: the operator (``what``), the call (``at``), ``x``'s
    shape and dtype, the regions given (only the one the cause quotes the shape of, where it quotes one), each
    beside its declared shape, and the cause in full with the user's line. A ValueError (a refusal, often the
    kit's own) keeps its type, with these facts as a note; any other error becomes :class:`StepFailed`."""
    given = {r.name: (tuple(caches[r.name].shape), shape_of(decl, r, r.clock)) for r in regions
             if isinstance(caches.get(r.name), torch.Tensor)}
    cause = " ".join(str(e).split())
    quoted = [n for n, (shape, _) in given.items() if shape in _shapes_in(cause)]
    shown = "; ".join(f"'{n}' {given[n][0]} (declared {given[n][1]})" for n in (quoted[:1] or given))
    xs = f"x {tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else ""
    where = user_frame(e)
    facts = (f"the {what} raised {type(e).__name__}{' at ' + at if at else ''} given {xs + ' and ' if xs else ''}the "
             f"{decl.model} region{'' if len(quoted[:1] or given) == 1 else 's'} {shown or '(none)'}")
    if isinstance(e, ValueError):
        e.add_note(facts + (f" [{where}]" if where else ""))
        return e
    return StepFailed(f"{facts}: {cause}" + (f" [{where}]" if where else ""))


def takes_frames(fn: Callable) -> bool:
    """True when ``fn`` has a ``frames`` parameter: the kit passes it the call's committed frames."""
    try:
        return "frames" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def call_step(fn: Callable, x, caches, last, frames: int, takes_frames: bool):
    return fn(x, caches, last, frames=frames) if takes_frames else fn(x, caches, last)


def pair(res, what: str):
    """A step's result as ``(output, {region: tensor})``, else a ValueError naming the step and what it returned."""
    if isinstance(res, tuple) and len(res) == 2:
        return res
    got = f"a tuple of {len(res)}" if isinstance(res, tuple) else "None" if res is None else f"a {type(res).__name__}"
    raise ValueError(f"the {what} returned {got}; it must return (output, {{region: tensor}})")


def merged(caches: Mapping, new: Mapping) -> dict:
    """A stock step's caches after a call: what it returned over what it was given (an operator of several
    returns the regions it writes; extra keys it keeps, such as a ring's position, ride along)."""
    if not isinstance(new, Mapping):
        raise ValueError(f"the stock step must return (output, {{region: tensor}}), got a {type(new).__name__} second")
    return {**caches, **new}


class Caches(dict):
    """What a views-form step is given: region name -> its cached frames (a view of the carry; a ring's
    :class:`~cadencelab.adapters.kit.RingView`), plus :meth:`append` for a step that attends over its cache
    after the call's new frames are in it, as a model writing its own buffer does."""

    def __init__(self, views: Mapping, carries: Mapping, undo=None):
        super().__init__(views)
        self.carries, self.appended, self.undo = carries, set(), undo

    def append(self, name: str, new: torch.Tensor) -> torch.Tensor:
        """Write ``new`` into region ``name``'s carry in place, where its layout puts new frames (in front of
        a newest-first cache, after a chronological one); return the cache with them (a view of the carry).
        The runtime then only retains. A views-form step still returns ``new`` as the region's new frames; a
        stock-form step returns the view itself as the region's attended cache."""
        c = self.carries.get(name)
        if c is None or name not in self:
            raise ValueError(f"Caches.append: '{name}' is not a region this step writes ({sorted(self)})")
        n, f = self[name].shape[c.dim], new.shape[c.dim]
        if c.policy.ring_order or n + f > c.capacity:
            raise ValueError(f"Caches.append: region '{name}' holds {n} frames in a carry of {c.capacity}: no room "
                             f"for {f} more in place (declare it with envelope='attended'; a ring writes through "
                             f"its RingView)")
        if self.undo is None:
            c.write_appended(new, n)
        else:  # logged: a call the runtime then refuses is undone
            self.undo.appended(name, c.buffer, c.dim, n, f, c.layout != "chronological",
                               lambda: c.write_appended(new, n))
        self.appended.add(name)
        return c.buffer.narrow(c.dim, 0, n + f)
