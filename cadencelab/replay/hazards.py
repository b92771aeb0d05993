"""Capture-safety preflight: run a step eagerly under detectors, list what would break a CUDA graph.

:func:`preflight` calls a step a few times (at least twice, to see what changes between calls) under a torch
function mode and a dispatch mode, and returns one row per hazard with the user-code line it came from (the
first frame outside torch and ``cadencelab.replay``), how often it fired and the fix in plain words:
``host_constant`` / ``host_input`` (host data copied in: the same bytes every call, or changing ones),
``device_to_host``, ``host_sync`` (a device value read on the host, also inside a torch function),
``data_dependent_shape`` (an output size depending on values, or equal input shapes giving unequal outputs),
``host_rng`` (``device_rng`` is info only: replays advance it correctly), ``pool_allocation`` (a tensor made
during the call kept in state) and ``rebound`` (a state tensor replaced, identity or address changed).

**Target device.** ``device`` names where the step will be captured. When its tensors live there, host and device
are read from the tensors and ``torch.cuda.set_sync_debug_mode`` reports the syncs the dispatch mode cannot see.
Emulated on a CPU, every tensor existing before the call is device-resident (but a module's unregistered tensor
attribute the step moves with ``.to(device)`` is on the host: ``Module.to()`` left it there); a tensor made in the
step with no ``device=``, from Python or NumPy data, or only from such tensors is a host tensor.

**Inside torch functions.** A composite op that reaches the dispatch mode whole with no kernel of its own for the
backend runs through its C++ composite kernel with the mode on, so the ops inside it (``torch.istft``'s host check
of the window envelope) are seen, attributed to the calling line and named in ``op`` (``aten.equal in torch.istft``).
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

from .effects import RngSnapshot
from .sites import UNKNOWN, Site, user_site
from .statewalk import LEAVES, roots_of, state_tensors

__all__ = ["preflight", "Preflight", "KINDS", "COLUMNS"]

# ---------------------------------------------------------------------------------------
# what each hazard means and how to fix it
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    severity: str  # "hazard" or "info"
    fix: str


KINDS: dict[str, Kind] = {
    "host_constant": Kind("hazard", "the same host data is copied to the device on every call: build it once, "
                          "before capture, as a device-resident buffer (register_buffer, or a tensor made on the "
                          "device at setup) and read that"),
    "host_input": Kind("hazard", "host data that changes between calls is copied to the device inside the step: "
                       "copy it into a preallocated device tensor before the step and pass that tensor in"),
    "device_to_host": Kind("hazard", "a device tensor is copied to the host inside the step: keep the step on "
                           "the device and copy the result after it returns (outside the captured region)"),
    "host_sync": Kind("hazard", "a device value is read on the host (a sync; a graph freezes the value read at "
                      "capture): keep the decision on the device (torch.where, clamp) or run this op eagerly "
                      "outside the captured region"),
    "data_dependent_shape": Kind("hazard", "the output size depends on tensor values: use a fixed-size form "
                                 "(torch.where, a mask multiply, nonzero_static with a declared bound) or run it "
                                 "outside the captured region"),
    "host_rng": Kind("hazard", "a host generator is drawn inside the step (a graph would replay the captured "
                     "draws): draw on the device (device=...) or pass the random values in as an input"),
    "device_rng": Kind("info", "device draws are graph-safe (each replay advances the generator): nothing to fix"),
    "pool_allocation": Kind("hazard", "a tensor allocated inside the step is kept in state after it returns; "
                            "under capture it lives in the graph's private pool and the next replay overwrites "
                            "it: allocate it once before capture and write into it in place (buf.copy_(x))"),
    "rebound": Kind("hazard", "a state tensor is replaced by another tensor between calls; a captured graph "
                    "keeps reading and writing the old address: update it in place (state.x.copy_(new) or "
                    "state.x[:] = new), never rebind (state.x = new)"),
}

COLUMNS = ["kind", "severity", "op", "where", "source", "count", "calls", "detail", "fix", "file", "line"]

# ops whose output size depends on values; index/index_put_ only with boolean indices
_DATA_DEPENDENT = {"nonzero", "nonzero_numpy", "argwhere", "masked_select", "unique", "_unique", "_unique2",
                   "unique_dim", "unique_consecutive", "unique_dim_consecutive", "bincount", "repeat_interleave"}
# ops that return a Python value read from tensor data
_HOST_READS = {"_local_scalar_dense", "is_nonzero", "equal"}
_MOVES = {"_to_copy", "copy_"}
_FACTORIES = frozenset(f.__name__ for f in _device_constructors())

# ---------------------------------------------------------------------------------------
# events and tensor provenance
# ---------------------------------------------------------------------------------------


@dataclass
class Event:
    kind: str
    op: str
    site: Site
    call: int
    detail: str = ""
    value: Any = None  # bytes digest (copies) or the value read (syncs): compared across calls


@dataclass
class _Origin:
    site: Site
    host: bool  # emulated placement (unused on a real device)
    built: Site | None = None  # where the host data was built


def _api_name(func) -> str:
    q = getattr(func, "__qualname__", None) or getattr(func, "__name__", str(func))
    for prefix, repl in (("TensorBase.", "Tensor."), ("Tensor.", "Tensor."), ("_VariableFunctionsClass.", "torch.")):
        if q.startswith(prefix):
            return repl + q[len(prefix):]
    mod = getattr(func, "__module__", None) or "torch"
    return q if "." in q else f"{mod}.{q}" if mod.startswith("torch") else f"torch.{q}"


def _digest(t: torch.Tensor) -> str:
    b = t.detach().reshape(-1).contiguous().view(torch.uint8).cpu().numpy().tobytes()
    return hashlib.sha1(b + str((t.dtype, tuple(t.shape))).encode()).hexdigest()[:16]


def _draws(func, args, kwargs) -> bool:
    """A seeded op draws unless its dropout probability is 0 or it runs with train=False."""
    for i, a in enumerate(func._schema.arguments):
        if a.name not in ("p", "dropout_p", "train"):
            continue
        v = args[i] if i < len(args) else kwargs.get(a.name, a.default_value if a.has_default_value() else None)
        if a.name != "train" and isinstance(v, (int, float)) and v == 0 or a.name == "train" and v is False:
            return False
    return True


def _tensors(x) -> list:
    return [t for t in tree_leaves(x) if isinstance(t, torch.Tensor)]


class _Watch:
    """The detectors' shared state for one preflight."""

    def __init__(self, device: torch.device, emulated: bool):
        self.device, self.emulated = device, emulated
        self.events: list[Event] = []
        self.call = 0
        self.busy = False
        self.api: str | None = None  # the torch function (torch function mode level) now running
        self.api_device = False  # that function was given an explicit device
        self.origin = WeakIdKeyDictionary()  # tensor -> _Origin, for tensors made during the call
        self.attr_host = WeakIdKeyDictionary()  # plain module tensor attributes -> path (emulation)
        self.moved = WeakIdKeyDictionary()  # emulation: tensors .to()-ed in place this call -> host?
        self.shapes: dict = {}  # (site, op) -> {input shapes: output shapes}
        self.flagged = False  # the running op already produced an event
        self.synced: Site | None = None  # a sync-debug warning fired inside the running op
        self.in_op = False

    # -- placement ------------------------------------------------------------------------
    def is_host(self, t: torch.Tensor) -> bool:
        if not self.emulated:
            return t.device.type == "cpu"
        if t in self.moved:
            return self.moved[t]
        o = self.origin.get(t)
        return o.host if o is not None else False

    def built(self, t: torch.Tensor) -> str:
        o = self.origin.get(t)
        if o is not None and o.built is not None:
            return f"built at {o.built.where}: {o.built.source(80)}"
        if t in self.attr_host:
            return f"module attribute {self.attr_host[t]} (not a registered buffer)"
        return "made before the call"

    def add(self, kind: str, op: str, site: Site, detail: str = "", value: Any = None) -> None:
        self.events.append(Event(kind, op, site, self.call, detail, value))
        self.flagged = True

    def h2d(self, op: str, src: torch.Tensor, site: Site) -> None:
        # a Python scalar assigned into a device tensor (x[:, 0] = 0) becomes a kernel argument: a hazard
        # only when its value changes between calls (the graph would keep the first)
        kind = "host_scalar" if src.dim() == 0 and self.api == "Tensor.__setitem__" else "host_to_device"
        self.add(kind, op, site, self.built(src), _digest(src))

    # -- one dispatched op -------------------------------------------------------------------
    def on_op(self, func, args, kwargs, out) -> None:
        name = func.overloadpacket.__name__
        op = f"aten.{name}" + (f" in {self.api}" if self.api else "")
        site = user_site(1)
        ins = _tensors((args, kwargs))
        outs = _tensors(out)
        # provenance of the outputs made by this op (in-place results keep theirs)
        host, built = False, None
        if ins:
            host_ins = [self.is_host(t) for t in ins]
            host = all(host_ins)
            built = next((self.origin[t].built for t, h in zip(ins, host_ins)
                          if h and t in self.origin and self.origin[t].built is not None), None)
        if name == "lift_fresh" or not ins:  # a factory: host when made from Python data or with no device given
            factory = name == "lift_fresh" or (self.api is not None and self.api.split(".")[-1] in _FACTORIES)
            host = factory and not self.api_device and self.api != "Tensor.__setitem__"
            built = site
        for t in outs:
            if name == "lift_fresh" or (t not in self.origin and not any(t is i for i in ins)):
                self.origin[t] = _Origin(site, host, built)
        self._classify(func, name, op, site, args, kwargs, ins, outs, out)
        self._shape_change(func, op, site, args, kwargs, outs)

    def _classify(self, func, name, op, site, args, kwargs, ins, outs, out) -> None:
        if name == "lift_fresh" and self.api == "Tensor.__setitem__":
            pass  # a Python scalar assigned into a tensor is made on that tensor's device
        elif name == "lift_fresh" and outs and not self.is_host(outs[0]):
            self.add("host_to_device", op, site, "tensor from Python/NumPy data made on the device", _digest(outs[0]))
        elif name == "_to_copy" and not self.emulated and ins and outs:
            src, dst = ins[0], outs[0]
            if src.device.type == "cpu" and dst.device.type != "cpu":
                self.h2d(op, src, site)
            elif src.device.type != "cpu" and dst.device.type == "cpu":
                self.add("device_to_host", op, site)
        elif name == "copy_" and len(args) > 1 and isinstance(args[1], torch.Tensor):
            dst, src = args[0], args[1]
            if self.is_host(src) and not self.is_host(dst):
                self.h2d(op, src, site)
            elif not self.is_host(src) and self.is_host(dst):
                self.add("device_to_host", op, site)
        elif name in _HOST_READS and ins and not all(self.is_host(t) for t in ins):
            self.add("host_sync", op, site, value=out)
        elif ins and name not in _MOVES:  # host operands of a device op (0-dim host scalars included)
            placed = [self.is_host(t) for t in ins]
            if any(placed) and not all(placed):
                for t, h in zip(ins, placed):
                    if h:
                        self.h2d(op + " (host operand)", t, site)
        if name in _DATA_DEPENDENT or (name in ("index", "index_put", "index_put_")
                                       and any(t.dtype in (torch.bool, torch.uint8) for t in ins[1:])):
            self.add("data_dependent_shape", op, site)
        if torch.Tag.nondeterministic_seeded in func.tags and _draws(func, args, kwargs):
            gen = kwargs.get("generator")
            if gen is not None:
                host = gen.device.type == "cpu"
            elif self.emulated:
                host = self.is_host(outs[0]) if outs else False
            else:
                host = bool(outs) and outs[0].device.type == "cpu"
            self.add("host_rng" if host else "device_rng", op, site)

    def _shape_change(self, func, op, site, args, kwargs, outs) -> None:
        if not outs or func.overloadpacket.__name__ in _DATA_DEPENDENT:
            return
        key = (site, op)
        sig_in = tuple(tuple(x.shape) if isinstance(x, torch.Tensor) else x if isinstance(x, LEAVES) else type(x)
                       for x in tree_leaves((args, kwargs)))
        sig_out = tuple(tuple(t.shape) for t in outs)
        seen = self.shapes.setdefault(key, {})
        prev = seen.setdefault(sig_in, sig_out)
        if prev != sig_out:
            self.add("data_dependent_shape", op, site, f"inputs {list(sig_in)} gave outputs {list(prev)} and "
                                                       f"{list(sig_out)}")
            seen[sig_in] = sig_out

    # -- one torch function (emulated moves) -----------------------------------------------------
    def on_function(self, func, api: str, args, kwargs, out) -> None:
        name = getattr(func, "__name__", "")
        if not self.emulated or not args or not isinstance(args[0], torch.Tensor):
            return
        src = args[0]
        if name == "to":
            try:
                dev = torch._C._nn._parse_to(*args[1:], **kwargs)[0]
            except Exception:  # not a move
                return
            if dev is None:
                return
            to_host = False  # an explicit device stands for the target device
        elif name == "cuda":
            to_host = False
        elif name in ("cpu", "numpy", "tolist"):
            to_host = True
        else:
            return
        site = user_site(1)
        host = self.is_host(src) or src in self.attr_host
        if host and not to_host:
            self.h2d(api, src, site)
        elif not host and to_host:
            self.add("device_to_host", api, site)
        if isinstance(out, torch.Tensor):
            if out is src:
                self.moved[out] = to_host
            elif out in self.origin:
                self.origin[out].host = to_host


