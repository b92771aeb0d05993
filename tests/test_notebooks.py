"""The course: the notebooks are Python sources in jupytext's percent format, each shaped as a lesson
(title and learning goals, the parameters cell, short cells, the check cell last); every notebook runs
top to bottom (nbclient, kernel python3, 300 s per cell; the tests run them one after another in one
kernel, the namespace cleared between them) and its check cell prints the marker; all within the CI budget
(45 s a notebook); the tour writes an offline HTML report; `cadencelab lab` serves the folder.

One execution per CI run: when ``$CADENCELAB_TOUR_DIR`` names the output of a `cadencelab tour` made
from the same sources (its digest of the notebooks, the package and the data matches), the execution
tests read the tour's executed notebooks instead of running them again; otherwise (a fresh clone, a
stale or missing tour) they execute the notebooks themselves."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
jupytext = pytest.importorskip("jupytext")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from cadencelab.course import tour  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
NAMES = [p.stem for p in tour.course(NOTEBOOKS)]
BUDGET_S = float(os.environ.get("CADENCELAB_NOTEBOOK_BUDGET_S", str(45 * len(NAMES))))  # 45 s a notebook
TOUR_DIR_ENV = "CADENCELAB_TOUR_DIR"
_TIMES: dict[str, float] = {}


def _artifact(name: str, text: str) -> None:
    dest = os.environ.get("CADENCELAB_ARTIFACTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        (Path(dest) / name).write_text(text)


def _source(name: str) -> Path:
    return NOTEBOOKS / f"{name}{tour.SOURCE_SUFFIX}"


def test_seven_lessons_as_percent_sources():
    assert len(NAMES) >= 10 and not list(NOTEBOOKS.glob("*.ipynb")), "the .py sources are the only notebooks"
    assert NAMES[0].startswith("00_") and NAMES[-1].startswith("10_"), "profiling opens it, the capstone ends it"
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
        # predict, then measure: a prediction is asked, and revealed in a later cell
        asked = [i for i, c in enumerate(code) if "Prediction(" in c.source]
        shown = [i for i, c in enumerate(code) if "reveal(" in c.source or "reveal_figure(" in c.source]
        assert asked and shown and min(shown) > min(asked), f"{path.name}: no prediction asked before a reveal"


def test_sources_are_lint_clean():
    """The sources are Python files: pyflakes and pycodestyle rules (ruff), as pyproject.toml configures them."""
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it comes with the `test` extra)")
    done = subprocess.run([ruff, "check", "--no-cache", "--select", "E,F,W", *map(str, tour.course(NOTEBOOKS))],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]


def test_read_notebook_names_a_wrong_file(tmp_path):
    bad = tmp_path / "01_lesson.txt"
    bad.write_text("# %%\nX = 1\n")
    with pytest.raises(ValueError, match="01_lesson.txt.*percent format"):
        tour.read_notebook(bad)


@pytest.fixture(scope="module")
def course_kernel(tmp_path_factory):
    """One kernel for every course notebook this module executes (tour.SharedKernel: the namespace cleared with
    %reset -f between notebooks, the kernel start and the imports paid once, about 3 s of each run). A
    notebook that reads a name only an earlier one defined still fails here; what a shared kernel cannot
    show (an import left to an earlier notebook's side effect) the tour shows: it gives every notebook a
    fresh kernel, and CI runs it first."""
    book = tmp_path_factory.mktemp("gradebook") / "gradebook.json"  # the tests' own, never the student's
    with tour.SharedKernel(NOTEBOOKS, env={**tour.COURSE_ENV, "CADENCELAB_GRADEBOOK": str(book)}) as k:
        yield k


def test_a_shared_kernel_keeps_the_environment_it_started_with():
    """A notebook that needs other kernel variables is refused by a shared kernel (before anything runs)."""
    from cadencelab.course import kernel

    shared = tour.SharedKernel(NOTEBOOKS, env={"CADENCELAB_PROBE": "1"})  # not started: the check comes first
    with pytest.raises(ValueError, match="keeps the environment it started with"):
        kernel.execute(nbformat.v4.new_notebook(), NOTEBOOKS, kernel=shared, env={"CADENCELAB_PROBE": "2"})


def _executed(name: str, kernel: tour.SharedKernel) -> tour.NotebookRun:
    """The tour's run of ``name`` when $CADENCELAB_TOUR_DIR holds a matching one, else a new execution."""
    where = os.environ.get(TOUR_DIR_ENV)
    if where:
        run = tour.load_run(where, _source(name), parameters=tour.COURSE_PARAMETERS)
        if run is not None:
            return run
        print(f"{TOUR_DIR_ENV}={where}: no tour run of {name} from these sources; executing it")
    return tour.execute_notebook(_source(name), timeout=300, parameters=tour.COURSE_PARAMETERS, kernel=kernel)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes(name, tmp_path, course_kernel):
    run = _executed(name, course_kernel)
    _TIMES[name] = run.seconds
    nbformat.write(run.nb, tmp_path / f"{name}.ipynb")
    assert run.error is None, run.error[-3000:]
    assert tour.CHECK_MARKER in run.check, f"check cell printed: {run.check!r}"
    assert run.figures, f"{name}: no plotly figure in the outputs"
    states = (run.gradebook or {}).get("exercises") or {}
    assert states and set(states.values()) == {"solved"}, f"{name}: the course's answers, graded: {run.gradebook}"
    assert "gradebook: " in run.check and " solved (0 attempted, 0 blank)" in run.check, run.check


def test_mutual_enabling_follows_its_condition(course_kernel):
    """Notebook 5 with CONDITION="unpinned": the rules panel reads the unpinned factorial too."""
    from cadencelab.course import data

    run = tour.execute_notebook(_source("05_mutual_enabling"), timeout=300, kernel=course_kernel,
                                parameters={**tour.COURSE_PARAMETERS, "CONDITION": "unpinned"})
    assert run.error is None, run.error[-3000:]
    b0 = data.pareto_frame("unpinned").set_index("arm").loc["B0", "lat_ms"]
    assert tour.CHECK_MARKER in run.check and f"B0 {b0:.1f} ms" in run.check, run.check


def test_the_capstone_runs_on_each_model(course_kernel):
    """Notebook 10 with each model a student may pick (the tour runs the default): the model's code and task are
    shown, the course's answer for that model is certified and the check names the model."""
    from cadencelab.course import capstone

    for name in [m for m in capstone.MODELS if m != capstone.DEFAULT_MODEL]:
        run = tour.execute_notebook(_source("10_capstone"), timeout=300, kernel=course_kernel,
                                    parameters={**tour.COURSE_PARAMETERS, "MODEL": name})
        assert run.error is None, run.error[-3000:]
        assert tour.CHECK_MARKER in run.check and capstone.capstone_model(name).title in run.check, run.check


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


#: a lesson in percent format: prose around a captioned figure, a learning goal wrapped over two lines
_PROSE = (
    '# %% [markdown]\n# # A prose lesson\n#\n# **You will learn**\n# - a goal that is long enough to\n'
    '#   wrap onto a second line\n# - another\n\n'
    '# %% tags=["parameters"]\nX = 1\n\n'
    '# %% [markdown]\n# Before the figure: **what to look for**.\n\n'
    '# %%\nimport plotly.graph_objects as go\nfrom cadencelab.course.display import show\n'
    'from cadencelab.viz.options import set_caption\n'
    'show(set_caption(go.Figure(go.Scatter(x=[1, 2], y=[X, 3])), "the caption of this figure"))\n\n'
    '# %% [markdown]\n# After the figure: the reading.\n\n'
    '# %% tags=["check"]\nassert X == 1\nprint("CHECK OK: prose")\n')


@pytest.fixture(scope="module")
def small_tour(tmp_path_factory):
    """One tour of a two-notebook course, run as a user runs it (``python -m cadencelab.cli tour OUT``, progress
    on) in a fresh process: a prose lesson that passes and a copy whose check fails (X == 2 asserted).
    The tour and reuse tests below all read this one run: two kernels in all."""
    root = tmp_path_factory.mktemp("small_tour")
    course_dir = root / "course"
    course_dir.mkdir()
    good = course_dir / "01_prose.py"
    good.write_text(_PROSE, encoding="utf-8")
    bad = course_dir / "02_bad.py"
    bad.write_text(_PROSE.replace("assert X == 1", "assert X == 2").replace("CHECK OK: prose", "CHECK OK: bad"),
                   encoding="utf-8")
    out = root / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{tour.NOTEBOOKS_ENV: str(course_dir)})
    done = subprocess.run([sys.executable, "-m", "cadencelab.cli", "tour", str(out)], capture_output=True,
                          text=True, timeout=600, cwd=str(root), env=env)
    return dict(course=course_dir, good=good, bad=bad, out=out, done=done)


