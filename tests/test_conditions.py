"""Device conditions: one definition applied everywhere, the arm@condition references, the fairness gate
and the conditions study's choice (on hand-made results; the study itself runs on the H200)."""

from __future__ import annotations

import os

import pandas as pd
import pytest
import torch

from cadencelab.bench import conditions as C
from cadencelab.bench.token2wav_analysis import busy_floor, fairness, gated, reference_of
from cadencelab.replay.determinism import CONDITIONS, EXACT, REFERENCE, apply_condition, condition_of, split_arm


@pytest.fixture
def restore_flags():
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark, os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    yield
    (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic,
     torch.backends.cudnn.benchmark) = saved[:4]
    if saved[4] is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved[4]


def test_each_condition_sets_exactly_its_knobs(restore_flags):
    for name, c in CONDITIONS.items():
        got = apply_condition(name)
        assert got["condition"] == name
        assert torch.backends.cudnn.deterministic is c.cudnn_deterministic
        assert torch.backends.cudnn.benchmark is False
        if c.tf32 is None:  # torch's defaults
            assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, True)
        else:
            assert torch.backends.cuda.matmul.allow_tf32 is c.tf32 and torch.backends.cudnn.allow_tf32 is c.tf32
        assert os.environ.get("CUBLAS_WORKSPACE_CONFIG") == c.cublas_workspace


def test_the_exact_condition_is_the_default_and_unknown_names_are_refused():
    assert condition_of(None).name == EXACT and EXACT in CONDITIONS and REFERENCE in CONDITIONS
    assert CONDITIONS[REFERENCE].pins == 0
    with pytest.raises(ValueError, match="unknown device condition 'fast'.*defaults"):
        condition_of("fast")
    with pytest.raises(ValueError, match="'nope'"):
        split_arm("B0@nope")
    assert split_arm("SRc") == ("SRc", EXACT)
    assert split_arm("SRc@defaults") == ("SRc", "defaults")


def test_arms_are_gated_on_the_b0_of_their_own_condition():
    arms = ("B0", "SRc", "B0@defaults", "SRc@defaults", "SRc@no_tf32")
    assert reference_of("SRc", arms, EXACT) == "B0" and gated("SRc", arms, EXACT)
    assert reference_of("SRc@defaults", arms, EXACT) == "B0@defaults" and gated("SRc@defaults", arms, EXACT)
    # a B0 is its own reference (not gated); an arm whose condition has no B0 is compared, not gated
    assert reference_of("B0@defaults", arms, EXACT) == "B0@defaults" and not gated("B0@defaults", arms, EXACT)
    assert reference_of("SRc@no_tf32", arms, EXACT) == "B0" and not gated("SRc@no_tf32", arms, EXACT)


def test_fairness_gate_reads_b0_against_the_unpinned_reference():
    """The gate holds only when B0's whole interval against the unpinned reference is within the tolerance,
    fails when the whole interval is above it, and is inconclusive when it straddles it."""
    ref = f"B0@{REFERENCE}"

    def gate(delta, lo, hi):  # delta = reference / B0 - 1 and its interval
        return fairness({"B0": dict(latency_ms=110.0), ref: dict(latency_ms=110.0 * (1 + delta), latency_delta=delta,
                                                                 latency_delta_lo=lo, latency_delta_hi=hi)})

    f = gate(100 / 110 - 1, -0.12, -0.05)  # B0 10% slower, its interval [5.3%, 13.6%]: above 5% throughout
    assert f["B0_slower_by"] == pytest.approx(0.10) and f["verdict"] == "fails" and f["holds"] is False
    assert f["B0_slower_by_ci"][0] < f["B0_slower_by"] < f["B0_slower_by_ci"][1]
    f = gate(-0.01, -0.03, 0.01)  # B0 1% slower, interval [-1%, +3.1%]: within 5% throughout
    assert f["verdict"] == "holds" and f["holds"] is True
    f = gate(-0.01, -0.2, 0.15)  # wide: straddles the tolerance
    assert f["verdict"] == "inconclusive" and f["holds"] is False
    assert fairness({"B0": dict(latency_ms=110.0)}) is None


