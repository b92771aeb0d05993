"""The one seam from a declared operator to an engine.

``bind(decl, operator, fn, reads=..., frames=...)`` returns an :class:`ExactShapeReplay` whose admitted catalog
*and* classifier both come from the declaration: the catalog is :func:`~cadencelab.contract.admitted_labels`, and
the classifier builds each call's label with :func:`~cadencelab.contract.class_label` from the extents of the
regions the operator reads (``Operator.reads``, in that order) and the call's frames on the operator's clock. The
caller says only *where* those numbers live in a call (:class:`At`: an argument by name or position, a key inside
it, a dim), never what a label looks like, so a classifier cannot disagree with its catalog.

What the declaration supplies beyond positions:

* clock conversion: frames counted on another clock (tokens, samples) are converted with the declared ratios;
* lookahead: a call whose frames dim carries lookahead (``At.last`` names its final-call flag) commits all but
  the lookahead frames, unless it is the turn's final call, see :func:`lookahead`;
* cache-free priming: a call that carries no tensor for a region it reads is labelled with the catalog's priming
  kind (eager by construction) when the declaration has priming for the operator, and is refused otherwise;
* regions the arguments do not carry (a stock call passing the cached mel already concatenated with the chunk):
  their extent is read off the operator's joint trajectory from the located regions, when that determines it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..contract import PRIMING, Declaration, admitted_labels, catalog_counts, class_label, operator_tuples
from ..contract.clocks import per_call, scale
from ..contract.errors import DeclarationError
from .engine import ExactShapeReplay, eager_label

__all__ = ["At", "Classifier", "bind", "lookahead"]


@dataclass(frozen=True)
class At:
    """Where a number lives in a call.

    arg:   the argument: its name, its position, or a callable taking no argument that returns the
           tensor (state a module keeps outside the call's arguments).
    dim:   the dim that counts it (negative counts from the end). For a region read the default is
           the region's clock axis in its declared shape; for frames it must be given.
    key:   a key inside a dict argument (a stock cache dict).
    clock: the clock ``dim`` counts when it is not the operator's (frames; e.g. "tokens", "samples").
    last:  (frames) the dim carries the call's lookahead, and this argument (name or position) is
           true on the turn's final call, which commits its lookahead frames too. Without it the dim
           holds committed frames only.
    less:  (frames) the dim holds this read region's cached extent plus the call's frames.
    """

    arg: Any
    dim: int | None = None
    key: str | None = None
    clock: str | None = None
    last: Any = None
    less: str | None = None


def lookahead(decl: Declaration, clock: str) -> int:
    """Ticks of ``clock`` a call reads beyond what it commits (its lookahead).

    The one place the seam reads lookahead from a declaration: with a ``call_clock`` it is the
    contract's :func:`~cadencelab.contract.per_call` derivation; a declaration without one gives it
    the older way, as the ``offset`` of ``clock`` itself.
    """
    call_clock = getattr(decl, "call_clock", None)
    if call_clock is not None:
        pc = per_call(decl.clock_map, clock, call_clock)
        return pc.lookahead if pc is not None else 0
    return decl.clock(clock).offset


class _Args:
    """Finds arguments of ``fn`` by name or position, defaults included."""

    def __init__(self, fn: Callable):
        self.names: list[str] = []
        self.defaults: dict[str, Any] = {}
        self.open = True  # no signature, or **kwargs: any name may arrive
        self.varargs = True  # no signature, or *args: any position may arrive
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            return
        self.open = self.varargs = False
        for p in sig.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                self.names.append(p.name)
                if p.default is not p.empty:
                    self.defaults[p.name] = p.default
            elif p.kind == p.VAR_KEYWORD:
                self.open = True
            elif p.kind == p.VAR_POSITIONAL:
                self.varargs = True

    def check(self, src, where: str) -> None:
        if isinstance(src, bool) or not (isinstance(src, (str, int)) or callable(src)):
            raise ValueError(f"{where}: an argument is a name, a position or a callable, got {src!r}")
        if isinstance(src, str) and not self.open and src not in self.names:
            raise ValueError(f"{where}: the callable has no argument {src!r} (its arguments: {self.names})")
        if isinstance(src, int) and (src < 0 or (not self.varargs and src >= len(self.names))):
            raise ValueError(f"{where}: no argument at position {src} (the callable takes {len(self.names)}: "
                             f"{self.names})")

    def get(self, src, args: tuple, kwargs: dict):
        if callable(src) and not isinstance(src, (str, int)):
            return src()
        if isinstance(src, int):
            if src < len(args):
                return args[src]
            name = self.names[src] if src < len(self.names) else None
        else:
            name = src
            if name in kwargs:
                return kwargs[name]
            pos = self.names.index(name) if name in self.names else None
            if pos is not None and pos < len(args):
                return args[pos]
        if name in kwargs:
            return kwargs[name]
        return self.defaults.get(name)


class Classifier:
    """``classifier(*args, **kwargs) -> label`` for one declared operator (see :func:`bind`)."""

    def __init__(self, decl: Declaration, operator: str, fn: Callable, *, reads: Mapping[str, At] | None = None,
                 frames: At, batch: At | None = None, batch_sizes=None):
        self.decl, self.op = decl, decl.operator(operator)
        op = self.op
        where = f"bind({op.name})"
        reads = dict(reads or {})
        for name, at in reads.items():
            if name not in op.reads:
                raise DeclarationError(f"{where}.reads.{name}", f"operator '{op.name}' does not read region "
                                       f"'{name}' (it reads {list(op.reads)})")
            if not isinstance(at, At):
                raise TypeError(f"{where}.reads.{name}: expected an At(...), got {type(at).__name__}")
            if at.clock not in (None, decl.region(name).clock):
                raise DeclarationError(f"{where}.reads.{name}.clock", "a region's extent counts its own clock "
                                       f"'{decl.region(name).clock}', got {at.clock!r}")
        if not isinstance(frames, At) or frames.dim is None:
            raise TypeError(f"{where}.frames: say where the call's frames live, e.g. At('x', dim=1)")
        if frames.less is not None and frames.less not in op.reads:
            raise DeclarationError(f"{where}.frames.less", f"'{frames.less}' is not a region '{op.name}' reads")
        if (batch is None) != (batch_sizes is None):
            raise ValueError(f"{where}: a batched operator needs both batch=At(...) and batch_sizes")
        self.args = _Args(fn)
        for name, at in list(reads.items()) + [("frames", frames), ("batch", batch)]:
            if at is None:
                continue
            if not isinstance(at, At):
                raise TypeError(f"{where}.{name}: expected an At(...), got {type(at).__name__}")
            self.args.check(at.arg, f"{where}.{name}")
            if at.last is not None:
                self.args.check(at.last, f"{where}.{name}.last")
            if at.dim is not None and (isinstance(at.dim, bool) or not isinstance(at.dim, int)):
                raise ValueError(f"{where}.{name}.dim: an int (negative counts from the end), got {at.dim!r}")
            if at.key is not None and (isinstance(at.key, bool) or not isinstance(at.key, (str, int))):
                raise ValueError(f"{where}.{name}.key: a key of a dict argument (a str or an int), got {at.key!r}")
            if name in reads and at.dim is not None:
                rank = len(decl.region(name).shape)
                if not -rank <= at.dim < rank:
                    raise ValueError(f"{where}.reads.{name}.dim: {at.dim} is outside the region's {rank} declared dims "
                                     f"{tuple(decl.region(name).shape)}")
        self.reads, self.frames, self.batch = reads, frames, batch
        self.batch_sizes = None if batch_sizes is None else tuple(int(b) for b in batch_sizes)
        self.clock = frames.clock or op.clock
        self.scale = self._clock_scale(where)
        self.lookahead = lookahead(decl, self.clock)
        self.priming = bool(catalog_counts(decl, op.name)["priming"])
        self._infer = self._inference_table(where)

    # -- derived from the declaration -----------------------------------------------------
    def _clock_scale(self, where: str) -> tuple[int, int]:
        """(multiply, divide) taking ticks of the frames clock to ticks of the operator's clock."""
        return scale(self.decl.clock_map, self.clock, self.op.clock, f"{where}.frames.clock")

    def _inference_table(self, where: str) -> dict | None:
        missing = [n for n in self.op.reads if n not in self.reads]
        if not missing:
            return None
        located = [n for n in self.op.reads if n in self.reads]
        table: dict = {}
        for t in operator_tuples(self.decl, self.op.name):
            ext = dict(zip(self.op.reads, t))
            k = tuple(int(ext[n]) for n in located)
            v = tuple(int(ext[n]) for n in missing)
            if table.setdefault(k, v) != v:
                raise DeclarationError(f"{where}.reads", f"region(s) {missing} are not located and the extents of "
                                       f"{located or 'nothing'} do not determine them: locate them with At(...)")
        return dict(missing=missing, located=located, table=table)

    @property
    def catalog(self) -> set:
        return admitted_labels(self.decl, self.op.name, self.batch_sizes)

    # -- per call -------------------------------------------------------------------------
    def extents(self, args: tuple, kwargs: dict) -> dict[str, int | None]:
        """The cached extent of every region the operator reads (None: the call carries none)."""
        out: dict[str, int | None] = {}
        for name, at in self.reads.items():
            v = self.args.get(at.arg, args, kwargs)
            if v is not None and at.key is not None:
                if not isinstance(v, Mapping):
                    raise ValueError(f"bind({self.op.name}).reads.{name}: At(key={at.key!r}) needs a dict argument "
                                     f"{at.arg!r}, got a {type(v).__name__}")
                if at.key not in v:
                    raise ValueError(f"bind({self.op.name}).reads.{name}: argument {at.arg!r} has no key {at.key!r} "
                                     f"(its keys: {sorted(map(str, v))})")
                v = v[at.key]
            dim = self.decl.region(name).clock_axis if at.dim is None else at.dim
            out[name] = None if v is None else int(_tensor(v, f"bind({self.op.name}).reads.{name}").shape[dim])
        if self._infer is not None and not any(out[n] is None for n in self._infer["located"]):
            got = self._infer["table"].get(tuple(out[n] for n in self._infer["located"]))
            for n, e in zip(self._infer["missing"], got or (None,) * len(self._infer["missing"])):
                out[n] = e
        return out

    def __call__(self, *args, **kwargs):
        ext = self.extents(args, kwargs)
        absent = [n for n in self.reads if ext[n] is None]
        if absent:
            return eager_label(PRIMING if self.priming else f"no {absent[0]} in the call")
        if any(e is None for e in ext.values()):
            return eager_label("extents outside the declared trajectory")
        at = self.frames
        v = _tensor(self.args.get(at.arg, args, kwargs), f"bind({self.op.name}).frames")
        if not -v.dim() <= at.dim < v.dim():
            raise ValueError(f"bind({self.op.name}).frames: dim {at.dim} is outside the argument's {v.dim()} dims "
                             f"{tuple(v.shape)}")
        n = int(v.shape[at.dim])
        if at.less is not None:
            n -= ext[at.less]
        if at.last is not None and not self.args.get(at.last, args, kwargs):
            n -= self.lookahead
            if n < 0:
                return eager_label(f"a steady call of {n + self.lookahead} {self.clock} ticks, fewer than the "
                                   f"lookahead {self.lookahead}")
        mul, div = self.scale
        if (n * mul) % div:
            return eager_label(f"{n} {self.clock} ticks are not whole {self.op.clock} ticks")
        batch = None
        if self.batch is not None:
            b = self.args.get(self.batch.arg, args, kwargs)
            batch = b.shape[self.batch.dim]
        return class_label([ext[r] for r in self.op.reads], n * mul // div, batch)


def _tensor(v, where: str):
    if not hasattr(v, "shape") or not hasattr(v, "dim"):
        raise ValueError(f"{where}: expected a tensor in the call, got {type(v).__name__}")
    return v


def _carried(carries) -> dict:
    """owners= and write_through= of an engine from the carries it writes (a dict name -> Carry, a list of
    carries, or a callable returning either): their buffers, read when the engine asks. An object whose
    ``owner`` is False (state a model holds, never an argument) is write-through only; one with a ``reader``
    (a function returning its buffer now) is read through it."""
    def now():
        cs = carries() if callable(carries) else carries
        return list(cs.values()) if isinstance(cs, Mapping) else list(cs)

    for c in now():
        if not hasattr(c, "buffer") or not hasattr(c, "name"):
            raise ValueError(f"bind: carries= takes Carry objects, got a {type(c).__name__}")
    if not callable(carries):  # the same objects every call: each buffer read straight off its carry
        fixed = now()
        owned = [c for c in fixed if getattr(c, "owner", True)]  # state never passed as an argument: guarded only
        return dict(owners=lambda: [c.buffer for c in owned],
                    write_through={c.name: getattr(c, "reader", None) or (lambda c=c: c.buffer) for c in fixed})
    return dict(owners=lambda: [c.buffer for c in now()],
                write_through={c.name: (lambda n=c.name: next(k.buffer for k in now() if k.name == n)) for c in now()})


def bind(decl: Declaration, operator: str, fn: Callable, *, frames: At | None = None,
         reads: Mapping[str, At] | None = None, batch: At | None = None, batch_sizes=None, name: str | None = None,
         carries=None, classifier: Classifier | None = None, **engine) -> ExactShapeReplay:
    """An :class:`ExactShapeReplay` of ``fn`` for the declared ``operator``: catalog and classifier derived.

    reads:  region name -> :class:`At` where that region's cached tensor is in a call (regions the
            operator reads but the call does not carry are inferred, see the module docstring).
    frames: :class:`At` where the call's frames are.
    batch, batch_sizes: for an operator run over a batch of sessions: where the batch size is, and the
            declared sizes (each admitted label is admitted once per size).
    carries: the :class:`~cadencelab.state.Carry` objects ``fn`` writes in place (a dict, a list, or a callable
            returning either): the engine's owners and write-through buffers.
    classifier: a :class:`Classifier` already built for ``fn`` (then reads, frames and batch are its own).
    engine: passed to :class:`ExactShapeReplay` (backend, owners, write_through, modules, pool,
            clone_outputs, max_classes, max_invalidations, strict); ``name`` defaults to the operator's.
    """
    for k in ("catalog", "classify"):
        if k in engine:
            raise TypeError(f"bind derives {k} from the declaration; do not pass {k}=")
    if carries is not None:
        if "owners" in engine or "write_through" in engine:
            raise TypeError("bind: carries= gives the owners and write-through buffers; do not pass them too")
        engine.update(_carried(carries))
    if classifier is not None:
        if classifier.op.name != decl.operator(operator).name or any(v is not None for v in (frames, reads, batch)):
            raise ValueError(f"bind({operator}): a classifier of operator '{classifier.op.name}' given with its own "
                             f"reads/frames/batch; pass one or the other")
        cls = classifier
    else:
        if frames is None:
            raise TypeError(f"bind({operator}).frames: say where the call's frames live, e.g. At('x', dim=1)")
        cls = Classifier(decl, operator, fn, reads=reads, frames=frames, batch=batch, batch_sizes=batch_sizes)
    eng = ExactShapeReplay(fn, name or operator, catalog=cls.catalog, classify=cls, **engine)
    eng.operator, eng.classifier = cls.op, cls
    return eng
