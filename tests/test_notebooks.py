"""The course: the notebooks are Python sources in jupytext's percent format, each shaped as a lesson
(title and learning goals, the parameters cell, short cells, the check cell last); every notebook runs
top to bottom (nbclient, kernel python3, 300 s per cell) and its check cell prints the marker; all
seven within the CI budget; the tour writes an offline HTML report; `cadencelab lab` serves the folder."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
jupytext = pytest.importorskip("jupytext")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from cadencelab import tour  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
NAMES = [p.stem for p in tour.course(NOTEBOOKS)]
BUDGET_S = float(os.environ.get("CADENCELAB_NOTEBOOK_BUDGET_S", "300"))
_TIMES: dict[str, float] = {}


def _artifact(name: str, text: str) -> None:
    dest = os.environ.get("CADENCELAB_ARTIFACTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        (Path(dest) / name).write_text(text)


def _source(name: str) -> Path:
    return NOTEBOOKS / f"{name}{tour.SOURCE_SUFFIX}"


def test_seven_lessons_as_percent_sources():
    assert len(NAMES) == 7 and not list(NOTEBOOKS.glob("*.ipynb")), "the .py sources are the only notebooks"
    for name in NAMES:
        path = _source(name)
        nb = tour.read_notebook(path)
        nbformat.validate(nb)
        # the text is jupytext's own form under notebooks/jupytext.toml: a save from JupyterLab changes nothing
        assert tour.notebook_text(nb, path) == path.read_text(encoding="utf-8"), f"{path.name}: not in canonical form"
        assert nb.metadata["kernelspec"]["name"] == tour.KERNEL
        first, params = nb.cells[0], nb.cells[1]
        assert first.cell_type == "markdown" and first.source.startswith("# "), f"{path.name}: a title opens it"
        title, goals = tour._header(nb)
        assert title and len(goals) >= 2, f"{path.name}: a title and learning goals open the notebook"
        assert params.cell_type == "code" and params.metadata.get("tags") == ["parameters"], \
            f"{path.name}: the parameters cell comes right after the title"
        assert "LIVE = torch.cuda.is_available()" in params.source
        check = nb.cells[-1]
        assert check.cell_type == "code" and check.metadata.get("tags") == ["check"] and "CHECK OK" in check.source, \
            f"{path.name}: the check cell is the last cell"
        # story in the notebook, logic in the library: no long cells
        code = [c for c in nb.cells if c.cell_type == "code"]
        long = [i for i, c in enumerate(code) if len(c.source.splitlines()) > 12]
        assert not long, f"{path.name}: code cells {long} are longer than 12 lines"


def test_read_notebook_names_a_wrong_file(tmp_path):
    bad = tmp_path / "01_lesson.txt"
    bad.write_text("# %%\nX = 1\n")
    with pytest.raises(ValueError, match="01_lesson.txt.*percent format"):
        tour.read_notebook(bad)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes(name, tmp_path):
    run = tour.execute_notebook(_source(name), timeout=300)
    _TIMES[name] = run.seconds
    nbformat.write(run.nb, tmp_path / f"{name}.ipynb")
    assert run.error is None, run.error[-3000:]
    assert tour.CHECK_MARKER in run.check, f"check cell printed: {run.check!r}"
    assert run.figures, f"{name}: no plotly figure in the outputs"


def test_mutual_enabling_follows_its_condition():
    """Notebook 5 with CONDITION="unpinned": the rules panel reads the unpinned factorial too."""
    from cadencelab import data

    run = tour.execute_notebook(_source("05_mutual_enabling"), timeout=300,
                                parameters={"CONDITION": "unpinned"})
    assert run.error is None, run.error[-3000:]
    b0 = data.pareto_frame("unpinned").set_index("arm").loc["B0", "lat_ms"]
    assert tour.CHECK_MARKER in run.check and f"B0 {b0:.1f} ms" in run.check, run.check


def test_course_within_budget():
    if len(_TIMES) != len(NAMES):
        pytest.skip("runs after every notebook executed in this session")
    total = sum(_TIMES.values())
    _artifact("notebook_times.json", json.dumps(dict(_TIMES, total=total), indent=1))
    print("notebook seconds:", {k: round(v, 1) for k, v in _TIMES.items()}, f"total {total:.1f}")
    assert total <= BUDGET_S, f"the course took {total:.0f} s > {BUDGET_S:.0f} s: {_TIMES}"


# ---------------------------------------------------------------------------------------
# the tour and the lab
# ---------------------------------------------------------------------------------------


def _tiny(path: Path, ok: bool = True) -> Path:
    """A four-cell lesson written as a percent-format source."""
    path.write_text(
        '# %% [markdown]\n# # A tiny lesson\n#\n# **You will learn**\n# - one thing\n# - another\n\n'
        '# %% tags=["parameters"]\nX = 1\n\n'
        '# %%\nimport plotly.graph_objects as go\ngo.Figure(go.Scatter(x=[1, 2], y=[X, 3]))\n\n'
        f'# %% tags=["check"]\nassert X == {1 if ok else 2}\nprint("CHECK OK: tiny")\n', encoding="utf-8")
    return path


def test_run_tour_writes_an_offline_report(tmp_path):
    nb = _tiny(tmp_path / "01_tiny.py")
    report = tour.run_tour(tmp_path / "out", progress=False, notebooks=[nb])
    page = report.read_text()
    assert report.name == "index.html" and "A tiny lesson" in page and "one thing" in page and "CHECK OK: tiny" in page
    assert page.count("Plotly.newPlot") == 1 and "<script src=" not in page  # plotly.js embedded once: offline
    assert (tmp_path / "out" / "notebooks" / "01_tiny.ipynb").exists()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary[0]["ok"] and summary[0]["figures"] == 1


def test_run_tour_reports_failures_and_parameters(tmp_path):
    bad = _tiny(tmp_path / "01_bad.py", ok=False)
    with pytest.raises(tour.TourFailed) as e:
        tour.run_tour(tmp_path / "out", progress=False, notebooks=[bad])
    assert e.value.report.exists() and "FAILED" in e.value.report.read_text()
    run = tour.execute_notebook(bad, parameters={"X": 2})  # papermill-style override fixes it
    assert run.ok and run.nb.cells[2].metadata["tags"] == ["injected-parameters"]


def test_lab_command_serves_the_course(monkeypatch):
    cmd = tour.lab_command(port=8899, open_browser=False)
    assert cmd[:3] == [sys.executable, "-m", "jupyterlab"]
    assert f"--ServerApp.root_dir={NOTEBOOKS}" in cmd and "--port=8899" in cmd and "--no-browser" in cmd
    env = tour.kernel_env()
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)
    calls = []

    class _Exited:  # a server that has already stopped with status 0
        returncode = 0

        def __init__(self, c, **kw):
            calls.append((c, kw))

        def poll(self):
            return 0

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(tour.subprocess, "Popen", _Exited)
    assert tour.launch_lab(port=8899, open_browser=False) == 0
    served, kw = calls[0]
    assert kw["cwd"] == str(NOTEBOOKS)
    # the .py sources open as notebooks: jupytext's contents manager, and a click opens the notebook view
    assert f"--ServerApp.contents_manager_class={tour.LAB_CONTENTS_MANAGER}" in served
    settings = [a.split("=", 1)[1] for a in served if a.startswith("--LabApp.app_settings_dir=")]
    assert len(settings) == 1 and not Path(settings[0]).exists(), "the scratch settings folder is removed after"


def test_lab_settings_open_sources_as_notebooks(tmp_path):
    import importlib

    pytest.importorskip("jupyterlab")
    folder = tour.lab_settings_dir(tmp_path / "settings")
    written = json.loads((folder / tour.LAB_OVERRIDES_FILE).read_text())
    assert written["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]["python"] == "Jupytext Notebook"
    module, _, cls = tour.LAB_CONTENTS_MANAGER.rpartition(".")
    assert hasattr(importlib.import_module(module), cls)
    from jupyterlab_server.settings_utils import _get_overrides  # what the server reads at start

    overrides, error = _get_overrides(str(folder))
    assert not error and overrides == written


@pytest.mark.skipif(shutil.which("jupyter") is None, reason="jupyter is not on PATH")
def test_cli_tour_entry_point(tmp_path, monkeypatch):
    from cadencelab import cli

    nb_dir = tmp_path / "course"
    nb_dir.mkdir()
    _tiny(nb_dir / "01_tiny.py")
    monkeypatch.setenv(tour.NOTEBOOKS_ENV, str(nb_dir))
    assert cli.main(["tour", str(tmp_path / "out"), "--quiet"]) == 0
    assert (tmp_path / "out" / "index.html").exists()
