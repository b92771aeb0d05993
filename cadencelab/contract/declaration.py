"""What an adapter declares: clocks, regions, operators, admission, device constants.

A :class:`Declaration` validates itself on construction and raises
:class:`DeclarationError` naming the offending field. Nothing here touches a tensor;
:mod:`cadencelab.contract.derive` turns a declaration into extents, bytes, catalogs and
verdicts before any traffic arrives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .clocks import Clock, validate_clocks
from .errors import DeclarationError
from .policies import POLICIES

LIFETIMES = ("call", "turn", "stream")
MUTABILITY = ("immutable", "mutable")
ROLES = ("state", "workspace", "constant")
ENVELOPES = ("retained", "attended")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int32": 4, "int64": 8, "int16": 2, "int8": 1, "bool": 1}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class Region:
    """A contract-managed state region.

    shape:   dims as ints, the region's clock name (the extent dim) or a symbolic dim
             declared in ``Declaration.dims`` (e.g. "steps").
    growth:  extent added per steady call along ``clock`` (the stride s_r).
    max_call: the most one call can add (f_call; a flush with lookahead); defaults to growth.
    initial: extent at turn start (the prompt), 0 when the region starts empty.
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
    growth: int = 0
    max_call: int | None = None
    initial: int = 0
    lifetime: str = "stream"
    mutability: str = "mutable"
    role: str = "state"
    envelope: str = "retained"
    dtype: str = "float32"
    device: str = "cuda"
    stock: Mapping[str, int] = field(default_factory=dict)
    address_stable: bool = False
    resident_in: str | None = None
    description: str = ""

    @property
    def call_max(self) -> int:
        return self.growth if self.max_call is None else self.max_call

    @property
    def clock_axis(self) -> int:
        return list(self.shape).index(self.clock)

    @property
    def persistent(self) -> bool:
        return self.lifetime in ("turn", "stream")

    def validate(self, where: str, clocks: Mapping[str, Clock], dims: Mapping[str, int]) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise DeclarationError(f"{where}.name", "a region needs a non-empty name")
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
        if not isinstance(self.policy, POLICIES):
            raise DeclarationError(f"{where}.policy", f"unknown retention policy {type(self.policy).__name__}")
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
        if self.policy.kind == "prompt_retained" and self.initial > self.policy.prompt:
            raise DeclarationError(
                f"{where}.initial", f"initial extent {self.initial} exceeds the declared prompt {self.policy.prompt}"
            )
        cap = {"ring": "capacity", "fixed": "extent"}.get(self.policy.kind)
        if cap is not None and self.initial > getattr(self.policy, cap):
            raise DeclarationError(
                f"{where}.initial",
                f"initial extent {self.initial} exceeds the policy's {cap} {getattr(self.policy, cap)}",
            )
        if not isinstance(self.address_stable, bool):
            raise DeclarationError(f"{where}.address_stable", f"must be True or False, got {self.address_stable!r}")
        if not isinstance(self.device, str) or not self.device:
            raise DeclarationError(f"{where}.device", f"must be a device string such as 'cuda', got {self.device!r}")


@dataclass(frozen=True)
class Operator:
    """An operator whose signature the runtime may specialise.

    reads:    regions whose (shape) extent enters the operator's signature.
    call:     frames (on ``clock``) one steady call advances: the stride.
    flush:    (min, max, step) call sizes of a partial final flush, or None.
    per_chunk: invocations per chunk (n_steps for a per-solver-step binding).
    scalars:  the non-extent configuration Q_o (dtype, n_steps, flags...).
    query_dependent: the query length depends on traffic (not on a clock), so the
              signature is not stable even when every region is bounded.
    """

    name: str
    reads: tuple
    clock: str
    call: int
    flush: tuple | None = None
    per_chunk: int = 1
    scalars: Mapping[str, Any] = field(default_factory=dict)
    query_dependent: bool = False
    description: str = ""

    def validate(self, where: str, clocks: Mapping[str, Clock], regions: Mapping[str, Region]) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise DeclarationError(f"{where}.name", "an operator needs a non-empty name")
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


@dataclass(frozen=True)
class Admission:
    """The admission predicate: a call of ``f`` frames on ``clock`` is admissible iff f <= max_call."""

    clock: str
    max_call: int

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

    # -- validation ------------------------------------------------------------------
    def validate(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise DeclarationError("model", "a declaration needs a model name")
        for name in ("clocks", "regions", "operators", "constants"):
            if not isinstance(getattr(self, name), tuple):
                raise DeclarationError(name, f"must be a tuple, got {type(getattr(self, name)).__name__}")
        if not self.clocks:
            raise DeclarationError("clocks", "declare at least one clock")
        clocks = validate_clocks(self.clocks)
        if not isinstance(self.dims, Mapping):
            raise DeclarationError("dims", "must map symbolic dim names to sizes")
        for k, v in self.dims.items():
            if not isinstance(k, str):
                raise DeclarationError(f"dims.{k}", f"dim names must be strings, got {type(k).__name__}")
            if not _is_int(v) or v <= 0:
                raise DeclarationError(f"dims.{k}", f"must be a positive integer, got {v!r}")
            if k in clocks:
                raise DeclarationError(f"dims.{k}", "a symbolic dim cannot share a clock's name")
        regions: dict[str, Region] = {}
        for i, r in enumerate(self.regions):
            if not isinstance(r, Region):
                raise DeclarationError(f"regions[{i}]", f"expected a Region, got {type(r).__name__}")
            where = f"regions[{i}]({r.name})" if isinstance(r.name, str) else f"regions[{i}]"
            r.validate(where, clocks, self.dims)
            if r.name in regions:
                raise DeclarationError(f"{where}.name", f"duplicate region name '{r.name}'")
            regions[r.name] = r
        for i, r in enumerate(self.regions):
            if r.resident_in is not None:
                host = regions.get(r.resident_in) if isinstance(r.resident_in, str) else None
                if host is None:
                    raise DeclarationError(f"regions[{i}]({r.name}).resident_in", f"unknown region '{r.resident_in}'")
                if host.resident_in is not None:
                    raise DeclarationError(f"regions[{i}]({r.name}).resident_in", "nested residency is not supported")
        names = set()
        for i, o in enumerate(self.operators):
            if not isinstance(o, Operator):
                raise DeclarationError(f"operators[{i}]", f"expected an Operator, got {type(o).__name__}")
            o.validate(f"operators[{i}]({o.name})", clocks, regions)
            if o.name in names:
                raise DeclarationError(f"operators[{i}].name", f"duplicate operator name '{o.name}'")
            names.add(o.name)
        if self.admission is not None:
            if not isinstance(self.admission, Admission):
                raise DeclarationError("admission", f"expected an Admission, got {type(self.admission).__name__}")
            if not isinstance(self.admission.clock, str) or self.admission.clock not in clocks:
                raise DeclarationError("admission.clock", f"unknown clock '{self.admission.clock}'")
            if not _is_int(self.admission.max_call) or self.admission.max_call <= 0:
                raise DeclarationError("admission.max_call", f"must be a positive integer, got {self.admission.max_call!r}")
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
