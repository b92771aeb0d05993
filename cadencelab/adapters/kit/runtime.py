"""The kit's runtime: a declared model streamed over carries, with retention in place, audits and replay.

One :class:`StreamingRuntime` runs one arm of one model's spec (a :class:`~.spec.KitModel`). It holds the model's
state regions (one :class:`~cadencelab.state.Carry` each, rings included) and one :class:`Bound` per declared
operator it runs (its step, classifier and engine: each operator its own catalog). An arm of the one table
(:mod:`cadencelab.adapters.arms`) is two switches and where it replays, as in the paper's factorial:

* the state rule: the carries (S, SR, SRc), or the model's own stock step on plain tensors (B0, R, Rc);
* replay: each operator's calls through :func:`~cadencelab.replay.bind`; per call (Rc, SRc) replays the whole
  call, retention in place included; per step (R, SR) replays the step alone and keeps the write into the
  carries eager. With the state rule off the stock step is the whole call, so R and Rc run the same thing.
  A per-step arm replays an operator whose ``spec.granularity`` is ``"inner"`` by running its step eagerly
  and replaying the declared operators it calls through its modules (``spec.inner``, see :mod:`.inner`): the
  paper's solver-step granularity, each DiT call of a loop the model owns replayed on its own.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd
import torch

from ...contract import PRIMING, Declaration
from ...contract.clocks import scale, scaled
from ...replay import At, Classifier, bind, preflight
from ...state import Carry, DifferentialAuditor, ShadowAuditor
from ..arms import CELLS, Arm
from .adopt import adopted_carry, adopted_end, adoptions, held_state
from .bound import Bound, options_per_op, per_op
from .inner import GRANULARITIES, Inner, bind_inner, granularities, inner_of, install
from .regions import base_of, check_initial, check_shape, constant_extent, state_regions
from .rings import RingEnd, RingView
from .session import engine_counters
from .steps import Caches, before_label, call_step, committed, frames_at, merged, pair, step_failed, takes_frames
from .traffic import KitRun, Traffic
from .undo import Undo

__all__ = ["FORMS", "AUDITS", "GRANULARITIES", "ENGINE_OPTIONS", "Bound", "Inner", "StreamingRuntime", "KitRun"]

FORMS = ("views", "stock", "inplace")
AUDITS = ("declared", "differential")
#: what ``engine_options`` may set on each operator's engine (see :class:`~cadencelab.replay.ExactShapeReplay`)
ENGINE_OPTIONS = ("max_invalidations", "max_classes", "clone_outputs", "strict", "pool")


def arm_of(arm) -> Arm:
    """The arm a runtime runs: an :class:`~cadencelab.adapters.arms.Arm`, or a factorial cell's name."""
    if isinstance(arm, Arm):
        return arm
    if not isinstance(arm, str) or arm not in CELLS:
        raise ValueError(f"unknown arm {arm!r}; arms: {list(CELLS)}")
    return CELLS[arm]


def spec_decl(spec) -> Declaration:
    """The spec's declaration; anything but a spec (the old ``StreamingRuntime(decl, step)``) is refused."""
    decl = getattr(spec, "decl", None)
    if not isinstance(decl, Declaration) or not hasattr(spec, "step"):
        raise ValueError(f"StreamingRuntime takes the model's spec, KitModel(decl, step, ...), got a "
                         f"{type(spec).__name__}")
    return decl


