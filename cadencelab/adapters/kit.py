"""The adapter kit: a declaration and the model's step are a streaming runtime, certified in one call.

A new adapter writes two things: its :class:`~cadencelab.contract.Declaration` and the model's
step, in one of two forms:

* ``form="views"``: ``step(x, caches, last) -> (out, new)``: reads each region's cached frames
  (``caches[name]``, a view of its carry in the declared layout) and returns the frames the call
  adds to each region (``new[name]``); the runtime appends them per the declared layout and
  retains per the declared policy, in place;
* ``form="stock"``: ``step(x, caches, last) -> (out, attended)``: the stock step that concatenates
  its caches and returns them uncut; the runtime writes what the declared policy keeps into the
  carry, in place.

``last`` is True on a turn's final call (which commits its lookahead frames).
:class:`StreamingRuntime` then provides what ``TeachingRuntime`` and ``freeze_style.CarryStream``
each wire by hand: one :class:`~cadencelab.state.Carry` per state region (one allocation, the same
address across turn resets), retention in place, the audits (against the declared cut, and
differentially against the model's own stock step), and replay through
:func:`~cadencelab.replay.bind`.

:func:`certify` runs a traffic through the model's own stock step and through the runtime and
returns one :class:`Certification` of DataFrames: the derived catalog against the labels the
stock model was observed to see, the audit verdicts, bit-exactness per call, replay counters by
reason and the carries' addresses.
"""

from __future__ import annotations

import inspect
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import pandas as pd
import torch

from ..contract import PRIMING, Declaration, class_labels
from ..contract.clocks import per_call, scale
from ..contract.policies import Fixed, Ring
from ..replay import At, Classifier, bind, preflight
from ..state import Carry, DifferentialAuditor, ShadowAuditor

__all__ = ["FORMS", "AUDITS", "Traffic", "StreamingRuntime", "KitRun", "Certification", "run_stock", "certify",
           "preflight_step", "exact_table", "adapter_lines"]

FORMS = ("views", "stock")
AUDITS = ("declared", "differential")