class _FunctionMode(TorchFunctionMode):
    def __init__(self, w: _Watch):
        super().__init__()
        self.w = w

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        w = self.w
        if w.busy or w.api is not None:
            return func(*args, **kwargs)
        api = _api_name(func)
        w.api, w.api_device = api, kwargs.get("device") is not None
        try:
            out = func(*args, **kwargs)
        finally:
            w.api, w.api_device = None, False
        w.busy = True
        try:
            w.on_function(func, api, args, kwargs, out)
        finally:
            w.busy = False
        return out


def _composite_only(func, args, kwargs) -> bool:
    """An op eager runs through its CompositeImplicitAutograd kernel (no kernel of its own for the backend)."""
    name = func.name()
    if not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd"):
        return False
    keys = {"CPU" if t.device.type == "cpu" else t.device.type.upper() for t in _tensors((args, kwargs))}
    return not any(torch._C._dispatch_has_kernel_for_dispatch_key(name, k)
                   for k in keys | {"CompositeExplicitAutograd"})


class _DispatchMode(TorchDispatchMode):
    def __init__(self, w: _Watch):
        super().__init__()
        self.w = w

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        w = self.w
        if w.busy:
            return func(*args, **kwargs)
        if _composite_only(func, args, kwargs):
            # reached undecomposed (inference mode): run the C++ composite kernel eager runs, where this
            # mode sees its ops (not func.decompose, which may pick a Python reference without the checks)
            with self:
                return func._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd, *args, **kwargs)
        w.flagged, w.synced, w.in_op = False, None, True
        try:
            out = func(*args, **kwargs)
        finally:
            w.in_op = False
        w.busy = True
        try:
            w.on_op(func, args, kwargs, out)
            if w.synced is not None and not w.flagged:
                api = f" in {w.api}" if w.api else ""
                w.add("host_sync", f"aten.{func.overloadpacket.__name__}{api}", w.synced,
                      "reported by torch.cuda.set_sync_debug_mode")
        finally:
            w.busy = False
        return out


