"""Run code under ``torch.profiler`` and get a :class:`Trace` back.

Three entry points, one mechanism (export a Chrome trace, load it with :func:`load_trace`):

- :func:`profile_call` profiles one call of ``fn`` after ``warmup`` unprofiled calls;
- :func:`profiled` is a context manager for a whole stream: mark chunks yourself with
  ``torch.profiler.record_function("chunk")`` and read ``p.windows("chunk")`` afterwards;
- :func:`profile_stream` runs a list of zero-argument step functions, one ``chunk`` range each.

On CUDA the profiler records CPU and CUDA activity and the device is synchronized before the
profiler stops, so every kernel launched inside lands in the trace. On CPU the trace holds host
ops only and busy/slack come back NaN with the reason (see :mod:`cadencelab.profile.metrics`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import pandas as pd
import torch

from . import metrics
from .outputs import atomic_path
from .trace import Trace, load_trace

__all__ = ["Profile", "profile_call", "profiled", "profile_stream", "CALL_RANGE"]

CALL_RANGE = "cadencelab.call"
_DEFAULT = object()   # "use the profile's own window"


@dataclass
class Profile:
    """A finished profile: the trace frames plus shortcuts to the metrics.

    trace:  the loaded :class:`Trace`.
    device: the device string the code ran on.
    path:   where the Chrome trace was kept (None when it was only held in memory).
    result: what the profiled call returned (a list of step results for profile_stream).
    window: the default window for :meth:`summary` (a range name, or None for the whole trace).
    """

    trace: Trace | None = None
    device: str = "cpu"
    path: str | None = None
    result: Any = None
    window: str | None = None
    options: dict = field(default_factory=dict)

    def _need(self) -> Trace:
        if self.trace is None:
            raise RuntimeError("the profile is not finished yet: read it after the `with profiled(...)` block")
        return self.trace

    def summary(self, window: Any = _DEFAULT, **kw) -> pd.DataFrame:
        """metrics.summary over ``window`` (default: this profile's window; None: whole trace)."""
        return metrics.summary(self._need(), self.window if window is _DEFAULT else window, **kw)

    def windows(self, name: str = "chunk", **kw) -> pd.DataFrame:
        """One summary row per occurrence of the host range ``name`` (busy, wall, launches...)."""
        return metrics.summary(self._need(), name, **kw)

    def stages(self, names: Sequence[str] | str | None = None, **kw) -> pd.DataFrame:
        """metrics.stages: per named range attribution of device work."""
        return metrics.stages(self._need(), names, **kw)

    def gaps(self, **kw) -> pd.DataFrame:
        """metrics.gaps on this trace."""
        return metrics.gaps(self._need(), **kw)

    @property
    def kernels(self) -> pd.DataFrame:
        return self._need().kernels

    @property
    def cpu_ops(self) -> pd.DataFrame:
        return self._need().cpu_ops

    @property
    def launches(self) -> pd.DataFrame:
        return self._need().launches

    @property
    def ranges(self) -> pd.DataFrame:
        return self._need().ranges


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


def _is_cuda(device: str | torch.device) -> bool:
    return torch.device(device).type == "cuda"


def _sync(device: str | torch.device) -> None:
    if _is_cuda(device):
        torch.cuda.synchronize(torch.device(device))


def _activities(device: str | torch.device) -> list:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if _is_cuda(device):
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {device!r} asked for, but torch.cuda is not available")
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def _export(prof, trace_path: str | None) -> tuple[Trace, str | None]:
    """Export the profiler's Chrome trace and load it; keep the file only when a path is given."""
    if trace_path is not None:  # written atomically, never into the recorded data
        with atomic_path(trace_path) as tmp:
            prof.export_chrome_trace(str(tmp))
        return load_trace(trace_path), trace_path
    fd, tmp = tempfile.mkstemp(prefix="cadencelab-", suffix=".pt.trace.json")
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        trace = load_trace(tmp)
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)
    trace.source = "<torch.profiler>"
    return trace, None


# ----------------------------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def profiled(device: str | torch.device = "cpu", *, record_shapes: bool = False, profile_memory: bool = False,
             with_stack: bool = False, trace_path: str | None = None, window: str | None = "chunk") -> Iterator[Profile]:
    """Profile the body of a ``with`` block; the yielded :class:`Profile` is filled on exit.

    >>> with profiled("cuda") as p:
    ...     for chunk in stream:
    ...         with torch.profiler.record_function("chunk"):
    ...             step(chunk)
    >>> p.windows("chunk")          # one row per chunk: wall_us, busy_us, slack_frac, launches...

    ``window`` is the range name :meth:`Profile.summary` uses by default when the trace has it.
    The device is synchronized before the profiler stops.
    """
    p = Profile(device=str(device), options=dict(record_shapes=record_shapes, profile_memory=profile_memory,
                                                 with_stack=with_stack))
    prof = torch.profiler.profile(activities=_activities(device), record_shapes=record_shapes,
                                  profile_memory=profile_memory, with_stack=with_stack)
    prof.__enter__()
    try:
        yield p
        _sync(device)
    finally:
        prof.__exit__(None, None, None)
    p.trace, p.path = _export(prof, trace_path)
    names = set(p.trace.ranges.loc[p.trace.ranges["side"] == "cpu", "name"])
    p.window = window if window in names else None


def profile_call(fn: Callable, *args, device: str | torch.device = "cpu", ranges: bool = True,
                 record_shapes: bool = False, warmup: int = 1, trace_path: str | None = None,
                 **kwargs) -> Profile:
    """Profile one call ``fn(*args, **kwargs)`` after ``warmup`` unprofiled calls.

    ranges=True wraps the profiled call in the range ``"cadencelab.call"`` and makes it the
    profile's default window, so ``summary()`` measures the call and not the profiler's own
    start-up. The call's return value is in ``Profile.result``.
    """
    for _ in range(max(0, int(warmup))):
        fn(*args, **kwargs)
    _sync(device)
    with profiled(device, record_shapes=record_shapes, trace_path=trace_path, window=CALL_RANGE) as p:
        if ranges:
            with torch.profiler.record_function(CALL_RANGE):
                p.result = fn(*args, **kwargs)
                _sync(device)
        else:
            p.result = fn(*args, **kwargs)
    return p


def profile_stream(step_fns: Sequence[Callable[[], Any]], *, device: str | torch.device = "cpu",
                   window: str = "chunk", warmup: int = 0, sync_each: bool = True,
                   record_shapes: bool = False, trace_path: str | None = None) -> Profile:
    """Run zero-argument step functions in order, each inside a ``window`` range.

    ``warmup`` runs the first step that many times before profiling. With ``sync_each`` the
    device is synchronized at the end of every step, inside its range, so a chunk's window
    covers its device work (as a real-time stream that hands audio back each chunk does).
    ``Profile.result`` is the list of step results; ``p.summary()`` gives one row per step.
    """
    steps = list(step_fns)
    if not steps:
        raise ValueError("profile_stream needs at least one step function")
    for _ in range(max(0, int(warmup))):
        steps[0]()
    _sync(device)
    results = []
    with profiled(device, record_shapes=record_shapes, trace_path=trace_path, window=window) as p:
        for step in steps:
            with torch.profiler.record_function(window):
                results.append(step())
                if sync_each:
                    _sync(device)
    p.result = results
    return p