@dataclass
class Traffic:
    """What to stream: ``turns[i]`` is the list of inputs of turn i (its last input is the turn's final
    call); ``prompts[i]`` (optional) is what the turn is primed from (passed to ``init``)."""

    turns: list
    prompts: list | None = None

    def __post_init__(self):
        if not isinstance(self.turns, (list, tuple)) or not self.turns:
            raise ValueError(f"Traffic: turns must be a non-empty list of turns (each a list of input tensors), "
                             f"got {_what(self.turns)}")
        for t, turn in enumerate(self.turns):
            if not isinstance(turn, (list, tuple)) or not turn:
                raise ValueError(f"Traffic: turn {t} must be a non-empty list of input tensors, got {_what(turn)}")
            for i, x in enumerate(turn):
                if not isinstance(x, torch.Tensor):
                    raise ValueError(f"Traffic: turn {t}, call {i} is a {type(x).__name__}, not a tensor")
        if self.prompts is not None and (not isinstance(self.prompts, (list, tuple))
                                         or len(self.prompts) != len(self.turns)):
            raise ValueError(f"Traffic: prompts must be None or one per turn ({len(self.turns)}), got {_what(self.prompts)}")

    @property
    def calls(self) -> int:
        return sum(len(t) for t in self.turns)

    def prompt(self, i: int):
        return None if self.prompts is None else self.prompts[i]

    @classmethod
    def stream(cls, decl: Declaration, signals: Sequence[torch.Tensor], *, clock: str, dim: int = 1,
               prompts: list | None = None) -> "Traffic":
        """Each signal (one turn) cut into the calls a streaming client makes, sizes from the declaration.

        ``clock`` is the clock ``dim`` counts (e.g. "samples"); per call it advances the committed ticks
        and reads the lookahead ticks beyond them (:func:`~cadencelab.contract.per_call` of ``clock`` on
        the declaration's ``call_clock``). Steady calls are taken while a whole call's ticks remain; the
        turn's final call carries the rest, committing its lookahead too.
        """
        if getattr(decl, "call_clock", None) is None:
            raise ValueError(f"Traffic.stream: the {decl.model} declaration names no call_clock")
        driven = [c for c in decl.clock_map if c != decl.call_clock and per_call(decl.clock_map, c, decl.call_clock)]
        if clock == decl.call_clock:
            raise ValueError(f"Traffic.stream: clock {clock!r} is the call clock (one tick per call); name the clock "
                             f"dim {dim} counts, one of {driven}")
        pc = per_call(decl.clock_map, clock, decl.call_clock) if clock in decl.clock_map else None
        if pc is None:
            raise ValueError(f"Traffic.stream: clock {clock!r} is not driven by the call clock '{decl.call_clock}' "
                             f"(clocks it drives: {driven})")
        if isinstance(signals, torch.Tensor) or not isinstance(signals, (list, tuple)) or not signals:
            raise ValueError(f"Traffic.stream: signals must be a non-empty list of tensors (one per turn), "
                             f"got {_what(signals)}")
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise ValueError(f"Traffic.stream: dim must be an int, got {dim!r}")
        width = pc.committed + pc.lookahead
        turns = []
        for i, sig in enumerate(signals):
            if not isinstance(sig, torch.Tensor):
                raise ValueError(f"Traffic.stream: signal {i} is a {type(sig).__name__}, not a tensor")
            if not -sig.dim() <= dim < sig.dim():
                raise ValueError(f"Traffic.stream: dim {dim} is outside signal {i}'s {sig.dim()} dims {tuple(sig.shape)}")
            n = sig.shape[dim]
            if n < max(pc.lookahead, 1):
                raise ValueError(f"Traffic.stream: turn {i} has {n} '{clock}' ticks, fewer than one call commits "
                                 f"on its last call ({max(pc.lookahead, 1)})")
            starts = list(range(0, n - width + 1, pc.committed))
            end = starts[-1] + pc.committed if starts else 0
            calls = [sig.narrow(dim, a, width) for a in starts]
            turns.append(calls + [sig.narrow(dim, end, n - end)] if end < n else calls)  # no lookahead: none left
        return cls(turns, prompts)

    def calls_of(self):
        """(turn, index in turn, input, last) per call, in order."""
        for t, chunks in enumerate(self.turns):
            for i, x in enumerate(chunks):
                yield t, i, x, i == len(chunks) - 1


def _what(v) -> str:
    return f"{type(v).__name__} of {len(v)}" if isinstance(v, (list, tuple)) else f"a {type(v).__name__}"


def _frames_at(frames, last: int) -> At:
    """The call's frames in ``x`` (argument 0), its final-call flag at position ``last``."""
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


def _state_regions(decl: Declaration) -> list:
    return [r for r in decl.regions if r.role == "state" and r.resident_in is None]


def _constant_extent(policy) -> bool:
    """Policies whose tensor always has the same extent (zero-filled at a turn's start)."""
    return isinstance(policy, (Fixed, Ring))


def _shape(decl: Declaration, region, ext) -> tuple:
    """The region's declared shape with ``ext`` on its clock axis (``ext`` may be a placeholder such as "n")."""
    return tuple(ext if d == region.clock else (decl.dims[d] if isinstance(d, str) else d) for d in region.shape)


def _declared(decl: Declaration, region) -> str:
    return f"the {decl.model} declaration's Region('{region.name}', shape={tuple(region.shape)})"


