"""Figures you can trust: the recorded factorial files meet the process method, and the README and the
paper table print every factorial figure with its interval and no direction the interval does not support."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from cadencelab.course import data, paper, trust

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
import results_table  # noqa: E402

TRUSTED = ("factorial", "headline")


@pytest.mark.parametrize("name", TRUSTED)
def test_recorded_file_meets_the_method(name):
    r = data.result(name)
    s, prov = r["summary"], r["provenance"]
    assert s["processes_per_arm"] >= 3
    assert s["method"]["min_processes"] >= 3 and s["method"]["cores"], "pinned to a fixed set of cores"
    assert s["stopped"] in ("converged", "time budget", "max processes")
    for key in ("gpu", "torch", "date", "git_commit"):
        assert prov.get(key), f"{name}: provenance lacks {key}"
    aa = s["a_a"]
    assert set(aa) >= {"arm", "ratio", "ci", "holds"} and aa["arm"] == "B0_repeat"
    assert aa["holds"] == (aa["ci"][0] <= 0 <= aa["ci"][1]) and not s["unstable"]
    lo, hi = s["speedup_SRc_vs_B0_ci"]
    assert lo < s["speedup_SRc_vs_B0"] < hi
    # processes of every arm ran interleaved: each process index holds every live arm
    procs = {(p["arm"], p["process"]) for p in r["processes"]}
    for p in range(s["method"]["min_processes"]):
        assert {a for a, q in procs if q == p} == set(s["processes_by_arm"])
    # the stock runtime is deterministic across its processes, and every gated arm is exact
    assert s["b0_cross_process_exact"]["agree"] == s["b0_cross_process_exact"]["blocks"]
    assert not s["non_exact_arms"] and not s["failed_arms"]


def test_headline_stopping_is_reported_as_it_happened():
    h = trust.headline()
    assert h["processes"] >= 3
    if h["halfwidth"] > h["target"]:
        assert h["stopped"] in ("time budget", "max processes")
    block = results_table.readme_block((ROOT / "README.md").read_text())
    line = next(l for l in block.splitlines() if l.startswith("- **Headline**"))
    assert trust.figure_text(h["speedup"], *h["ci"]) in line
    assert ("not within" in line) == (h["halfwidth"] > h["target"])
    assert f"{100 * h['halfwidth']:.0f}%" in line


def test_readme_factorial_rows_print_the_interval_and_only_the_claim_it_supports():
    block = results_table.readme_block((ROOT / "README.md").read_text())
    df = trust.arms_frame("factorial").set_index("arm")
    lines = block.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("| arm | latency ms (mean over processes)"))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    rows = {l.split("|")[1].strip(): [c.strip() for c in l.split("|")[1:-1]] for l in lines[start + 2:end]}
    checked = 0
    for arm, d in df.iterrows():
        if arm == "B0":
            continue
        cells = rows[arm]
        assert cells[2] == trust.figure_text(d["latency_delta"], d["latency_delta_lo"], d["latency_delta_hi"], "%")
        assert cells[3] == trust.claim(d["latency_delta_lo"], d["latency_delta_hi"])
        if cells[3] in ("faster", "slower"):
            assert not d["latency_delta_lo"] <= 0 <= d["latency_delta_hi"]
        checked += 1
    assert checked == len(df) - 1
    aa = trust.a_a("headline")
    assert trust.figure_text(aa["ratio"], *aa["ci"], unit="%") in block


def test_readme_claims_no_direction_its_intervals_do_not_support():
    block = results_table.readme_block((ROOT / "README.md").read_text())
    for phrase in ("Pinning slows", "stands clear", "identical code is slower", "The limit is the device:"):
        assert phrase not in block
    f = data.factorial_summary()["fairness"]
    assert f["verdict"] in block and (f["verdict"] != "holds" or f["B0_slower_by_ci"][1] <= f["tolerance"])


def test_paper_table_changes_say_only_what_their_interval_supports():
    vs = paper.paper_vs_recording("exact")
    table = paper.paper_vs_table("exact")
    for r, text in zip(vs.itertuples(), table["this recording"]):
        if not paper.is_change(r.key) or np.isnan(r.recorded_lo):
            continue
        word = "no clear difference" if r.recorded_lo <= 0 <= r.recorded_hi else ("higher" if r.recorded_lo > 0 else "lower")
        assert text.endswith(word), (r.key, text)
    s_row = table.set_index(vs["key"]).loc["s_latency_delta", "this recording"]
    assert re.search(r"\[[-+]\d", s_row)  # the S row carries its interval


def test_figure_text_and_claim():
    assert trust.figure_text(4.0167, 3.4356, 4.6951) == "4.02x [3.44, 4.70]"
    assert trust.figure_text(0.0099, -0.1926, 0.2589, "%") == "+1.0% [-19.3, +25.9]"
    assert trust.figure_text(60.21, 60.1, 60.4, "ms") == "60.2 ms [60.1, 60.4]"
    assert trust.figure_text(2.0) == "2.00x (no interval)"
    assert trust.figure_text(float("nan")) == "not recorded"
    with pytest.raises(ValueError, match="unit"):
        trust.figure_text(1.0, 0.5, 1.5, "s")
    assert trust.claim(-0.3, -0.1) == "faster" and trust.claim(0.1, 0.2) == "slower"
    assert trust.claim(-0.1, 0.1) == "no clear difference"


def test_b0_split_and_prediction_from_the_recording():
    s = trust.b0_split()
    assert s["dispatch_launch_ms"] + s["other_host_ms"] == pytest.approx(s["latency_ms"])
    assert s["device_busy_ms"] < s["latency_ms"]
    # the host's own rate predicts its own latency; a faster host predicts a faster B0, never below the busy floor
    assert trust.predicted_b0_ms(s["tiny_ops_per_s"]) == pytest.approx(s["latency_ms"])
    assert trust.predicted_b0_ms(2 * s["tiny_ops_per_s"]) < s["latency_ms"]
    assert trust.predicted_b0_ms(1e12) == pytest.approx(max(s["other_host_ms"], s["device_busy_ms"]))
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="tiny_ops_per_s"):
            trust.predicted_b0_ms(bad)


def test_latency_interval_and_process_frame():
    pt, lo, hi = trust.latency_interval("headline", "B0")
    per = trust.process_frame("headline")
    b0 = per[per["arm"] == "B0"]
    assert pt == pytest.approx(b0["mean"].mean()) and lo < pt < hi
    assert len(b0) == trust.headline()["processes"] and b0["tiny_ops_per_s"].gt(0).all()
    ceiling = trust.ceiling_interval("factorial")
    assert ceiling[1] < ceiling[0] < ceiling[2]
    with pytest.raises(ValueError, match="older recording"):
        trust.process_frame("factorial_pinned")


def test_the_headline_meets_the_issue_bar_and_says_what_staging_did():
    """The recorded headline: A/A holds, half-width within 10% of the point, at least 3 processes per arm;
    the staging check's direction is the one its interval supports, and the README prints it and the
    headline recomputed from the blocks no staging overlapped."""
    h = trust.headline("headline")
    assert h["a_a"]["holds"] and h["processes"] >= 3 and h["halfwidth"] <= 0.10
    st = trust.staging_check("headline")
    assert st is not None
    e = st["effect"]
    assert e["direction"] == trust.claim(*e["ci"])
    lo, hi = st["clear_ci"]
    assert lo < st["clear_speedup"] < hi and st["clear_blocks"]["B0"] == e["blocks_clear"]
    line = next(l for l in results_table.readme_block((ROOT / "README.md").read_text()).splitlines()
                if l.startswith("- **Staging check**"))
    assert trust.figure_text(e["ratio"], *e["ci"], unit="%") in line and f"({e['direction']})" in line
    assert trust.figure_text(st["clear_speedup"], *st["clear_ci"]) in line
    assert trust.staging_check("factorial") is None  # recorded before staging: nothing to weigh