# ---------------------------------------------------------------------------------------
# the result
# ---------------------------------------------------------------------------------------


class Preflight(pd.DataFrame):
    """The preflight's rows (one per hazard and site, see :data:`COLUMNS`) plus :meth:`summary`.

    ``attrs``: ``fn`` (the step's name), ``device`` (the target), ``ran_on`` (where the tensors
    were), ``emulated`` and ``calls``. Slicing returns plain DataFrames.
    """

    @property
    def _constructor(self):
        return pd.DataFrame

    def hazards(self) -> pd.DataFrame:
        return self[self["severity"] == "hazard"]

    def summary(self) -> str:
        """One line: the step, the target, how many hazards of each kind."""
        a = self.attrs
        how = f"emulated on {a.get('ran_on')}" if a.get("emulated") else f"on {a.get('ran_on')}"
        haz = self.hazards()
        if haz.empty:
            kinds = "no hazards"
        else:
            counts = haz.groupby("kind", sort=False).size()
            kinds = f"{len(haz)} hazard row(s): " + ", ".join(f"{k} {n}" for k, n in counts.items())
        info = int((self["severity"] == "info").sum()) if len(self) else 0
        return (f"preflight {a.get('fn')} for {a.get('device')} ({how}, {a.get('calls')} calls): {kinds}"
                + (f"; {info} info row(s)" if info else ""))