def _check_shape(decl: Declaration, region, t, what: str) -> None:
    """``t`` has the region's declared dims (any extent on its clock axis), else a one-line error naming both."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{what} for region '{region.name}' is a {type(t).__name__}, not a tensor")
    want = _shape(decl, region, "n")
    if t.dim() != len(want) or any(w != "n" and w != g for w, g in zip(want, t.shape)):
        raise ValueError(f"{what} for region '{region.name}' has shape {tuple(t.shape)}; {_declared(decl, region)} "
                         f"wants {want} (n on its clock axis '{region.clock}'): declare the region's dims in the "
                         f"order of the step's tensors")


def _check_initial(decl: Declaration, regions, init) -> None:
    """A region declared with an initial extent needs ``init`` (nothing else can give its first frames)."""
    need = [r for r in regions if r.initial]
    if need and init is None:
        r = need[0]
        raise ValueError(f"region '{r.name}' declares initial={r.initial} frames at a turn's start, but no init= gives "
                         f"them: pass init=lambda prompt: {{'{r.name}': <its first {r.initial} frames>}}, or declare "
                         f"initial=0")


def _base(decl: Declaration, region, device, given: Mapping | None) -> torch.Tensor:
    """A region's cache at a turn's start: ``given[name]`` (priming), zeros at a constant extent, else empty.

    A :class:`~cadencelab.contract.Fixed` or :class:`~cadencelab.contract.Ring` region starts zero-filled
    at its constant extent; a region declared with ``initial`` frames must be given them."""
    if given and region.name in given:
        t = given[region.name]
        _check_shape(decl, region, t, "init")
        if region.initial and t.shape[region.clock_axis] != region.initial:
            raise ValueError(f"init gave region '{region.name}' {t.shape[region.clock_axis]} frames; "
                             f"{_declared(decl, region)} declares initial={region.initial}")
        return t.to(device)
    if region.initial:
        raise ValueError(f"region '{region.name}' declares initial={region.initial} frames at a turn's start; init "
                         f"returned none for it (it returned {sorted(given or {})})")
    ext = region.policy.shape_extent(0) if _constant_extent(region.policy) else 0
    return torch.zeros(_shape(decl, region, ext), dtype=getattr(torch, region.dtype), device=device)


def _step_failed(decl: Declaration, regions, caches: Mapping, e: Exception, what: str) -> RuntimeError:
    """The step raised: name the regions it was given (their shapes, and the declared shapes)."""
    given = "; ".join(f"'{r.name}' {tuple(caches[r.name].shape)} from {tuple(r.shape)}" for r in regions
                      if isinstance(caches.get(r.name), torch.Tensor))
    return RuntimeError(f"the {what} raised {type(e).__name__} given the {decl.model} regions {given} (shapes built "
                        f"from the declaration; a region whose dims are declared in another order than the step's "
                        f"tensors fails like this): {str(e).splitlines()[0] if str(e) else ''}")


def _takes_frames(fn: Callable) -> bool:
    """True when ``fn`` has a ``frames`` parameter: the kit passes it the call's committed frames."""
    try:
        return "frames" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _call(fn: Callable, x, caches, last, frames: int, takes_frames: bool):
    return fn(x, caches, last, frames=frames) if takes_frames else fn(x, caches, last)


class _LastLabel:
    """The engine's classifier inside a runtime: the label the runtime already computed for the call."""

    def __init__(self, classifier: Classifier):
        self.classifier, self.op, self.label = classifier, classifier.op, None

    @property
    def catalog(self) -> set:
        return self.classifier.catalog

    def __call__(self, *args, **kwargs):
        return self.label


