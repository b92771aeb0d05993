"""Which operation a failed CUDA graph capture failed at.

A capture that fails often reports "operation failed due to a previous error during capture" at whatever op
came next; the cause (a host sync such as ``.item()``, ``nonzero``, a copy to the host) is never named. When a
capture fails, the engine captures the same call once more into a throwaway graph under :class:`OpLog` (a
capture executes nothing, so this changes no state), which records every op dispatched, the first one that
cannot be captured (a host sync or a host tensor) and the first one that raised, each with the user's line.
Nothing of this runs on a capture that succeeds.
"""

from __future__ import annotations

import contextlib
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .nogc import no_collection

__all__ = ["SYNC_OPS", "OpLog", "diagnose_capture", "throwaway_capture"]

#: ops that read a device value on the host (a sync: not capturable)
SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::nonzero",
                      "aten::equal", "aten::allclose", "aten::unique", "aten::_unique2", "aten::unique_consecutive",
                      "aten::masked_select", "aten::nonzero_static", "aten::_assert_async", "aten::histc",
                      "aten::bincount"})


def _where() -> str:
    """The innermost frame of the current stack outside torch and this module: the user's line."""
    skip = (torch.__file__.rsplit("/", 1)[0], __file__)
    frames = [f for f in traceback.extract_stack() if not f.filename.startswith(skip)]
    f = frames[-1] if frames else None
    return f"{f.filename}:{f.lineno} in {f.name}" if f is not None else "?"


def _tensors(args, kwargs):
    for a in (*args, *(kwargs or {}).values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (t for t in a if isinstance(t, torch.Tensor))


class OpLog(TorchDispatchMode):
    """Every op dispatched inside (``ops``, names); ``unsafe``: the first that cannot be captured (a host sync,
    or a non-scalar host tensor beside device ones), ``failed``: the first that raised, each (op, line, why)."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []
        self.unsafe: tuple | None = None
        self.failed: tuple | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name() if hasattr(func, "name") else str(func)
        name = name if name.startswith("aten::") or "::" in name else f"aten::{name}"
        name = name.split(".")[0]
        self.ops.append(name)
        if self.unsafe is None:
            ts = list(_tensors(args, kwargs))
            host = any(t.device.type == "cpu" and t.dim() > 0 for t in ts) and any(t.is_cuda for t in ts)
            if name in SYNC_OPS or host:
                why = "a host sync" if name in SYNC_OPS else "a host tensor beside device ones"
                self.unsafe = (name, _where(), why)
        try:
            return func(*args, **(kwargs or {}))
        except Exception as e:
            if self.failed is None:
                self.failed = (name, _where(), str(e).splitlines()[0] if str(e) else type(e).__name__)
            raise

    def describe(self) -> str:
        """One line: the first op that cannot be captured, else the first that raised; '' when neither."""
        if self.unsafe is not None:
            op, at, why = self.unsafe
            return f"first operation that cannot be captured: {op} ({why}) at {at}"
        if self.failed is not None:
            op, at, why = self.failed
            return f"first failing operation: {op} at {at}: {why}"
        return ""


def diagnose_capture(fn, args, kwargs, capture=None, cleanup=None) -> str:
    """Call ``fn`` once more inside ``capture()`` (a throwaway graph capture; default none, for CPU tests) under an
    :class:`OpLog`, then ``cleanup()``; return its :meth:`~OpLog.describe` (never raises: '' when it cannot tell)."""
    log = OpLog()
    with contextlib.suppress(Exception), (capture() if capture is not None else contextlib.nullcontext()), log:
        fn(*args, **kwargs)  # its failure is what is being diagnosed
    if cleanup is not None:
        with contextlib.suppress(Exception):  # a diagnosis never fails the call
            cleanup()
    return log.describe()


def throwaway_capture(stream, keep: list, end) -> tuple:
    """``(capture, cleanup)`` for :func:`diagnose_capture` on CUDA: a graph captured on ``stream`` into its own pool
    only to see which op fails (kept in ``keep``: the allocator may still hold its filters), undone by
    ``end(pool)`` as a failed capture is."""
    graph, pool = torch.cuda.CUDAGraph(), torch.cuda.graph_pool_handle()
    keep.append(graph)
    caller = torch.cuda.current_stream()

    @contextlib.contextmanager
    def capture():
        try:
            with no_collection(), torch.cuda.graph(graph, pool=pool, stream=stream):
                yield
        finally:  # a capture that fails at its end never leaves its stream context: the caller's comes back
            torch.cuda.set_stream(caller)

    return capture, lambda: end(pool)
