"""What an adapter declares: clocks, regions, operators, admission, device constants.

A :class:`Declaration` validates itself on construction and raises
:class:`DeclarationError` naming the offending field. Nothing here touches a tensor;
:mod:`cadencelab.contract.derivation` turns a declaration into extents, bytes, catalogs and
verdicts before any traffic arrives.

Declared once, derived everywhere: a declaration that names its ``call_clock`` (one tick =
one call) may leave ``Region.growth``/``max_call``, ``Operator.call``, ``Admission.max_call``
unset and write ``Operator.flush="lookahead"``; they are derived from the clocks' ratios and
lookahead offsets (:func:`cadencelab.contract.clocks.per_call`) when the declaration is built,
and the declaration holds the resolved values.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from .clocks import Clock, in_units_of, per_call, validate_clocks
from .errors import MAX_NAME, DeclarationError, check_name
from .policies import RetentionPolicy

LIFETIMES = ("call", "turn", "stream")
MUTABILITY = ("immutable", "mutable")
ROLES = ("state", "workspace", "constant")
ENVELOPES = ("retained", "attended")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int32": 4, "int64": 8, "int16": 2, "int8": 1, "bool": 1}


def _where(kind: str, i: int, name) -> str:
    """``regions[3](name)``, the name left out when it could not be printed on one line."""
    ok = isinstance(name, str) and name.isprintable() and 0 < len(name) <= MAX_NAME
    return f"{kind}[{i}]({name})" if ok else f"{kind}[{i}]"


def _derived(obj, **derived):
    """``obj`` with the ``derived`` fields set, remembering the object as declared (so a changed declaration
    derives them again instead of taking them as declared)."""
    out = dataclasses.replace(obj, **derived)
    object.__setattr__(out, "_as_declared", obj)
    return out


def _declared(obj):
    """What was declared, before the fields :func:`_derived` set."""
    return getattr(obj, "_as_declared", obj)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class Region:
    """A contract-managed state region.

    shape:   dims as ints, the region's clock name (the extent dim) or a symbolic dim
             declared in ``Declaration.dims`` (e.g. "steps").
    growth:  extent added per steady call along ``clock`` (the stride s_r). None: derived from
             the declaration's call clock (the committed ticks per call; 0 for an immutable
             region, or when there is no call clock or it does not drive ``clock``).
    max_call: the most one call can add (f_call; a flush with lookahead). None: committed +
             lookahead when ``growth`` was derived, else ``growth``.
    initial: extent at turn start (the prompt), 0 when the region starts empty; at most the
             policy's bound (window, capacity, prompt, fixed extent).
    envelope: "retained" sizes the region to the retention bound A (state between calls);
             "attended" to A + max_call (a workspace that holds a call's whole attended extent).
    stock:   the implementation constants the stock runtime allocates per dim
             (e.g. {"steps": 16, "frames": 1000}); ρ_r is measured against these.
    resident_in: the region whose storage holds this one (an in-buffer carry), if any.
    """

    name: str
    clock: str
    shape: tuple
    policy: Any
    growth: int | None = None
    max_call: int | None = None
    initial: int = 0
    lifetime: str = "stream"
    mutability: str = "mutable"
    role: str = "state"
    envelope: str = "retained"
    dtype: str = "float32"
    stock: Mapping[str, int] = field(default_factory=dict)
    address_stable: bool = False
    resident_in: str | None = None
    description: str = ""

    @property
    def call_max(self) -> int:
        """The most one call adds: ``max_call``, or ``growth`` when none is declared."""
        return self.growth if self.max_call is None else self.max_call

    @property
    def clock_axis(self) -> int:
        return list(self.shape).index(self.clock)

    @property
    def persistent(self) -> bool:
        return self.lifetime in ("turn", "stream")

    def validate(self, where: str, clocks: Mapping[str, Clock], dims: Mapping[str, int]) -> None:
        check_name(f"{where}.name", self.name, "a region")
        if not isinstance(self.clock, str) or self.clock not in clocks:
            raise DeclarationError(f"{where}.clock", f"unknown clock {self.clock!r}")
        if not isinstance(self.shape, tuple) or not self.shape:
            raise DeclarationError(f"{where}.shape", f"must be a non-empty tuple, got {self.shape!r}")
        for j, d in enumerate(self.shape):
            if isinstance(d, str):
                if d != self.clock and d not in dims:
                    raise DeclarationError(f"{where}.shape[{j}]", f"symbolic dim '{d}' is not declared in dims")
            elif not _is_int(d) or d <= 0:
                raise DeclarationError(f"{where}.shape[{j}]", f"dims must be positive integers or names, got {d!r}")
        if list(self.shape).count(self.clock) != 1:  # every dim is a name or an int by now: == is safe
            raise DeclarationError(f"{where}.shape", f"must name the clock '{self.clock}' exactly once, got {self.shape!r}")
        if not isinstance(self.policy, RetentionPolicy):
            raise DeclarationError(f"{where}.policy", f"unknown retention policy {type(self.policy).__name__} (a "
                                   f"policy is a RetentionPolicy)")
        self.policy.validate(f"{where}.policy")
        for name in ("growth", "initial"):
            v = getattr(self, name)
            if not _is_int(v) or v < 0:
                raise DeclarationError(f"{where}.{name}", f"must be a non-negative integer, got {v!r}")
        if self.max_call is not None and (not _is_int(self.max_call) or self.max_call < self.growth):
            raise DeclarationError(f"{where}.max_call", f"must be an integer >= growth ({self.growth}), got {self.max_call!r}")
        if not isinstance(self.lifetime, str) or self.lifetime not in LIFETIMES:
            raise DeclarationError(f"{where}.lifetime", f"must be one of {LIFETIMES}, got {self.lifetime!r}")
        if not isinstance(self.mutability, str) or self.mutability not in MUTABILITY:
            raise DeclarationError(f"{where}.mutability", f"must be one of {MUTABILITY}, got {self.mutability!r}")
        if not isinstance(self.role, str) or self.role not in ROLES:
            raise DeclarationError(f"{where}.role", f"must be one of {ROLES}, got {self.role!r}")
        if not isinstance(self.envelope, str) or self.envelope not in ENVELOPES:
            raise DeclarationError(f"{where}.envelope", f"must be one of {ENVELOPES}, got {self.envelope!r}")
        if not isinstance(self.dtype, str) or self.dtype not in DTYPE_BYTES:
            raise DeclarationError(f"{where}.dtype", f"unknown dtype {self.dtype!r}; known: {sorted(DTYPE_BYTES)}")
        if not isinstance(self.stock, Mapping):
            raise DeclarationError(f"{where}.stock", "must map dim names to implementation constants")
        for k, v in self.stock.items():
            if k not in self.shape:
                raise DeclarationError(f"{where}.stock.{k}", f"'{k}' is not a symbolic dim of shape {self.shape!r}")
            if not _is_int(v) or v <= 0:
                raise DeclarationError(f"{where}.stock.{k}", f"must be a positive integer, got {v!r}")
        if self.mutability == "immutable" and self.growth > 0:
            raise DeclarationError(f"{where}.growth", "an immutable region cannot grow per call")
        self.policy.check_region(where, self.initial, self.call_max,
                                 "max_call" if self.max_call is not None else "growth")
        if getattr(self.policy, "counts", False) and not self.dtype.startswith("int"):
            raise DeclarationError(f"{where}.dtype",
                                   f"a counter counts frames: declare an integer dtype, got {self.dtype!r}")
        if not isinstance(self.address_stable, bool):
            raise DeclarationError(f"{where}.address_stable", f"must be True or False, got {self.address_stable!r}")


@dataclass(frozen=True)
class Operator:
    """An operator whose signature the runtime may specialise.

    reads:    regions whose (shape) extent enters the operator's signature. A call advances
              every growing region it reads by one call (the consistency rules check it).
    call:     frames (on ``clock``) one steady call advances: the stride. None: the committed
              ticks of ``clock`` per tick of the declaration's call clock.
    flush:    (min, max, step) call sizes of a partial final flush, None for no flush, or
              "lookahead": derived from the call clock, from the lookahead to committed +
              lookahead - one lookahead unit (see :meth:`cadencelab.contract.clocks.PerCall.flush`).
    per_chunk: invocations per chunk (n_steps for a per-solver-step binding).
    scalars:  the non-extent configuration Q_o (dtype, n_steps, flags...).
    query_dependent: the query length depends on traffic (not on a clock), so the
              signature is not stable even when every region is bounded.
    """

    name: str
    reads: tuple
    clock: str
    call: int | None = None
    flush: tuple | str | None = None
    per_chunk: int = 1
    scalars: Mapping[str, Any] = field(default_factory=dict)
    query_dependent: bool = False
    description: str = ""

    def validate(self, where: str, clocks: Mapping[str, Clock], regions: Mapping[str, Region]) -> None:
        check_name(f"{where}.name", self.name, "an operator")
        if not isinstance(self.reads, tuple):
            raise DeclarationError(f"{where}.reads", f"must be a tuple of region names, got {self.reads!r}")
        for j, r in enumerate(self.reads):
            if not isinstance(r, str) or r not in regions:
                raise DeclarationError(f"{where}.reads[{j}]", f"unknown region '{r}'")
        if not isinstance(self.clock, str) or self.clock not in clocks:
            raise DeclarationError(f"{where}.clock", f"unknown clock {self.clock!r}")
        if not _is_int(self.call) or self.call <= 0:
            raise DeclarationError(f"{where}.call", f"must be a positive integer, got {self.call!r}")
        if self.flush is not None:
            if (
                not isinstance(self.flush, tuple)
                or len(self.flush) != 3
                or not all(_is_int(v) for v in self.flush)
                or self.flush[0] <= 0
                or self.flush[1] < self.flush[0]
                or self.flush[2] <= 0
            ):
                raise DeclarationError(f"{where}.flush", f"must be (min, max, step) positive integers with min <= max, got {self.flush!r}")
        if not _is_int(self.per_chunk) or self.per_chunk <= 0:
            raise DeclarationError(f"{where}.per_chunk", f"must be a positive integer, got {self.per_chunk!r}")
        if not isinstance(self.scalars, Mapping):
            raise DeclarationError(f"{where}.scalars", "must be a mapping of keyed scalar arguments")
        if not isinstance(self.query_dependent, bool):
            raise DeclarationError(f"{where}.query_dependent", f"must be True or False, got {self.query_dependent!r}")
        for k, v in self.scalars.items():
            if not isinstance(v, (int, float, bool, str, type(None))):
                raise DeclarationError(f"{where}.scalars.{k}", f"must be a plain scalar, got {type(v).__name__}")
            if isinstance(v, float) and not math.isfinite(v):
                raise DeclarationError(f"{where}.scalars.{k}", f"must be finite (a NaN or infinity keys no class), got {v!r}")


@dataclass(frozen=True)
class Admission:
    """The admission predicate: a call of ``f`` frames on ``clock`` is admissible iff f <= max_call.

    ``max_call`` None: the steady call, the committed ticks of ``clock`` per call (needs the
    declaration's call clock).
    """

    clock: str
    max_call: int | None = None

    def admits(self, f: int) -> bool:
        return f <= self.max_call


@dataclass(frozen=True)
class DeviceConstant:
    """A host-side constant the stock runtime rebuilds and copies every call, made device-resident."""

    name: str
    shape: tuple
    dtype: str = "float32"
    source: str = ""


@dataclass(frozen=True)
class Declaration:
    """A model's native-clock contract."""

    model: str
    clocks: tuple
    regions: tuple
    operators: tuple = ()
    admission: Admission | None = None
    dims: Mapping[str, int] = field(default_factory=dict)
    constants: tuple = ()
    single_session: bool = True
    horizon: int = 64
    params: Mapping[str, Any] = field(default_factory=dict)
    call_clock: str | None = None

    def __post_init__(self):
        self.validate()

    # -- lookups ---------------------------------------------------------------------
    def clock(self, name: str) -> Clock:
        return self.clock_map[name]

    @property
    def clock_map(self) -> dict[str, Clock]:
        return {c.name: c for c in self.clocks}

    def region(self, name: str) -> Region:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(f"no region '{name}' in the {self.model} declaration")

    def operator(self, name: str) -> Operator:
        for o in self.operators:
            if o.name == name:
                return o
        raise KeyError(f"no operator '{name}' in the {self.model} declaration")

    # -- changes -----------------------------------------------------------------------
    def replace(self, **changes) -> "Declaration":
        """This declaration with fields changed, validated and re-derived: a region's growth or max_call, an
        operator's call or flush and the admission that were derived from the clocks are derived again
        (``dataclasses.replace`` does the same: a derived value remembers it was derived)."""
        return dataclasses.replace(self, **changes)

    def with_clocks(self, *clocks: Clock) -> "Declaration":
        """This declaration with ``clocks`` (each replaces the clock of its name, or is added), re-derived."""
        by = {c.name: c for c in self.clocks}
        by.update({c.name: c for c in clocks})
        return self.replace(clocks=tuple(by.values()))

    # -- validation ------------------------------------------------------------------
    def validate(self) -> None:
        check_name("model", self.model, "a declaration")
        for name in ("clocks", "regions", "operators", "constants"):
            if not isinstance(getattr(self, name), tuple):
                raise DeclarationError(name, f"must be a tuple, got {type(getattr(self, name)).__name__}")
        if not self.clocks:
            raise DeclarationError("clocks", "declare at least one clock")
        clocks = validate_clocks(self.clocks)
        if self.call_clock is not None and (not isinstance(self.call_clock, str) or self.call_clock not in clocks):
            raise DeclarationError("call_clock", f"unknown clock {self.call_clock!r}")
        if not isinstance(self.dims, Mapping):
            raise DeclarationError("dims", "must map symbolic dim names to sizes")
        for k, v in self.dims.items():
            if not isinstance(k, str):
                raise DeclarationError(f"dims.{k}", f"dim names must be strings, got {type(k).__name__}")
            check_name(f"dims.{k}", k, "a dim")
            if not _is_int(v) or v <= 0:
                raise DeclarationError(f"dims.{k}", f"must be a positive integer, got {v!r}")
            if k in clocks:
                raise DeclarationError(f"dims.{k}", "a symbolic dim cannot share a clock's name")
        regions: dict[str, Region] = {}
        resolved = []
        for i, r in enumerate(self.regions):
            if not isinstance(r, Region):
                raise DeclarationError(f"regions[{i}]", f"expected a Region, got {type(r).__name__}")
            where = _where("regions", i, r.name)
            r = self._resolve_region(r, clocks)
            resolved.append(r)
            r.validate(where, clocks, self.dims)
            if r.name in regions:
                raise DeclarationError(f"{where}.name", f"duplicate region name '{r.name}'")
            regions[r.name] = r
        for i, r in enumerate(self.regions):
            if r.resident_in is not None:
                host = regions.get(r.resident_in) if isinstance(r.resident_in, str) else None
                if host is None:
                    raise DeclarationError(f"{_where('regions', i, r.name)}.resident_in", f"unknown region '{r.resident_in}'")
                if host.resident_in is not None:
                    raise DeclarationError(f"{_where('regions', i, r.name)}.resident_in", "nested residency is not supported")
        object.__setattr__(self, "regions", tuple(resolved))
        names = set()
        ops = []
        for i, o in enumerate(self.operators):
            if not isinstance(o, Operator):
                raise DeclarationError(f"operators[{i}]", f"expected an Operator, got {type(o).__name__}")
            where = _where("operators", i, o.name)
            o = self._resolve_operator(o, where, clocks)
            ops.append(o)
            o.validate(where, clocks, regions)
            if o.name in names:
                raise DeclarationError(f"operators[{i}].name", f"duplicate operator name '{o.name}'")
            names.add(o.name)
            self._check_operator_writes(o, where, clocks, regions)
        object.__setattr__(self, "operators", tuple(ops))
        if self.admission is not None:
            if not isinstance(self.admission, Admission):
                raise DeclarationError("admission", f"expected an Admission, got {type(self.admission).__name__}")
            if not isinstance(self.admission.clock, str) or self.admission.clock not in clocks:
                raise DeclarationError("admission.clock", f"unknown clock '{self.admission.clock}'")
            object.__setattr__(self, "admission", _declared(self.admission))
            if self.admission.max_call is None:
                pc = self._per_call(clocks, self.admission.clock)
                if pc is None:
                    raise DeclarationError("admission.max_call", self._no_call_clock(self.admission.clock))
                object.__setattr__(self, "admission", _derived(self.admission, max_call=pc.committed))
            if not _is_int(self.admission.max_call) or self.admission.max_call <= 0:
                raise DeclarationError("admission.max_call", f"must be a positive integer, got {self.admission.max_call!r}")
            for i, o in enumerate(self.operators):
                if o.clock == self.admission.clock and o.call > self.admission.max_call:
                    raise DeclarationError(
                        "admission.max_call",
                        f"{self.admission.max_call} admits no steady call of {_where('operators', i, o.name)}, which "
                        f"advances {o.call} '{o.clock}' per call; the admission must be >= the steady call",
                    )
        for i, c in enumerate(self.constants):
            if not isinstance(c, DeviceConstant):
                raise DeclarationError(f"constants[{i}]", f"expected a DeviceConstant, got {type(c).__name__}")
            if not isinstance(c.shape, tuple) or not all(_is_int(d) and d > 0 for d in c.shape):
                raise DeclarationError(f"constants[{i}].shape", f"must be a tuple of positive integers, got {c.shape!r}")
            if not isinstance(c.dtype, str) or c.dtype not in DTYPE_BYTES:
                raise DeclarationError(f"constants[{i}].dtype", f"unknown dtype {c.dtype!r}")
        if not isinstance(self.params, Mapping):
            raise DeclarationError("params", f"must be a mapping, got {type(self.params).__name__}")
        if not isinstance(self.single_session, bool):
            raise DeclarationError("single_session", "must be True or False")
        if not _is_int(self.horizon) or self.horizon < 2:
            raise DeclarationError("horizon", f"must be an integer >= 2 calls, got {self.horizon!r}")

    # -- derived fields (call clock and lookahead) --------------------------------------
    def _per_call(self, clocks: Mapping[str, Clock], clock):
        if self.call_clock is None or not isinstance(clock, str) or clock not in clocks:
            return None
        return per_call(clocks, clock, self.call_clock)

    def _no_call_clock(self, clock) -> str:
        if self.call_clock is None:
            return "not given, and the declaration names no call_clock to derive it from"
        return f"not given, and the call clock '{self.call_clock}' does not drive clock {clock!r}"

    def _resolve_region(self, r: Region, clocks: Mapping[str, Clock]) -> Region:
        """``r`` with growth and max_call derived from the call clock where they were left unset."""
        r = _declared(r)
        if r.growth is not None:
            return r
        pc = self._per_call(clocks, r.clock)
        if pc is None or r.mutability == "immutable":
            return _derived(r, growth=0)
        max_call = pc.frames if r.max_call is None else r.max_call
        return _derived(r, growth=pc.committed, max_call=max_call)

    def _resolve_operator(self, o: Operator, where: str, clocks: Mapping[str, Clock]) -> Operator:
        """``o`` with call and a "lookahead" flush derived from the call clock."""
        o = _declared(o)
        change = {}
        if not isinstance(o.clock, str) or o.clock not in clocks:
            return o  # Operator.validate names the clock
        if o.call is None:
            pc = self._per_call(clocks, o.clock)
            if pc is None:
                raise DeclarationError(f"{where}.call", self._no_call_clock(o.clock))
            change["call"] = pc.committed
        if isinstance(o.flush, str) and o.flush == "lookahead":
            pc = self._per_call(clocks, o.clock)
            if pc is None:
                raise DeclarationError(f"{where}.flush", self._no_call_clock(o.clock))
            if pc.flush() is None:
                raise DeclarationError(
                    f"{where}.flush", f"'lookahead' but no clock between '{self.call_clock}' and '{o.clock}' has an offset"
                )
            change["flush"] = pc.flush()
        return _derived(o, **change) if change else o

    def _check_operator_writes(self, o: Operator, where: str, clocks: Mapping[str, Clock], regions) -> None:
        """A call advances each growing region it reads by its stride, and no flush exceeds a region's max_call."""
        for name in dict.fromkeys(o.reads):
            r = regions[name]
            if r.growth == 0 or r.mutability == "immutable":
                continue
            call = in_units_of(clocks, o.call, o.clock, r.clock)
            if call is None:  # unrelated clocks: no common unit to compare in
                continue
            num, den = call
            if num != r.growth * den:
                raise DeclarationError(
                    f"{where}.call",
                    f"{o.call} '{o.clock}' per call contradicts region '{r.name}', which grows {r.growth} "
                    f"'{r.clock}' per call ({num / den:g} '{r.clock}' expected from the call)",
                )
            if o.flush is not None:
                num, den = in_units_of(clocks, o.flush[1], o.clock, r.clock)
                if num > r.call_max * den:
                    raise DeclarationError(
                        f"{where}.flush",
                        f"a flush of {o.flush[1]} '{o.clock}' adds {num / den:g} '{r.clock}' to region '{r.name}', "
                        f"more than its max_call {r.call_max}",
                    )