class StreamingRuntime:
    """A declared model streamed over carries, with retention in place, audits and replay.

    decl, step, form: see the module docstring; ``operator`` defaults to the declaration's only one.
              A step (or stock step) with a ``frames`` parameter is given the call's committed frames on the
              operator's clock (``frames=16``): the count the runtime derived, not one to recompute.
    frames:   where the call's frames are in ``x``: its dim (an int), or an :class:`At` whose ``dim`` and
              ``clock`` say so (its ``arg`` is ignored: the runtime passes ``x`` first).
    init:     ``init(prompt) -> {region: base tensor}``: cache-free priming at a turn's start (eager,
              counted as priming); regions it leaves out start empty, or zero-filled at a constant extent
              (a region declared with ``initial`` frames must be given them).
    replay:   run the step through :func:`~cadencelab.replay.bind` (``backend`` "auto", "cuda", "eager").
    audit:    "declared" and/or "differential" (a name or a tuple): the carry against the declared stock
              cut, and against ``stock`` (the model's own step) run in shadow. The differential audit
              compares after every call but a turn's final one: what that call leaves behind nothing reads
              (the next turn starts from its base).
    modules:  modules whose parameters the step reads (guarded by the engine).

    Each call is checked before anything changes: ``x`` a tensor, a steady call committing the declared
    frames (a call shorter than the lookahead, or counted on the wrong dim, is refused naming the clock and
    the frame counts), no call after a turn's final call without :meth:`reset`; what the step returns is
    checked against the declared shapes and frame counts before it is written into a carry.
    """

    def __init__(self, decl: Declaration, step: Callable, *, frames=1, form: str = "views", operator: str | None = None,
                 init: Callable | None = None, stock: Callable | None = None, replay: bool = False,
                 backend: str = "auto", audit=(), modules: Sequence[torch.nn.Module] = (), device="cpu"):
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        if not callable(step):
            raise ValueError(f"step must be callable step(x, caches, last), got {type(step).__name__}")
        audits = (audit,) if isinstance(audit, str) else tuple(audit or ())
        for a in audits:
            if a not in AUDITS:
                raise ValueError(f"audit must name some of {AUDITS}, got {a!r}")
        if "differential" in audits and stock is None:
            raise ValueError("the differential audit runs the model's own stock step: pass stock=")
        if operator is None:
            if len(decl.operators) != 1:
                raise ValueError(f"the {decl.model} declaration has {len(decl.operators)} operators: name one")
            operator = decl.operators[0].name
        self.decl, self.op = decl, decl.operator(operator)
        self.step, self.form, self.init, self.stock = step, form, init, stock
        self.device = torch.device(device)
        self.regions = _state_regions(decl)
        self.names = [r.name for r in self.regions]
        rings = [r.name for r in self.regions if isinstance(r.policy, Ring)]
        if rings:  # a ring's write position would have to enter the signature; not wired here yet
            raise ValueError(f"regions {rings}: ring regions are not supported by the kit yet")
        for n in self.op.reads:
            if n not in self.names:
                raise ValueError(f"operator '{self.op.name}' reads '{n}', which is not a state region the runtime carries")
        _check_initial(decl, self.regions, init)
        self.carries: dict[str, Carry] = {}
        for r in self.regions:
            grows = r.policy.kind not in ("fixed", "ring")
            env = "attended" if (form == "views" and grows and r.policy.layout == "newest_first") else None
            self.carries[r.name] = Carry.for_region(decl, r.name, self.device, envelope=env)
        reads = {n: At(2 + self.names.index(n)) for n in self.op.reads}
        self._frames = _frames_at(frames, last=1)  # _device_step(x, last, *views)
        self.classifier = Classifier(decl, self.op.name, self._device_step, reads=reads, frames=self._frames)
        self._ratio = {r.name: scale(decl.clock_map, self.op.clock, r.clock, f"regions.{r.name}.clock")
                       for r in self.regions}
        self._takes_frames = _takes_frames(step)
        self._stock_frames = stock is not None and _takes_frames(stock)
        self.declared = ShadowAuditor() if "declared" in audits else None
        self.differential = DifferentialAuditor(stock=self._stock_call) if "differential" in audits else None
        self._shadow: dict = {}
        self._f, self._expect, self._ended = 0, {}, False
        self.engine = None
        if replay:
            self.engine = bind(decl, self.op.name, self._device_step, classifier=_LastLabel(self.classifier),
                               backend=backend, carries=self.carries, modules=list(modules))
        self.calls = 0

    # -- turns ---------------------------------------------------------------------------
    @torch.inference_mode()
    def reset(self, prompt=None) -> dict:
        """Turn start, in place: each carry to its base state; returns the bases (the stock caches' start)."""
        given = self.init(prompt) if self.init is not None else None
        if given is not None and not isinstance(given, Mapping):
            raise ValueError(f"init(prompt) must return a dict region -> tensor, got {type(given).__name__}")
        bases = {r.name: _base(self.decl, r, self.device, given) for r in self.regions}  # every check before a write
        for r in self.regions:
            c = self.carries[r.name]
            if bases[r.name].shape[c.dim] > c.capacity:
                raise ValueError(f"init gave region '{r.name}' {bases[r.name].shape[c.dim]} frames; its carry holds "
                                 f"{c.capacity}")
        if given is not None and self.engine is not None:
            self.engine.record_external(PRIMING)
        for r in self.regions:
            self.carries[r.name].reset_in_place(bases[r.name])
        self._shadow = {n: b.clone() for n, b in bases.items()}
        if self.differential is not None:
            self.differential.start(bases)
        self._ended = False
        return bases

    # -- one call ------------------------------------------------------------------------
    def _views(self) -> list:
        return [c.view() for c in self.carries.values()]

    def _stock_call(self, x, caches, last):
        return _call(self.stock, x, caches, last, self._f, self._stock_frames)

    def _device_step(self, x, last, *views):
        """Device work of one call: the step on the carries' views, checked, then append + retain in place."""
        caches = dict(zip(self.names, views))
        try:
            out, got = _call(self.step, x, caches, last, self._f, self._takes_frames)
        except RuntimeError as e:
            raise _step_failed(self.decl, self.regions, caches, e, "step") from e
        if not isinstance(got, Mapping):
            raise ValueError(f"the step must return (output, {{region: tensor}}), got a {type(got).__name__} second")
        missing = [n for n in self.names if n not in got]
        if missing:
            raise ValueError(f"the step returned no tensor for region(s) {missing}")
        for r in self.regions:  # host checks on shapes only, before any write
            t = got[r.name]
            _check_shape(self.decl, r, t, "the step's output")
            if r.name in self._expect and t.shape[r.clock_axis] != self._expect[r.name]:
                raise ValueError(f"the step returned {t.shape[r.clock_axis]} frames for region '{r.name}' where the "
                                 f"declaration implies {self._expect[r.name]} ({self.form} form, {self._f} "
                                 f"'{self.op.clock}' committed)")
        for n, v in zip(self.names, views):
            c = self.carries[n]
            if self.form == "views":
                c.write_append_retained(got[n], v.shape[c.dim])
            else:
                c.write_retained_from(got[n])
        return (out, got) if self.declared is not None else out

    def frames_of(self, x, last: bool) -> int:
        """The call's committed frames on the operator's clock (what the classifier labels it with).

        A steady call must commit the declared frames per call; a ValueError names the clock and the counts."""
        at, cls, op = self._frames, self.classifier, self.op
        if not -x.dim() <= at.dim < x.dim():
            raise ValueError(f"frames: dim {at.dim} is outside x's {x.dim()} dims {tuple(x.shape)}")
        n = x.shape[at.dim]
        mul, div = cls.scale
        width = op.call * div // mul + cls.lookahead
        where = f"x dim {at.dim} holds {n} '{cls.clock}' ticks"
        if not last and n < cls.lookahead:
            raise ValueError(f"a steady call shorter than the lookahead: {where}, fewer than the {cls.lookahead} of "
                             f"lookahead a steady call reads beyond the {op.call} '{op.clock}' it commits ({width} "
                             f"'{cls.clock}' ticks); a turn's final call passes last=True")
        label = cls(x, last, *self._views())
        if self.engine is not None:
            self.engine.classify.label = label  # the engine labels a new class with it: each call labelled once
        if not isinstance(label[-1], int):
            raise ValueError(f"call of {tuple(x.shape)}: {label[1]}")
        f = label[-1]
        most = max(op.call, op.flush[1] if op.flush else 0)
        if last and f > most:
            raise ValueError(f"a turn's final call commits at most {most} '{op.clock}' per the {self.decl.model} "
                             f"declaration; {where} ({f} committed): check frames= (the dim of x counting "
                             f"'{cls.clock}') and how the turn was cut")
        if not last and f != op.call:
            raise ValueError(f"a steady call commits {op.call} '{op.clock}' per the {self.decl.model} declaration "
                             f"({width} '{cls.clock}' ticks with the lookahead); {where} ({f} committed): check frames= "
                             f"(the dim of x counting '{cls.clock}') or pass last=True for a turn's final call")
        return f

    @torch.inference_mode()
    def __call__(self, x: torch.Tensor, last: bool = False) -> torch.Tensor:
        """One call on ``x`` (``last``: the turn's final call) -> the step's output."""
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"a call takes a tensor x, got {type(x).__name__}")
        if self._ended:
            raise ValueError("the turn ended with a final call (last=True): call reset() to start the next turn")
        f = self.frames_of(x, last)
        before = {n: c.length for n, c in self.carries.items()}
        fr = {r.name: self._on(r.name, f) for r in self.regions}
        self._f = f
        self._expect = {n: fr[n] if self.form == "views" else before[n] + fr[n] for n in self.names}
        fn = self.engine if self.engine is not None else self._device_step
        res = fn(x, bool(last), *self._views())
        out, got = res if self.declared is not None else (res, None)
        for r in self.regions:
            self.carries[r.name].commit(r.policy.extent_after(before[r.name] + fr[r.name]))
        if self.declared is not None:
            self._audit_declared(got)
        if self.differential is not None and not last:  # nothing reads what a final call leaves behind
            self.differential.check(self.calls, self.carries, x, bool(last))
        self._ended = bool(last)
        self.calls += 1
        return out

    def _on(self, region: str, f: int) -> int:
        """``f`` ticks of the operator's clock on the region's clock."""
        mul, div = self._ratio[region]
        if (f * mul) % div:
            raise ValueError(f"{f} '{self.op.clock}' ticks are not whole ticks of region '{region}''s clock")
        return f * mul // div

    def _audit_declared(self, got: dict) -> None:
        """The current audit: each carry against the stock concatenation and cut *as declared*."""
        for r in self.regions:
            c, pol = self.carries[r.name], r.policy
            if self.form == "views":
                old = self._shadow[r.name]
                full = torch.cat([got[r.name], old] if pol.layout == "newest_first" else [old, got[r.name]], dim=c.dim)
            else:
                full = got[r.name]
            self._shadow[r.name] = pol.apply(full, c.dim).clone()
            self.declared.compare_with(c, self._shadow[r.name], self.calls)

    # -- a traffic -------------------------------------------------------------------------
    def run(self, traffic: Traffic) -> "KitRun":
        outs, rows = [], []
        for t, i, x, last in traffic.calls_of():
            if i == 0:
                self.reset(traffic.prompt(t))
            mark = self.engine.tally() if self.engine is not None else None
            out = self(x, last)
            outs.append(out.clone())
            path = self.engine.path_since(mark) if mark is not None else "eager"
            rows.append(dict(turn=t, call=len(rows), last=last, path=path,
                             **{f"ptr_{n}": c.buffer.data_ptr() for n, c in self.carries.items()},
                             **{f"ext_{n}": c.length for n, c in self.carries.items()}))
        return KitRun(outs, pd.DataFrame(rows))

    def pointers(self) -> dict[str, int]:
        return {n: c.buffer.data_ptr() for n, c in self.carries.items()}


