"""The course, headless or in JupyterLab.

    run_tour(out_dir)    execute the course's notebooks (nbclient, kernel python3), keep the executed copies in
                         out_dir/notebooks/ and write out_dir/index.html (:mod:`cadencelab.course.report`; offline:
                         plotly.js is embedded once). By default it runs with :data:`COURSE_PARAMETERS` (a
                         student's predictions) and the course's answers typed into the exercise cells
                         (:func:`fill_answers`, from ``course-solutions/``, outside the package); every check cell
                         writes its gradebook entry, and a course answer not graded "solved" fails the tour.
    launch_lab(port)     open JupyterLab on the notebooks folder (blocks until the server stops).
    execute_notebook     one notebook -> NotebookRun (timings, figures, check output, error).

Reading the notebooks is :mod:`cadencelab.course.sources` and the JupyterLab launcher :mod:`cadencelab.course.lab`,
both importable from here too. One execution serves a whole CI run: ``out_dir/tour.json`` holds a digest of what
the run depends on (notebook sources, the package's Python files, the data folder, the parameters), and
:func:`load_run` gives back a notebook's run while the digest still matches (None otherwise), so the tests need
not execute it again. The kernel imports this checkout of cadencelab and runs in the notebooks folder.
Papermill-style parameters: ``execute_notebook(path, parameters={"LIVE": False})`` inserts an
``injected-parameters`` cell after the cell tagged ``parameters``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .gradebook import GRADEBOOK_ENV, gradebook_path
from .kernel import KERNEL, SharedKernel, execute
from .lab import LAB_CONTENTS_MANAGER, LAB_OVERRIDES, LAB_OVERRIDES_FILE, lab_command, lab_settings_dir, launch_lab
from .sources import (
    NOTEBOOKS_ENV,
    SOURCE_SUFFIX,
    course,
    kernel_env,
    notebook_text,
    notebooks_dir,
    read_notebook,
    repo_root,
)
from .switches import TOUR_PREDICTIONS

__all__ = [
    "ANSWER_TAG",
    "CHECK_MARKER",
    "COURSE_ENV",
    "COURSE_PARAMETERS",
    "LAB_CONTENTS_MANAGER",
    "LAB_OVERRIDES",
    "LAB_OVERRIDES_FILE",
    "NOTEBOOKS_ENV",
    "SOURCE_SUFFIX",
    "TOUR_MARKER",
    "NotebookRun",
    "SharedKernel",
    "TourFailed",
    "TourRefused",
    "check_tour_dir",
    "course",
    "execute_notebook",
    "fill_answers",
    "inject_parameters",
    "kernel_env",
    "lab_command",
    "lab_settings_dir",
    "launch_lab",
    "load_run",
    "notebook_text",
    "notebooks_dir",
    "read_notebook",
    "render_report",
    "repo_root",
    "run_digest",
    "run_tour",
    "solutions_dir",
]

#: what every notebook's final check cell prints when its assertions hold
CHECK_MARKER = "CHECK OK"
#: parameters the tour (and so CI) runs the course with when given none: a student's predictions (the
#: lab starts them blank)
COURSE_PARAMETERS = dict(TOUR_PREDICTIONS)
#: the environment the tour (and so CI) adds for every kernel: nothing (no switch marks an answer; the tour
#: types the course's answers into the cells tagged :data:`ANSWER_TAG`, and points the gradebook into its folder)
COURSE_ENV: dict = {}
#: the tag of an exercise cell the student writes (the tour fills it in from ``course-solutions/answers``)
ANSWER_TAG = "answer"
PLOTLY_MIME = "application/vnd.plotly.v1+json"


#: the file a tour writes into its output folder: a folder holding it may be written again
TOUR_MARKER = ".cadencelab-tour"
#: what a tour ran, for reuse (see load_run): the digest and the parameters
TOUR_RECORD = "tour.json"


class TourRefused(ValueError):
    """The output folder cannot be used: it would overwrite files the tour did not write."""


class TourFailed(RuntimeError):
    """Some notebook raised or its check cell did not print the marker; the report was still written."""

    def __init__(self, message: str, report: Path):
        super().__init__(message)
        self.report = report


# ---------------------------------------------------------------------------------------
# one notebook
# ---------------------------------------------------------------------------------------


@dataclass
class NotebookRun:
    """One executed notebook."""

    path: Path
    title: str
    goals: list
    seconds: float = 0.0
    error: str | None = None
    check: str = ""
    figures: list = field(default_factory=list)  # plotly figure dicts, in output order
    nb: Any = None
    kernel_log: str = ""  # what the kernel process itself wrote (not a cell's output): its log, C-level prints
    gradebook: dict | None = None  # the notebook's gradebook entry (exercises' states, predictions), if recorded

    @property
    def ok(self) -> bool:
        return self.error is None and CHECK_MARKER in self.check

    @property
    def name(self) -> str:
        return self.path.stem


def _header(nb) -> tuple[str, list[str]]:
    """Title (first '# ' line) and learning goals (bullets after 'You will learn') of a notebook."""
    title, goals = "", []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        lines = cell.source.splitlines()
        for i, line in enumerate(lines):
            if not title and line.startswith("# "):
                title = line[2:].strip()
            if "you will learn" in line.lower():
                for g in lines[i + 1:]:
                    if g.strip().startswith(("- ", "* ")):
                        goals.append(g.strip()[2:].strip())
                    elif goals and g.strip() and g[:1].isspace():  # a bullet wrapped onto the next line
                        goals[-1] += " " + g.strip()
                    elif goals:
                        break
        if title and goals:
            break
    return title, goals


def inject_parameters(nb, parameters: dict) -> None:
    """Insert ``NAME = value`` assignments after the cell tagged ``parameters`` (papermill style)."""
    import nbformat

    if not parameters:
        return
    src = "# injected parameters\n" + "\n".join(f"{k} = {v!r}" for k, v in parameters.items())
    cell = nbformat.v4.new_code_cell(src, metadata={"tags": ["injected-parameters"]})
    at = next((i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if at is None:
        raise ValueError("inject_parameters: the notebook has no cell tagged 'parameters'")
    nb.cells.insert(at + 1, cell)


def solutions_dir() -> Path:
    """The folder of the course's answers (one percent-format file per notebook, a cell per answer cell):
    ``course-solutions/answers`` beside the notebooks' repository, outside the installed package."""
    return repo_root() / "course-solutions" / "answers"