def test_tour_prints_progress_and_results_only(small_tour):
    """Nothing but the tour's progress and results reaches the terminal: no kernel log line (the kernels talk
    over local sockets, so none warns about unencrypted TCP), no WARNING of any library."""
    done = small_tour["done"]
    lines = [ln.strip() for ln in (done.stdout + done.stderr).replace("\r", "\n").splitlines() if ln.strip()]
    assert done.returncode == 1, done.stderr[-3000:]  # one notebook failed
    assert not [ln for ln in lines if "WARNING" in ln.upper() or "[IPKernelApp]" in ln], lines
    said = [ln for ln in lines if not ln.startswith("cadencelab tour:")]  # tqdm's bar is the rest
    assert any(ln.startswith("01_prose: ok in") for ln in said) and any(ln.startswith("02_bad: FAILED in")
                                                                          for ln in said), lines
    assert lines[-1] == f"cadencelab tour: 1 notebook(s) failed: 02_bad; see {small_tour['out'] / 'index.html'}"
    bar = [ln for ln in lines if ln.startswith("cadencelab tour:") and ln != lines[-1]]
    assert bar and all("notebook" in ln for ln in bar), lines  # the rest is the progress bar


def test_tour_run_is_reused_only_while_its_sources_match(small_tour, tmp_path):
    out, good, bad = small_tour["out"], small_tour["good"], small_tour["bad"]
    record = json.loads((out / tour.TOUR_RECORD).read_text())
    assert record["digest"] == tour.run_digest([good, bad], tour.COURSE_PARAMETERS)
    assert record["notebooks"] == ["01_prose.py", "02_bad.py"]
    assert record["parameters"] == tour.COURSE_PARAMETERS  # the tour runs the course with its predictions
    assert {"gpu", "torch", "date", "git_commit"} <= set(record["provenance"])  # where it ran, for a recorded tour
    run = tour.load_run(out, good)
    assert run is not None and run.ok and len(run.figures) == 1 and "CHECK OK: prose" in run.check
    assert run.title == "A prose lesson" and run.goals[1] == "another"
    failed = tour.load_run(out, bad)
    assert failed is not None and not failed.ok and "assert X == 2" in failed.error
    assert tour.load_run(out, good, parameters={"X": 2}) is None  # other parameters: not the same run
    assert tour.load_run(tmp_path / "nowhere", good) is None
    copy = tmp_path / "course"  # the same sources elsewhere: the same run; an edited one: stale
    shutil.copytree(small_tour["course"], copy)
    assert tour.load_run(out, copy / good.name) is not None
    (copy / good.name).write_text(_PROSE.replace("x=[1, 2]", "x=[1, 4]"), encoding="utf-8")
    assert tour.load_run(out, copy / good.name) is None