def _rows(events: list[Event], calls: int) -> list[dict]:
    """Group events by (kind, op, site); split host->device copies into constants and inputs."""
    groups: dict[tuple, list[Event]] = {}
    for e in events:  # new state entries group by the line that made them (a dict growing per call is one row)
        groups.setdefault((e.kind, "" if e.kind == "pool_allocation" else e.op, e.site), []).append(e)
    rows = []
    for (kind, op, site), evs in groups.items():
        detail = evs[0].detail
        if kind == "pool_allocation":
            paths = list(dict.fromkeys(e.op for e in evs))
            op = ", ".join(paths[:3]) + (f" (+{len(paths) - 3} more)" if len(paths) > 3 else "")
            detail = "; ".join(e.detail for e in evs[:3]) + (" ..." if len(evs) > 3 else "")
        if kind in ("host_to_device", "host_scalar", "host_sync"):
            per_call = [tuple(e.value for e in evs if e.call == c) for c in range(calls)]
            same = all(p == per_call[0] for p in per_call)
            if kind == "host_scalar":
                if same:
                    continue  # the same literal every call: a kernel argument the graph may keep
                kind, detail = "host_input", "a Python scalar assigned into a device tensor changes between calls"
            elif kind == "host_to_device":
                kind = "host_constant" if same else "host_input"
                detail = detail or ("same bytes every call" if same else "bytes change between calls")
            else:
                values = sorted({repr(v) for e in evs for v in [e.value]})[:4]
                detail = (detail + "; " if detail else "") + ("same value every call" if same else
                                                              "value changes between calls") + \
                    f" (read {', '.join(values)})"
        k = KINDS[kind]
        rows.append(dict(kind=kind, severity=k.severity, op=op, where=site.where, source=site.source(),
                         count=len(evs), calls=len({e.call for e in evs}), detail=detail, fix=k.fix,
                         file=site.file, line=site.line))
    return rows