class StreamingRuntime:
    """A declared model streamed over carries: retention in place, audits and replay.

    ``spec`` is the model (a :class:`~.spec.KitModel`); the runtime's own options:
    arm: an arm of the one table (:data:`~cadencelab.adapters.arms.CELLS`) or an
        :class:`~cadencelab.adapters.arms.Arm`: its state rule, replay and where it replays.
    backend: "auto", "cuda" or "eager"; engine_options: the engines' options (a dict by operator: each its own).
    audit: "declared" and/or "differential": the carry against the declared stock cut, and against ``spec.stock``
        run in shadow after every call but a turn's final one (nothing reads what that leaves); or a
        :class:`~cadencelab.state.ShadowAuditor` the caller keeps.

    Every call is checked before anything changes (``x``, a steady call's frames, no call after a final one
    without :meth:`reset`) and a step's returns against the declared shapes and frame counts before they are
    written, so a refused call leaves the carries as they were. A Counter region advances by the frames each
    call commits, inside the replayed call; a Ring region reaches a step as a :class:`RingView`. In
    ``form="inplace"`` the step writes its state itself: the runtime keeps extents and replay, and refuses the
    audits (an in-place step does not say which frames it added).
    """

    def __init__(self, spec, arm: str | Arm = "S", *, backend: str = "auto", audit=(),
                 engine_options: Mapping | None = None):
        decl, form = spec_decl(spec), spec.form
        self.spec, self.arm = spec, arm_of(arm)
        state_rule, replay = self.arm.state_rule, self.arm.replay is not None
        auditor = audit if isinstance(audit, ShadowAuditor) else None
        audits = ("declared",) if auditor is not None else (audit,) if isinstance(audit, str) else tuple(audit or ())
        for a in audits:
            if a not in AUDITS:
                raise ValueError(f"audit must name some of {AUDITS}, got {a!r}")
        if audits and not state_rule:
            raise ValueError(f"the audits watch the carries: turn the state rule on (arm {self.arm.name} has it off)")
        if audits and form == "inplace":
            raise ValueError(f"the audits {audits} compare the frames a call adds, which an in-place step does not "
                             f"return: run form='inplace' without audit= (check its outputs against the stock model)")
        step = spec.step if spec.step is not None or state_rule else spec.stock  # a stock arm runs the stock step
        names = list(step) if isinstance(step, Mapping) else [spec.operator] if spec.operator else \
            [o.name for o in decl.operators]
        if not isinstance(step, Mapping) and len(names) != 1:
            raise ValueError(f"the {decl.model} declaration has {len(names)} operators: name one, or give a dict "
                             f"operator -> step")
        unknown = [n for n in names if n not in {o.name for o in decl.operators}]
        if unknown:
            raise ValueError(f"{unknown} are not operators of the {decl.model} declaration "
                             f"({[o.name for o in decl.operators]})")
        own = granularities("step" if spec.granularity is None else spec.granularity, names)
        self.granularity = own if self.arm.replay == "step" else granularities(self.arm.replay or "call", names)
        inner = spec.inner if self.arm.replay in ("step", "inner") else None  # the call arms replay steps whole
        self.inner = inner_of(inner, decl, names, self.granularity, replay)
        self.decl, self.form, self.init = decl, form, spec.init
        self.state_rule = state_rule
        self.device = torch.device(spec.device)
        self.regions = state_regions(decl)
        self.names = [r.name for r in self.regions]
        steps, stocks = per_op(step, names, "step"), per_op(spec.stock, names, "stock")
        where, writes = per_op(spec.frames, names, "frames"), spec.writes
        if writes is None and len(names) > 1 and state_rule:
            raise ValueError(f"several operators {names}: say which regions each step returns, writes={{op: (...)}}")
        wr = per_op(writes, names, "writes") if writes is not None else {n: tuple(self.names) for n in names}
        rings = {r.name for r in self.regions if r.policy.ring_order}
        #: counter regions (:class:`~cadencelab.contract.Counter`): the runtime advances them, a step only reads them
        self.counter_regions = {r.name for r in self.regions if getattr(r.policy, "counts", False)}
        if self.counter_regions and form == "inplace":
            raise ValueError(f"counter regions {sorted(self.counter_regions)} are advanced by the runtime: use "
                             f"form='views' or 'stock'")
        if rings and form == "stock":
            raise ValueError(f"ring regions {sorted(rings)} need form='views' (the step reads the ring in ring order "
                             f"and returns its new frames) or form='inplace'")
        self.ops: dict[str, Bound] = {}
        for n in names:
            op = decl.operator(n)
            for fn, what in ((steps[n], "step"), (stocks[n], "stock")):
                if fn is not None and not callable(fn):
                    raise ValueError(f"{what} of operator '{n}' must be callable (x, caches, last), got "
                                     f"{type(fn).__name__}")
            if steps[n] is None:
                raise ValueError(f"operator '{n}' has no step")
            if not state_rule and stocks[n] is None:
                raise ValueError(f"with the state rule off the runtime runs the model's own stock step: pass stock= "
                                 f"for operator '{n}'")
            if "differential" in audits and stocks[n] is None:
                raise ValueError("the differential audit runs the model's own stock step: pass stock=")
            bad = [r for r in list(op.reads) + list(wr[n] or ()) if r not in self.names]
            if bad:
                raise ValueError(f"operator '{n}' reads or writes {bad}, which are not state regions the runtime "
                                 f"carries ({self.names})")
            touches = tuple(r for r in self.names if r in op.reads or r in (wr[n] or ()))
            self.ops[n] = Bound(n, op, steps[n], stocks[n], frames_at(where[n] if where[n] is not None else 1, last=1),
                                tuple(r for r in self.names if r in (wr[n] or ())), touches,
                                takes_frames=takes_frames(steps[n]),
                                stock_frames=stocks[n] is not None and takes_frames(stocks[n]))
        check_initial(decl, self.regions, spec.init)
        # the adopted tensors are carries: an arm without the state rule runs the stock step on plain tensors
        adopt = adoptions(spec.adopt if state_rule else None, self.names, rings)
        self.carries: dict[str, Carry] = {}
        self.ends: dict[str, RingEnd] = {}
        if state_rule:
            for r in self.regions:
                grows = not r.policy.constant_extent
                env = "attended" if (form == "views" and grows and r.policy.layout == "newest_first") else None
                if r.name in adopt:
                    shape = Carry.shape_for(decl, r.name, env)
                    self.carries[r.name] = adopted_carry(decl, r, adopt[r.name][0], shape, self.device)
                else:
                    self.carries[r.name] = Carry.for_region(decl, r.name, self.device, envelope=env)
                if r.name in rings:
                    end = adopt.get(r.name, (None, None))[1]
                    self.ends[r.name] = RingEnd(r.name, self.device,
                                                None if end is None else adopted_end(r.name, end, self.device))
        self.held = held_state(spec.held, self.names)
        self._clock = {r.name: r.clock for r in self.regions}
        self._ratio = {(n, r.name): scale(decl.clock_map, b.op.clock, r.clock, f"regions.{r.name}.clock")
                       for n, b in self.ops.items() for r in self.regions}
        self.audited = set(self.names if spec.audit_regions is None else spec.audit_regions)
        if self.audited - set(self.names):
            raise ValueError(f"audit_regions: {sorted(self.audited - set(self.names))} are not state regions the "
                             f"runtime carries ({self.names})")
        options = options_per_op(engine_options, names + list(self.inner), ENGINE_OPTIONS)
        modules = spec.modules
        #: each operator's modules (its engine guards their parameters; its preflight watches them)
        self.modules = {n: m or () for n, m in per_op(modules, names, "modules").items()} \
            if isinstance(modules, Mapping) else {n: modules for n in names}
        for b in self.ops.values():
            self._bind(b, replay and self.granularity[b.name] != "inner", backend, self._guard(b.touches),
                       self.modules[b.name], options[b.name])
        self.inner_engines = {n: bind_inner(decl, n, i, self._guard(), backend, options[n])
                              for n, i in self.inner.items()} if replay else {}
        self.declared = (auditor or ShadowAuditor()) if "declared" in audits else None
        self.differential = DifferentialAuditor(stock=self._stock_call) if "differential" in audits else None
        self.caches: dict = {}  # the stock arm's state (plain tensors, new every call)
        self._shadow: dict = {}
        self._cur, self._f, self._expect = next(iter(self.ops)), 0, {}
        self.ended: set[str] = set()  # operators whose final call of this turn has run (a session keeps its own)
        self.calls, self.undo, self.moved = 0, None, None  # moved: why calls are refused until reset()
        self.turns, self.turn_start = 0, 0  # turns begun (resets), and the calls before this turn's first
        for n, e in self.inner_engines.items():  # last: a refused runtime installed nothing on the model
            install(self.inner[n], e)

    def _guard(self, touches=None) -> dict:
        """An engine's owners (carries, ring ends) and write-through buffers (the carries and ring ends of the
        regions its operator touches, default all; then held state), read from ``carries`` when asked: a carry
        replaced there is seen moved (an invalidation), not as a new input."""
        carries, ends = self.carries, list(self.ends.values())
        mine = [n for n in carries if touches is None or n in touches]
        wt = {n: (lambda n=n: carries[n].buffer) for n in mine}
        wt.update({self.ends[n].name: (lambda e=self.ends[n]: e.buffer) for n in mine if n in self.ends})
        wt.update({h.name: h.reader for h in self.held})
        return dict(owners=lambda: [c.buffer for c in carries.values()] + [e.buffer for e in ends], write_through=wt)

    def _bind(self, b: Bound, replay: bool, backend: str, owners: dict, modules, options: dict) -> None:
        """The operator's classifier (built once) and, with replay, its engine (labelled by the runtime)."""
        if self.state_rule:
            fn = (lambda x, last, *views, b=b: self._run_step(b, x, last, views)) \
                if self.granularity[b.name] == "step" else (lambda x, last, *views, b=b: self._device_step(b, x, last, *views))
            reads = {n: At(2 + b.touches.index(n)) for n in b.op.reads}
        else:
            fn = lambda x, caches, last, b=b: self._stock_step(b, x, caches, last)  # noqa: E731
            reads = {n: At(1, key=n) for n in b.op.reads}
        flag = (1 if self.state_rule else 2) if b.frames.last is not None else None  # None: Committed frames
        b.frames = At(0, dim=b.frames.dim, clock=b.frames.clock, last=flag)
        b.classifier = Classifier(self.decl, b.name, fn, reads=reads, frames=b.frames)
        if replay:
            b.engine = bind(self.decl, b.name, fn, classifier=b.classifier, backend=backend,
                            modules=list(modules), **owners, **options)

    # -- the operators ---------------------------------------------------------------------
    def bound(self, operator: str | None) -> Bound:
        """The operator named in a call (None: the only one); a name the runtime does not run is refused."""
        return self._bound(operator)

    def _bound(self, operator: str | None) -> Bound:
        if operator is None:
            if len(self.ops) != 1:
                raise ValueError(f"this runtime runs {list(self.ops)}: name the operator of the call")
            return next(iter(self.ops.values()))
        if operator not in self.ops:
            raise ValueError(f"operator {operator!r} is not one this runtime runs ({list(self.ops)})")
        return self.ops[operator]

    @property
    def engine(self):
        """The only operator's engine (None without replay)."""
        return self._bound(None).engine

    @property
    def engines(self) -> dict:
        """Every engine by operator name: the operators' the runtime calls, then the inner ones."""
        return {**{n: b.engine for n, b in self.ops.items() if b.engine is not None}, **self.inner_engines}

    @property
    def classifier(self) -> Classifier:
        """The only operator's classifier."""
        return self._bound(None).classifier

    # -- turns ---------------------------------------------------------------------------
    def start(self, prompt=None) -> dict:
        """The session protocol's turn start (:class:`~.session.Session`): :meth:`reset`."""
        return self.reset(prompt)

    def counters(self):
        """Replay counters of every engine (empty without replay)."""
        return engine_counters(self.engines.values())

    @torch.inference_mode()
    def reset(self, prompt=None) -> dict:
        """Turn start, in place: each carry to its base state; returns the bases (the stock caches' start)."""
        given = self.init(prompt) if self.init is not None else None
        if given is not None and not isinstance(given, Mapping):
            raise ValueError(f"init(prompt) must return a dict region -> tensor, got {type(given).__name__}")
        bases = {r.name: base_of(self.decl, r, self.device, given) for r in self.regions}  # every check first
        for n, c in self.carries.items():
            if bases[n].shape[c.dim] > c.capacity:
                raise ValueError(f"init gave region '{n}' {bases[n].shape[c.dim]} frames; its carry holds {c.capacity}")
        primed = set(given or ())
        for b in self.ops.values():  # an engine whose operator reads a region init primed saw a priming call
            if b.engine is not None and primed & set(b.op.reads):
                b.engine.record_external(PRIMING)
        for n, c in self.carries.items():
            c.reset_in_place(bases[n])
        for r in self.regions:
            if r.name in self.ends:
                self.ends[r.name].reset(r.initial)
        # the stock arm's state, and the declared audit's shadow: held only where they are read
        self.caches = {} if self.state_rule else {n: b.clone() for n, b in bases.items()}
        self._shadow = {n: b.clone() for n, b in bases.items()} if self.declared is not None else {}
        if self.differential is not None:
            self.differential.start(bases)
        self.ended, self.moved, self.turns, self.turn_start = set(), None, self.turns + 1, self.calls
        return bases

    # -- one call ------------------------------------------------------------------------
    def _caches(self, b: Bound, views) -> Caches:
        """A step's caches: each region's view (a ring's as a :class:`RingView`), appendable in place."""
        return Caches({n: RingView(v, self.ends[n].buffer, self.carries[n].dim, self.undo, n) if n in self.ends else v
                       for n, v in zip(b.touches, views)},
                      {n: self.carries[n] for n in b.writes if n not in self.ends} if self.form != "inplace" else {},
                      self.undo)

    def _views(self, b: Bound) -> list:
        return [self.carries[n].buffer if n in self.ends else self.carries[n].view() for n in b.touches]

    def _stock_call(self, x, caches, last):
        b = self.ops[self._cur]
        out, new = pair(call_step(b.stock, x, caches, last, self._f, b.stock_frames), f"stock step of '{b.name}'")
        return out, merged(caches, new)

    def _stock_step(self, b: Bound, x, caches, last):
        """The stock step on the caches it is given: its output and what it returned (checked a dict)."""
        try:
            out, new = pair(call_step(b.stock, x, caches, last, self._f, b.stock_frames), f"stock step of '{b.name}'")
        except Exception as e:  # noqa: BLE001 - the user's error, named with the call (a ValueError keeps its type)
            raise step_failed(self.decl, self.regions, caches, e, f"stock step of '{b.name}'", x, self.at(last)) from e
        return out, merged({}, new)

    def at(self, last: bool) -> str:
        """Which call this is, for errors: 'call 7 (turn 1, its call 3, final, 12 'frames')'."""
        return (f"call {self.calls} (turn {self.turns - 1}, its call {self.calls - self.turn_start}"
                f"{', final' if last else ''}, {self._f} '{self.ops[self._cur].op.clock}' committed)")

    def _run_step(self, b: Bound, x, last, views):
        """The step on the carries' views (rings as :class:`RingView`), its output checked; no write."""
        caches = self._caches(b, views)
        try:
            res = call_step(b.step, x, caches, last, self._f, b.takes_frames)
        except Exception as e:  # noqa: BLE001 - the user's error, named with the call (a ValueError keeps its type)
            raise step_failed(self.decl, self.regions, {n: getattr(v, "buffer", v) for n, v in caches.items()}, e,
                              f"step of '{b.name}'", x, self.at(last)) from e
        if self.form == "inplace":  # the step wrote its regions itself
            return res, {}
        out, got = pair(res, f"step of '{b.name}' ({self.form} form)")
        b.appended = set(caches.appended)
        if not isinstance(got, Mapping):
            raise ValueError(f"the step must return (output, {{region: tensor}}), got a {type(got).__name__} second")
        missing = [n for n in b.writes if n not in got and n not in self.counter_regions]
        if missing:
            raise ValueError(f"the step returned no tensor for region(s) {missing}")
        counted = [n for n in got if n in self.counter_regions]
        if counted:
            raise ValueError(f"the step returned counter region(s) {counted}: the runtime advances a counter by the "
                             f"frames a call commits (its declared rule); return none for it")
        for r in self.regions:  # host checks on shapes only, before any write
            if r.name not in b.writes or r.name in self.counter_regions:
                continue
            t = got[r.name]
            check_shape(self.decl, r, t, "the step's output", self.device)
            cut = self.form == "stock" and constant_extent(r.policy) and \
                t.shape[r.clock_axis] == r.policy.shape_extent(0)  # a constant region the model cut itself
            if r.name in self._expect and t.shape[r.clock_axis] != self._expect[r.name] and not cut:
                raise ValueError(f"the step returned {t.shape[r.clock_axis]} frames for region '{r.name}' where the "
                                 f"declaration implies {self._expect[r.name]} ({self.form} form, {self._f} "
                                 f"'{b.op.clock}' committed)")
            if r.name in self.ends:
                b.ring_written[r.name] = caches[r.name].written
        return out, {n: got[n] for n in b.writes if n not in self.counter_regions}

    def _write(self, b: Bound, got: Mapping, views) -> None:
        """Append + retain each written region in place (rings: at the device position, then advance it).

        In place form the step wrote them: only a ring position the runtime owns is advanced."""
        for n, v in zip(b.touches, views):
            if n not in b.writes:
                continue
            c = self.carries[n]
            if n in self.counter_regions:  # its declared rule: + the frames the call commits on its clock
                c.buffer.add_(self._fr[n])
            elif self.form == "inplace":
                if n in self.ends and not self.ends[n].model_advances:
                    self.ends[n].buffer.add_(self._expect[n])
            elif n in self.ends:
                end = self.ends[n].buffer
                if not b.ring_written.get(n):
                    RingView(v, end, c.dim).write(got[n])
                end.add_(got[n].shape[c.dim])
            elif n in b.appended and self.form == "views":  # the step wrote its new frames itself: retain
                c.move_retained(v.shape[c.dim] + got[n].shape[c.dim])
            elif self.form == "views":
                c.write_append_retained(got[n], v.shape[c.dim])
            else:
                c.write_retained_from(got[n])

    def _device_step(self, b: Bound, x, last, *views):
        """Device work of one call: the step on the carries' views, checked, then append + retain in place."""
        out, got = self._run_step(b, x, last, views)
        seen = self._audited(got)
        self._write(b, got, views)
        return (out, seen) if self.declared is not None else out

    def _audited(self, got: Mapping) -> Mapping:
        """What the declared audit reads of a call: a returned view of a carry's own storage copied before the
        write moves it (a stock-form step returning its in-buffer cache)."""
        if self.declared is None:
            return got
        return {n: t.clone() if self.carries[n].owns(t) else t for n, t in got.items()}

    def frames_of(self, x, last: bool, operator: str | None = None) -> int:
        """The call's committed frames on the operator's clock (what the classifier labels it with).

        A steady call must commit the declared frames per call; a ValueError names the clock and the counts."""
        b = self._bound(operator)
        before_label(b, x, last)
        args = (x, bool(last), *self._views(b)) if self.state_rule else (x, self.caches, bool(last))
        label = b.label = b.classifier(*args)
        if b.engine is not None:
            b.engine.label_next(label)  # the engine labels a new class with it: each call labelled once
        f = committed(self.decl.model, b, x, last, label)
        return f

    @torch.inference_mode()
    def __call__(self, x: torch.Tensor, last: bool = False, operator: str | None = None) -> torch.Tensor:
        """One call of ``operator`` (default: the only one) on ``x`` (``last``: its final call of the turn)."""
        b = self._bound(operator)
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"a call takes a tensor x, got {type(x).__name__}")
        if self.moved:
            raise ValueError(self.moved)
        if b.name in self.ended:
            raise ValueError(f"the turn ended with a final call of '{b.name}' (last=True): call reset() to start "
                             f"the next turn")
        f = self.frames_of(x, last, b.name)
        self._cur, self._f = b.name, f
        if not self.state_rule:
            fn = b.engine if b.engine is not None else (lambda x, c, last: self._stock_step(b, x, c, last))
            # the regions its operator touches (and keys a stock step keeps beside them): an engine copies no others
            given = {k: v for k, v in self.caches.items() if k in b.touches or k not in self._clock}
            out, new = fn(x, given, bool(last))
            self.caches = {**self.caches, **new}
        else:
            out = self._call_carried(b, x, bool(last), f)
        if last:
            self.ended.add(b.name)
        self.calls += 1
        return out

    def _call_carried(self, b: Bound, x, last: bool, f: int):
        before = {n: c.length for n, c in self.carries.items()}
        fr = self._fr = {n: self.on(b.name, n, f) for n in b.writes}
        self._expect = {n: before[n] + fr[n] if self.form == "stock" and n not in self.ends else fr[n]
                        for n in b.writes}
        views = self._views(b)
        ends = {n: self.ends[n].host for n in b.writes if n in self.ends}
        with Undo(self, b):  # a call refused in here leaves the carries as they were (or refuses calls until reset)
            if self.granularity[b.name] == "step":
                out, new = (b.engine or (lambda *a: self._run_step(b, a[0], a[1], a[2:])))(x, last, *views)
                got = self._audited(new)
                self._write(b, new, views)
            else:
                res = (b.engine or (lambda *a: self._device_step(b, *a)))(x, last, *views)
                out, got = res if self.declared is not None else (res, None)
        for n in b.writes:
            if n in self.ends:
                self.ends[n].host += fr[n]
            else:
                r = self.decl.region(n)
                self.carries[n].commit(r.policy.extent_after(before[n] + fr[n]))
        if self.declared is not None:
            self._audit_declared(b, got, ends)
        if self.differential is not None and not last:  # nothing reads what a final call leaves behind
            self.differential.check(self.calls, {n: c for n, c in self.carries.items() if n in self.audited}, x, last)
        return out

    def on(self, operator: str, region: str, f: int) -> int:
        """``f`` ticks of ``operator``'s clock on ``region``'s clock."""
        return scaled(f, self._ratio[(operator, region)], self.ops[operator].op.clock, self._clock[region],
                      f"region '{region}'")

    def _audit_declared(self, b: Bound, got: dict, ends: dict) -> None:
        """The current audit: each written carry against the stock concatenation and cut *as declared*."""
        for n in b.writes:
            if n not in self.audited:
                continue
            c, r = self.carries[n], self.decl.region(n)
            if n in self.counter_regions:
                shadow = r.policy.advance(self._shadow[n], self._fr[n])
            elif self.form == "views":  # the call's new frames added to the stock cache, as the policy adds them
                shadow = r.policy.stock_next(self._shadow[n], got[n], c.dim, ends.get(n, 0)).clone()
            else:  # the step returned its whole attended cache
                shadow = r.policy.apply(got[n], c.dim).clone()
            self._shadow[n] = shadow
            self.declared.compare_with(c, shadow, self.calls)

    def preflight(self, traffic: Traffic, operator: str | None = None):
        """:func:`~cadencelab.replay.preflight` of an operator's step (default: the only one) on its first call in
        ``traffic``, from the caches at that turn's start (the target is a GPU, emulated on CPU tensors), its
        modules watched. The calls are real: the carries are reset first."""
        b = self._bound(operator)
        first = next(((t, x, last) for t, i, op, x, last in traffic.items_of() if self.bound(op).name == b.name), None)
        if first is None:
            raise ValueError(f"preflight: the traffic has no call of operator '{b.name}'")
        t, x, last = first
        self.reset(traffic.prompt(t))
        self._f = self.frames_of(x, last, b.name)
        caches = self._caches(b, self._views(b))
        kw = {"frames": self._f} if b.takes_frames else {}
        try:
            return preflight(b.step, x, caches, last, device="cuda", calls=2, modules=list(self.modules[b.name]), **kw)
        except Exception as e:  # noqa: BLE001 - the user's error, named with the call (a ValueError keeps its type)
            raise step_failed(self.decl, self.regions, {n: getattr(v, "buffer", v) for n, v in caches.items()}, e,
                              f"step of '{b.name}' (in the preflight)", x, self.at(last)) from e

    # -- a traffic -------------------------------------------------------------------------
    def run(self, traffic: Traffic) -> "KitRun":
        if not isinstance(traffic, Traffic):
            raise ValueError(f"run: traffic must be a Traffic, got {type(traffic).__name__}")
        outs, rows = [], []
        for t, i, op, x, last in traffic.items_of():
            if i == 0:
                self.reset(traffic.prompt(t))
            b = self.bound(op)
            mark = b.engine.tally() if b.engine is not None else None
            out = self(x, last, b.name)
            outs.append(out.clone())
            path = b.engine.path_since(mark) if mark is not None else "eager"
            rows.append(dict(turn=t, call=len(rows), operator=b.name, last=last, path=path,
                             **{f"ptr_{n}": c.buffer.data_ptr() for n, c in self.carries.items()},
                             **{f"ext_{n}": (self.ends[n].host if n in self.ends else c.length)
                                for n, c in self.carries.items()}))
        return KitRun(outs, pd.DataFrame(rows))

    def pointers(self) -> dict[str, int]:
        return {n: c.buffer.data_ptr() for n, c in self.carries.items()}

