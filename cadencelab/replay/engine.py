"""ExactShapeReplay: one CUDA graph per catalog signature, admitted per call, failing closed.

Per call the engine

1. keys the call by its full signature (shapes, strides, dtypes, devices, alignment, scalar arguments;
   contract-owned inputs by owner and offset); arguments it cannot key on are refused and run eagerly;
2. checks the class is in the declared catalog (``catalog`` + ``classify``) and under ``max_classes``;
3. on a class's first hit runs the call eagerly on the capture stream as its probe, watching host and device
   random generators: host draws reject the class for good, device draws are admitted (graph-safe Philox). It
   then captures the class; capture executes nothing and the generators are restored around it, so the probe's
   results stand as the call's results and the capture is transparent;
4. on later hits checks address stability (aliased inputs, declared write-through regions, module parameters
   and buffers): drift drops the class's graph, logs an invalidation and runs eagerly. Then it copies staged
   inputs into the class's static buffers and replays.

Contract-owned inputs (views of registered ``owners``, e.g. the carry) are bound by address at capture, with no
staging copy; everything else is staged per class. ``backend="eager"`` keeps identical bookkeeping (catalog,
admission, guards, counters) but executes every call eagerly, and says so: logic you can test and teach on a CPU.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import pandas as pd
import torch

from ..contract.derivation import CLASS_BUDGET
from .effects import RngSnapshot, cuda_devices
from .nogc import no_collection
from .oplog import diagnose_capture, throwaway_capture
from .pools import FAILED_GRAPHS, end_failed_capture, shared_pool
from .signatures import Unkeyable, alignment, describe, flatten, signature, unflatten

log = logging.getLogger("cadencelab.replay")

NEW, CAPTURED, REJECTED, FAILED = "new", "captured", "rejected", "capture_failed"

# A parameter, buffer or submodule (re)registration on a module of a tree an engine lists bumps this
# epoch, so an engine can keep its list of module tensors and still notice a replaced parameter.
_EPOCH = [0]


#: every module in a tree an engine lists (its modules and their descendants, when it last listed them), by id,
#: held weakly. A registration elsewhere (a fresh ``nn.Sequential`` a model's forward slices out of its layers,
#: every call) cannot change a listed tree: such a module joins one only by a registration on a tracked module,
#: which bumps. A new module that reuses a dead one's id is not tracked (the weak reference says so): it is in no
#: listed tree, and bumping for it would re-list every engine's tensors for nothing.
_TRACKED: dict[int, weakref.ref] = {}


def _bump(module, *_args):
    ref = _TRACKED.get(id(module))  # a dict lookup per registration anywhere: the common miss costs no more
    if ref is not None and ref() is module:
        _EPOCH[0] += 1


torch.nn.modules.module.register_module_parameter_registration_hook(_bump)
torch.nn.modules.module.register_module_buffer_registration_hook(_bump)
torch.nn.modules.module.register_module_module_registration_hook(_bump)


_EAGER = "eager"


def eager_label(reason: str) -> tuple:
    """A class label that keeps the class eager by construction, counted under ``reason``
    (a cache-free priming call, a call that misses a region it reads)."""
    return (_EAGER, str(reason))


def _eager_reason(label) -> str | None:
    return label[1] if isinstance(label, tuple) and len(label) == 2 and label[0] == _EAGER else None


_NO_TIMER = contextlib.nullcontext()
_DATA_PTR = torch.Tensor.data_ptr


def _untimed(_part: str):
    """The timer of an engine that is not timed: one shared no-op context (a replay's parts cost nothing more)."""
    return _NO_TIMER


def replay_disabled() -> bool:
    """``CADENCELAB_NO_REPLAY=1`` turns every engine into plain eager calls (counted as 'disabled')."""
    return os.environ.get("CADENCELAB_NO_REPLAY", "0") not in ("", "0")


def _static_like(t: torch.Tensor) -> torch.Tensor:
    """A buffer with ``t``'s shape, strides, dtype, device and pointer alignment residue."""
    span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0) if t.numel() else 0
    resid = (t.data_ptr() % alignment(t)) // t.element_size()
    raw = torch.empty(span + resid, dtype=t.dtype, device=t.device)
    return raw.as_strided(t.shape, t.stride(), raw.storage_offset() + resid)


