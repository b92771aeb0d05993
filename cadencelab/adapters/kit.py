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
from ..contract.clocks import per_call, ticks_per
from ..contract.policies import Fixed, Ring
from ..replay import At, Classifier, bind
from ..state import Carry, DifferentialAuditor, ShadowAuditor

__all__ = ["FORMS", "AUDITS", "Traffic", "StreamingRuntime", "KitRun", "Certification", "run_stock", "certify",
           "exact_table", "adapter_lines"]

FORMS = ("views", "stock")
AUDITS = ("declared", "differential")


@dataclass
class Traffic:
    """What to stream: ``turns[i]`` is the list of inputs of turn i (its last input is the turn's final
    call); ``prompts[i]`` (optional) is what the turn is primed from (passed to ``init``)."""

    turns: list
    prompts: list | None = None

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
        pc = per_call(decl.clock_map, clock, decl.call_clock) if clock in decl.clock_map else None
        if pc is None:
            raise ValueError(f"Traffic.stream: clock {clock!r} is not driven by the call clock '{decl.call_clock}'")
        width = pc.committed + pc.lookahead
        turns = []
        for i, sig in enumerate(signals):
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


def _frames_at(frames, last: int) -> At:
    """The call's frames in ``x`` (argument 0), its final-call flag at position ``last``."""
    at = frames if isinstance(frames, At) else At(0, dim=int(frames))
    return At(0, dim=at.dim, clock=at.clock, last=last)


def _state_regions(decl: Declaration) -> list:
    return [r for r in decl.regions if r.role == "state" and r.resident_in is None]


def _constant_extent(policy) -> bool:
    """Policies whose tensor always has the same extent (zero-filled at a turn's start)."""
    return isinstance(policy, (Fixed, Ring))


def _base(decl: Declaration, region, device, given: Mapping | None) -> torch.Tensor:
    """A region's cache at a turn's start: ``given[name]`` (priming), zeros at a constant extent, else empty."""
    if given and region.name in given:
        return given[region.name]
    ext = region.policy.shape_extent(0) if _constant_extent(region.policy) else 0
    shape = tuple(ext if d == region.clock else (decl.dims[d] if isinstance(d, str) else d) for d in region.shape)
    return torch.zeros(shape, dtype=getattr(torch, region.dtype), device=device)


def _ticks(decl: Declaration, f: int, op_clock: str, clock: str) -> int:
    """``f`` ticks of ``op_clock`` on ``clock``."""
    if clock == op_clock:
        return f
    try:
        return f * ticks_per(decl.clock_map, clock, op_clock)
    except Exception:
        per = ticks_per(decl.clock_map, op_clock, clock)
        if f % per:
            raise ValueError(f"{f} '{op_clock}' ticks are not whole '{clock}' ticks") from None
        return f // per


