"""Property-based fuzzing of declarations: valid ones derive consistently, invalid ones fail closed.

Two generators share one strategy (:func:`specs`), which draws a *consistent* declaration
together with the per-call tick counts of its clocks:

* random clock forests (roots advance a few ticks per call; children are driven through
  ``ratio``; ``offset`` adds lookahead ticks per call);
* regions with a random retention policy (SlidingWindow, Ring, PromptRetained, Fixed) in
  either layout, whose ``growth`` is the per-call tick count of their clock, ``max_call``
  growth plus the clock's lookahead, ``initial`` within the policy's bound, symbolic dims,
  stock constants at least the demand, optional residency;
* operators reading random subsets of the regions, with optional flush ranges; an optional
  admission predicate.

``test_valid_declarations_derive_consistently`` checks every derivation against an explicit
step-by-step simulation written here (independent of ``derive.py``): envelopes, trajectories,
demand/stock bytes, the catalogs (steady, flush, priming rows, admission) and the verdict.
``test_invalid_declarations_raise_declaration_error_naming_the_field`` mutates one field of a
generated valid declaration to a bad value (wrong type, negative, NaN, huge negative, unknown
name, list where a name is expected, None, empty tuple...) and demands a ``DeclarationError``
whose ``.field`` names that field -- never another exception type, never acceptance.

600 + 600 generated declarations (and 2 x 150 more in the small-region properties) run in CI.
Library bugs found while writing these were fixed; their tests stay at the end as regression tests.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cadencelab.contract import (
    CLASS_BUDGET,
    K_MAX,
    Admission,
    Clock,
    Declaration,
    DeclarationError,
    DeviceConstant,
    Fixed,
    Operator,
    PromptRetained,
    Region,
    Ring,
    SlidingWindow,
    catalog,
    catalog_width,
    checks,
    demand_shape,
    derive,
    envelope,
    region_table,
    stock_shape,
    trajectory,
    verdict,
)
from cadencelab.contract.declaration import DTYPE_BYTES

VALID_EXAMPLES = 200
INVALID_EXAMPLES = 200
FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                  HealthCheck.filter_too_much])

CLOCK_NAMES = ("tokens", "frames", "samples", "steps", "chunks")
DIM_NAMES = ("n_steps", "heads", "slots")
LAYOUTS = ("chronological", "newest_first")
LIFETIMES = ("call", "turn", "stream")
ROLES = ("state", "workspace", "constant")


# ---------------------------------------------------------------------------------------
# the explicit model: policies and clocks simulated here, independently of derive.py
# ---------------------------------------------------------------------------------------


def retained_after(policy, attended: int) -> int:
    """The live extent a policy keeps after a call that attended ``attended`` frames."""
    if isinstance(policy, SlidingWindow):
        return attended if attended <= policy.window else policy.window
    if isinstance(policy, Ring):
        return attended if attended <= policy.capacity else policy.capacity
    if isinstance(policy, PromptRetained):
        bound = policy.prompt + policy.retained
        return attended if attended <= bound else bound
    if isinstance(policy, Fixed):
        return policy.extent
    raise AssertionError(f"unexpected policy {policy!r}")


def signature_extent(policy, live: int) -> int:
    """The extent a tensor signature sees: a ring is allocated at capacity, a fixed region at its extent."""
    if isinstance(policy, Ring):
        return policy.capacity
    if isinstance(policy, Fixed):
        return policy.extent
    return live


@dataclasses.dataclass
class ClockModel:
    """Per-call tick counts of every clock: roots advance ``advance[root]``, children follow ratios."""

    clocks: tuple
    advance: dict  # root name -> ticks per call
    lookahead_root: dict  # root name -> lookahead ticks per call
    call_clock: str | None = None  # a root that advances one tick per call, declared as the call clock

    def ancestors(self, name) -> list[str]:
        """``name`` and every clock above it, nearest first."""
        out = [name]
        while self.parent(out[-1]) is not None:
            out.append(self.parent(out[-1]))
        return out

    def ratio_to(self, name, ancestor) -> int:
        """Ticks of ``name`` per tick of ``ancestor`` (product of ratios below it)."""
        n = 1
        while name != ancestor:
            n *= self.clock(name).ratio
            name = self.parent(name)
        return n

    def lca(self, a, b):
        up = self.ancestors(a)
        return next((x for x in self.ancestors(b) if x in up), None)

    def per_call(self, name):
        """(committed, lookahead, unit) of ``name`` per call of the call clock, or None when it is not driven by it."""
        if self.call_clock is None or self.call_clock not in self.ancestors(name):
            return None
        path = self.ancestors(name)[: self.ancestors(name).index(self.call_clock)][::-1]  # below the call clock
        look, unit = 0, 1
        for n in path:
            c = self.clock(n)
            look = look * c.ratio + c.offset
            unit = 1 if c.offset else unit * c.ratio
        return self.ratio_to(name, self.call_clock), look, unit if look else 1

    def parent(self, name):
        return next(c for c in self.clocks if c.name == name).parent

    def clock(self, name):
        return next(c for c in self.clocks if c.name == name)

    def ticks(self, name) -> int:
        c = self.clock(name)
        if c.parent is None:
            return self.advance[name]
        return self.ticks(c.parent) * c.ratio

    def lookahead(self, name) -> int:
        """Lookahead ticks per call: the parent's scaled by ``ratio``, plus this clock's ``offset``."""
        c = self.clock(name)
        if c.parent is None:
            return self.lookahead_root[name] + c.offset
        return self.lookahead(c.parent) * c.ratio + c.offset

    def run(self, calls: int) -> list[dict]:
        """Counters of every clock after each call, advancing the roots tick by tick."""
        counters = {c.name: 0 for c in self.clocks}
        out = []
        for _ in range(calls):
            for root, n in self.advance.items():
                for _ in range(n):  # one root tick drives every clock below it
                    self._tick(root, counters, 1)
            out.append(dict(counters))
        return out

    def _tick(self, name, counters, n):
        counters[name] += n
        for c in self.clocks:
            if c.parent == name:
                self._tick(c.name, counters, n * c.ratio)


def simulate_region(region: Region, clocks: ClockModel, calls: int = 400) -> list[tuple[int, int, int]]:
    """(cached, attended, retained) per call, stepping the clocks, until the cached extent repeats."""
    counters = clocks.run(calls)
    before = 0
    cached = region.initial
    rows, seen = [], set()
    for t in range(calls):
        grew = counters[t][region.clock] - before
        before = counters[t][region.clock]
        attended = cached + grew
        kept = retained_after(region.policy, attended)
        rows.append((cached, attended, kept))
        if cached in seen:
            break
        seen.add(cached)
        cached = kept
    return rows


def my_envelope(region: Region, clocks: ClockModel) -> tuple[int, int, int]:
    exts = [signature_extent(region.policy, c) for c, _, _ in simulate_region(region, clocks)]
    a_minus, a = min(exts), max(exts)
    call_max = region.growth if region.max_call is None else region.max_call
    a_att = a if isinstance(region.policy, (Ring, Fixed)) else a + call_max
    return a_minus, a, a_att


def my_catalog_tuples(decl: Declaration, op: Operator, clocks: ClockModel, calls: int = 400) -> list[tuple]:
    """Distinct signature-extent tuples of ``op``'s regions along the joint trajectory, in order."""
    regions = [decl.region(n) for n in op.reads]
    counters = clocks.run(calls)
    cached = [r.initial for r in regions]
    before = [0] * len(regions)
    seen_states, tuples = set(), []
    for t in range(calls):
        key = tuple(signature_extent(r.policy, c) for r, c in zip(regions, cached))
        if key not in tuples:
            tuples.append(key)
        state = tuple(cached)
        if state in seen_states:
            break
        seen_states.add(state)
        nxt = []
        for i, r in enumerate(regions):
            grew = counters[t][r.clock] - before[i]
            before[i] = counters[t][r.clock]
            nxt.append(retained_after(r.policy, cached[i] + grew))
        cached = nxt
    return tuples


