"""Certification: a traffic through the model's own stock step and through the kit's runtime, clause by clause."""

from __future__ import annotations

import inspect
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Sequence

import pandas as pd
import torch

from ...contract import class_labels
from ...replay import Preflight
from ...state.equal import bitwise_equal, nan_detail
from .runtime import StreamingRuntime
from .steps import call_step, merged
from .traffic import Traffic

__all__ = ["run_stock", "model_reference", "ModelStart", "NotStarted", "REFERENCES", "Certification", "certify",
           "exact_table", "adapter_lines"]

#: what a certificate is checked against, by what ``reference=`` is (see :func:`model_reference`)
REFERENCES = {"loop": "the model's own loop", "recorded": "recorded outputs",
              "stock": "the stock step from the model's own start"}


class NotStarted(KeyError):
    """A stock step read a region at a turn's start that the model's own start does not give."""

    def __str__(self) -> str:
        return self.args[0]


class ModelStart(dict):
    """A stock step's caches at a turn's start: only what ``init`` (the model's priming) gave. Every other
    region is absent, so the model starts it itself (``caches.get(name)`` is None), as its own loop does; a
    step that indexes one raises :class:`NotStarted` naming it, never a value the declaration invented."""

    def __init__(self, given, regions, turn: int):
        super().__init__(given)
        self.regions, self.turn = regions, turn

    def __missing__(self, key):
        if key in self.regions:
            raise NotStarted(f"the stock step read region '{key}' at turn {self.turn}'s start, which the model's own "
                             f"start does not give (init gives {sorted(self) or 'nothing'}): let the stock step start "
                             f"it as the model does (caches.get('{key}') is None there), give the model's own start "
                             f"through init=, or pass reference= (the model's own loop)")
        raise KeyError(key)


def run_stock(spec) -> tuple[list, pd.DataFrame]:
    """The spec's stock step over its traffic on plain tensors (the B0 arm of :class:`StreamingRuntime`): outputs,
    and per call the label (:func:`~cadencelab.contract.class_label`) of the shapes it was observed to see."""
    traffic = spec.traffic
    if not isinstance(traffic, Traffic):
        raise ValueError(f"run_stock: traffic must be a Traffic, got {type(traffic).__name__}")
    rt = _stock_runtime(spec)
    outs, rows = [], []
    with torch.inference_mode():
        for t, i, op, x, last in traffic.items_of():
            if i == 0:
                rt.reset(traffic.prompt(t))
            b = rt.bound(op)
            outs.append(rt(x, last, b.name).clone())
            steady = not last or b.label[-1] == b.op.call  # a final call of a whole call's frames is a steady one
            rows.append(dict(operator=b.name, turn=t, call=len(rows), kind="steady" if steady else "flush",
                             label=b.label, frames=b.label[-1]))
    return outs, pd.DataFrame(rows, columns=["operator", "turn", "call", "kind", "label", "frames"])


def _stock_runtime(spec) -> StreamingRuntime:
    """The B0 arm of ``spec``, each stock step given every region (as the model's own loop holds them)."""
    return StreamingRuntime(replace(spec, writes=None), "B0")