def fill_answers(nb, stem: str, folder: str | os.PathLike | None = None) -> int:
    """Type the course's answers into the cells of ``nb`` tagged :data:`ANSWER_TAG`, in order, from
    ``folder/<stem>.py`` (default :func:`solutions_dir`); returns how many. Fails loudly when the counts differ."""
    import jupytext

    cells = [c for c in nb.cells if c.cell_type == "code" and ANSWER_TAG in c.get("metadata", {}).get("tags", [])]
    if not cells:
        return 0
    src = Path(folder or solutions_dir()) / f"{stem}{SOURCE_SUFFIX}"
    if not src.is_file():
        raise FileNotFoundError(f"{stem}: {len(cells)} answer cell(s) and no course answers at {src}")
    answers = [c for c in jupytext.read(src, fmt="py:percent").cells if c.cell_type == "code"]
    if len(answers) != len(cells):
        raise ValueError(f"{stem}: {len(cells)} answer cell(s) in the notebook, {len(answers)} in {src}")
    for cell, ans in zip(cells, answers):
        cell.source = ans.source
    return len(cells)


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return "\n".join(output.get("traceback", [])) or f"{output.get('ename')}: {output.get('evalue')}"
    return output.get("data", {}).get("text/plain", "")


def execute_notebook(path: str | os.PathLike, timeout: int = 300, parameters: dict | None = None,
                     kernel_name: str = KERNEL, cwd: str | os.PathLike | None = None,
                     kernel: SharedKernel | None = None, env: dict | None = None,
                     answers: bool = True) -> NotebookRun:
    """Execute one notebook top to bottom; errors are recorded, not raised.

    answers: type the course's answers into the answer cells first (:func:`fill_answers`); then every exercise
    the check cell records must be "solved" in the gradebook (``$CADENCELAB_GRADEBOOK`` of ``env``), else the
    run fails naming it. False: the notebook as a student's lab opens it (blank answers).
    env: variables set for the kernel on top of :func:`kernel_env` (None: :data:`COURSE_ENV`).

    timeout: seconds per cell. The check output is the text printed by the cell tagged
    ``check`` (or, without a tag, by the last code cell). What the kernel process itself writes
    (its log, C-level prints) is kept in ``run.kernel_log``, never printed (:mod:`.kernel`).
    kernel: a :class:`~cadencelab.course.kernel.SharedKernel` to run in instead of a new kernel.
    """
    path = Path(path)
    nb = read_notebook(path)
    title, goals = _header(nb)
    inject_parameters(nb, parameters or {})
    filled = fill_answers(nb, path.stem) if answers else 0
    run = NotebookRun(path, title or path.stem, goals, nb=nb)
    t0 = time.perf_counter()
    # a shared kernel keeps the environment it started with; a new one gets env (None: COURSE_ENV)
    run.error, run.kernel_log = execute(nb, cwd or path.parent, timeout, kernel_name, kernel,
                                        env=None if kernel is not None and env is None else
                                        (COURSE_ENV if env is None else env))
    run.seconds = time.perf_counter() - t0
    _collect(run)
    book = ((env or {}).get(GRADEBOOK_ENV) or (kernel.env.get(GRADEBOOK_ENV) if kernel is not None else None)
            or str(gradebook_path()))  # the kernel's environment is this process's, plus env
    run.gradebook = _gradebook_entry(book, path.stem)
    if filled and run.error is None:
        bad = {e: s for e, s in ((run.gradebook or {}).get("exercises") or {}).items() if s != "solved"}
        if run.gradebook is None or bad:
            run.error = (f"the course's answers typed into {path.stem} are not all graded solved: {bad}"
                         if bad else f"{path.stem}: its check cell recorded no gradebook entry")
    return run


