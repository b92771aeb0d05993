"""Derivations from a declaration alone, before any traffic.

* ``trajectory``: the extent a_r(t) entering and leaving each call;
* ``region_table``: envelope A_r, demand bytes, stock bytes, ρ_r, catalog width K_r;
* ``catalog``: the enumerated signature classes per operator, with partial-flush classes
  bounded by the admission predicate;
* ``checks``: properties C1-C3 with readable reasons;
* ``verdict``: whether each operator's catalog is affordable for exact specialization.

Everything returns a pandas DataFrame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from .declaration import DTYPE_BYTES, Declaration, Operator, Region

#: default ceiling on steady signature classes per operator for exact specialization
K_MAX = 16
#: how many calls to simulate before declaring a bounded trajectory non-converging
_MAX_CALLS = 1_000_000


# ---------------------------------------------------------------------------------------
# extents
# ---------------------------------------------------------------------------------------


def _steps(region: Region):
    """Yield (cached, attended, retained) per call until the cached extent is a fixed point."""
    cached = region.initial
    for t in range(_MAX_CALLS):
        attended = cached + region.growth
        retained = region.policy.extent_after(attended)
        yield t, cached, attended, retained
        if retained == cached:
            return
        cached = retained


def trajectory(decl: Declaration, region: str, calls: int | None = None) -> pd.DataFrame:
    """Extent trajectory a_r(t) of ``region``: one row per call.

    Columns: call, cached (extent entering the call), attended (cached + growth),
    retained (after retention), shape_extent (what a tensor signature sees).
    Bounded regions run to their fixed point and then ``calls`` rows in all (default
    ``decl.horizon``); unbounded ones run ``calls`` rows.
    """
    r = decl.region(region)
    n = decl.horizon if calls is None else calls
    rows = []
    if r.policy.bounded:
        last = None
        for t, cached, attended, retained in _steps(r):
            rows.append((t, cached, attended, retained))
            last = (cached, attended, retained)
        while len(rows) < n:  # steady state repeats
            rows.append((len(rows),) + last)
    else:
        cached = r.initial
        for t in range(n):
            attended = cached + r.growth
            rows.append((t, cached, attended, attended))
            cached = attended
    df = pd.DataFrame(rows, columns=["call", "cached", "attended", "retained"])
    df["shape_extent"] = [r.policy.shape_extent(c) for c in df["cached"]]
    df.insert(0, "region", r.name)
    return df


def envelope(decl: Declaration, region: str) -> tuple[float, float, float]:
    """(A_minus, A, A_attended): lowest and highest cached shape extent, and A + f_call."""
    r = decl.region(region)
    if not r.policy.bounded:
        return float(r.initial), math.inf, math.inf
    exts = [r.policy.shape_extent(c) for _, c, _, _ in _steps(r)]
    a_minus, a = min(exts), max(exts)
    if r.policy.kind in ("ring", "fixed"):
        return a_minus, a, a
    return a_minus, a, a + r.call_max


def catalog_width(decl: Declaration, region: str) -> dict:
    """K_r = ceil(W_r / s_r) + 1 with W_r = A_r - A_r^-, and the enumerated count of distinct extents."""
    r = decl.region(region)
    a_minus, a, _ = envelope(decl, region)
    if not r.policy.bounded:
        return dict(W=math.inf, s=r.growth, K=math.inf, K_enumerated=math.inf)
    w = a - a_minus
    k_enum = len({r.policy.shape_extent(c) for _, c, _, _ in _steps(r)})
    # with no growth the extent only settles once (e.g. a prompt longer than a window): count, no stride
    k = 1 if w == 0 else (k_enum if r.growth == 0 else math.ceil(w / r.growth) + 1)
    return dict(W=w, s=r.growth, K=k, K_enumerated=k_enum)


def _shape(decl: Declaration, r: Region, extent: float, stock: bool) -> tuple:
    out = []
    for d in r.shape:
        if isinstance(d, int):
            out.append(d)
        elif d == r.clock:
            out.append(r.stock.get(d, extent) if stock else extent)
        else:
            out.append(r.stock.get(d, decl.dims[d]) if stock else decl.dims[d])
    return tuple(out)


def _nbytes(shape: tuple, dtype: str) -> float:
    n = float(DTYPE_BYTES[dtype])
    for d in shape:
        n *= d
    return n


def demand_shape(decl: Declaration, region: str) -> tuple:
    """The shape the state rule allocates: clocks and retention, not implementation constants."""
    r = decl.region(region)
    _, a, a_att = envelope(decl, region)
    ext = a_att if r.envelope == "attended" else a
    return _shape(decl, r, int(ext) if math.isfinite(ext) else ext, stock=False)


def stock_shape(decl: Declaration, region: str) -> tuple:
    """The shape the stock runtime reserves (its implementation constants, where declared)."""
    r = decl.region(region)
    _, a, a_att = envelope(decl, region)
    ext = a_att if r.envelope == "attended" else a
    return _shape(decl, r, int(ext) if math.isfinite(ext) else ext, stock=True)


def region_table(decl: Declaration) -> pd.DataFrame:
    """One row per region: policy, envelope, demand vs stock shape and bytes, ρ_r, K_r."""
    rows = []
    for r in decl.regions:
        a_minus, a, a_att = envelope(decl, r.name)
        kw = catalog_width(decl, r.name)
        dshape, sshape = demand_shape(decl, r.name), stock_shape(decl, r.name)
        dbytes, sbytes = _nbytes(dshape, r.dtype), _nbytes(sshape, r.dtype)
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
                A_steady_attended=(a + r.growth) if r.policy.kind not in ("ring", "fixed") else a,
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


def _operator_tuples(decl: Declaration, op: Operator) -> list[tuple]:
    """Distinct tuples of cached shape extents (one per region read) along the joint trajectory."""
    regions = [decl.region(n) for n in op.reads]
    if any(not r.policy.bounded for r in regions):
        return []
    cached = [r.initial for r in regions]
    seen: list[tuple] = []
    for _ in range(_MAX_CALLS):
        key = tuple(r.policy.shape_extent(c) for r, c in zip(regions, cached))
        if key not in seen:
            seen.append(key)
        nxt = [r.policy.extent_after(c + r.growth) for r, c in zip(regions, cached)]
        if nxt == cached:
            break
        cached = nxt
    return seen


def catalog(decl: Declaration, operator: str) -> pd.DataFrame:
    """The enumerated signature catalog of ``operator``.

    One row per class: class_id, operator, kind ("steady", "flush" or "priming"),
    ext_<region> per region read, f (call frames), admitted, reason, bindings (classes x
    invocations per chunk for a per-step binding).
    """
    op = decl.operator(operator)
    tuples = _operator_tuples(decl, op)
    adm = decl.admission
    rows = []

    def admitted(f: int) -> tuple[bool, str]:
        if adm is None or adm.clock != op.clock:
            return True, "no admission predicate on this clock"
        if adm.admits(f):
            return True, f"f={f} <= f_chunk={adm.max_call}"
        return False, f"f={f} > f_chunk={adm.max_call}: outside the admission predicate (eager)"

    if any(decl.region(n).initial > 0 and decl.region(n).lifetime == "turn" for n in op.reads):
        rows.append(
            dict(kind="priming", f=None, admitted=False, reason="cache-free prompt priming: eager by construction",
                 **{f"ext_{n}": None for n in op.reads})
        )
    for t in tuples:
        ok, why = admitted(op.call)
        rows.append(dict(kind="steady", f=op.call, admitted=ok, reason=why, **{f"ext_{n}": e for n, e in zip(op.reads, t)}))
    if op.flush is not None:
        lo, hi, step = op.flush
        for t in tuples:
            for f in range(lo, hi + 1, step):
                ok, why = admitted(f)
                rows.append(dict(kind="flush", f=f, admitted=ok, reason=why, **{f"ext_{n}": e for n, e in zip(op.reads, t)}))
    df = pd.DataFrame(rows)
    if df.empty:
        df = pd.DataFrame(columns=["kind", "f", "admitted", "reason"] + [f"ext_{n}" for n in op.reads])
    df.insert(0, "operator", op.name)
    df.insert(0, "class_id", [f"{op.name}:{i}" for i in range(len(df))])
    df["bindings"] = op.per_chunk
    for k, v in op.scalars.items():
        df[f"q_{k}"] = v
    return df


def admitted_labels(decl: Declaration, operator: str) -> set[tuple]:
    """Catalog labels (ext_<region>..., f) of the admitted steady and flush classes of ``operator``."""
    cat = catalog(decl, operator)
    ext = [c for c in cat.columns if c.startswith("ext_")]
    rows = cat[cat["admitted"].astype(bool)]
    return {tuple(int(r[c]) for c in ext) + (int(r["f"]),) for _, r in rows.iterrows()}


def catalogs(decl: Declaration) -> pd.DataFrame:
    """All operators' catalogs stacked."""
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
    bounded = [r.name for r in persistent if r.policy.bounded and r.policy.kind != "fixed"]
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