def test_busy_floor_is_b0_latency_over_b0_busy():
    f = busy_floor({"B0": dict(busy_ms_median=70.0, steady_latency_ms_median=210.0),
                    "SRc": dict(steady_latency_ms_median=75.0, busy_ms_median=69.0)})
    assert f["ceiling"] == pytest.approx(3.0) and f["SRc_speedup"] == pytest.approx(2.8)
    assert f["SRc_share_of_ceiling"] == pytest.approx(2.8 / 3.0)


def _fake(cfg: C.ConditionsConfig, b0_ms: dict, not_exact: set) -> dict:
    arms = {}
    for name in cfg.arm_names():
        base, cond = split_arm(name, EXACT)
        arms[name] = dict(steady_latency_ms_median=b0_ms[cond] * (0.4 if base == "SRc" else 1.0), blocks=2,
                          exact_blocks=0 if (cond, base) in not_exact else 2, exact=(cond, base) not in not_exact)
    return dict(arms=arms)


def test_the_study_chooses_the_fastest_exact_condition():
    cfg = C.ConditionsConfig()
    b0 = {"defaults": 180.0, "cudnn_det": 185.0, "no_tf32": 190.0, "no_tf32_cudnn_det": 188.0,
          "no_tf32_cudnn_det_ws": 320.0}
    # nothing pinned is fastest but its B0 is not reproducible across processes; cudnn_det is exact
    rows = C.condition_rows(_fake(cfg, b0, {("defaults", "B0_repeat"), ("no_tf32", "SRc")}), cfg)
    assert rows.set_index("condition").loc["no_tf32_cudnn_det_ws", "B0_cost_vs_fastest"] == pytest.approx(320 / 180 - 1)
    s = C.summarise(rows)
    assert s["chosen"] == "cudnn_det" and s["fastest_condition"] == "defaults" and not s["fastest_condition_is_exact"]
    # fewest pins first: with cudnn_det not exact, the two-pin condition wins over the faster-looking three-pin one
    b0_alt = dict(b0, no_tf32_cudnn_det_ws=170.0)
    alt = C.summarise(C.condition_rows(_fake(cfg, b0_alt, {("defaults", "B0_repeat"), ("cudnn_det", "SRc"),
                                                          ("no_tf32", "SRc")}), cfg))
    assert alt["chosen"] == "no_tf32_cudnn_det"
    assert s["exact_conditions"] == ["cudnn_det", "no_tf32_cudnn_det", "no_tf32_cudnn_det_ws"]
    assert s["chosen_B0_slower_than_fastest_by"] == pytest.approx(185 / 180 - 1)
    none = C.summarise(C.condition_rows(_fake(cfg, b0, {(c, "SRc") for c in b0}), cfg))
    assert none["chosen"] is None


def test_study_arms_keep_the_plain_names_for_the_exact_condition():
    names = C.ConditionsConfig(conditions=(EXACT, "defaults"), arms=("B0", "SRc")).arm_names()
    assert names == ("B0", "SRc", "B0@defaults", "SRc@defaults")
    with pytest.raises(ValueError, match="exact condition"):
        C.run_conditions(C.ConditionsConfig(conditions=("defaults",)))


def test_the_recorded_study_chose_the_library_exact_condition():
    """data/h200/device_conditions.json (the H200 run) names EXACT; every arm there was exact in it."""
    from cadencelab.course import data

    d = data.load_json("h200/device_conditions.json")
    assert d["summary"]["chosen"] == EXACT
    rows = pd.DataFrame(d["conditions"]).set_index("condition")
    assert bool(rows.loc[EXACT, "exact"]) and rows.loc[EXACT, "pins"] == min(rows.loc[rows["exact"], "pins"])
    assert d["provenance"]["gpu"] and d["provenance"]["torch"] and d["provenance"]["date"]