# ---------------------------------------------------------------------------------------
# the generator of consistent declarations
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Spec:
    decl: Declaration
    clocks: ClockModel
    derived: dict = dataclasses.field(default_factory=dict)  # field path -> value the declaration must derive


@st.composite
def clock_models(draw) -> ClockModel:
    n = draw(st.integers(1, 4))
    names = list(draw(st.permutations(CLOCK_NAMES)))[:n]
    clocks = []
    for i, name in enumerate(names):
        parent = draw(st.sampled_from(names[:i])) if (i and draw(st.booleans())) else None
        ratio = draw(st.integers(1, 3)) if parent else None
        rate = draw(st.none() | st.floats(0.5, 100.0))
        if parent is not None:  # a child's rate is its parent's times the ratio, or not given
            prate = next(c for c in clocks if c.name == parent).rate_hz
            rate = None if (prate is None or draw(st.booleans())) else prate * ratio
        clocks.append(Clock(
            name, f"{name} tick", parent=parent, ratio=ratio, offset=draw(st.integers(0, 2)), rate_hz=rate,
            fixed=draw(st.booleans()),
        ))
    roots = [c.name for c in clocks if c.parent is None]
    advance = {r: draw(st.integers(0, 3)) for r in roots}
    lookahead = {r: draw(st.integers(0, 2)) for r in roots}
    call_clock = draw(st.sampled_from(roots)) if draw(st.booleans()) else None
    if call_clock is not None:  # one call is one tick of the call clock
        advance[call_clock] = 1
    return ClockModel(tuple(clocks), advance, lookahead, call_clock)


@st.composite
def policies(draw, call_max: int = 0):
    layout = draw(st.sampled_from(LAYOUTS))
    kind = draw(st.sampled_from(("sliding", "ring", "prompt", "fixed")))
    if kind == "sliding":
        return SlidingWindow(draw(st.integers(1, 24)), layout)
    if kind == "ring":  # a ring holds at least one call's frames
        return Ring(draw(st.integers(max(1, call_max), max(1, call_max) + 24)), layout)
    if kind == "prompt":
        return PromptRetained(draw(st.integers(0, 16)), draw(st.integers(1, 24)), layout)
    return Fixed(draw(st.integers(1, 12)), layout)  # a fixed region of 0 frames is refused


def _initial_bound(policy) -> int:
    if isinstance(policy, SlidingWindow):
        return policy.window
    if isinstance(policy, Ring):
        return policy.capacity
    if isinstance(policy, PromptRetained):
        return policy.prompt
    return policy.extent


