"""Certification: a traffic through the model's own stock step and through the kit's runtime, clause by clause."""

from __future__ import annotations

import inspect
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

import pandas as pd
import torch

from ...contract import Declaration, class_labels
from ...replay import Preflight
from .runtime import AUDITS, StreamingRuntime
from .traffic import Traffic

__all__ = ["run_stock", "Certification", "certify", "exact_table", "adapter_lines"]


def run_stock(decl: Declaration, stock, traffic: Traffic, *, frames=1, operator: str | None = None,
              init: Callable | None = None, device="cpu") -> tuple[list, pd.DataFrame]:
    """The model's own stock step (one callable, or a dict operator -> stock step) over ``traffic`` on plain
    tensors (the B0 arm of :class:`StreamingRuntime`): outputs, and per call the label
    (:func:`~cadencelab.contract.class_label`) of the shapes it was observed to see."""
    if not isinstance(traffic, Traffic):
        raise ValueError(f"run_stock: traffic must be a Traffic, got {type(traffic).__name__}")
    rt = StreamingRuntime(decl, stock, stock=stock, state_rule=False, frames=frames, operator=operator, init=init,
                          device=device)
    outs, rows = [], []
    with torch.inference_mode():
        for t, i, op, x, last in traffic.items_of():
            if i == 0:
                rt.reset(traffic.prompt(t))
            b = rt.bound(op)
            outs.append(rt(x, last, b.name).clone())
            steady = not last or b.label[-1] == b.op.call  # a final call of a whole call's frames is a steady one
            rows.append(dict(operator=b.name, turn=t, call=len(rows), kind="steady" if steady else "flush",
                             label=b.label))
    return outs, pd.DataFrame(rows, columns=["operator", "turn", "call", "kind", "label"])


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


def certify(decl: Declaration, step, stock, traffic: Traffic, *, frames=1, form: str = "views",
            operator: str | None = None, writes=None, init: Callable | None = None, backend: str = "auto", modules=(),
            device="cpu", adopt=None, held=None, engine_options=None, audits=AUDITS) -> Certification:
    """Run ``traffic`` through the model's own ``stock`` step and through the runtime (replay, its audits).

    ``step``/``stock``: one callable, or a dict operator -> step for a model of several operators (then
    ``writes`` too, see :class:`StreamingRuntime`). Clauses: the preflight finds no capture hazard in any
    step (:func:`~cadencelab.replay.preflight`, on every backend); per operator, the steady labels the stock
    model was observed to see equal the derived steady catalog and its flush labels are among the derived
    flush classes; the ``audits`` (default both) agree on every retention; every call is bit-identical
    (``torch.equal``) to the stock call; the carries never move; some call replayed. ``adopt``, ``held``,
    ``engine_options``: as for :class:`StreamingRuntime`.
    """
    want, observed = run_stock(decl, stock, traffic, frames=frames, operator=operator, init=init, device=device)
    kw = dict(frames=frames, form=form, operator=operator, writes=writes, init=init, device=device, adopt=adopt,
              held=held, engine_options=engine_options)
    probe = StreamingRuntime(decl, step, **kw)  # a throwaway runtime: the preflight's calls are real
    pfs = [probe.preflight(traffic, modules=modules, operator=n) for n in probe.ops]
    pf = pfs[0] if len(pfs) == 1 else Preflight(pd.concat(pfs, ignore_index=True))
    if len(pfs) > 1:
        pf.attrs.update(pfs[0].attrs, fn=", ".join(p.attrs.get("fn", "") for p in pfs))
    rt = StreamingRuntime(decl, step, stock=stock, replay=True, backend=backend, audit=audits, modules=modules, **kw)
    got = rt.run(traffic)
    rows = []

    def clause(name, passed, detail):
        rows.append(dict(clause=name, passed=bool(passed), detail=detail))

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
        for k in ("steady", "flush"):
            for lab in sorted(derived[k] | set(seen[k]), key=str):
                cat_rows.append(dict(operator=name, kind=k, label=lab, derived=lab in derived[k],
                                     admitted=lab in admitted, observed=seen[k].get(lab, 0)))
        who = f"'{name}': " if len(rt.ops) > 1 else ""
        clause(f"steady classes: observed == derived{' (' + name + ')' if len(rt.ops) > 1 else ''}",
               set(seen["steady"]) == derived["steady"],
               f"{who}derived {sorted(derived['steady'])}, observed {sorted(seen['steady'])}")
        extra = set(seen["flush"]) - derived["flush"]
        clause(f"flush classes: observed within derived{' (' + name + ')' if len(rt.ops) > 1 else ''}", not extra,
               f"{who}{len(seen['flush'])} observed of {len(derived['flush'])} derived"
               + (f"; NOT derived: {sorted(extra)}" if extra else ""))
    cat = pd.DataFrame(cat_rows, columns=["operator", "kind", "label", "derived", "admitted", "observed"])
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
    clause("bit-exact with the stock step", len(want) == len(got.outputs) and exact["equal"].all(),
           f"{int(exact['equal'].sum())} of {len(exact)} calls torch.equal")
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
    return Certification(pd.DataFrame(rows), cat, audit, exact, counters, addresses, rt, got.outputs, want, pf)


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


def by_reason(engine) -> pd.DataFrame:
    """Calls per outcome: 'replayed' and each eager reason (probe, outside_catalog, priming, ...)."""
    replayed, c = engine.tally()
    c["replayed"] = replayed
    return pd.DataFrame([dict(engine=engine.name, reason=r, count=n) for r, n in sorted(c.items())],
                        columns=["engine", "reason", "count"])