@dataclass
class KitRun:
    """Per-call outputs and a per-call table (turn, call, last, path, carry pointers and extents)."""

    outputs: list
    table: pd.DataFrame


def run_stock(decl: Declaration, stock: Callable, traffic: Traffic, *, frames=1, operator: str | None = None,
              init: Callable | None = None, device="cpu") -> tuple[list, pd.DataFrame]:
    """The model's own stock step over ``traffic`` on plain tensors: outputs, and per call the label
    (:func:`~cadencelab.contract.class_label`) of the shapes it was observed to see."""
    if not isinstance(traffic, Traffic):
        raise ValueError(f"run_stock: traffic must be a Traffic, got {type(traffic).__name__}")
    op = decl.operator(operator) if operator else decl.operators[0]
    regions = _state_regions(decl)
    _check_initial(decl, regions, init)
    reads = {n: At(1, key=n) for n in op.reads}
    observe = Classifier(decl, op.name, stock, reads=reads, frames=_frames_at(frames, last=2))  # stock(x, caches, last)
    takes = _takes_frames(stock)
    outs, rows = [], []
    caches: dict = {}
    with torch.inference_mode():
        for t, i, x, last in traffic.calls_of():
            if i == 0:
                given = init(traffic.prompt(t)) if init is not None else None
                caches = {r.name: _base(decl, r, device, given) for r in regions}
            label = observe(x, caches, bool(last))
            try:
                out, caches = _call(stock, x, caches, bool(last), label[-1], takes)
            except RuntimeError as e:
                raise _step_failed(decl, regions, caches, e, f"stock step (turn {t}, call {i})") from e
            outs.append(out.clone())
            rows.append(dict(operator=op.name, turn=t, call=len(rows), kind="flush" if last else "steady", label=label))
    return outs, pd.DataFrame(rows)