def model_reference(spec, *, committed: Sequence[int] | None = None) -> tuple[list, str]:
    """What a certificate is checked against: ``(outputs per call, which reference)``; never the declaration.

    ``spec.reference``: a callable ``reference(traffic) -> [tensor per call]`` (the model's own streaming loop),
    or the recorded outputs themselves (one tensor per call); None runs the stock step from the model's own start:
    each turn's caches hold only what ``init(prompt)`` gives (a :class:`ModelStart`), and what the step returns
    is its state from then on. ``committed``: each call's committed frames, for a stock step taking ``frames``
    (:func:`run_stock`'s ``frames`` column; computed when not given)."""
    reference, traffic = spec.reference, spec.traffic
    if reference is not None and not callable(reference):
        if isinstance(reference, torch.Tensor) or not isinstance(reference, (list, tuple)):
            raise ValueError(f"reference must be the model's own loop (a callable traffic -> outputs) or its recorded "
                             f"outputs (a list, one tensor per call), got a {type(reference).__name__}")
        outs, kind = list(reference), "recorded"
    elif callable(reference):
        with torch.inference_mode():
            outs, kind = reference(traffic), "loop"
        if isinstance(outs, torch.Tensor) or not isinstance(outs, (list, tuple)):
            raise ValueError(f"reference(traffic) must return a list of tensors (one per call), got a "
                             f"{type(outs).__name__}")
        outs = list(outs)
    else:
        if committed is None:
            committed = run_stock(spec)[1]["frames"].tolist()
        outs, kind = _stock_from_model_start(spec, committed), "stock"
    bad = [i for i, o in enumerate(outs) if not isinstance(o, torch.Tensor)]
    if bad:
        raise ValueError(f"the reference ({REFERENCES[kind]}) gave a {type(outs[bad[0]]).__name__} for call "
                         f"{bad[0]}, not a tensor")
    return outs, kind


def _stock_from_model_start(spec, committed) -> list:
    """The stock step over the traffic, each turn from the model's own start (see :class:`ModelStart`)."""
    rt = _stock_runtime(spec)  # for each operator's stock step and the regions it touches; never run
    init, device, traffic = spec.init, rt.device, spec.traffic
    regions, outs, caches = set(rt.names), [], {}
    with torch.inference_mode():
        for k, (t, i, op, x, last) in enumerate(traffic.items_of()):
            if i == 0:
                given = init(traffic.prompt(t)) if init is not None else None
                given = {n: v.to(device) if isinstance(v, torch.Tensor) else v for n, v in (given or {}).items()}
                caches = ModelStart(given, regions, t)
            b = rt.bound(op)
            mine = {n: v for n, v in caches.items() if n in b.touches or n not in regions}
            out, new = call_step(b.stock, x, ModelStart(mine, regions, t), bool(last), committed[k], b.stock_frames)
            caches = {**caches, **merged({}, new)}
            outs.append(out.clone())
    return outs


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
    stock_outputs: list = field(default_factory=list, repr=False)  # the model reference's output per call
    preflight: pd.DataFrame | None = field(default=None, repr=False)  # the step's capture hazards (replay.preflight)
    reference: str = REFERENCES["stock"]  # what the outputs were checked against (see model_reference)

    @property
    def ok(self) -> bool:
        return bool(self.table["passed"].all())

    def _repr_html_(self) -> str:
        return (f"<b>{'CERTIFIED' if self.ok else 'NOT CERTIFIED'}</b> against {self.reference}"
                + self.table.to_html(index=False))

    def __repr__(self) -> str:
        return (f"Certification({'ok' if self.ok else 'FAILED'}, against {self.reference})\n"
                + self.table.to_string(index=False))