def _gradebook_entry(book, stem: str) -> dict | None:
    """This notebook's entry (keyed by its number, the stem's leading digits) of the gradebook file ``book``."""
    if not book:
        return None
    try:
        entries = json.loads(Path(book).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    digits = "".join(ch for ch in stem.split("_")[0] if ch.isdigit())
    return entries.get(str(int(digits))) if digits else None


def _collect(run: NotebookRun) -> None:
    """Fill ``run.check`` and ``run.figures`` from the outputs of the executed ``run.nb``."""
    code = [c for c in run.nb.cells if c.cell_type == "code"]
    check = next((c for c in code if "check" in c.get("metadata", {}).get("tags", [])), code[-1] if code else None)
    if check is not None:
        run.check = "".join(_text(o) for o in check.get("outputs", []))
    for c in code:
        for o in c.get("outputs", []):
            fig = o.get("data", {}).get(PLOTLY_MIME)
            if fig is not None:
                run.figures.append(fig)


# ---------------------------------------------------------------------------------------
# one execution per CI run: reuse a tour's output
# ---------------------------------------------------------------------------------------


def _digest_files(paths: list[Path]) -> list[Path]:
    files = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
        elif p.is_file():
            files.append(p)
    return files


def run_digest(notebooks: list, parameters: dict | None = None) -> str:
    """SHA-256 of what an execution of ``notebooks`` depends on, as a hex string.

    Covers the notebook sources (with the jupytext.toml beside them), the package's Python files
    (this checkout's ``cadencelab/``), the data folder (``$CADENCELAB_DATA`` or ``data/``) and the
    parameters (None: :data:`COURSE_PARAMETERS`, as :func:`run_tour`): a tour made before any of them
    changed does not match.
    """
    import hashlib

    from . import data

    parameters = COURSE_PARAMETERS if parameters is None else parameters
    paths = [Path(p) for p in notebooks]
    try:
        data_files = _digest_files([data.data_dir()])
    except FileNotFoundError:  # no data folder: nothing of it to depend on
        data_files = []
    extra = sorted({p.parent / "jupytext.toml" for p in paths})
    h = hashlib.sha256()
    h.update(json.dumps(sorted((parameters or {}).items()), default=repr).encode())
    h.update(json.dumps(sorted(COURSE_ENV.items())).encode())  # the environment every run of the tour gets
    answers = _digest_files([solutions_dir()]) if solutions_dir().is_dir() else []
    for group, files in (("notebooks", paths + extra),
                         ("package", [f for f in _digest_files([Path(__file__).resolve().parent]) if f.suffix == ".py"]),
                         ("data", data_files), ("answers", answers)):
        h.update(group.encode())
        for f in files:
            if f.is_file():
                h.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def load_run(out_dir: str | os.PathLike, source: str | os.PathLike, parameters: dict | None = None) -> NotebookRun | None:
    """The run of ``source`` that the tour in ``out_dir`` made, or None when it cannot stand in for a new one.

    None when the folder has no tour record, the record's digest differs from :func:`run_digest`
    of the same notebooks now (a source, the package, the data or the parameters changed), or
    the tour did not execute ``source``. The run is rebuilt from the executed notebook and the
    tour's summary.json (seconds, error).
    """
    import nbformat

    parameters = COURSE_PARAMETERS if parameters is None else parameters
    out, source = Path(out_dir), Path(source)
    try:
        record = json.loads((out / TOUR_RECORD).read_text(encoding="utf-8"))
        summary = {s["notebook"]: s for s in json.loads((out / "summary.json").read_text(encoding="utf-8"))}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if source.name not in summary or source.name not in record.get("notebooks", []):
        return None
    if record.get("digest") != run_digest([Path(source.parent) / n for n in record["notebooks"]], parameters):
        return None
    executed = out / "notebooks" / f"{source.stem}.ipynb"
    if not executed.is_file():
        return None
    nb = nbformat.read(executed, as_version=4)
    title, goals = _header(nb)
    row = summary[source.name]
    run = NotebookRun(source, title or source.stem, goals, seconds=float(row["seconds"]), error=row.get("error"), nb=nb,
                      gradebook=row.get("gradebook"))
    _collect(run)
    return run


# ---------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------

def render_report(runs: list[NotebookRun], out_dir: Path, started: float | None = None) -> Path:
    """Write ``out_dir/index.html`` for ``runs`` (see :mod:`cadencelab.course.report`); ``started``: the
    tour's ``time.perf_counter()`` at its start, so the page states the tour's measured wall time."""
    from .report import render_report as _render

    wall = None if started is None else time.perf_counter() - started
    return _render(runs, out_dir, check_marker=CHECK_MARKER, wall_s=wall)


def run_tour(out_dir: str | os.PathLike, progress: bool = True, notebooks: list | None = None, timeout: int = 300,
             parameters: dict | None = None) -> Path:
    """Execute the course and write ``out_dir/index.html``; returns its path.

    parameters: injected after each notebook's parameters cell (None: :data:`COURSE_PARAMETERS`, the predictions);
    the course's answers are typed into the answer cells and every check cell records to out_dir/gradebook.json.

    progress: a tqdm bar over the notebooks (on stderr). Executed notebooks (with outputs) are
    kept in ``out_dir/notebooks/``, a machine-readable ``summary.json`` beside the page.
    Raises :class:`TourFailed` (after writing the report) when a notebook fails or its check
    cell does not print the marker.
    """
    out = check_tour_dir(out_dir)  # a refused folder: refused before anything heavy is imported

    import nbformat
    from tqdm.auto import tqdm

    started = time.perf_counter()
    from ..profile.outputs import write_atomic  # every file whole or not at all (an interrupted tour)
    from ..profile.provenance import run_provenance  # torch's version among the rest: imported when a tour runs

    parameters = COURSE_PARAMETERS if parameters is None else parameters
    paths = [Path(p) for p in (notebooks or course())]
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    write_atomic(out / TOUR_MARKER, "written by cadencelab tour; this folder may be overwritten by the next tour\n")
    (out / TOUR_RECORD).unlink(missing_ok=True)  # an interrupted tour leaves no record to reuse
    digest = run_digest(paths, parameters)  # before execution: what the runs were made from
    runs = []
    bar = tqdm(paths, desc="cadencelab tour", unit="notebook", disable=not progress, file=sys.stderr)
    with stop_on_signals() as stopped:  # Ctrl-C or SIGTERM ends the tour (exit 130), never a notebook "failed"
        for p in bar:
            bar.set_postfix_str(p.stem)
            r = execute_notebook(p, timeout=timeout, parameters=parameters,
                                 env={**COURSE_ENV, GRADEBOOK_ENV: str((out / "gradebook.json").resolve())})
            if stopped:  # the kernel was interrupted too: its error is the signal's, not the notebook's
                raise KeyboardInterrupt(f"tour stopped by {stopped[0]} during {p.name}")
            text = nbformat.writes(r.nb)  # as nbformat.write writes it: ending in one newline
            write_atomic(out / "notebooks" / f"{p.stem}.ipynb", text if text.endswith("\n") else text + "\n")
            runs.append(r)
            if progress:
                bar.write(f"  {p.stem}: {'ok' if r.ok else 'FAILED'} in {r.seconds:.1f} s, {len(r.figures)} figures")
    report = render_report(runs, out, started=started)
    record = dict(digest=digest, notebooks=[p.name for p in paths], parameters=parameters or {}, timeout=timeout,
                  provenance=run_provenance())
    write_atomic(out / TOUR_RECORD, json.dumps(record, indent=1, default=repr))
    failed = [r.name for r in runs if not r.ok]
    if failed:
        raise TourFailed(f"{len(failed)} notebook(s) failed: {', '.join(failed)}; see {report}", report)
    return report


@contextlib.contextmanager
def stop_on_signals():
    """SIGINT and SIGTERM while inside: the signal's name is appended to the yielded list and KeyboardInterrupt
    raised (wherever the tour is; code that swallows it, such as a notebook client, is caught by the list);
    the previous handlers restored on leaving. Outside the main thread nothing is installed."""
    stopped: list = []

    def on_signal(signum, frame):
        stopped.append(signal.Signals(signum).name)
        raise KeyboardInterrupt(stopped[-1])

    try:
        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        old = {}
    try:
        yield stopped
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def check_tour_dir(out_dir: str | os.PathLike) -> Path:
    """``out_dir`` if a tour may write there: a folder that does not exist yet, an empty one, or
    one an earlier tour wrote (it holds :data:`TOUR_MARKER`; a folder holding an index.html and a summary.json
    without it is a user's, refused);
    never the folder of the course notebooks or one above it. Raises :class:`TourRefused`."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise TourRefused(f"{out}: exists and is not a folder")
    from ..profile.outputs import OutputRefused, guard_output

    try:
        guard_output(out, "OUT_DIR")
    except OutputRefused as e:
        raise TourRefused(e.reason) from None
    target = (out / "notebooks").resolve()
    src = [repo_root().resolve()]
    try:
        src.append(notebooks_dir().resolve())
    except FileNotFoundError:
        pass
    for s in src:
        if target == s or s.is_relative_to(out.resolve()):
            raise TourRefused(f"{out}: holds the course sources ({s}); the executed notebooks would overwrite "
                              f"them: name a new folder, e.g. out/tour")
    if out.is_dir() and any(out.iterdir()):
        if not (out / TOUR_MARKER).is_file():  # only the tour's own mark: a user's index.html is the user's
            raise TourRefused(f"{out}: a folder with other files in it and no {TOUR_MARKER}; the tour writes only into "
                              f"a new or empty folder, or one an earlier tour marked as its own")
    return out