@dataclass
class Certification:
    """One model's certification: a clause table and the DataFrames behind it."""

    table: pd.DataFrame
    catalog: pd.DataFrame
    audit: pd.DataFrame
    exact: pd.DataFrame
    counters: pd.DataFrame
    addresses: pd.DataFrame
    runtime: StreamingRuntime | None = field(default=None, repr=False)
    outputs: list = field(default_factory=list, repr=False)  # the runtime's output per call
    stock_outputs: list = field(default_factory=list, repr=False)  # the stock step's output per call
    preflight: pd.DataFrame | None = field(default=None, repr=False)  # the step's capture hazards (replay.preflight)

    @property
    def ok(self) -> bool:
        return bool(self.table["passed"].all())

    def _repr_html_(self) -> str:
        return f"<b>{'CERTIFIED' if self.ok else 'NOT CERTIFIED'}</b>" + self.table.to_html(index=False)

    def __repr__(self) -> str:
        return f"Certification({'ok' if self.ok else 'FAILED'})\n" + self.table.to_string(index=False)


def certify(decl: Declaration, step: Callable, stock: Callable, traffic: Traffic, *, frames=1, form: str = "views",
            init: Callable | None = None, backend: str = "auto", modules=(), device="cpu") -> Certification:
    """Run ``traffic`` through the model's own ``stock`` step and through the runtime (replay, both audits).

    Clauses: the steady labels the stock model was observed to see equal the derived steady catalog,
    its flush labels are among the derived flush classes; both audits agree on every retention; every
    call is bit-identical (``torch.equal``) to the stock call; the carries never move; some call replayed.
    """
    want, observed = run_stock(decl, stock, traffic, frames=frames, init=init, device=device)
    op = decl.operator(observed["operator"].iloc[0]) if len(observed) else decl.operators[0]
    pf = preflight_step(decl, step, traffic, frames=frames, form=form, operator=op.name, init=init, modules=modules,
                        device=device)
    rt = StreamingRuntime(decl, step, frames=frames, form=form, operator=op.name, init=init, stock=stock, replay=True,
                          backend=backend, audit=AUDITS, modules=modules, device=device)
    got = rt.run(traffic)
    rows = []

    def clause(name, passed, detail):
        rows.append(dict(clause=name, passed=bool(passed), detail=detail))

    hazards = pf.hazards()
    clause("preflight: no capture hazard in the step", hazards.empty,
           pf.summary() + "".join(f"; {h.kind} at {h.where}: {h.source}" for h in hazards.head(3).itertuples()))

    # the derived catalog against what the stock model saw
    derived = {k: class_labels(decl, op.name, k) for k in ("steady", "flush")}
    admitted = rt.classifier.catalog
    seen = {k: Counter(observed.loc[observed["kind"] == k, "label"]) for k in ("steady", "flush")}
    cat_rows = []
    for k in ("steady", "flush"):
        for lab in sorted(derived[k] | set(seen[k]), key=str):
            cat_rows.append(dict(operator=op.name, kind=k, label=lab, derived=lab in derived[k], admitted=lab in admitted,
                                 observed=seen[k].get(lab, 0)))
    cat = pd.DataFrame(cat_rows, columns=["operator", "kind", "label", "derived", "admitted", "observed"])
    steady_ok = set(seen["steady"]) == derived["steady"]
    clause("steady classes: observed == derived", steady_ok,
           f"derived {sorted(derived['steady'])}, observed {sorted(seen['steady'])}")
    extra = set(seen["flush"]) - derived["flush"]
    clause("flush classes: observed within derived", not extra,
           f"{len(seen['flush'])} observed of {len(derived['flush'])} derived" + (f"; NOT derived: {sorted(extra)}" if extra else ""))
    # audits
    audits = []
    for name, aud in (("declared", rt.declared), ("differential", rt.differential)):
        s = aud.summary()
        s.insert(0, "audit", name)
        first = aud.first_divergence
        audits.append(s)
        clause(f"{name} audit agrees on every retention", aud.ok and aud.applications > 0,
               f"{aud.agreements} of {aud.applications} agree"
               + (f"; first divergence: call {first.call}, region {first.region}, index {first.index} ({first.detail})"
                  if first else ""))
    audit = pd.concat(audits, ignore_index=True)
    # exactness
    exact = exact_table(want, got.outputs)
    clause("bit-exact with the stock step", len(want) == len(got.outputs) and exact["equal"].all(),
           f"{int(exact['equal'].sum())} of {len(exact)} calls torch.equal")
    # addresses
    addr = []
    for n, c in rt.carries.items():
        col = got.table[f"ptr_{n}"]
        addr.append(dict(region=n, data_ptr=c.buffer.data_ptr(), distinct=int(col.nunique()),
                         address_ok=c.address_ok(), bytes=c.buffer.numel() * c.buffer.element_size()))
    addresses = pd.DataFrame(addr)
    inval = int(rt.engine.counters()["invalidations"].sum()) if rt.engine.classes else 0
    clause("carries at one address", (addresses["distinct"] == 1).all() and addresses["address_ok"].all() and not inval,
           f"{len(addresses)} carries, {inval} invalidations")
    # replay counters by reason
    counters = _by_reason(rt.engine)
    replays = int(counters.loc[counters["reason"] == "replayed", "count"].sum())
    clause("admitted calls replayed", replays > 0, rt.engine.summary())
    return Certification(pd.DataFrame(rows), cat, audit, exact, counters, addresses, rt, got.outputs, want, pf)


