"""Derivations from a declaration alone, before any traffic.

* ``trajectory``: the extent a_r(t) entering and leaving each call;
* ``region_table``: envelope A_r, demand bytes, stock bytes, ρ_r, catalog width K_r;
* ``catalog``: the enumerated signature classes per operator, with partial-flush classes
  bounded by the admission predicate;
* ``checks``: properties C1-C3 with readable reasons;
* ``verdict``: whether each operator's catalog is affordable for exact specialization.

Every extent has a closed form, which the region's policy gives
(:meth:`~cadencelab.contract.policies.RetentionPolicy.cached_at`: ``min(initial + t * growth, bound)``
for a growing region, its extent from call 1 on for a fixed one), so
envelopes and class counts cost O(1) per region, whatever the window. Only tables whose
rows the caller asked for (a trajectory, an enumerated catalog) are built row by row, and
above :data:`ROW_LIMIT` rows they raise :class:`DerivationLimitError` naming the field that
sets their size instead of truncating.

Everything returns a pandas DataFrame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .declaration import DTYPE_BYTES, Declaration, Operator, Region
from .errors import DerivationLimitError

#: default ceiling on steady signature classes per operator for exact specialization
K_MAX = 16
#: the most classes one replay engine captures (``ExactShapeReplay``'s ``max_classes`` default reads it):
#: each captured class costs a warm-up and graph-pool memory, so an operator is affordable only when
#: every admitted class (steady and flush) fits. A policy choice, set here once: Token2wav's flow
#: operators admit 69 classes (3 steady + 66 flush) at the paper's operating point.
CLASS_BUDGET = 128
#: the most rows a trajectory, a catalog or a label set is enumerated into
ROW_LIMIT = 100_000


# ---------------------------------------------------------------------------------------
# closed-form extents
# ---------------------------------------------------------------------------------------


def _where(decl: Declaration, r: Region) -> str:
    return f"regions[{decl.regions.index(r)}]({r.name})"


def cached_at(r: Region, t):
    """The live extent entering call ``t`` (an int or a numpy array of calls): the policy's closed form."""
    return r.policy.cached_at(r.initial, r.growth, t)


def settle_calls(r: Region) -> float:
    """Calls until the cached extent stops changing (its fixed point is entered at this call); inf if never."""
    return r.policy.settle_calls(r.initial, r.growth)


def _shape_steps(r: Region) -> float:
    """Calls over which the extent a signature sees changes (none for a constant extent)."""
    return 0 if r.policy.constant_extent else settle_calls(r)


def _shape_extent(r: Region, live):
    return r.policy.shape_extent(live)


def trajectory(decl: Declaration, region: str, calls: int | None = None) -> pd.DataFrame:
    """Extent trajectory a_r(t) of ``region``: one row per call.

    Columns: call, cached (extent entering the call), attended (cached + growth),
    retained (after retention), shape_extent (what a tensor signature sees).
    ``calls`` rows when given; by default ``decl.horizon`` rows, or more for a bounded
    region that has not reached its fixed point by then (the table ends in steady state).
    More than :data:`ROW_LIMIT` rows raise :class:`DerivationLimitError`.
    """
    r = decl.region(region)
    if calls is not None:
        if not isinstance(calls, int) or isinstance(calls, bool) or calls < 1:
            raise ValueError(f"calls must be a positive integer, got {calls!r}")
        n, field_, what = calls, "calls", f"the trajectory of '{r.name}' over {calls:,} calls"
    else:
        settle = settle_calls(r)
        n = decl.horizon if (not r.policy.bounded or settle + 1 <= decl.horizon) else int(settle) + 1
        field_ = f"{_where(decl, r)}.policy"
        what = f"the trajectory of '{r.name}' to its fixed point ({r.policy.describe()}, growth {r.growth})"
    if n > ROW_LIMIT:
        raise DerivationLimitError(field_, n, ROW_LIMIT, what + "; pass calls= for a prefix")
    t = np.arange(n, dtype=np.int64)
    cached = np.asarray(cached_at(r, t), dtype=np.int64)
    attended = cached + r.growth
    retained = np.asarray(cached_at(r, t + 1), dtype=np.int64) if r.policy.bounded else attended
    df = pd.DataFrame(dict(call=t, cached=cached, attended=attended, retained=retained))
    df["shape_extent"] = _shape_extent(r, cached)
    df.insert(0, "region", r.name)
    return df


