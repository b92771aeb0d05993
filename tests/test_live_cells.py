"""course.live_cells: the live cells' table held to the notebooks, the presets, the memory measurement (run here on
the CPU, where the peaks are n/a) and the README's running-live guide generated from the recorded file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from cadencelab.course import data, live_cells, tour

ROOT = Path(__file__).resolve().parents[1]


def _notebook(n: int) -> str:
    return next(p for p in tour.course(ROOT / "notebooks") if p.name.startswith(f"{n:02d}_")).read_text()


def test_the_table_names_what_each_notebook_runs_live():
    """Every notebook that runs something on the GPU has its live cells in the table, and each cell's call is in
    its notebook's source; the cells sized by LIVE_PRESET are the notebooks that take the parameter."""
    live = {int(p.name[:2]) for p in tour.course(ROOT / "notebooks")
            if re.search(r'if LIVE|"cuda" if LIVE|live=LIVE|lesson\(LIVE\)', p.read_text())}
    assert live <= {c.notebook for c in live_cells.CELLS}
    for c in live_cells.CELLS:
        assert c.call in _notebook(c.notebook), (c.name, c.call)
    sized = {c.notebook for c in live_cells.CELLS if c.sized}
    takes = {int(p.name[:2]) for p in tour.course(ROOT / "notebooks") if "LIVE_PRESET = " in p.read_text()}
    assert sized == takes and all("live_preset(LIVE_PRESET)" in _notebook(n) for n in sized)
    assert live_cells.live_preset("small") == live_cells.PRESETS["small"]
    with pytest.raises(ValueError, match="LIVE_PRESET must be one of"):
        live_cells.live_preset("medium")


def test_memory_on_the_cpu_reports_peaks_n_a_with_provenance(tmp_path, capsys):
    out = tmp_path / "memory"
    rc = live_cells.main(["--memory", "--out", str(out), "--device", "cpu", "--presets", "small",
                          "--cells", "carry,graph_lesson"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "n/a" in printed and f"wrote {out / live_cells.FILE}" in printed
    obj = json.loads((out / live_cells.FILE).read_text())
    assert obj["command"] == live_cells.COMMAND and obj["provenance"]["torch"] and obj["provenance"]["gpu"] is None
    rows = pd.DataFrame(obj["rows"]).set_index("cell")
    assert rows.loc["carry", "status"] == "ok" and rows.loc["carry", "seconds"] > 0
    assert rows[["peak_allocated_MiB", "peak_reserved_MiB"]].isna().all().all()  # n/a on a CPU
    assert rows.loc["graph_lesson", "status"].startswith("skipped")
    csv = pd.read_csv(out / live_cells.CSV)
    assert list(csv.columns) == live_cells.COLUMNS and len(csv) == 2
    df = live_cells.recorded(out / live_cells.FILE)
    assert "n/a" in live_cells.guide(df) and "arm S of the teaching Token2wav" in live_cells.guide(df)
    # a second run refuses to overwrite; the data folder is refused; bad names are named
    assert live_cells.main(["--memory", "--out", str(out), "--device", "cpu", "--cells", "carry"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert live_cells.main(["--memory", "--out", str(data.data_dir() / "x"), "--device", "cpu"]) == 2
    assert live_cells.main(["--memory", "--out", str(tmp_path / "b"), "--presets", "huge"]) == 2
    assert live_cells.main(["--memory", "--out", str(tmp_path / "c"), "--cells", "nope"]) == 2
    assert "no live cell 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_a_failing_cell_is_reported_and_the_others_still_measured(monkeypatch):
    boom = live_cells.LiveCell("boom", 0, "a cell that fails", "profile_chunk", lambda dev, sizes: 1 / 0)
    monkeypatch.setattr(live_cells, "CELLS", (boom, live_cells.cell("graph_lesson")))
    df = live_cells.measure("cpu", ("small",), ["boom", "graph_lesson"]).set_index("cell")
    assert df.loc["boom", "status"].startswith("error: ZeroDivisionError")
    assert df.loc["graph_lesson", "status"].startswith("skipped")


def test_a_run_stopped_midway_keeps_its_finished_rows_marked_incomplete(tmp_path, monkeypatch):
    """The files are rewritten after every cell run: a run killed at a time limit (here: the second cell never
    returns) leaves the first cell's row, and the record and the guide say it is incomplete."""
    class Stop(BaseException):  # what a kill looks like to the code after it: nothing more runs
        pass

    def never(dev, sizes):
        raise Stop

    ok = live_cells.LiveCell("first", 3, "a cell that runs", "carry", lambda dev, sizes: None, cpu=True)
    stuck = live_cells.LiveCell("stuck", 5, "a cell cut short", "carry", never, cpu=True)
    monkeypatch.setattr(live_cells, "CELLS", (ok, stuck))
    with pytest.raises(Stop):
        live_cells.record(tmp_path / "m", "cpu", ("small",))
    df = live_cells.recorded(tmp_path / "m" / live_cells.FILE)
    assert df["cell"].tolist() == ["first"] and df.attrs["complete"] is False and df.attrs["planned"] == 2
    assert "Incomplete" in live_cells.guide(df) and "1 of its 2" in live_cells.guide(df)
    assert len(pd.read_csv(tmp_path / "m" / live_cells.CSV)) == 1
    monkeypatch.setattr(live_cells, "CELLS", (ok,))
    live_cells.record(tmp_path / "n", "cpu", ("small",))
    whole = live_cells.recorded(tmp_path / "n" / live_cells.FILE)
    assert whole.attrs["complete"] is True and "Incomplete" not in live_cells.guide(whole)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal without a GPU")
def test_a_cuda_measurement_without_a_gpu_is_refused():
    with pytest.raises(ValueError, match="needs CUDA"):
        live_cells.measure("cuda", ("small",), ["carry"])


def test_the_guide_reads_the_recorded_file_or_says_how_to_record_it():
    none = live_cells.guide(None) if live_cells.recorded() is None else None
    if none is not None:
        assert live_cells.COMMAND in none and "Not measured yet" in none and "| notebook |" not in none
    rows = [dict(cell="rules_panel", notebook=5, what="the live factorial", preset="small", sizes="x", device="cuda",
                 status="ok", seconds=12.3, peak_allocated_MiB=1234.5, peak_reserved_MiB=2048.0,
                 resident_before_MiB=0.0)]
    df = pd.DataFrame(rows, columns=live_cells.COLUMNS)
    df.attrs["provenance"] = dict(gpu="NVIDIA H200", torch="2.11", git_commit="abc1234", date="2026-12-02T00:00:00Z")
    text = live_cells.guide(df)
    assert "| 5 | the live factorial | small | 1,234 | 2,048 | 12 | ok |" in text and "NVIDIA H200" in text
    assert "`abc1234`" in text and "LIVE_PRESET" in text
    assert data.how_to_record("live_memory").startswith(live_cells.COMMAND)


def test_the_readme_guide_is_generated():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cadencelab_docs_results_table", ROOT / "docs" / "results_table.py")
    rt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rt)
    readme = (ROOT / "README.md").read_text()
    assert rt.readme_live_block(readme) == live_cells.guide().strip(), (
        "README.md's running-live guide is out of date: run `python docs/results_table.py --write-readme`")


@pytest.mark.cuda
def test_memory_on_a_gpu_reports_each_cells_peak():
    df = live_cells.measure("cuda", ("small",), ["carry", "graph_lesson"]).set_index("cell")
    assert (df["status"] == "ok").all(), df["status"]
    assert (df["peak_allocated_MiB"] > 0).all() and (df["peak_reserved_MiB"] >= df["peak_allocated_MiB"]).all()
