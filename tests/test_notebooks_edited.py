"""A student's edited notebook, run as the lab runs it (no answers typed in, predictions blank): a right
answer typed into the exercise cell is graded "solved", a wrong one "not solved yet", and either way the
check cell still prints CHECK OK: no bare AssertionError at the end of a notebook the student got right; a
blank notebook on an older recording runs to its check too.

The runs share one kernel started with the lab's environment (tour.SharedKernel: the namespace cleared between
notebooks, the kernel start and the imports paid once); what only a fresh kernel shows, the tour shows (it gives
every notebook its own, and CI runs it first)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("jupytext")

from course_answers import sol  # noqa: E402

from cadencelab.course import tour  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: the lab's environment: nothing added (no switch marks an answer); a gradebook of the tests' own
LAB: dict = {}
NOTEBOOKS = ROOT / "notebooks"


@pytest.fixture(scope="module")
def lab_kernel(tmp_path_factory):
    """One kernel, in the course folder, with the lab's environment and a gradebook in a temporary folder."""
    book = tmp_path_factory.mktemp("gradebook") / "gradebook.json"
    with tour.SharedKernel(NOTEBOOKS, env={**LAB, "CADENCELAB_GRADEBOOK": str(book)}) as k:
        yield k


def _edited(tmp_path: Path, stem: str, blank: str, typed: str) -> Path:
    src = next((ROOT / "notebooks").glob(f"{stem}*.py"))
    text = src.read_text(encoding="utf-8")
    assert blank in text, f"{src.name}: the exercise cell changed; update this test"
    dest = tmp_path / src.name
    dest.write_text(text.replace(blank, typed), encoding="utf-8")
    shutil.copy(src.parent / "jupytext.toml", tmp_path / "jupytext.toml")
    return dest


@pytest.mark.parametrize("right", [True, False])
def test_an_edited_notebook_2_ends_in_its_check(tmp_path, right, lab_kernel):
    exercise = dict(f_retained=200, f_chunk=60)  # the notebook's EXERCISE configuration (asserted below)
    assert f"EXERCISE = dict(f_retained={exercise['f_retained']}, f_chunk={exercise['f_chunk']})" in \
        next((ROOT / "notebooks").glob("02_*.py")).read_text(encoding="utf-8")
    k = {p: int(v) + (0 if right else 1) for p, v in sol.solution("t2w_K", **exercise).items()}  # plain ints
    path = _edited(tmp_path, "02_", 'answer_K = {"flow_chunk": ..., "estimator_step": ..., "flow_encoder": ..., '
                                    '"vocoder_core": ...}', f"answer_K = {k!r}")
    run = tour.execute_notebook(path, cwd=NOTEBOOKS, kernel=lab_kernel, answers=False)
    assert run.error is None, run.error[-2000:]
    verdict = "solved" if right else "not solved yet"  # extents and rho still blank
    assert tour.CHECK_MARKER in run.check and f"not answered yet, {verdict}, not answered yet" in run.check, run.check
    book = f"gradebook: {int(right)} of 3 solved ({int(not right)} attempted, 2 blank)"
    assert book in run.check and run.gradebook["exercises"]["t2w_K"] == ("solved" if right else "attempted"), run.check


def test_an_edited_notebook_7_ends_in_its_check(tmp_path, lab_kernel):
    right = {k: round(v, 2) for k, v in sol.solution("slack").items()}  # rounded within the stated 0.01
    path = _edited(tmp_path, "07_", 'answer = {"eager": ..., "replay": ...}', f"answer = {right!r}")
    run = tour.execute_notebook(path, cwd=NOTEBOOKS, kernel=lab_kernel, answers=False)
    assert run.error is None, run.error[-2000:]
    assert tour.CHECK_MARKER in run.check and "exercise solved" in run.check, run.check
    assert "gradebook: 1 of 1 solved" in run.check, run.check


def test_an_edited_notebook_6_ends_in_its_check(tmp_path, lab_kernel):
    """Notebook 6 as a student runs it: the prediction left blank (the reveal refuses), the capacity typed in
    another style (a numpy int, the plateau rounded within the stated 2%)."""
    right = sol.solution("capacity")
    typed = f'answer = {{"sessions": np.int64({right["sessions"]}), "plateau": {round(right["plateau"], 1)}}}'
    path = _edited(tmp_path, "06_", 'answer = {"sessions": ..., "plateau": ...}', "import numpy as np\n" + typed)
    run = tour.execute_notebook(path, cwd=NOTEBOOKS, kernel=lab_kernel, answers=False)
    assert run.error is None, run.error[-2000:]
    assert tour.CHECK_MARKER in run.check and "exercise: solved" in run.check, run.check


def test_anatomy_runs_on_an_older_recording_with_blank_exercises(lab_kernel):
    """Notebook 1 with CONDITION="unpinned" (no duplex second recorded under it) and the student's blanks."""
    # a student's lab: no answers, no predictions (the course's shared kernel keeps the answers on: the lab's here)
    run = tour.execute_notebook(NOTEBOOKS / "01_anatomy_of_a_duplex_second.py", timeout=300,
                                parameters={"CONDITION": "unpinned"},
                                kernel=lab_kernel, answers=False)
    assert run.error is None, run.error[-3000:]
    assert tour.CHECK_MARKER in run.check and "exercise not answered yet" in run.check, run.check
    assert "gradebook: 0 of 1 solved (0 attempted, 1 blank); predictions: 0 of 2 close or right (2 not made)" \
        in run.check, run.check
    text = "".join(o.get("text", "") for c in run.nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "recording: 'exact'" in text  # it says which recording the stage spreads come from
    shown = "".join(o.get("data", {}).get("text/plain", "") for c in run.nb.cells if c.cell_type == "code"
                    for o in c.get("outputs", []))
    assert "predict first" in shown  # the reveal refuses until a prediction is given