@st.composite
def specs(draw, max_regions: int = 3, max_operators: int = 3) -> Spec:
    cm = draw(clock_models())
    clock_names = [c.name for c in cm.clocks]
    dims = {d: draw(st.integers(1, 4)) for d in draw(st.lists(st.sampled_from(DIM_NAMES), unique=True, max_size=2))}
    regions, declared = [], []
    derived = {}
    n_regions = draw(st.integers(1, max_regions))
    for i in range(n_regions):
        clock = draw(st.sampled_from(clock_names))
        growth = cm.ticks(clock)
        pc = cm.per_call(clock)
        derive_it = pc is not None and draw(st.booleans())
        if derive_it:  # growth and max_call left to the declaration: committed and committed + lookahead
            max_call = pc[0] + pc[1]
        else:
            max_call = growth + cm.lookahead(clock) if draw(st.booleans()) else None
        policy = draw(policies(call_max=growth if max_call is None else max_call))
        initial = draw(st.integers(0, _initial_bound(policy)))
        others = draw(st.lists(st.sampled_from(tuple(dims)) | st.integers(1, 3), max_size=2)) if dims else \
            draw(st.lists(st.integers(1, 3), max_size=2))
        pos = draw(st.integers(0, len(others)))
        shape = tuple(others[:pos]) + (clock,) + tuple(others[pos:])
        mutability = "immutable" if (growth == 0 and not derive_it and draw(st.booleans())) else "mutable"
        envelope_kind = draw(st.sampled_from(("retained", "attended")))
        partial = Region(f"r{i}", clock=clock, shape=shape, policy=policy, growth=growth, max_call=max_call,
                         initial=initial)
        _, a, a_att = my_envelope(partial, cm)
        demand = a_att if envelope_kind == "attended" else a
        stock = {}
        for d in sorted({d for d in shape if isinstance(d, str)}):
            if draw(st.booleans()):
                stock[d] = (demand if d == clock else dims[d]) + draw(st.integers(0, 5))
                stock[d] = max(stock[d], 1)
        resident_in = None
        hosts = [r.name for r in regions if r.resident_in is None]
        if hosts and draw(st.integers(0, 3)) == 0:
            resident_in = draw(st.sampled_from(hosts))
        final = dataclasses.replace(
            partial, lifetime=draw(st.sampled_from(LIFETIMES)), mutability=mutability,
            role=draw(st.sampled_from(ROLES)), envelope=envelope_kind, dtype=draw(st.sampled_from(sorted(DTYPE_BYTES))),
            stock=stock, address_stable=draw(st.booleans()), resident_in=resident_in)
        regions.append(final)  # as resolved: what the generator reasons with
        declared.append(dataclasses.replace(final, growth=None, max_call=None) if derive_it else final)
        if derive_it:
            derived[f"regions[{i}].growth"], derived[f"regions[{i}].max_call"] = growth, max_call
    names = [r.name for r in regions]
    operators = []
    for j in range(draw(st.integers(0, max_operators))):
        clock = draw(st.sampled_from(clock_names))
        reads = tuple(draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names))))
        limit = flush_limit(cm, clock, [r for r in regions if r.name in reads])
        pc = cm.per_call(clock)
        call = max(1, cm.ticks(clock))
        flush = None
        look_flush = None if pc is None or pc[1] == 0 else (pc[1], pc[0] + pc[1] - pc[2], pc[2])
        if look_flush is not None and look_flush[1] <= limit and draw(st.booleans()):
            flush, derived[f"operators[{j}].flush"] = "lookahead", look_flush
        elif limit >= 1 and draw(st.booleans()):
            lo = draw(st.integers(1, min(4, limit)))
            flush = (lo, min(limit, lo + draw(st.integers(0, 6))), draw(st.integers(1, 3)))
        if pc is not None and draw(st.booleans()):
            derived[f"operators[{j}].call"], call = call, None
        operators.append(Operator(
            f"o{j}", reads=reads,
            clock=clock, call=call, flush=flush, per_chunk=draw(st.integers(1, 3)),
            scalars=draw(st.dictionaries(st.sampled_from(("dtype", "n", "flag")),
                                         st.integers(0, 9) | st.booleans() | st.just("float32"), max_size=2)),
            query_dependent=draw(st.integers(0, 4)) == 0))
    admission = None
    if draw(st.booleans()):
        clock = draw(st.sampled_from(clock_names))
        lower = max([max(1, cm.ticks(o.clock)) for o in operators if o.clock == clock], default=1)
        pc = cm.per_call(clock)
        if pc is not None and pc[0] >= lower and draw(st.booleans()):  # derived: the steady call on that clock
            admission, derived["admission.max_call"] = Admission(clock), pc[0]
        else:
            admission = Admission(clock, draw(st.integers(lower, lower + 10)))
    constants = tuple(DeviceConstant(f"k{i}", (draw(st.integers(1, 9)),)) for i in range(draw(st.integers(0, 2))))
    decl = Declaration(
        model=draw(st.sampled_from(("m", "fuzz-model", "token2wav-like"))), clocks=cm.clocks, regions=tuple(declared),
        operators=tuple(operators), admission=admission, dims=dims, constants=constants,
        single_session=draw(st.booleans()), horizon=draw(st.integers(2, 16)), call_clock=cm.call_clock)
    return Spec(decl, cm, derived)