def certify(spec, *, backend: str = "auto") -> Certification:
    """Run the spec's traffic through the model's own stock step and through the runtime (SRc, its audits).

    ``spec``: a :class:`~.spec.KitModel` with a traffic. Clauses: the preflight finds no capture hazard in any
    step (:func:`~cadencelab.replay.preflight`, on every backend); per operator, the steady labels the stock
    model was observed to see equal the derived steady catalog and its flush labels are among the derived
    flush classes; the ``spec.audits`` (default both) agree on every retention; every call is bit-identical
    to the model's reference; the carries never move; some call replayed.

    The reference is the model's, never one built from this declaration (:func:`model_reference`):
    ``spec.reference`` the model's own loop or its recorded outputs, else the stock step from the model's own
    start. The stock step run from the *declared* state (what the catalog clauses observe) is compared with
    it too: a declared base, initial extent, retention or lookahead the model does not have fails there.
    """
    declared_out, observed = run_stock(spec)
    decl, traffic, ref_error = spec.decl, spec.traffic, None
    try:
        want, kind = model_reference(spec, committed=observed["frames"].tolist())
    except NotStarted as e:
        want, kind, ref_error = [], "stock", str(e)
    probe = StreamingRuntime(spec, "S")  # a throwaway runtime: the preflight's calls are real
    pfs = [probe.preflight(traffic, operator=n) for n in probe.ops]
    pf = pfs[0] if len(pfs) == 1 else Preflight(pd.concat(pfs, ignore_index=True))
    if len(pfs) > 1:
        pf.attrs.update(pfs[0].attrs, fn=", ".join(p.attrs.get("fn", "") for p in pfs))
    rt = StreamingRuntime(spec, "SRc", backend=backend, audit=spec.audits)
    got = rt.run(traffic)
    rows = []

    def clause(name, passed, detail):
        rows.append(dict(clause=name, passed=bool(passed), detail=detail))

    label = REFERENCES[kind]
    counted = len(want) == traffic.calls
    clause(f"reference: {label}", ref_error is None and counted,
           ref_error or (f"{len(want)} outputs for the traffic's {traffic.calls} calls" if not counted else
                         f"{len(want)} calls"))
    first = _first_unequal(want, declared_out)
    clause(f"the declared state's stock step equals {label}", ref_error is None and counted and first is None,
           "every call bit-identical" if ref_error is None and counted and first is None else
           "no reference to compare" if ref_error is not None or not counted else
           f"first differs at call {first} ({_where(traffic, first)}): the declaration's start (a base, an initial "
           f"extent, init), retention or lookahead is not the model's")
    hazards = pf.hazards()
    clause("preflight: no capture hazard in the step", hazards.empty,
           pf.summary() + "".join(f"; {h.kind} at {h.where}: {h.source}" for h in hazards.head(3).itertuples()))

    # the derived catalog against what the stock model saw, per operator
    cat_rows = []
    for name, b in rt.ops.items():
        derived = {k: class_labels(decl, name, k) for k in ("steady", "flush")}
        admitted = b.classifier.catalog
        mine = observed[observed["operator"] == name]
        seen = {k: Counter(mine.loc[mine["kind"] == k, "label"]) for k in ("steady", "flush")}
        dims = ", ".join((*b.op.reads, f"f ({b.op.clock})"))  # what each number of a label is
        for k in ("steady", "flush"):
            for lab in sorted(derived[k] | set(seen[k]), key=str):
                cat_rows.append(dict(operator=name, kind=k, label=lab, dims=dims, derived=lab in derived[k],
                                     admitted=lab in admitted, observed=seen[k].get(lab, 0)))
        who = f"'{name}': " if len(rt.ops) > 1 else ""
        clause(f"steady classes: observed == derived{' (' + name + ')' if len(rt.ops) > 1 else ''}",
               set(seen["steady"]) == derived["steady"],
               f"{who}derived {sorted(derived['steady'])}, observed {sorted(seen['steady'])}")
        extra = set(seen["flush"]) - derived["flush"]
        clause(f"flush classes: observed within derived{' (' + name + ')' if len(rt.ops) > 1 else ''}", not extra,
               f"{who}{len(seen['flush'])} observed of {len(derived['flush'])} derived"
               + (f"; NOT derived: {sorted(extra)}" if extra else ""))
    cat = pd.DataFrame(cat_rows, columns=["operator", "kind", "label", "dims", "derived", "admitted", "observed"])
    # audits
    tables = []
    for name, aud in (("declared", rt.declared), ("differential", rt.differential)):
        if aud is None:  # not asked for (audits=)
            continue
        s = aud.summary()
        s.insert(0, "audit", name)
        first = aud.first_divergence
        tables.append(s)
        clause(f"{name} audit agrees on every retention", aud.ok and aud.applications > 0,
               f"{aud.agreements} of {aud.applications} agree"
               + (f"; first divergence: call {first.call}, region {first.region}, index {first.index} ({first.detail})"
                  if first else ""))
    audit = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=["audit", "region"])
    # exactness
    exact = exact_table(want, got.outputs)
    clause(f"bit-exact with {label}", len(want) == len(got.outputs) and bool(exact["equal"].all()),
           f"{int(exact['equal'].sum())} of {len(got.outputs)} calls bit-identical")
    # addresses
    addr = []
    for n, c in rt.carries.items():
        col = got.table[f"ptr_{n}"]
        addr.append(dict(region=n, data_ptr=c.buffer.data_ptr(), distinct=int(col.nunique()),
                         address_ok=c.address_ok(), bytes=c.buffer.numel() * c.buffer.element_size()))
    addresses = pd.DataFrame(addr)
    engines = list(rt.engines.values())
    inval = sum(int(e.counters()["invalidations"].sum()) for e in engines if e.classes)
    clause("carries at one address", (addresses["distinct"] == 1).all() and addresses["address_ok"].all() and not inval,
           f"{len(addresses)} carries, {inval} invalidations")
    # replay counters by reason, per engine
    counters = pd.concat([by_reason(e) for e in engines], ignore_index=True)
    replays = counters[counters["reason"] == "replayed"].groupby("engine")["count"].sum()
    clause("admitted calls replayed", len(replays) == len(engines) and (replays > 0).all(),
           "; ".join(e.summary() for e in engines))
    return Certification(pd.DataFrame(rows), cat, audit, exact, counters, addresses, rt, got.outputs, want, pf,
                         reference=label)