@dataclass
class ClassState:
    """Bookkeeping of one signature class."""

    key: tuple
    label: Any
    status: str = NEW
    reason: str = ""
    rng: str = "unknown"
    hits: int = 0
    replays: int = 0
    eager: int = 0
    captures: int = 0
    invalidations: int = 0
    capture_s: float = 0.0
    staging_bytes: int = 0
    pool_bytes: int = 0
    misses: Counter = field(default_factory=Counter)
    graph: Any = None
    statics: list | None = None
    alias_ptrs: tuple = ()
    guard_ptrs: tuple = ()
    out_structure: Any = None
    out_leaves: list | None = None


class ReplayError(RuntimeError):
    """Raised only in ``strict`` mode, where a refused call must not silently run eagerly."""


class ExactShapeReplay:
    """Wrap ``fn`` for exact-shape replay.

    fn:            the callable; host-side bookkeeping must live outside it (it does not run on replay).
    name:          for counters and logs.
    backend:       "cuda", "eager", or "auto" (cuda when available; eager bookkeeping when the first call brings
                   host tensors only). On "cuda" a class with host tensors is rejected (host_tensors).
    catalog, classify: admissible class labels (from the declaration; None admits any signature) and
                   ``classify(*args, **kwargs) -> label`` mapping a call to its label.
    owners:        contract-owned buffers (or a callable returning them): inputs that view them are aliased by
                   address instead of staged.
    write_through, modules: regions ``fn`` writes at fixed addresses (name -> tensor or callable) and modules
                   whose parameters/buffers the graph reads by address; both pointer-checked every call.
    clone_outputs: return copies of graph outputs (default); else outputs alias graph memory until the next
                   replay of any engine sharing the pool.
    max_classes:   cap on captured classes (default the contract's ``CLASS_BUDGET``, the affordability budget).
    max_invalidations: after this many pointer drifts a class stays eager.
    eager_guard:   a zero-argument callable returning a context manager entered around every eager execution of
                   ``fn`` (probe, capture, fallback, eager backend), never around a replay (used by the lanes).
    ``timer``:     attribute, None by default: ``timer(part) -> context manager`` times a call's parts.
    """

    def __init__(
        self,
        fn: Callable,
        name: str | None = None,
        *,
        backend: str = "auto",
        catalog: Iterable | None = None,
        classify: Callable | None = None,
        owners: Iterable[torch.Tensor] | Callable[[], Iterable[torch.Tensor]] = (),
        write_through: Mapping[str, Any] | None = None,
        modules: Iterable[torch.nn.Module] = (),
        pool=None,
        clone_outputs: bool = True,
        max_classes: int = CLASS_BUDGET,
        max_invalidations: int = 3,
        strict: bool = False,
        eager_guard: Callable[[], Any] | None = None,
    ):
        self._auto = backend == "auto"
        if backend == "auto":
            backend = "cuda" if torch.cuda.is_available() else "eager"
        if backend not in ("cuda", "eager"):
            raise ValueError(f"backend must be 'cuda', 'eager' or 'auto', got {backend!r}")
        if backend == "cuda" and not torch.cuda.is_available():
            raise ValueError("backend='cuda' needs a CUDA device; use backend='eager' on CPU")
        if catalog is not None and classify is None:
            raise ValueError("a catalog needs a classify(*args, **kwargs) -> label function")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "callable")
        self.backend = backend
        self.catalog = None if catalog is None else set(catalog)
        self.classify = classify
        self.given_label = None  # the caller's label of the next call (label_next), taken by that call
        self._owners = owners
        self._write_through = dict(write_through or {})
        self.modules = list(modules)
        self.pool = pool
        self.clone_outputs = clone_outputs
        self.max_classes = max_classes
        self.max_invalidations = max_invalidations
        self.strict = strict
        self.eager_guard = eager_guard
        self.timer = None
        self.classes: dict[tuple, ClassState] = {}
        self.unclassed = Counter()
        self.events: list[dict] = []
        self.calls = 0
        self._stream = None
        self._tensors: list = []
        self._tensors_epoch = -1

    # ------------------------------------------------------------------------------------
    # helpers
    # ------------------------------------------------------------------------------------
    def owners(self) -> list:
        o = self._owners() if callable(self._owners) else self._owners
        return list(o)

    def write_through(self) -> dict[str, torch.Tensor]:
        return {k: (v() if callable(v) else v) for k, v in self._write_through.items()}

    def output_storages(self) -> set[int]:
        """Storage addresses of the replayed outputs a caller receives without a copy
        (``clone_outputs=False``): graph memory that the next replay of the same class overwrites.
        A caller keeping such an output across calls (a session snapshot) must copy it. Empty when
        outputs are cloned."""
        if self.clone_outputs:
            return set()
        return {t.untyped_storage().data_ptr() for c in self.classes.values() if c.status == CAPTURED
                for t in (c.out_leaves or ()) if isinstance(t, torch.Tensor)}

    def _guard_names(self) -> list[str]:
        names = list(self.write_through())
        for mi, m in enumerate(self.modules):
            names += [f"module{mi}.{n}" for n, _ in m.named_parameters()]
            names += [f"module{mi}.{n}" for n, _ in m.named_buffers()]
        return names

    def _module_tensors(self) -> list:
        if self._tensors_epoch != _EPOCH[0]:
            _TRACKED.update((id(sub), weakref.ref(sub)) for m in self.modules for sub in m.modules())
            self._tensors = [t for m in self.modules for t in (*m.parameters(), *m.buffers())]
            self._tensors_epoch = _EPOCH[0]
        return self._tensors

    def _guard_ptrs(self) -> tuple:
        """Addresses the graphs read or write implicitly: write-through regions, then module state.

        Module tensors are listed again only after a (re)registration anywhere (the epoch);
        their data pointers are read every call, so ``.data`` swaps and moves are seen too.
        """
        # every call: the regions' getters called in place (no dict built), the module tensors' pointers read by
        # one map of the unbound method (no attribute lookup per tensor)
        ptrs = [(v() if callable(v) else v).data_ptr() for v in self._write_through.values()]
        ptrs.extend(map(_DATA_PTR, self._module_tensors()))
        return tuple(ptrs)

    def _event(self, kind: str, cls: ClassState | None, detail: str = "") -> None:
        self.events.append(dict(engine=self.name, call=self.calls, kind=kind,
                                label=None if cls is None else cls.label, detail=detail))
        if len(self.events) > 10_000:
            del self.events[:5_000]

    def _eager(self, cls: ClassState | None, reason: str, args, kwargs):
        if self.strict and reason not in ("probe",):
            raise ReplayError(f"{self.name}: call refused ({reason})")
        with self._guarded():
            out = self.fn(*args, **kwargs)
        if cls is None:  # counted once the call has run: a call that raises leaves the counters as they were
            self.unclassed[reason] += 1
        else:
            cls.eager += 1
            cls.misses[reason] += 1
        return out

    def _guarded(self):
        return self.eager_guard() if self.eager_guard is not None else contextlib.nullcontext()

    def _nearest(self, key: tuple) -> str:
        best, score = None, -1
        for k, c in self.classes.items():
            if c.status != CAPTURED:
                continue
            s = sum(a == b for a, b in zip(k[1], key[1]))
            if s > score:
                best, score = k, s
        return describe(best) if best is not None else "none captured"

    # ------------------------------------------------------------------------------------
    # the call
    # ------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        """One call: replayed, probed and captured, or eager (counted). A call that raises (the
        function refused its arguments) leaves no trace: the call count, a class it created and the
        class's hits are rolled back, so the next right call counts as it would alone."""
        seen: list = []  # (class, created by this call)
        self.calls += 1
        try:
            return self._call(seen, args, kwargs)
        except BaseException:
            self.calls -= 1
            for cls, created in seen:
                if created:
                    self.classes.pop(cls.key, None)
                else:
                    cls.hits -= 1
            raise

    def label_next(self, label) -> None:
        """The label of the next call, from a caller that classified it already (a kit runtime): the engine
        labels a new class with it instead of classifying the call again."""
        self.given_label = label

    def _call(self, seen: list, args, kwargs):
        given, self.given_label = self.given_label, None
        if replay_disabled():
            return self._eager(None, "disabled", args, kwargs)
        timer = self.timer or _untimed
        try:
            with timer("signature"):
                key, structure, leaves, aliased = signature(args, kwargs, self.owners())
        except Unkeyable as e:
            self._event("refused", None, str(e))
            log.warning("%s: refused to key a call (%s); running eagerly", self.name, e)
            return self._eager(None, "unkeyable", args, kwargs)
        cls = self.classes.get(key)
        if cls is None:
            label = given if given is not None else (self.classify(*args, **kwargs) if self.classify is not None
                                                     else describe(key))
            cls = ClassState(key, label)
            self.classes[key] = cls
            if _eager_reason(label) is not None:
                cls.status, cls.reason = REJECTED, _eager_reason(label)  # eager by construction (e.g. priming)
            elif self.catalog is not None and label not in self.catalog:
                cls.status, cls.reason = REJECTED, "outside_catalog"
                log.info("%s: signature outside the catalog: %s (label %r); nearest captured: %s",
                         self.name, describe(key), label, self._nearest(key))
            elif sum(c.status == CAPTURED for c in self.classes.values()) >= self.max_classes:
                cls.status, cls.reason = REJECTED, "catalog_full"
            elif self.backend == "cuda":
                self._check_devices(cls, leaves)
            seen.append((cls, True))
        else:
            seen.append((cls, False))
        cls.hits += 1
        if cls.status == CAPTURED:
            with timer("checks"):
                bad = self._drift(cls, leaves, aliased)
            if bad:
                cls.invalidations += 1
                cls.graph = cls.statics = cls.out_leaves = None
                if cls.invalidations > self.max_invalidations:
                    cls.status, cls.reason = FAILED, "unstable_addresses"
                else:
                    cls.status = NEW
                self._event("invalidation", cls, bad)
                log.warning("%s: pointer drift in class %r (%s): graph dropped, running eagerly", self.name, cls.label, bad)
                return self._eager(cls, "invalidated", args, kwargs)
            return self._replay(cls, leaves)
        if cls.status in (REJECTED, FAILED):
            return self._eager(cls, cls.reason, args, kwargs)
        with self._guarded():
            return self._probe_and_capture(cls, args, kwargs, structure, leaves, aliased)

    def _check_devices(self, cls: ClassState, leaves) -> None:
        """A CUDA graph replays device work only: host tensors among the arguments or regions would be
        read once, at capture, and frozen. With ``backend="auto"`` and no CUDA tensor at all the engine
        switches to the eager backend's bookkeeping (a CPU model on a GPU machine); a mix of host and
        device tensors rejects the class (``host_tensors``, eager, counted)."""
        tensors = [v for v in leaves if isinstance(v, torch.Tensor)]
        tensors += list(self.write_through().values())
        host = [t for t in tensors if not t.is_cuda]
        if not host:
            return
        if self._auto and len(host) == len(tensors) and not any(c.status == CAPTURED for c in self.classes.values()):
            self.backend = "eager"
            log.info("%s: backend 'auto' on host tensors: using the eager backend's bookkeeping", self.name)
            return
        cls.status, cls.reason = REJECTED, "host_tensors"
        log.warning("%s: class %r has %d host tensor(s) among %d; a CUDA graph cannot replay them: eager",
                    self.name, cls.label, len(host), len(tensors))

    def _drift(self, cls: ClassState, leaves, aliased) -> str:
        ptrs = tuple(v.data_ptr() for v, a in zip(leaves, aliased) if a is not None)
        if ptrs != cls.alias_ptrs:
            return "aliased input moved"
        now = self._guard_ptrs()
        if now != cls.guard_ptrs:
            if len(now) == len(cls.guard_ptrs):
                moved = [n for n, p, q in zip(self._guard_names(), now, cls.guard_ptrs) if p != q]
            else:
                moved = ["the set of regions/parameters changed"]
            return "write-through/parameter moved: " + ", ".join(moved[:4])
        return ""

    def _replay(self, cls: ClassState, leaves):
        if self.backend == "eager":
            cls.replays += 1
            args, kwargs = unflatten(cls.key[0], leaves)
            with self._guarded(), (self.timer or _untimed)("launch"):
                return self.fn(*args, **kwargs)
        timer = self.timer or _untimed
        with timer("stage"):
            for st, v in zip(cls.statics, leaves):
                if st is not None:
                    st.copy_(v)
        with timer("launch"):
            cls.graph.replay()
        cls.replays += 1
        with timer("outputs"):
            outs = [o.clone() if (self.clone_outputs and isinstance(o, torch.Tensor)) else o for o in cls.out_leaves]
        return unflatten(cls.out_structure, outs)

    def _probe_and_capture(self, cls: ClassState, args, kwargs, structure, leaves, aliased):
        devs = cuda_devices(leaves) if self.backend == "cuda" else ()
        before = RngSnapshot.take(devs)
        if self.backend == "cuda":
            cur = torch.cuda.current_stream()
            if self._stream is None:
                self._stream = torch.cuda.Stream()
            self._stream.wait_stream(cur)
            with torch.cuda.stream(self._stream):
                out = self.fn(*args, **kwargs)
            cur.wait_stream(self._stream)
        else:
            out = self.fn(*args, **kwargs)
        after = RngSnapshot.take(devs)
        cls.eager += 1
        cls.misses["probe"] += 1
        if before.host_changed(after):
            cls.status, cls.reason, cls.rng = REJECTED, "host_rng", "host"
            self._event("rejected", cls, "draws host randomness")
            log.warning("%s: class %r draws host randomness: rejected for good (eager)", self.name, cls.label)
            return out
        cls.rng = "device" if before.device_changed(after) else "none"
        cls.alias_ptrs = tuple(v.data_ptr() for v, a in zip(leaves, aliased) if a is not None)
        cls.guard_ptrs = self._guard_ptrs()
        cls.staging_bytes = sum(
            v.numel() * v.element_size() for v, a in zip(leaves, aliased) if isinstance(v, torch.Tensor) and a is None
        )
        if self.backend == "eager":
            cls.status, cls.captures = CAPTURED, cls.captures + 1
            self._event("capture", cls, "eager backend: admitted, executes eagerly")
            return out
        self._capture(cls, structure, leaves, aliased, after)
        return out

    def _capture(self, cls: ClassState, structure, leaves, aliased, rng_after: RngSnapshot) -> None:
        t0 = time.perf_counter()
        dev = next((v.device for v in leaves if isinstance(v, torch.Tensor) and v.is_cuda), None)
        cur = torch.cuda.current_stream()
        statics = []
        call_leaves = []
        for v, a in zip(leaves, aliased):
            if isinstance(v, torch.Tensor) and a is None:
                st = _static_like(v)
                st.copy_(v)
                statics.append(st)
                call_leaves.append(st)
            else:
                statics.append(None)
                call_leaves.append(v)
        cargs, ckwargs = unflatten(structure, call_leaves)
        torch.cuda.synchronize(dev)
        alloc0 = torch.cuda.memory_allocated(dev)
        graph = torch.cuda.CUDAGraph()
        if self.pool is None and not self.clone_outputs:
            # outputs alias pool memory across calls: keep them out of other engines' reuse
            self.pool = torch.cuda.graph_pool_handle()
        pool = self.pool if self.pool is not None else shared_pool(dev)
        try:
            with no_collection(), torch.cuda.graph(graph, pool=pool, stream=self._stream):
                out = self.fn(*cargs, **ckwargs)
            out_leaves: list = []
            out_structure = flatten(out, out_leaves)
        except Exception as e:  # capture failed: the class stays eager, the stream goes on
            torch.cuda.set_stream(cur)
            try:
                torch.cuda.synchronize(dev)
            except Exception:
                pass
            end_failed_capture(dev, pool, self._stream)
            FAILED_GRAPHS.append(graph)
            if self.pool == pool:
                self.pool = torch.cuda.graph_pool_handle()
            why = diagnose_capture(self.fn, cargs, ckwargs, *throwaway_capture(  # names the op it failed at
                self._stream, FAILED_GRAPHS, lambda p: end_failed_capture(dev, p, self._stream)))
            torch.cuda.set_stream(cur)
            msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}" + (f"; {why}" if why else "")
            cls.status, cls.reason, cls.graph = FAILED, "capture_failed", None
            self._event("capture_failed", cls, msg)
            log.warning("%s: capture of class %r failed (%s); it stays eager", self.name, cls.label, msg)
            return
        finally:
            rng_after.restore()
        torch.cuda.synchronize(dev)
        cls.graph, cls.statics = graph, statics
        cls.out_structure, cls.out_leaves = out_structure, [v for _, v in out_leaves]
        cls.pool_bytes = max(0, torch.cuda.memory_allocated(dev) - alloc0)
        cls.capture_s = time.perf_counter() - t0
        cls.captures += 1
        cls.status = CAPTURED
        self._event("capture", cls, f"rng={cls.rng}")

    # ------------------------------------------------------------------------------------
    # reports
    # ------------------------------------------------------------------------------------
    def counters(self) -> pd.DataFrame:
        """One row per class: status, calls replayed / eager, misses by reason, invalidations, cost."""
        rows = []
        for c in self.classes.values():
            rows.append(dict(engine=self.name, backend=self.backend, label=c.label, signature=describe(c.key),
                             status=c.status, reason=c.reason, rng=c.rng, hits=c.hits, replays=c.replays,
                             eager=c.eager, captures=c.captures, invalidations=c.invalidations,
                             capture_s=c.capture_s, staging_bytes=c.staging_bytes, pool_bytes=c.pool_bytes,
                             misses=sum(c.misses.values()), miss_reasons=dict(c.misses)))
        for reason, n in self.unclassed.items():
            rows.append(dict(engine=self.name, backend=self.backend, label=None, signature=None, status="unclassed",
                             reason=reason, rng=None, hits=n, replays=0, eager=n, captures=0, invalidations=0,
                             capture_s=0.0, staging_bytes=0, pool_bytes=0, misses=n, miss_reasons={reason: n}))
        cols = ["engine", "backend", "label", "signature", "status", "reason", "rng", "hits", "replays", "eager",
                "captures", "invalidations", "capture_s", "staging_bytes", "pool_bytes", "misses", "miss_reasons"]
        return pd.DataFrame(rows, columns=cols)

    def misses(self) -> pd.DataFrame:
        """Long form: engine, label, reason, count."""
        rows = [dict(engine=self.name, label=c.label, reason=r, count=n) for c in self.classes.values() for r, n in c.misses.items()]
        rows += [dict(engine=self.name, label=None, reason=r, count=n) for r, n in self.unclassed.items()]
        return pd.DataFrame(rows, columns=["engine", "label", "reason", "count"])

    def memory_report(self) -> pd.DataFrame:
        """Eq. (6): staging bytes per captured class plus the frozen write-through envelope."""
        wt = sum(t.numel() * t.element_size() for t in self.write_through().values())
        rows = [dict(engine=self.name, label=c.label, staging_bytes=c.staging_bytes, pool_bytes=c.pool_bytes)
                for c in self.classes.values() if c.status == CAPTURED]
        df = pd.DataFrame(rows, columns=["engine", "label", "staging_bytes", "pool_bytes"])
        df.attrs["write_through_bytes"] = wt
        df.attrs["reserved_bytes_eq6"] = int(df["staging_bytes"].sum()) + wt
        return df

    def tally(self) -> tuple[int, Counter]:
        """(replays so far, misses so far by reason): mark it before a call, then :meth:`path_since`."""
        reasons = Counter()
        for c in self.classes.values():
            reasons.update(c.misses)
        reasons.update(self.unclassed)
        return sum(c.replays for c in self.classes.values()), reasons

    def path_since(self, mark: tuple[int, Counter]) -> str:
        """How the calls since ``mark`` (a :meth:`tally`) ran: "replay" (or "replay (eager backend)"), else
        "eager: " and the miss reasons counted since."""
        replays, misses = self.tally()
        if replays > mark[0]:
            return "replay" if self.backend == "cuda" else "replay (eager backend)"
        diff = misses - mark[1]
        return "eager: " + (", ".join(sorted(diff)) if diff else "?")

    def summary(self) -> str:
        """e.g. 'flow_chunk: 25 of 31 replayed, 6 misses: probe 3, priming 3'."""
        total = self.calls
        replayed, reasons = self.tally()
        miss = sum(reasons.values())
        verb = "replayed" if self.backend == "cuda" else "admitted (eager backend)"
        tail = ", ".join(f"{r} {n}" for r, n in reasons.most_common())
        return f"{self.name}: {replayed} of {total} {verb}, {miss} misses" + (f": {tail}" if tail else "")

    def record_external(self, reason: str) -> None:
        """Count a call of this operator that ran eagerly outside the engine (e.g. cache-free priming)."""
        self.calls += 1
        self.unclassed[reason] += 1

    def reset_counters(self) -> None:
        """Zero the counters, keeping captured graphs."""
        self.calls = 0
        self.unclassed.clear()
        self.events.clear()
        for c in self.classes.values():
            c.hits = c.replays = c.eager = 0
            c.misses.clear()