def flush_limit(cm: ClockModel, clock: str, regions) -> float:
    """The largest flush on ``clock`` that adds no more than max_call to any growing region it reads."""
    limit = math.inf
    for r in regions:
        lca = cm.lca(clock, r.clock)
        if r.growth == 0 or r.mutability == "immutable" or lca is None:
            continue
        call_max = r.growth if r.max_call is None else r.max_call
        limit = min(limit, call_max * cm.ratio_to(clock, lca) // cm.ratio_to(r.clock, lca))
    return limit


# ---------------------------------------------------------------------------------------
# valid declarations: every derivation agrees with the explicit model
# ---------------------------------------------------------------------------------------


def _nbytes(shape, dtype) -> float:
    return float(DTYPE_BYTES[dtype]) * math.prod(shape)


def _shape_of(decl, r: Region, ext: int, stock: bool) -> tuple:
    """The model: each named dimension's size, the clock's at ``ext``, the stock overrides on top."""
    sizes = {**decl.dims, r.clock: ext, **(r.stock if stock else {})}
    return tuple(d if isinstance(d, int) else sizes[d] for d in r.shape)


def check_derived_fields(spec: Spec) -> None:
    """Fields left to the call clock hold the committed / lookahead values computed by the model here."""
    decl = spec.decl
    for path, want in spec.derived.items():
        if path == "admission.max_call":
            got = decl.admission.max_call
        else:
            kind, rest = path.split("[", 1)
            idx, attr = rest.split("].")
            got = getattr(getattr(decl, kind)[int(idx)], attr)
        assert got == want, (path, got, want)


def check_regions(spec: Spec) -> None:
    decl, cm = spec.decl, spec.clocks
    table = region_table(decl).set_index("region")
    for r in decl.regions:
        assert r.growth == cm.ticks(r.clock)  # the generator's consistency, restated
        a_minus, a, a_att = envelope(decl, r.name)
        assert (a_minus, a, a_att) == my_envelope(r, cm), r
        assert a_att >= a >= a_minus >= 0
        traj = trajectory(decl, r.name, calls=decl.horizon)
        assert len(traj) >= decl.horizon
        assert (traj["cached"] <= a).all(), (r, traj)
        assert (traj["shape_extent"] <= a).all() and (traj["shape_extent"] >= a_minus).all()
        assert (traj["attended"] == traj["cached"] + r.growth).all()
        sim = simulate_region(r, cm)
        n = min(len(sim), len(traj))
        assert [tuple(x) for x in traj[["cached", "attended", "retained"]].values[:n].tolist()] == sim[:n]
        demand_ext = a_att if r.envelope == "attended" else a
        dshape, sshape = demand_shape(decl, r.name), stock_shape(decl, r.name)
        assert dshape == _shape_of(decl, r, demand_ext, stock=False)
        assert sshape == _shape_of(decl, r, demand_ext, stock=True)
        row = table.loc[r.name]
        assert row["demand_bytes"] == _nbytes(dshape, r.dtype)
        assert row["stock_bytes"] == _nbytes(sshape, r.dtype)
        # every stock constant is >= the demand: the stock reservation can only be larger
        assert row["demand_bytes"] <= row["stock_bytes"]
        if row["demand_bytes"]:
            assert row["rho"] >= 1.0
        else:
            assert math.isnan(row["rho"])
        width = catalog_width(decl, r.name)
        assert width["K_enumerated"] == len({signature_extent(r.policy, c) for c, _, _ in sim})
        assert width["W"] == a - a_minus


def _admitted(decl: Declaration, op: Operator, f: int) -> bool:
    adm = decl.admission
    return adm is None or adm.clock != op.clock or f <= adm.max_call


def check_catalogs(spec: Spec) -> None:
    decl, cm = spec.decl, spec.clocks
    v = verdict(decl).set_index("operator") if decl.operators else None
    for op in decl.operators:
        cat = catalog(decl, op.name)
        ext_cols = [f"ext_{n}" for n in op.reads]
        mine = my_catalog_tuples(decl, op, cm)
        steady = cat[cat["kind"] == "steady"]
        got = [tuple(int(x) for x in row) for row in steady[ext_cols].values.tolist()] if ext_cols else \
            [()] * len(steady)
        assert got == mine, (op, got, mine)
        assert (steady["f"] == op.call).all()
        assert steady["admitted"].astype(bool).tolist() == [_admitted(decl, op, op.call)] * len(steady)
        flush = cat[cat["kind"] == "flush"]
        if op.flush is None:
            assert flush.empty
        else:
            sizes = list(range(op.flush[0], op.flush[1] + 1, op.flush[2]))
            assert len(flush) == len(sizes) * len(mine)
            want = [(t, f, _admitted(decl, op, f)) for t in mine for f in sizes]
            have = [(tuple(int(x) for x in row[:-2]), int(row[-2]), bool(row[-1]))
                    for row in flush[ext_cols + ["f", "admitted"]].values.tolist()]
            assert have == want
        priming = cat[cat["kind"] == "priming"]
        expect_priming = any(decl.region(n).initial > 0 and decl.region(n).lifetime == "turn" for n in op.reads)
        assert len(priming) == int(expect_priming)
        assert not priming["admitted"].astype(bool).any()
        assert cat["class_id"].is_unique
        assert (cat["bindings"] == op.per_chunk).all()
        row = v.loc[op.name]
        assert row["K"] == len(mine)
        assert row["bindings"] == len(mine) * op.per_chunk
        labels = {t + (f,) for t in mine for f in [op.call, *(sizes if op.flush else [])] if _admitted(decl, op, f)}
        assert row["admitted_classes"] == len(labels)
        assert bool(row["affordable"]) == (not op.query_dependent and len(mine) <= K_MAX and len(labels) <= CLASS_BUDGET)


@settings(max_examples=VALID_EXAMPLES, **FUZZ)
@given(spec=specs())
def test_valid_declarations_derive_consistently(spec):
    d = derive(spec.decl)  # never raises on a valid declaration
    assert len(d.regions) == len(spec.decl.regions)
    assert d.checks["check"].tolist() == ["C1", "C2", "C3"]
    check_derived_fields(spec)
    check_regions(spec)
    check_catalogs(spec)


@settings(max_examples=150, **FUZZ)
@given(spec=specs(max_regions=1, max_operators=1))
def test_catalog_width_formula_matches_enumeration_when_the_stride_divides_the_window(spec):
    """K = ceil(W / s) + 1 equals the enumerated count for a monotone trajectory whose stride divides W."""
    (r,) = spec.decl.regions
    w = catalog_width(spec.decl, r.name)
    a_minus, a, _ = envelope(spec.decl, r.name)
    if r.growth == 0 or w["W"] % r.growth or signature_extent(r.policy, r.initial) != a_minus:
        w_exts = {signature_extent(r.policy, c) for c, _, _ in simulate_region(r, spec.clocks)}
        assert w["K_enumerated"] == len(w_exts)
        return
    assert w["K"] == w["K_enumerated"] == w["W"] // r.growth + 1


@settings(max_examples=150, **FUZZ)
@given(spec=specs(max_regions=1, max_operators=0))
def test_single_region_operator_catalog_has_K_steady_classes(spec):
    """One operator over one region: its steady classes are exactly the region's enumerated extents."""
    (r,) = spec.decl.regions
    op = Operator("solo", reads=(r.name,), clock=r.clock, call=max(1, r.growth))
    decl = dataclasses.replace(spec.decl, operators=(op,), admission=None)
    steady = catalog(decl, "solo").query("kind == 'steady'")
    assert len(steady) == catalog_width(decl, r.name)["K_enumerated"]
    assert checks(decl)["passed"].dtype == bool


# ---------------------------------------------------------------------------------------
# invalid declarations: one field mutated, DeclarationError naming it
# ---------------------------------------------------------------------------------------

NAN = float("nan")
HUGE_NEG = -(10**30)
BAD_POSITIVE = (0, -1, HUGE_NEG, 2.5, True, False, None, NAN, "3", [3], (), math.inf)
BAD_NON_NEGATIVE = (-1, HUGE_NEG, 2.5, True, None, NAN, "0", [0], (), -math.inf)
BAD_NAME = ("", None, 5, ["x"], ("x",), NAN, 2.5)
BAD_REF = ("no_such_thing", "", 5, ["frames"], ("frames",), NAN, True)
BAD_ENUM = ("bogus", "", None, 5, ["call"], ("turn",), NAN)
BAD_MAPPING = (None, [("a", 1)], "abc", 5, ("a",))


class _Opaque:
    """An arbitrary object where a value is expected."""


def _where_region(decl, i):
    r = decl.regions[i]
    return f"regions[{i}]({r.name})"


def _replaced(decl: Declaration, field: str, index: int, **kw) -> dict:
    """``{field: items}`` with item ``index`` of the declaration's ``field`` changed by ``kw``."""
    items = list(getattr(decl, field))
    items[index] = dataclasses.replace(items[index], **kw)
    return {field: tuple(items)}


def _region_mutations(decl: Declaration, i: int):
    """(description, new declaration kwargs, acceptable fields) for region i."""
    r = decl.regions[i]
    w = _where_region(decl, i)

    def rep(**kw):
        return _replaced(decl, "regions", i, **kw)

    out = []
    for v in BAD_NAME:
        where = f"regions[{i}]({v})" if isinstance(v, str) else f"regions[{i}]"
        out.append((f"region name {v!r}", rep(name=v), {f"{where}.name", f"regions[{i}].name"}))  # a bad name: not repeated
    if i > 0:
        out.append(("duplicate region name", rep(name=decl.regions[0].name), {f"regions[{i}]({decl.regions[0].name}).name"}))
    for v in BAD_REF:
        out.append((f"region clock {v!r}", rep(clock=v), {f"{w}.clock"}))
    for v in (["frames"], (), None, "frames", 5):
        out.append((f"region shape {v!r}", rep(shape=v), {f"{w}.shape"}))
    others = tuple(d for d in r.shape if d != r.clock)
    out.append(("shape without its clock", rep(shape=others + (2,)), {f"{w}.shape"}))
    out.append(("shape naming its clock twice", rep(shape=r.shape + (r.clock,)), {f"{w}.shape"}))
    for j, d in enumerate(r.shape):
        if d == r.clock:
            continue
        for v in (0, -1, HUGE_NEG, 2.5, True, None, NAN, ["x"], "undeclared_dim", _Opaque()):
            shape = tuple(v if k == j else x for k, x in enumerate(r.shape))
            out.append((f"shape[{j}] = {v!r}", rep(shape=shape), {f"{w}.shape[{j}]"}))
    for v in ("sliding_window", None, 5, _Opaque(), (SlidingWindow(4),)):
        out.append((f"policy {v!r}", rep(policy=v), {f"{w}.policy"}))
    p = r.policy
    fields = {SlidingWindow: ("window",), Ring: ("capacity",), PromptRetained: ("prompt", "retained"),
              Fixed: ("extent",)}[type(p)]
    for fld in fields:
        minimum = 0 if fld in ("prompt", "extent") else 1
        for v in (BAD_NON_NEGATIVE if minimum == 0 else BAD_POSITIVE):
            kw = {fld: v}
            initial = r.initial
            if fld == "prompt":  # keep initial <= prompt from failing first on a valid-int mutation
                initial = 0
            out.append((f"policy.{fld} = {v!r}", rep(policy=dataclasses.replace(p, **kw), initial=initial),
                        {f"{w}.policy.{fld}"}))
    for v in ("oldest_first", "", None, 5, ["chronological"], NAN):
        out.append((f"policy.layout {v!r}", rep(policy=dataclasses.replace(p, layout=v)), {f"{w}.policy.layout"}))
    for v in BAD_NON_NEGATIVE:
        if v is not None:  # growth None is derived from the call clock
            out.append((f"growth {v!r}", rep(growth=v), {f"{w}.growth"}))
        out.append((f"initial {v!r}", rep(initial=v), {f"{w}.initial"}))
    if isinstance(p, PromptRetained):
        out.append(("initial beyond the prompt", rep(initial=p.prompt + 1), {f"{w}.initial"}))
    if isinstance(p, SlidingWindow):
        out.append(("initial beyond the window", rep(initial=p.window + 1), {f"{w}.initial"}))
    call_max = r.growth if r.max_call is None else r.max_call
    if isinstance(p, Ring) and call_max >= 2:
        out.append(("ring smaller than one call", rep(policy=Ring(call_max - 1, p.layout), initial=0),
                    {f"{w}.policy.capacity"}))
    bad_max = [2.5, True, "5", NAN, -1, [1], HUGE_NEG]
    if r.growth > 0:
        bad_max.append(r.growth - 1)
    for v in bad_max:
        out.append((f"max_call {v!r}", rep(max_call=v), {f"{w}.max_call"}))
    for fld in ("lifetime", "mutability", "role", "envelope", "dtype"):
        for v in BAD_ENUM + (("float8",) if fld == "dtype" else ()):
            out.append((f"{fld} {v!r}", rep(**{fld: v}), {f"{w}.{fld}"}))
    if r.growth > 0:
        out.append(("immutable region that grows", rep(mutability="immutable"), {f"{w}.growth"}))
    for v in BAD_MAPPING:
        out.append((f"stock {v!r}", rep(stock=v), {f"{w}.stock"}))
    out.append(("stock key not in shape", rep(stock={"no_such_dim": 4}), {f"{w}.stock.no_such_dim"}))
    for v in (0, -1, 2.5, True, None, NAN, "8", HUGE_NEG):
        out.append((f"stock[{r.clock}] = {v!r}", rep(stock={r.clock: v}), {f"{w}.stock.{r.clock}"}))
    # a region that hosts another cannot become resident itself: the error would name the hosted one
    hosted = any(x.resident_in == r.name for x in decl.regions)
    for v in () if hosted else ("no_such_region", 5, ["r0"], ("r0",), NAN, r.name):
        out.append((f"resident_in {v!r}", rep(resident_in=v), {f"{w}.resident_in"}))
    return out


def _operator_mutations(decl: Declaration, j: int):
    o = decl.operators[j]
    w = f"operators[{j}]({o.name})"

    def rep(**kw):
        return _replaced(decl, "operators", j, **kw)

    out = []
    for v in BAD_NAME:
        out.append((f"operator name {v!r}", rep(name=v), {f"operators[{j}]({v}).name", f"operators[{j}].name"}))
    if j > 0:
        out.append(("duplicate operator name", rep(name=decl.operators[0].name), {f"operators[{j}].name"}))
    for v in ("r0", ["r0"], None, 5, {"r0"}):
        out.append((f"reads {v!r}", rep(reads=v), {f"{w}.reads"}))
    for v in BAD_REF + (None,):
        k = len(o.reads)
        out.append((f"reads[{k}] = {v!r}", rep(reads=o.reads + (v,)), {f"{w}.reads[{k}]"}))
    for v in BAD_REF + (None,):
        out.append((f"operator clock {v!r}", rep(clock=v), {f"{w}.clock"}))
    for v in BAD_POSITIVE:
        if v is not None or decl.call_clock is None:  # call None is derived from a call clock
            out.append((f"call {v!r}", rep(call=v), {f"{w}.call"}))
        out.append((f"per_chunk {v!r}", rep(per_chunk=v), {f"{w}.per_chunk"}))
    if decl.call_clock is None:
        out.append(("flush 'lookahead' without a call clock", rep(flush="lookahead"), {f"{w}.flush"}))
    written = [decl.region(n) for n in dict.fromkeys(o.reads)]
    written = [r for r in written
               if r.growth > 0 and r.mutability == "mutable" and _lca(decl, o.clock, r.clock) is not None]
    if written:
        out.append(("call differs from the growth it writes", rep(call=o.call + 1), {f"{w}.call"}))
        limit = min(r.call_max * _ratio(decl, o.clock, _lca(decl, o.clock, r.clock))
                    // _ratio(decl, r.clock, _lca(decl, o.clock, r.clock)) for r in written)
        out.append(("flush beyond a region's max_call", rep(flush=(1, limit + 1, 1)), {f"{w}.flush"}))
    for v in ((0, 2, 1), (3, 1, 1), (1, 2, 0), (1, 2), (1, 2, 1, 1), [1, 2, 1], (1, 2.0, 1), "abc", (True, 2, 1),
              (1, NAN, 1), 5, (), (-1, 2, 1), (1, HUGE_NEG, 1)):
        out.append((f"flush {v!r}", rep(flush=v), {f"{w}.flush"}))
    for v in BAD_MAPPING:
        out.append((f"scalars {v!r}", rep(scalars=v), {f"{w}.scalars"}))
    for v in ([1], {"a": 1}, _Opaque(), (1, 2), b"x"):
        out.append((f"scalar {v!r}", rep(scalars={"k": v}), {f"{w}.scalars.k"}))
    return out


def _clock_mutations(decl: Declaration, i: int):
    c = decl.clocks[i]

    def rep(**kw):
        return _replaced(decl, "clocks", i, **kw)

    out = []
    for v in BAD_NAME:
        out.append((f"clock name {v!r}", rep(name=v), {f"clocks[{i}].name"}))
    if i > 0:
        out.append(("duplicate clock name", rep(name=decl.clocks[0].name), {f"clocks[{i}].name"}))
    for v in ("", None, 5, ["tick"]):
        out.append((f"unit {v!r}", rep(unit=v), {f"clocks[{i}].unit"}))
    if c.parent is None:
        for v in (2, 1, 0, "2", 2.5):
            out.append((f"root ratio {v!r}", rep(ratio=v), {f"clocks[{i}].ratio"}))
    else:
        for v in BAD_POSITIVE:
            out.append((f"ratio {v!r}", rep(ratio=v), {f"clocks[{i}].ratio"}))
        for v in BAD_REF:
            out.append((f"parent {v!r}", rep(parent=v), {f"clocks[{i}].parent"}))
        out.append(("self-driven clock", rep(parent=c.name), {f"clocks.{c.name}.parent"}))
        children = [x.name for x in decl.clocks if x.parent == c.name]
        for ch in children:
            out.append(("drive cycle through a child", rep(parent=ch), {f"clocks.{c.name}.parent"}))
    for v in BAD_NON_NEGATIVE:
        out.append((f"offset {v!r}", rep(offset=v), {f"clocks[{i}].offset"}))
    for v in (0, -1.0, NAN, "fast", -math.inf, math.inf, [1.0], HUGE_NEG):
        out.append((f"rate_hz {v!r}", rep(rate_hz=v), {f"clocks[{i}].rate_hz"}))
    parent = next((x for x in decl.clocks if x.name == c.parent), None)
    if parent is not None and parent.rate_hz is not None:
        out.append(("rate contradicting the parent's", rep(rate_hz=parent.rate_hz * c.ratio * 2), {f"clocks[{i}].rate_hz"}))
    return out


def _ancestors(decl, name):
    out = [name]
    while decl.clock(out[-1]).parent is not None:
        out.append(decl.clock(out[-1]).parent)
    return out


def _lca(decl, a, b):
    up = _ancestors(decl, a)
    return next((x for x in _ancestors(decl, b) if x in up), None)


def _ratio(decl, name, ancestor) -> int:
    n = 1
    while name != ancestor:
        n *= decl.clock(name).ratio
        name = decl.clock(name).parent
    return n


def mutations(decl: Declaration):
    out = []
    for v in BAD_NAME:
        out.append((f"model {v!r}", dict(model=v), {"model"}))
    for fld in ("clocks", "regions", "operators", "constants"):
        seq = getattr(decl, fld)
        for v in (list(seq), None, "abc", 5, {"a": 1}):
            out.append((f"{fld} {type(v).__name__}", {fld: v}, {fld}))
        if seq or fld == "constants":
            bad = seq + ("junk",)
            out.append((f"{fld} element junk", {fld: bad}, {f"{fld}[{len(seq)}]"}))
    out.append(("no clocks", dict(clocks=()), {"clocks"}))
    for v in BAD_MAPPING:
        out.append((f"dims {v!r}", dict(dims=v), {"dims"}))
    for v in (0, -1, 2.5, True, None, NAN, "4", HUGE_NEG, [4]):
        out.append((f"dims value {v!r}", dict(dims={**decl.dims, "extra_dim": v}), {"dims.extra_dim"}))
    clock0 = decl.clocks[0].name
    out.append(("dim named like a clock", dict(dims={**decl.dims, clock0: 3}), {f"dims.{clock0}"}))
    for v in (("frames", 2), 5, "frames", _Opaque()):
        out.append((f"admission {v!r}", dict(admission=v), {"admission"}))
    adm = decl.admission or Admission(clock0, 2)
    for v in BAD_REF + (None,):
        out.append((f"admission.clock {v!r}", dict(admission=dataclasses.replace(adm, clock=v)), {"admission.clock"}))
    for v in BAD_POSITIVE:
        if v is not None or decl.call_clock is None:  # None is derived from a call clock
            out.append((f"admission.max_call {v!r}", dict(admission=dataclasses.replace(adm, max_call=v)),
                        {"admission.max_call"}))
    for o in decl.operators:
        if o.call >= 2:
            out.append(("admission below a steady call", dict(admission=Admission(o.clock, o.call - 1)),
                        {"admission.max_call"}))
    for v in ("no_such_clock", 5, ["frames"], NAN):
        out.append((f"call_clock {v!r}", dict(call_clock=v), {"call_clock"}))
    for v in (1, 0, "yes", None, NAN):
        out.append((f"single_session {v!r}", dict(single_session=v), {"single_session"}))
    for v in (1, 0, -1, 2.5, True, None, NAN, "64", HUGE_NEG):
        out.append((f"horizon {v!r}", dict(horizon=v), {"horizon"}))
    for i in range(len(decl.clocks)):
        out += _clock_mutations(decl, i)
    for i in range(len(decl.regions)):
        out += _region_mutations(decl, i)
    for j in range(len(decl.operators)):
        out += _operator_mutations(decl, j)
    return out


@settings(max_examples=INVALID_EXAMPLES, **FUZZ)
@given(spec=specs(), data=st.data())
def test_invalid_declarations_raise_declaration_error_naming_the_field(spec, data):
    options = mutations(spec.decl)
    what, change, fields = data.draw(st.sampled_from(options), label="mutation")
    with pytest.raises(Exception) as info:
        dataclasses.replace(spec.decl, **change)
    err = info.value
    assert type(err) is DeclarationError, f"{what}: {type(err).__name__}: {err}"
    assert err.field in fields, f"{what}: field {err.field!r}, expected one of {sorted(fields)} ({err.reason})"
    assert err.reason and f"'{err.field}'" in str(err)


def test_every_mutation_family_is_reachable():
    """The mutation table covers every validated field of a rich declaration (a guard on the fuzzer)."""
    from cadencelab.adapters.token2wav.clocks import token2wav_declaration

    decl = token2wav_declaration()
    opts = mutations(decl)
    fields = {f for _, _, fs in opts for f in fs}
    for needle in ("model", "clocks", "dims", "admission.clock", "admission.max_call", "horizon", "single_session",
                   ".policy.layout", ".policy.prompt", ".policy.retained", ".policy.window", ".policy.extent",
                   ".shape", ".growth", ".initial", ".max_call", ".lifetime", ".mutability", ".role", ".envelope",
                   ".dtype", ".stock", ".resident_in", ".reads", ".flush", ".per_chunk", ".scalars", ".call",
                   ".ratio", ".offset", ".rate_hz", ".parent", ".unit", "call_clock"):
        assert any(needle in f for f in fields), needle
    for what, change, want in opts:
        with pytest.raises(DeclarationError) as info:
            dataclasses.replace(decl, **change)
        assert info.value.field in want, (what, info.value.field, want)


# ---------------------------------------------------------------------------------------
# bugs found by the fuzzer (fixed; kept as regression tests)
# ---------------------------------------------------------------------------------------

CLOCKS = (Clock("tokens", "token", rate_hz=25.0), Clock("frames", "frame", parent="tokens", ratio=2))


def _one_region(**kw) -> Declaration:
    base = dict(name="kv", clock="frames", shape=("frames", 2), policy=Ring(4), growth=2)
    base.update(kw)
    return Declaration("m", CLOCKS, (Region(**base),), (Operator("op", ("kv",), "frames", 2),))


@pytest.mark.parametrize("policy,initial", [(Ring(4), 10), (Fixed(2), 5), (SlidingWindow(8), 100)],
                         ids=["ring", "fixed", "sliding window"])
def test_initial_beyond_a_ring_or_fixed_bound_is_rejected(policy, initial):
    with pytest.raises(DeclarationError) as info:
        d = _one_region(policy=policy, initial=initial)
        # if accepted, the derivation is inconsistent: extent entering call 0 > envelope A
        _, a, _ = envelope(d, "kv")
        assert trajectory(d, "kv", calls=2)["cached"].max() <= a
    assert info.value.field == "regions[0](kv).initial"


def test_a_window_shorter_than_its_initial_extent_is_rejected():
    """Formerly accepted with K from the formula (24) against 2 real classes; now initial <= window."""
    with pytest.raises(DeclarationError) as info:
        _one_region(policy=SlidingWindow(3), initial=7, growth=0)
    assert info.value.field == "regions[0](kv).initial"


def test_region_device_is_gone():
    """Region.device was validated but never used: the runtime places carries, not the declaration."""
    assert "device" not in {f.name for f in dataclasses.fields(Region)}
    with pytest.raises(TypeError):
        Region("kv", clock="frames", shape=("frames",), policy=Ring(4), device="cpu")


def _decl_with(where: str, **kw) -> None:
    if where == "clock":
        Declaration("m", (Clock("tokens", "token", **kw), CLOCKS[1]), (_one_region().regions[0],))
    elif where == "region":
        _one_region(**kw)
    elif where == "operator":
        Declaration("m", CLOCKS, _one_region().regions, (Operator("op", ("kv",), "frames", 2, **kw),))
    elif where == "constant":
        Declaration("m", CLOCKS, _one_region().regions, constants=(DeviceConstant("c", **kw),))
    else:
        Declaration("m", CLOCKS, _one_region().regions, **kw)


UNVALIDATED = [
    # (id, where, kwargs, field the error should name)
    ("clock fixed='no' (truthy: C1 counts it as fixed)", "clock", dict(fixed="no"), "clocks[0].fixed"),
    ("clock fixed=None (falsy: C1 calls it traffic-dependent)", "clock", dict(fixed=None), "clocks[0].fixed"),
    ("clock rate_hz=True (a bool as 1 Hz)", "clock", dict(rate_hz=True), "clocks[0].rate_hz"),
    ("operator query_dependent='no' (truthy: verdict refuses the operator)", "operator", dict(query_dependent="no"),
     "operators[0](op).query_dependent"),
    ("region address_stable='no'", "region", dict(address_stable="no"), "regions[0](kv).address_stable"),
    ("constant dtype='float99'", "constant", dict(shape=(3,), dtype="float99"), "constants[0].dtype"),
    ("constant shape='abc'", "constant", dict(shape="abc"), "constants[0].shape"),
    ("dims key 5 (not a name)", "decl", dict(dims={5: 3}), "dims.5"),
    ("params=None", "decl", dict(params=None), "params"),
    ("region lifetime is a numpy array", "region", dict(lifetime=np.array(["call", "turn"])), "regions[0](kv).lifetime"),
    ("shape holds a numpy array", "region", dict(shape=(np.array([1, 2]), "frames")), "regions[0](kv).shape[0]"),
]


@pytest.mark.parametrize("where,kw,field", [(w, k, f) for _, w, k, f in UNVALIDATED], ids=[i for i, *_ in UNVALIDATED])
def test_unvalidated_fields_raise_declaration_error(where, kw, field):
    with pytest.raises(Exception) as info:
        _decl_with(where, **kw)
    assert type(info.value) is DeclarationError, f"{type(info.value).__name__}: {info.value}"
    assert info.value.field == field