# ---------------------------------------------------------------------------------------
# the preflight
# ---------------------------------------------------------------------------------------


def preflight(fn: Callable, *args, device="cuda", calls: int = 2, modules=None, **kwargs) -> Preflight:
    """Run ``fn(*args, **kwargs)`` ``calls`` times eagerly under detectors; one row per capture hazard.

    ``device``: the device the step will be captured on (a GPU; on CPU tensors the GPU is emulated,
    see the module docstring). ``modules``: modules or objects whose tensors are the step's state
    (a list, or a dict name -> object); ``fn`` itself when it is a module, a bound method's owner
    and module arguments are added.
    The calls are real: state advances as in any call (use a throwaway stream).

    Returns a :class:`Preflight` (a DataFrame with :data:`COLUMNS`, hazards first by kind,
    ``summary()`` for one line).
    """
    device = torch.device(device)
    if device.type == "cpu":
        raise ValueError(f"preflight: device={str(device)!r} is the host; name the capture target "
                         "(e.g. device='cuda'; on CPU tensors it is emulated)")
    if not isinstance(calls, int) or calls < 2:
        raise ValueError(f"preflight: calls={calls!r}; at least 2 calls are needed to see what changes "
                         "between calls")
    roots = roots_of(fn, args, kwargs, modules)
    state, plain = state_tensors(roots)
    leaves = _tensors((args, kwargs)) + list(state.values())
    ran_on = leaves[0].device if leaves else torch.device("cpu")
    emulated = not any(t.device.type == device.type for t in leaves)
    w = _Watch(device, emulated)
    cuda = device.type == "cuda" and not emulated and torch.cuda.is_available()
    devices = tuple(sorted({t.device.index or 0 for t in leaves if t.is_cuda})) if cuda else ()

    show = warnings.showwarning

    def on_warning(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" not in str(message):
            show(message, category, filename, lineno, file, line)
        elif not w.busy:
            if w.in_op:
                w.synced = user_site(1)
            else:  # an explicit synchronize outside any dispatched op
                w.add("host_sync", "cuda sync", user_site(1), "reported by torch.cuda.set_sync_debug_mode")

    for c in range(calls):
        w.call = c
        w.origin = WeakIdKeyDictionary()
        w.moved = WeakIdKeyDictionary()
        before, plain = state_tensors(roots)
        w.attr_host = WeakIdKeyDictionary()  # plain module attributes: on the host in emulation
        for path, t in plain.items():
            w.attr_host[t] = path
        before_ptr = {p: (t, t.data_ptr()) for p, t in before.items()}
        pre_storages = {t.untyped_storage().data_ptr() for t in before.values()}
        rng0 = RngSnapshot.take(devices)
        mode_before = torch.cuda.get_sync_debug_mode() if cuda else 0
        if cuda:
            _set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.showwarning = on_warning
                with _FunctionMode(w), _DispatchMode(w):
                    fn(*args, **kwargs)
        finally:
            if cuda:
                _set_sync_debug_mode(mode_before)
        rng1 = RngSnapshot.take(devices)
        after, _ = state_tensors(roots)
        _state_events(w, before_ptr, after, pre_storages)
        _rng_events(w, rng0, rng1, emulated)

    rows = _rows(_explained_syncs_dropped(w.events), calls)
    order = {k: i for i, k in enumerate(KINDS)}
    df = pd.DataFrame(rows, columns=COLUMNS)
    if len(df):
        df = df.assign(_o=df["kind"].map(order)).sort_values(["_o", "file", "line"], kind="stable") \
            .drop(columns="_o").reset_index(drop=True)
    res = Preflight(df)
    name = type(fn).__name__ if isinstance(fn, torch.nn.Module) else getattr(fn, "__qualname__", repr(fn))
    res.attrs.update(fn=name, device=str(device), ran_on=str(ran_on),
                     emulated=emulated, calls=calls)
    return res


def _set_sync_debug_mode(mode) -> None:
    """torch's sync-debug mode set outside the watch: the act of setting it may warn, once per process, with a
    message that names synchronizing (seen with torch 2.11 on an H200); inside the watch that message read as a
    sync of the step, a false ``host_sync`` hazard on the first preflight of a process only."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.cuda.set_sync_debug_mode(mode)


def _explained_syncs_dropped(events: list) -> list:
    """The events without the sync-debug reports (op "cuda sync") sited on a line that another finding
    already reports (a device-to-host copy, a host constant, a host sync of a named op): torch reports the
    same synchronization twice there. A sync on a line nothing else explains stays a hazard."""
    explained = {(e.site.file, e.site.line) for e in events if e.op != "cuda sync"}
    return [e for e in events if e.op != "cuda sync" or (e.site.file, e.site.line) not in explained]


def _state_events(w: _Watch, before: dict, after: dict, pre_storages: set) -> None:
    """Rebound state tensors, and tensors made during the call that state keeps."""
    for path, t in after.items():
        made = w.origin.get(t)
        site = made.site if made is not None else UNKNOWN
        if path in before:
            old, ptr = before[path]
            if t is not old or t.data_ptr() != ptr:
                how = "another tensor" if t is not old else "the same tensor at another address"
                new = "allocated inside the step" if made is not None and \
                    t.untyped_storage().data_ptr() not in pre_storages else "not allocated by the step"
                w.events.append(Event("rebound", path, site, w.call,
                                      f"{path} now holds {how} ({new})"))
        elif made is not None and t.untyped_storage().data_ptr() not in pre_storages:
            w.events.append(Event("pool_allocation", path, site, w.call,
                                  f"{path} {tuple(t.shape)} kept after the call"))


def _rng_events(w: _Watch, rng0: RngSnapshot, rng1: RngSnapshot, emulated: bool) -> None:
    located = any(e.kind == "host_rng" and e.call == w.call for e in w.events)
    if rng0.py != rng1.py:
        w.events.append(Event("host_rng", "python random", UNKNOWN, w.call, "Python's random module advanced"))
    if rng0.np is not None and rng1.np is not None and not (
            rng0.np[0] == rng1.np[0] and (rng0.np[1] == rng1.np[1]).all() and rng0.np[2:] == rng1.np[2:]):
        w.events.append(Event("host_rng", "numpy.random", UNKNOWN, w.call, "NumPy's global generator advanced"))
    if not emulated and not located and not torch.equal(rng0.host, rng1.host):
        w.events.append(Event("host_rng", "torch CPU generator", UNKNOWN, w.call,
                              "torch's CPU generator advanced (no op located)"))
