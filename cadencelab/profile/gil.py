"""How long a thread of this process waits for the interpreter lock, measured from the side.

CPython counts no lock waits, yet the lanes' graph launches were seen taking far longer than their thread's CPU
time (notebook 6): a launch releases the lock, and the thread must take it back before its next line. A probe
thread sleeps ``interval_s`` in a loop and times each wake-up: what a wake-up takes beyond its sleep is the OS's
wake-up latency (``idle_late_ms``, read before the probed work) plus, when other threads hold the lock, the
wait for it. One more thread asking for the lock every few milliseconds barely adds to what it measures.
"""

from __future__ import annotations

import threading
import time

import numpy as np

__all__ = ["GilProbe"]


class GilProbe:
    """``with GilProbe() as p: work()``, then ``p.summary()``: the probe's wake-ups during the work."""

    def __init__(self, interval_s: float = 0.002, idle_s: float = 0.1):
        if not interval_s > 0:
            raise ValueError(f"GilProbe: interval_s must be > 0, got {interval_s}")
        self.interval_s, self.idle_s = interval_s, idle_s
        self._late: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.idle_late_ms = float("nan")
        self.wall_s = 0.0

    def _loop(self, out: list, until: float | None = None) -> None:
        stop, clock, interval = self._stop, time.perf_counter, self.interval_s
        while until is None or clock() < until:
            t0 = clock()
            if stop.wait(interval):  # the end of the probed work wakes it at once: no sample then
                return
            out.append(clock() - t0 - interval)

    def __enter__(self) -> GilProbe:
        self._stop.clear()
        idle: list[float] = []
        if self.idle_s > 0:  # the wake-up latency with nothing else asking for the lock (this thread waits)
            self._loop(idle, time.perf_counter() + self.idle_s)
        self.idle_late_ms = float(np.median(idle) * 1e3) if idle else float("nan")
        self._late, self._t0 = [], time.perf_counter()
        self._thread = threading.Thread(target=self._loop, args=(self._late,), name="gil-probe", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.wall_s = time.perf_counter() - self._t0

    def summary(self) -> dict:
        """``probes``; the wake-ups' lateness beyond the sleep (median, p95, mean ms); ``late_share``: their sum
        over the probed wall (the share of it the probe spent runnable but not running); ``idle_late_ms``."""
        late = np.asarray(self._late, dtype=float) * 1e3
        if not len(late):
            return dict(probes=0, interval_ms=self.interval_s * 1e3, late_ms_median=float("nan"),
                        late_ms_p95=float("nan"), late_ms_mean=float("nan"), late_share=float("nan"),
                        idle_late_ms=self.idle_late_ms, wall_s=self.wall_s)
        return dict(probes=int(len(late)), interval_ms=self.interval_s * 1e3, late_ms_median=float(np.median(late)),
                    late_ms_p95=float(np.percentile(late, 95)), late_ms_mean=float(late.mean()),
                    late_share=float(late.sum() / 1e3 / self.wall_s) if self.wall_s > 0 else float("nan"),
                    idle_late_ms=self.idle_late_ms, wall_s=self.wall_s)