def preflight_step(decl: Declaration, step: Callable, traffic: Traffic, *, frames=1, form: str = "views",
                   operator: str | None = None, init: Callable | None = None, modules=(), device="cpu"):
    """:func:`~cadencelab.replay.preflight` of ``step`` on the first call of ``traffic`` (a throwaway runtime's
    caches at the first turn's start; the target is a GPU, emulated on CPU tensors)."""
    probe = StreamingRuntime(decl, step, frames=frames, form=form, operator=operator, init=init, device=device)
    probe.reset(traffic.prompt(0))
    x = traffic.turns[0][0]
    last = len(traffic.turns[0]) == 1
    probe._f = probe.frames_of(x, last)
    caches = {n: c.view() for n, c in probe.carries.items()}
    kw = {"frames": probe._f} if probe._takes_frames else {}
    return preflight(step, x, caches, last, device="cuda", calls=2, modules=list(modules), **kw)


def exact_table(want: Sequence[torch.Tensor], got: Sequence[torch.Tensor]) -> pd.DataFrame:
    """Per call: ``equal`` (same shape and ``torch.equal``) and ``max_abs_diff`` (inf when the shapes differ)."""
    rows = []
    for i, (a, b) in enumerate(zip(want, got)):
        same = a.shape == b.shape
        rows.append(dict(call=i, equal=bool(same and torch.equal(a, b)),
                         max_abs_diff=(a.double() - b.double()).abs().max().item() if same and a.numel() else
                         (0.0 if same else math.inf)))
    return pd.DataFrame(rows, columns=["call", "equal", "max_abs_diff"])


def adapter_lines(*objs) -> int:
    """Lines of code of the given functions or classes (their source; blank and comment-only lines not
    counted): the size of an adapter written as a declaration function and a step."""
    n = 0
    for obj in objs:
        try:
            src = inspect.getsource(obj)
        except (OSError, TypeError) as e:
            raise ValueError(f"adapter_lines: no source for {obj!r} ({e})") from None
        n += sum(1 for line in src.splitlines() if line.strip() and not line.strip().startswith("#"))
    return n


def _by_reason(engine) -> pd.DataFrame:
    """Calls per outcome: 'replayed' and each eager reason (probe, outside_catalog, priming, ...)."""
    replayed, c = engine.tally()
    c["replayed"] = replayed
    return pd.DataFrame([dict(engine=engine.name, reason=r, count=n) for r, n in sorted(c.items())],
                        columns=["engine", "reason", "count"])
