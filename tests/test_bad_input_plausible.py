"""Recorded data is checked for plausibility where a sign is known (issue 39): a negative latency, duration or
size in a recorded file is refused with the file and the field; signed quantities (changes, offsets, slack)
are not. CPU."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from cadencelab.course import data
from cadencelab.course.data.files import read_csv
from cadencelab.profile.plausible import check_frame, check_record, nonnegative


@pytest.mark.parametrize("name", ["latency_ms", "steady_latency_ms_median", "dur_us", "peak_bytes", "peak_MiB",
                                  "wall_s", "ms_per_call", "seconds"])
def test_durations_and_sizes_are_nonnegative(name):
    assert nonnegative(name)


@pytest.mark.parametrize("name", ["latency_delta", "latency_delta_lo", "vs_B0", "slack_ms", "start_ms", "arm",
                                  "blocks", "headline_change"])
def test_signed_or_unitless_fields_are_not_checked(name):
    assert not nonnegative(name)


def test_a_negative_latency_in_a_frame_names_file_column_and_row():
    df = pd.DataFrame({"arm": ["B0", "S"], "latency_ms": [1.0, -2.0], "latency_delta": [0.0, -0.5]})
    with pytest.raises(ValueError, match=r"f.csv: column 'latency_ms' holds 1 negative value\(s\) \(first at row 1: "):
        check_frame(df, "f.csv")
    assert check_frame(df.assign(latency_ms=[1.0, float("nan")]), "f.csv") is not None  # NaN: not recorded, fine


def test_a_negative_duration_deep_in_a_record_names_its_path():
    obj = {"summary": {"vs_B0": -0.8}, "arms": [{"arm": "B0", "ms_ci": [-1, 2], "peak_bytes": 10},
                                                {"arm": "S", "peak_bytes": -3}]}
    with pytest.raises(ValueError, match=r"r.json: field 'arms\[1\].peak_bytes' is negative \(-3\)"):
        check_record(obj, "r.json")
    deep = current = {}
    for _ in range(5000):  # any depth: no recursion
        current["x"] = current = {}
    check_record(deep, "deep.json")


def test_the_loaders_refuse_a_negative_latency(tmp_path, monkeypatch):
    root = tmp_path / "data"
    (root / "h200").mkdir(parents=True)
    (root / "h200" / "x.json").write_text(json.dumps({"summary": {"latency_ms": -4.0}}))
    pd.DataFrame({"chunk": [0, 1], "latency_ms": [3.0, -1.0]}).to_csv(root / "h200" / "x.csv", index=False)
    monkeypatch.setenv("CADENCELAB_DATA", str(root))
    with pytest.raises(ValueError, match=r"x.json: field 'summary.latency_ms' is negative"):
        data.load_json("h200/x.json")
    with pytest.raises(ValueError, match=r"x.csv: column 'latency_ms' holds 1 negative"):
        read_csv(root / "h200" / "x.csv")
