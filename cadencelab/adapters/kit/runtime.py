"""The kit's runtime: a declared model streamed over carries, with retention in place, audits and replay."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import pandas as pd
import torch

from ...contract import PRIMING, Declaration
from ...contract.clocks import scale
from ...contract.policies import Ring
from ...replay import At, Classifier, bind, preflight
from ...state import Carry, DifferentialAuditor, ShadowAuditor
from .regions import base_of, check_initial, check_shape, state_regions
from .traffic import Traffic

__all__ = ["FORMS", "AUDITS", "StreamingRuntime", "KitRun", "frames_at", "step_failed", "takes_frames", "call_step"]

FORMS = ("views", "stock")
AUDITS = ("declared", "differential")


def frames_at(frames, last: int) -> At:
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


def step_failed(decl: Declaration, regions, caches: Mapping, e: Exception, what: str) -> RuntimeError:
    """The step raised: name the regions it was given (their shapes, and the declared shapes)."""
    given = "; ".join(f"'{r.name}' {tuple(caches[r.name].shape)} from {tuple(r.shape)}" for r in regions
                      if isinstance(caches.get(r.name), torch.Tensor))
    return RuntimeError(f"the {what} raised {type(e).__name__} given the {decl.model} regions {given} (shapes built "
                        f"from the declaration; a region whose dims are declared in another order than the step's "
                        f"tensors fails like this): {str(e).splitlines()[0] if str(e) else ''}")


def takes_frames(fn: Callable) -> bool:
    """True when ``fn`` has a ``frames`` parameter: the kit passes it the call's committed frames."""
    try:
        return "frames" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def call_step(fn: Callable, x, caches, last, frames: int, takes_frames: bool):
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
        self.regions = state_regions(decl)
        self.names = [r.name for r in self.regions]
        rings = [r.name for r in self.regions if isinstance(r.policy, Ring)]
        if rings:  # a ring's write position would have to enter the signature; not wired here yet
            raise ValueError(f"regions {rings}: ring regions are not supported by the kit yet")
        for n in self.op.reads:
            if n not in self.names:
                raise ValueError(f"operator '{self.op.name}' reads '{n}', which is not a state region the runtime carries")
        check_initial(decl, self.regions, init)
        self.carries: dict[str, Carry] = {}
        for r in self.regions:
            grows = r.policy.kind not in ("fixed", "ring")
            env = "attended" if (form == "views" and grows and r.policy.layout == "newest_first") else None
            self.carries[r.name] = Carry.for_region(decl, r.name, self.device, envelope=env)
        reads = {n: At(2 + self.names.index(n)) for n in self.op.reads}
        self._frames = frames_at(frames, last=1)  # _device_step(x, last, *views)
        self.classifier = Classifier(decl, self.op.name, self._device_step, reads=reads, frames=self._frames)
        self._ratio = {r.name: scale(decl.clock_map, self.op.clock, r.clock, f"regions.{r.name}.clock")
                       for r in self.regions}
        self._takes_frames = takes_frames(step)
        self._stock_frames = stock is not None and takes_frames(stock)
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
        bases = {r.name: base_of(self.decl, r, self.device, given) for r in self.regions}  # every check before a write
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
        return call_step(self.stock, x, caches, last, self._f, self._stock_frames)

    def _device_step(self, x, last, *views):
        """Device work of one call: the step on the carries' views, checked, then append + retain in place."""
        caches = dict(zip(self.names, views))
        try:
            out, got = call_step(self.step, x, caches, last, self._f, self._takes_frames)
        except RuntimeError as e:
            raise step_failed(self.decl, self.regions, caches, e, "step") from e
        if not isinstance(got, Mapping):
            raise ValueError(f"the step must return (output, {{region: tensor}}), got a {type(got).__name__} second")
        missing = [n for n in self.names if n not in got]
        if missing:
            raise ValueError(f"the step returned no tensor for region(s) {missing}")
        for r in self.regions:  # host checks on shapes only, before any write
            t = got[r.name]
            check_shape(self.decl, r, t, "the step's output")
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
            self._auditdeclared_text(got)
        if self.differential is not None and not last:  # nothing reads what a final call leaves behind
            self.differential.check(self.calls, self.carries, x, bool(last))
        self._ended = bool(last)
        self.calls += 1
        return out

    def preflight(self, traffic: Traffic, modules=()):
        """:func:`~cadencelab.replay.preflight` of the step on ``traffic``'s first call, from the caches at the
        first turn's start (the target is a GPU, emulated on CPU tensors). The calls are real: the carries
        are reset first, and the step (views form) writes none itself."""
        self.reset(traffic.prompt(0))
        x = traffic.turns[0][0]
        last = len(traffic.turns[0]) == 1
        self._f = self.frames_of(x, last)
        caches = {n: c.view() for n, c in self.carries.items()}
        kw = {"frames": self._f} if self._takes_frames else {}
        return preflight(self.step, x, caches, last, device="cuda", calls=2, modules=list(modules), **kw)

    def _on(self, region: str, f: int) -> int:
        """``f`` ticks of the operator's clock on the region's clock."""
        mul, div = self._ratio[region]
        if (f * mul) % div:
            raise ValueError(f"{f} '{self.op.clock}' ticks are not whole ticks of region '{region}''s clock")
        return f * mul // div

    def _auditdeclared_text(self, got: dict) -> None:
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