def test_run_tour_reports_failures_and_parameters(small_tour):
    report = small_tour["out"] / "index.html"
    assert report.exists() and "FAILED" in report.read_text()
    summary = {s["notebook"]: s for s in json.loads((small_tour["out"] / "summary.json").read_text())}
    assert summary["01_prose.py"]["ok"] and not summary["02_bad.py"]["ok"]
    nb = tour.read_notebook(small_tour["bad"])
    tour.inject_parameters(nb, {"X": 2})  # papermill style: after the parameters cell (the course runs use it)
    assert nb.cells[2].metadata["tags"] == ["injected-parameters"] and nb.cells[2].source.endswith("X = 2")
    with pytest.raises(ValueError, match="no cell tagged 'parameters'"):
        tour.inject_parameters(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("X = 1")]), {"X": 2})


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

    from cadencelab.course import lab  # the launcher starts the server there

    monkeypatch.setattr(lab.subprocess, "Popen", _Exited)
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


def test_report_keeps_prose_captions_wrapped_goals_and_the_glossary(small_tour):
    """Through the console entry point (``cadencelab tour OUT``), the report reads as the notebook, offline:
    markdown around the figures, each figure's caption under it (once: not again from ``show``'s copy), a
    learning goal wrapped over two lines kept whole, a glossary every section links to, plotly.js embedded
    once, the executed notebook and the summary beside it."""
    out = small_tour["out"]
    report = out / "index.html"
    page = report.read_text()
    section = page[page.index("A prose lesson"):]
    assert "a goal that is long enough to wrap onto a second line" in page
    before, after = section.index("<strong>what to look for</strong>"), section.index("After the figure: the reading.")
    cap = section.index("the caption of this figure")
    assert before < section.index("Plotly.newPlot") < cap < after, "prose, figure, caption, prose: in cell order"
    # show()'s markdown copy is for JupyterLab; the page prints the caption once per notebook, under the figure
    assert page.count("<p class='caption'><b>Figure.</b> the caption of this figure") == 2
    assert "Figure.* the caption" not in page and "<em>Figure.</em>" not in page
    assert "id='glossary'" in page and "href='#glossary'" in page and "probe" in page
    assert page.count("CHECK OK: prose") == 2  # the summary table and the check section, not a third time
    assert report.name == "index.html"
    from plotly.offline import get_plotlyjs

    assert page.count(get_plotlyjs()[:300]) == 1 and "<script src=" not in page  # plotly.js embedded once: offline
    assert page.count("Plotly.newPlot") == 2  # one figure per notebook
    assert (out / "notebooks" / "01_prose.ipynb").exists() and (out / "notebooks" / "02_bad.ipynb").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary[0]["ok"] and summary[0]["figures"] == 1