def verdict(decl: Declaration, k_max: int = K_MAX) -> pd.DataFrame:
    """Is each operator's catalog affordable? One row per operator with the reason."""
    rows = []
    for op in decl.operators:
        unb = [n for n in op.reads if not decl.region(n).policy.bounded]
        if unb:
            rows.append(dict(operator=op.name, K=math.inf, flush_admitted=0, flush_rejected=0, bindings=math.inf,
                             affordable=False, reason=f"reads unbounded region(s) {', '.join(unb)}: catalog is infinite"))
            continue
        cat = catalog(decl, op.name)
        k = int((cat["kind"] == "steady").sum())
        fa = int(((cat["kind"] == "flush") & cat["admitted"]).sum())
        fr = int(((cat["kind"] == "flush") & ~cat["admitted"].astype(bool)).sum())
        widths = [catalog_width(decl, n)["K"] for n in op.reads]
        if op.query_dependent:
            ok, why = False, "query length depends on traffic: signatures are not determined by clocks"
        elif k > k_max:
            ok, why = False, f"K={k} steady classes > {k_max}: too wide for exact specialization"
        else:
            ok, why = True, f"K={k} steady classes (region widths {widths}), {fa} admitted flush classes"
        rows.append(dict(operator=op.name, K=k, flush_admitted=fa, flush_rejected=fr, bindings=k * op.per_chunk,
                         affordable=ok, reason=why))
    return pd.DataFrame(rows)


@dataclass
class Derivation:
    """Everything derived from one declaration."""

    declaration: Declaration
    regions: pd.DataFrame
    rho: pd.DataFrame
    catalog: pd.DataFrame
    checks: pd.DataFrame
    verdict: pd.DataFrame

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
            t["rho"] = t["rho"].map(lambda v: f"{v:.2f}" if v == v else "n/a")
            lines.append(t.to_string(index=False))
            lines += ["", "## operator catalogs"]
            lines.append(self.verdict.to_string(index=False))
        return "\n".join(lines)


def derive(decl: Declaration, k_max: int = K_MAX) -> Derivation:
    """All derivations of ``decl``."""
    return Derivation(decl, region_table(decl), rho_table(decl), catalogs(decl), checks(decl), verdict(decl, k_max))
