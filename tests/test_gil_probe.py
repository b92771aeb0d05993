"""The interpreter-lock probe: late wake-ups while another thread holds the lock, on time without one, and a
run's summaries as a point's columns."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from cadencelab.profile.gil import GilProbe
from cadencelab.profile.limiter import gil_point


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_the_probe_wakes_late_while_a_thread_holds_the_lock():
    """A pure-Python loop gives the lock up only every switch interval (set to 20 ms here): the probe waits for
    it, by far more than without the loop. Functional, not a speed target: the margin is tenfold."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.02)
    try:
        with GilProbe(idle_s=0.05) as quiet:
            time.sleep(0.3)
        with GilProbe(idle_s=0.05) as busy:
            t = threading.Thread(target=_spin, args=(0.4,))
            t.start()
            t.join()
    finally:
        sys.setswitchinterval(old)
    q, b = quiet.summary(), busy.summary()
    assert q["probes"] > 20 and b["probes"] >= 3 and b["probes"] < q["probes"]
    assert b["late_ms_median"] > 5.0 and b["late_ms_median"] > 4 * q["late_ms_median"]
    assert b["late_share"] > q["late_share"] and 0 < b["late_share"] <= 1.0
    assert q["idle_late_ms"] >= 0 and q["wall_s"] == pytest.approx(0.3, abs=0.2)


def test_a_probe_needs_a_positive_interval_and_summarises_no_wake_up_as_nan():
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        GilProbe(interval_s=0)
    p = GilProbe(interval_s=10.0, idle_s=0)
    with p:
        pass
    s = p.summary()
    assert s["probes"] == 0 and s["late_ms_median"] != s["late_ms_median"]
    assert gil_point(s) == {} and gil_point(None) == {} and gil_point([None, s]) == {}


def test_gil_point_reads_one_summary_or_one_per_process():
    a = dict(probes=10, late_ms_median=1.0, late_ms_p95=4.0, late_share=0.2, idle_late_ms=0.1)
    b = dict(probes=10, late_ms_median=3.0, late_ms_p95=9.0, late_share=0.4, idle_late_ms=0.3)
    assert gil_point(a) == dict(gil_late_ms=1.0, gil_late_p95_ms=4.0, gil_late_share=0.2, gil_idle_ms=0.1)
    both = gil_point([a, b, None])
    assert both["gil_late_ms"] == 2.0 and both["gil_late_p95_ms"] == 9.0
    assert both["gil_late_share"] == pytest.approx(0.3) and both["gil_idle_ms"] == pytest.approx(0.2)