class StreamingRuntime:
    """A declared model streamed over carries, with retention in place, audits and replay.

    decl, step, form: see the module docstring; ``operator`` defaults to the declaration's only one.
    frames:   where the call's frames are in ``x``: its dim (an int), or an :class:`At` whose ``dim`` and
              ``clock`` say so (its ``arg`` is ignored: the runtime passes ``x`` first).
    init:     ``init(prompt) -> {region: base tensor}``: cache-free priming at a turn's start (eager,
              counted as priming); regions it leaves out start empty, or zero-filled at a constant extent.
    replay:   run the step through :func:`~cadencelab.replay.bind` (``backend`` "auto", "cuda", "eager").
    audit:    "declared" and/or "differential" (a name or a tuple): the carry against the declared stock
              cut, and against ``stock`` (the model's own step) run in shadow.
    modules:  modules whose parameters the step reads (guarded by the engine).
    """

    def __init__(self, decl: Declaration, step: Callable, *, frames=1, form: str = "views", operator: str | None = None,
                 init: Callable | None = None, stock: Callable | None = None, replay: bool = False,
                 backend: str = "auto", audit=(), modules: Sequence[torch.nn.Module] = (), device="cpu"):
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
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
        self.carries: dict[str, Carry] = {}
        for r in self.regions:
            grows = r.policy.kind not in ("fixed", "ring")
            env = "attended" if (form == "views" and grows and r.policy.layout == "newest_first") else None
            self.carries[r.name] = Carry.for_region(decl, r.name, self.device, envelope=env)
        reads = {n: At(2 + self.names.index(n)) for n in self.op.reads}
        self._frames = _frames_at(frames, last=1)  # _device_step(x, last, *views)
        self.classifier = Classifier(decl, self.op.name, self._device_step, reads=reads, frames=self._frames)
        self.declared = ShadowAuditor() if "declared" in audits else None
        self.differential = DifferentialAuditor(stock=stock) if "differential" in audits else None
        self._shadow: dict = {}
        self.engine = None
        if replay:
            self.engine = bind(decl, self.op.name, self._device_step, reads=reads, frames=self._frames,
                               backend=backend, owners=lambda: [c.buffer for c in self.carries.values()],
                               write_through={n: (lambda c=c: c.buffer) for n, c in self.carries.items()},
                               modules=list(modules))
        self.calls = 0

    # -- turns ---------------------------------------------------------------------------
    @torch.inference_mode()
    def reset(self, prompt=None) -> dict:
        """Turn start, in place: each carry to its base state; returns the bases (the stock caches' start)."""
        given = self.init(prompt) if self.init is not None else None
        if given is not None and self.engine is not None:
            self.engine.record_external(PRIMING)
        bases = {r.name: _base(self.decl, r, self.device, given) for r in self.regions}
        for r in self.regions:
            self.carries[r.name].reset_in_place(bases[r.name])
        self._shadow = {n: b.clone() for n, b in bases.items()}
        if self.differential is not None:
            self.differential.start(bases)
        return bases

    # -- one call ------------------------------------------------------------------------
    def _views(self) -> list:
        return [c.view() for c in self.carries.values()]

    def _device_step(self, x, last, *views):
        """Device work of one call: the step on the carries' views, then append + retain in place."""
        out, got = self.step(x, dict(zip(self.names, views)), last)
        missing = [n for n in self.names if n not in got]
        if missing:
            raise ValueError(f"the step returned no tensor for region(s) {missing}")
        for n, v in zip(self.names, views):
            c = self.carries[n]
            if self.form == "views":
                c.write_append_retained(got[n], v.shape[c.dim])
            else:
                c.write_retained_from(got[n])
        return (out, got) if self.declared is not None else out

    def frames_of(self, x, last: bool) -> int:
        """The call's committed frames on the operator's clock (what the classifier labels it with)."""
        views = self._views()
        label = self.classifier(x, last, *views)
        if not isinstance(label[-1], int):
            raise ValueError(f"call of {tuple(x.shape)}: {label[1]}")
        return label[-1]

    @torch.inference_mode()
    def __call__(self, x: torch.Tensor, last: bool = False) -> torch.Tensor:
        """One call on ``x`` (``last``: the turn's final call) -> the step's output."""
        f = self.frames_of(x, last)
        before = {n: c.length for n, c in self.carries.items()}
        fn = self.engine if self.engine is not None else self._device_step
        res = fn(x, bool(last), *self._views())
        out, got = res if self.declared is not None else (res, None)
        for r in self.regions:
            c, fr = self.carries[r.name], _ticks(self.decl, f, self.op.clock, r.clock)
            if got is not None:
                n_got, n_want = got[r.name].shape[c.dim], fr if self.form == "views" else before[r.name] + fr
                if n_got != n_want:
                    raise ValueError(f"the step returned {n_got} frames for region '{r.name}' where the declaration "
                                     f"implies {n_want} ({self.form} form, {f} {self.op.clock} committed)")
            c.commit(r.policy.extent_after(before[r.name] + fr))
        if self.declared is not None:
            self._audit_declared(got)
        if self.differential is not None:
            self.differential.check(self.calls, self.carries, x, bool(last))
        self.calls += 1
        return out

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
    op = decl.operator(operator) if operator else decl.operators[0]
    regions = _state_regions(decl)
    reads = {n: At(1, key=n) for n in op.reads}
    observe = Classifier(decl, op.name, stock, reads=reads, frames=_frames_at(frames, last=2))  # stock(x, caches, last)
    outs, rows = [], []
    caches: dict = {}
    with torch.inference_mode():
        for t, i, x, last in traffic.calls_of():
            if i == 0:
                given = init(traffic.prompt(t)) if init is not None else None
                caches = {r.name: _base(decl, r, device, given) for r in regions}
            label = observe(x, caches, bool(last))
            out, caches = stock(x, caches, bool(last))
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
    rt = StreamingRuntime(decl, step, frames=frames, form=form, operator=op.name, init=init, stock=stock, replay=True,
                          backend=backend, audit=AUDITS, modules=modules, device=device)
    got = rt.run(traffic)
    rows = []

    def clause(name, passed, detail):
        rows.append(dict(clause=name, passed=bool(passed), detail=detail))

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
    return Certification(pd.DataFrame(rows), cat, audit, exact, counters, addresses, rt)


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