def envelope(decl: Declaration, region: str) -> tuple[float, float, float]:
    """(A_minus, A, A_attended): lowest and highest cached shape extent, and A + f_call."""
    r = decl.region(region)
    if not r.policy.bounded:
        return float(r.initial), math.inf, math.inf
    a_minus = r.policy.shape_extent(cached_at(r, 0))
    a = r.policy.shape_extent(cached_at(r, settle_calls(r)))
    return a_minus, a, r.policy.attended_extent(a, r.call_max)


def catalog_width(decl: Declaration, region: str) -> dict:
    """K_r = ceil(W_r / s_r) + 1 with W_r = A_r - A_r^-, and the count of distinct extents (both exact)."""
    r = decl.region(region)
    a_minus, a, _ = envelope(decl, region)
    if not r.policy.bounded:
        return dict(W=math.inf, s=r.growth, K=math.inf, K_enumerated=math.inf)
    w = a - a_minus
    k = 1 if w == 0 else -(-w // r.growth) + 1
    return dict(W=w, s=r.growth, K=k, K_enumerated=int(_shape_steps(r)) + 1)


def region_shape(decl: Declaration, r: Region, extent: float, stock: bool) -> tuple:
    """``r``'s shape with its clock dim at ``extent``; with ``stock`` the declared stock constants win."""
    out = []
    for d in r.shape:
        if isinstance(d, int):
            out.append(d)
        elif d == r.clock:
            out.append(r.stock.get(d, extent) if stock else extent)
        else:
            out.append(r.stock.get(d, decl.dims[d]) if stock else decl.dims[d])
    return tuple(out)


def nbytes(shape: tuple, dtype: str) -> float:
    """Bytes of a tensor of ``shape`` and declared ``dtype`` (inf for an unbounded extent)."""
    n = float(DTYPE_BYTES[dtype])
    for d in shape:
        n *= d
    return n


def _sized(decl: Declaration, region: str, stock: bool) -> tuple:
    r = decl.region(region)
    _, a, a_att = envelope(decl, region)
    ext = a_att if r.envelope == "attended" else a
    return region_shape(decl, r, int(ext) if math.isfinite(ext) else ext, stock=stock)


def demand_shape(decl: Declaration, region: str) -> tuple:
    """The shape the state rule allocates: clocks and retention, not implementation constants."""
    return _sized(decl, region, stock=False)


def stock_shape(decl: Declaration, region: str) -> tuple:
    """The shape the stock runtime reserves (its implementation constants, where declared)."""
    return _sized(decl, region, stock=True)


def region_table(decl: Declaration) -> pd.DataFrame:
    """One row per region: policy, envelope, demand vs stock shape and bytes, ρ_r, K_r."""
    rows = []
    for r in decl.regions:
        a_minus, a, a_att = envelope(decl, r.name)
        kw = catalog_width(decl, r.name)
        dshape, sshape = demand_shape(decl, r.name), stock_shape(decl, r.name)
        dbytes, sbytes = nbytes(dshape, r.dtype), nbytes(sshape, r.dtype)
        rows.append(
            dict(
                region=r.name,
                role=r.role,
                clock=r.clock,
                policy=r.policy.describe(),
                bounded=r.policy.bounded,
                lifetime=r.lifetime,
                mutability=r.mutability,
                layout=r.policy.layout,
                initial=r.initial,
                growth=r.growth,
                A_minus=a_minus,
                A=a,
                A_attended=a_att,
                A_steady_attended=r.policy.attended_extent(a, r.growth),
                envelope=r.envelope,
                demand_shape=dshape,
                stock_shape=sshape,
                demand_bytes=dbytes,
                stock_bytes=sbytes,
                rho=(sbytes / dbytes) if (dbytes and math.isfinite(dbytes)) else math.nan,
                W=kw["W"],
                K=kw["K"],
                K_enumerated=kw["K_enumerated"],
                address_stable=r.address_stable,
                resident_in=r.resident_in,
            )
        )
    return pd.DataFrame(rows)


def rho_table(decl: Declaration) -> pd.DataFrame:
    """ρ_r per region: reserved (stock) bytes over the declared live extent's bytes."""
    t = region_table(decl)
    out = t[["region", "role", "stock_shape", "demand_shape", "stock_bytes", "demand_bytes", "rho"]].copy()
    out["stock_MiB"] = out["stock_bytes"] / 2**20
    out["demand_MiB"] = out["demand_bytes"] / 2**20
    return out.sort_values("rho", ascending=False, na_position="last").reset_index(drop=True)


# ---------------------------------------------------------------------------------------
# catalogs
# ---------------------------------------------------------------------------------------


def _op_where(decl: Declaration, op: Operator) -> str:
    return f"operators[{decl.operators.index(op)}]({op.name})"


def _regions_read(decl: Declaration, op: Operator) -> list[Region]:
    """The regions ``op`` reads, each once, in declared order."""
    return [decl.region(n) for n in dict.fromkeys(op.reads)]


def _flush_sizes(op: Operator) -> range:
    if op.flush is None:
        return range(0)
    lo, hi, step = op.flush
    return range(lo, hi + 1, step)


def _admission(decl: Declaration, op: Operator):
    """f -> (admitted, reason) for calls of ``op``."""
    adm = decl.admission

    def admitted(f: int) -> tuple[bool, str]:
        if adm is None or adm.clock != op.clock:
            return True, "no admission predicate on this clock"
        if adm.admits(f):
            return True, f"f={f} <= f_chunk={adm.max_call}"
        return False, f"f={f} > f_chunk={adm.max_call}: outside the admission predicate (eager)"

    return admitted


def catalog_counts(decl: Declaration, operator: str) -> dict:
    """Class counts of ``operator``'s catalog in closed form (nothing is enumerated).

    steady (K), flush, flush_admitted, flush_rejected, priming, rows (the enumerated
    catalog's length), admitted_classes (distinct admitted labels: steady and flush, a flush
    of the steady size sharing its label). Infinite for an operator reading an unbounded region.
    """
    op = decl.operator(operator)
    regions = _regions_read(decl, op)
    priming = int(any(r.initial > 0 and r.lifetime == "turn" for r in regions))
    if any(not r.policy.bounded for r in regions):
        inf = math.inf
        return dict(steady=inf, flush=inf, flush_admitted=inf, flush_rejected=inf, priming=priming, rows=inf,
                    admitted_classes=inf)
    k = int(max((_shape_steps(r) for r in regions), default=0)) + 1
    sizes = _flush_sizes(op)
    admitted = _admission(decl, op)
    adm = decl.admission
    if adm is None or adm.clock != op.clock:
        n_adm = len(sizes)
    else:
        n_adm = len(sizes[: max(0, (adm.max_call - sizes.start) // sizes.step + 1)]) if len(sizes) else 0
    steady_ok = admitted(op.call)[0]
    shared = steady_ok and op.call in sizes  # a flush of the steady size has the steady label
    labels = k * (int(steady_ok) + n_adm - int(shared))
    return dict(steady=k, flush=k * len(sizes), flush_admitted=k * n_adm, flush_rejected=k * (len(sizes) - n_adm),
                priming=priming, rows=priming + k * (1 + len(sizes)), admitted_classes=labels)


def _check_rows(decl: Declaration, op: Operator, rows, what: str) -> None:
    if rows > ROW_LIMIT:
        needed = rows if math.isfinite(rows) else math.inf
        raise DerivationLimitError(_op_where(decl, op), needed, ROW_LIMIT, f"{what} of '{op.name}'")


def operator_tuples(decl: Declaration, operator: str) -> list[tuple]:
    """Distinct tuples of cached shape extents (one per region read) along the joint trajectory, in call order.

    Empty for an operator reading an unbounded region (no finite catalog).
    """
    op = decl.operator(operator)
    regions = _regions_read(decl, op)
    counts = catalog_counts(decl, operator)
    if not math.isfinite(counts["steady"]):
        return []
    _check_rows(decl, op, counts["steady"], "the steady classes")
    t = np.arange(counts["steady"], dtype=np.int64)
    cols = {r.name: np.asarray(_shape_extent(r, np.asarray(cached_at(r, t))), dtype=np.int64) for r in regions}
    return [tuple(int(cols[n][i]) for n in op.reads) for i in range(len(t))]


#: the catalog kind of a cache-free priming call (eager by construction)
PRIMING = "priming"


def catalog(decl: Declaration, operator: str) -> pd.DataFrame:
    """The enumerated signature catalog of ``operator``.

    One row per class: class_id, operator, kind ("steady", "flush" or "priming"),
    ext_<region> per region read, f (call frames), admitted, reason, bindings (classes x
    invocations per chunk for a per-step binding). More than :data:`ROW_LIMIT` rows raise
    :class:`DerivationLimitError` (see :func:`catalog_counts` for the counts alone).
    """
    op = decl.operator(operator)
    counts = catalog_counts(decl, operator)
    if math.isfinite(counts["rows"]):
        _check_rows(decl, op, counts["rows"], "the catalog")
    tuples = operator_tuples(decl, operator)
    admitted = _admission(decl, op)
    rows = []
    if counts["priming"]:
        rows.append(
            dict(kind=PRIMING, f=None, admitted=False, reason="cache-free prompt priming: eager by construction",
                 **{f"ext_{n}": None for n in op.reads})
        )
    ok, why = admitted(op.call)
    for t in tuples:
        rows.append(dict(kind="steady", f=op.call, admitted=ok, reason=why, **{f"ext_{n}": e for n, e in zip(op.reads, t)}))
    sizes = [(f,) + admitted(f) for f in _flush_sizes(op)]
    for t in tuples:
        ext = {f"ext_{n}": e for n, e in zip(op.reads, t)}
        for f, ok, why in sizes:
            rows.append(dict(kind="flush", f=f, admitted=ok, reason=why, **ext))
    df = pd.DataFrame(rows)
    if df.empty:
        df = pd.DataFrame(columns=["kind", "f", "admitted", "reason"] + [f"ext_{n}" for n in op.reads])
    df.insert(0, "operator", op.name)
    df.insert(0, "class_id", [f"{op.name}:{i}" for i in range(len(df))])
    df["bindings"] = op.per_chunk
    for k, v in op.scalars.items():
        df[f"q_{k}"] = v
    return df


def class_label(extents, f: int, batch: int | None = None) -> tuple:
    """The label of one signature class: the cached extents of the regions read (in ``Operator.reads``
    order) and the call's frames, led by the batch size for a batched operator. The one place the
    label format is written: catalogs and classifiers (:func:`cadencelab.replay.bind`) build labels here."""
    return ((int(batch),) if batch is not None else ()) + tuple(int(e) for e in extents) + (int(f),)


def admitted_labels(decl: Declaration, operator: str, batch_sizes=None) -> set[tuple]:
    """Labels (:func:`class_label`) of the admitted steady and flush classes of ``operator``; with
    ``batch_sizes``, one label per declared batch size and class."""
    op = decl.operator(operator)
    counts = catalog_counts(decl, operator)
    if math.isfinite(counts["admitted_classes"]):
        _check_rows(decl, op, counts["admitted_classes"], "the admitted labels")
    admitted = _admission(decl, op)
    sizes = [f for f in dict.fromkeys([op.call, *_flush_sizes(op)]) if admitted(f)[0]]
    batches = [None] if batch_sizes is None else list(batch_sizes)
    return {class_label(t, f, b) for t in operator_tuples(decl, operator) for f in sizes for b in batches}


def class_labels(decl: Declaration, operator: str, kind: str) -> set[tuple]:
    """Labels of every enumerated ``kind`` ("steady" or "flush") class of ``operator``, admitted or
    not: what a traffic may be observed to see."""
    op = decl.operator(operator)
    sizes = [op.call] if kind == "steady" else list(_flush_sizes(op)) if kind == "flush" else None
    if sizes is None:
        raise ValueError(f"kind must be 'steady' or 'flush', got {kind!r}")
    return {class_label(t, f) for t in operator_tuples(decl, operator) for f in sizes}


def catalogs(decl: Declaration) -> pd.DataFrame:
    """All operators' catalogs stacked (a :class:`DerivationLimitError` if one is too long to enumerate)."""
    frames = [catalog(decl, o.name) for o in decl.operators]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# ---------------------------------------------------------------------------------------
# checks and verdicts
# ---------------------------------------------------------------------------------------


def checks(decl: Declaration) -> pd.DataFrame:
    """Properties C1 (multiple fixed clocks), C2 (bounded retention), C3 (single session)."""
    fixed = [c.name for c in decl.clocks if c.fixed]
    dynamic = [c.name for c in decl.clocks if not c.fixed]
    if len(fixed) >= 2 and not dynamic:
        c1 = (True, f"{len(fixed)} clocks with configuration-fixed rates: {', '.join(fixed)}")
    elif dynamic:
        c1 = (False, f"traffic-dependent clock rates: {', '.join(dynamic)}")
    else:
        c1 = (False, f"only {len(fixed)} fixed clock(s); C1 needs two or more")
    persistent = [r for r in decl.regions if r.persistent and r.role == "state"]
    bounded = [r.name for r in persistent if r.policy.bounds_growth]
    unbounded = [r.name for r in persistent if not r.policy.bounded]
    if bounded:
        why = f"retention-bounded persistent regions: {', '.join(bounded)}"
        if unbounded:
            why += f"; unbounded (outside the lossless scope): {', '.join(unbounded)}"
        c2 = (True, why)
    elif unbounded:
        c2 = (False, f"persistent regions with no retention policy: {', '.join(unbounded)}")
    else:
        c2 = (False, "no persistent region obeys a declared retention policy")
    c3 = (
        (True, "one interactive session with sequentially dependent stages (no intra-session batching)")
        if decl.single_session
        else (False, "declared as a batched / multi-request workload")
    )
    return pd.DataFrame(
        [dict(check="C1", name="multiple native clocks", passed=c1[0], reason=c1[1]),
         dict(check="C2", name="bounded retention", passed=c2[0], reason=c2[1]),
         dict(check="C3", name="single-session interactivity", passed=c3[0], reason=c3[1])]
    )


def verdict(decl: Declaration, k_max: int = K_MAX, class_budget: int = CLASS_BUDGET) -> pd.DataFrame:
    """Is each operator's catalog affordable? One row per operator with the reason.

    Affordable: the signature does not depend on traffic, at most ``k_max`` steady classes,
    and every admitted class (steady and flush) fits the replay engine's capture budget
    ``class_budget`` (beyond it the engine runs new classes eagerly as ``catalog_full``).
    Counted in closed form: no catalog is enumerated.
    """
    rows = []
    for op in decl.operators:
        unb = [n for n in op.reads if not decl.region(n).policy.bounded]
        if unb:
            rows.append(dict(operator=op.name, K=math.inf, flush_admitted=0, flush_rejected=0, admitted_classes=math.inf,
                             class_budget=class_budget, bindings=math.inf, affordable=False,
                             reason=f"reads unbounded region(s) {', '.join(unb)}: catalog is infinite"))
            continue
        c = catalog_counts(decl, op.name)
        k, fa, fr, labels = c["steady"], c["flush_admitted"], c["flush_rejected"], c["admitted_classes"]
        widths = [catalog_width(decl, n)["K"] for n in dict.fromkeys(op.reads)]
        if op.query_dependent:
            ok, why = False, "query length depends on traffic: signatures are not determined by clocks"
        elif k > k_max:
            ok, why = False, f"K={k} steady classes > {k_max}: too wide for exact specialization"
        elif labels > class_budget:
            ok, why = False, (f"{labels} admitted classes (K={k} steady classes, {fa} admitted flush) > the replay "
                              f"engine's budget of "
                              f"{class_budget}: {labels - class_budget} would run eagerly (catalog_full)")
        else:
            ok, why = True, (f"K={k} steady classes (region widths {widths}), {fa} admitted flush classes; "
                             f"{labels} admitted classes <= budget {class_budget}")
        rows.append(dict(operator=op.name, K=k, flush_admitted=fa, flush_rejected=fr, admitted_classes=labels,
                         class_budget=class_budget, bindings=k * op.per_chunk, affordable=ok, reason=why))
    return pd.DataFrame(rows)


@dataclass
class Derivation:
    """Everything derived from one declaration.

    ``catalog`` stacks the operators' enumerated catalogs; ``not_enumerated`` maps each
    operator whose catalog has more than :data:`ROW_LIMIT` rows to that row count (its
    verdict is still exact: counts are closed-form).
    """

    declaration: Declaration
    regions: pd.DataFrame
    rho: pd.DataFrame
    catalog: pd.DataFrame
    checks: pd.DataFrame
    verdict: pd.DataFrame
    not_enumerated: dict = field(default_factory=dict)

    def report(self) -> str:
        """A plain-text report (what the CLI prints)."""
        d = self.declaration
        lines = [f"# {d.model}: derived from the declaration", ""]
        lines.append("## checks")
        for _, c in self.checks.iterrows():
            lines.append(f"  {c['check']} {'PASS' if c['passed'] else 'FAIL'}  {c['name']}: {c['reason']}")
        lines += ["", "## regions (ρ_r = stock reserved / declared live extent)"]
        cols = ["region", "policy", "A", "A_attended", "demand_shape", "stock_shape", "rho", "K"]
        with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 40):
            t = self.regions[cols].copy()
            t["rho"] = t["rho"].map(lambda v: "n/a" if v != v else f"{v:.2f}" if v >= 0.01 else f"{v:.2g}")
            lines.append(t.to_string(index=False))
            lines += ["", "## operator catalogs"]
            lines.append(self.verdict.to_string(index=False))
        for op, n in self.not_enumerated.items():
            lines.append(f"  {op}: catalog not enumerated ({n:,} rows > {ROW_LIMIT:,}); counts above are exact")
        return "\n".join(lines)


def derive(decl: Declaration, k_max: int = K_MAX, class_budget: int = CLASS_BUDGET) -> Derivation:
    """All derivations of ``decl``. Catalogs longer than :data:`ROW_LIMIT` rows are counted, not enumerated."""
    frames, skipped = [], {}
    for o in decl.operators:
        rows = catalog_counts(decl, o.name)["rows"]
        if math.isfinite(rows) and rows > ROW_LIMIT:
            skipped[o.name] = int(rows)
            continue
        frames.append(catalog(decl, o.name))
    cat = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return Derivation(decl, region_table(decl), rho_table(decl), cat, checks(decl),
                      verdict(decl, k_max, class_budget), skipped)