def _first_unequal(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> int | None:
    """The first call whose outputs are not bit-identical (a missing call counts), else None."""
    for i in range(max(len(a), len(b))):
        if i >= len(a) or i >= len(b) or not bool(exact_table([a[i]], [b[i]])["equal"].iloc[0]):
            return i
    return None


def _where(traffic: Traffic, k: int) -> str:
    """Call ``k`` of the traffic as 'turn t, call i of the turn' (its first call: the turn's start)."""
    for n, (t, i, op, _, last) in enumerate(traffic.items_of()):
        if n == k:
            return f"turn {t}, call {i} of the turn" + (f", operator '{op}'" if op else "") + \
                (": the turn's first call" if i == 0 else ", its final call" if last else "")
    return f"call {k}, beyond the traffic's {traffic.calls}"


def exact_table(want: Sequence[torch.Tensor], got: Sequence[torch.Tensor]) -> pd.DataFrame:
    """Per call: ``equal`` (same shape, dtype and bytes, :func:`~cadencelab.state.equal.bitwise_equal`: identical
    NaNs equal, a NaN against a number not), ``max_abs_diff`` over the elements that are numbers on both sides
    (inf when the shapes differ or a call is missing) and ``detail`` (the dtype, NaN or missing call named)."""
    rows = []
    for i in range(max(len(want), len(got))):
        if i >= len(want) or i >= len(got):
            rows.append(dict(call=i, equal=False, max_abs_diff=math.inf,
                             detail=f"no output: {len(want)} stock calls, {len(got)} calls compared"))
            continue
        a, b = want[i], got[i]
        same = a.shape == b.shape
        d = (a.double() - b.double().to(a.device)).abs() if same else None
        d = d[~torch.isnan(d)] if d is not None else None
        detail = "; ".join(x for x in (f"dtype {b.dtype} where the stock step gives {a.dtype}" if a.dtype != b.dtype
                                       else "", nan_detail(a, b) if same else f"shape {tuple(b.shape)} where the "
                                       f"stock step gives {tuple(a.shape)}") if x)
        rows.append(dict(call=i, equal=bitwise_equal(a, b),
                         max_abs_diff=(d.max().item() if d.numel() else 0.0) if same else math.inf, detail=detail))
    return pd.DataFrame(rows, columns=["call", "equal", "max_abs_diff", "detail"])


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


def by_reason(engine) -> pd.DataFrame:
    """Calls per outcome: 'replayed' and each eager reason (probe, outside_catalog, priming, ...)."""
    replayed, c = engine.tally()
    c["replayed"] = replayed
    return pd.DataFrame([dict(engine=engine.name, reason=r, count=n) for r, n in sorted(c.items())],
                        columns=["engine", "reason", "count"])
