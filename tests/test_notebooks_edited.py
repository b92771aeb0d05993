"""A student's edited notebook, run as the lab runs it (no answers switched on, predictions blank): a right
answer typed into the exercise cell is graded "solved", a wrong one "not solved yet", and either way the
check cell still prints CHECK OK: no bare AssertionError at the end of a notebook the student got right."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("jupytext")

from cadencelab.course import grading, tour  # noqa: E402
from cadencelab.course import solutions as sol  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LAB = {grading.SOLUTIONS_ENV: "0"}


def _edited(tmp_path: Path, stem: str, blank: str, typed: str) -> Path:
    src = next((ROOT / "notebooks").glob(f"{stem}*.py"))
    text = src.read_text(encoding="utf-8")
    assert blank in text, f"{src.name}: the exercise cell changed; update this test"
    dest = tmp_path / src.name
    dest.write_text(text.replace(blank, typed), encoding="utf-8")
    shutil.copy(src.parent / "jupytext.toml", tmp_path / "jupytext.toml")
    return dest


@pytest.mark.parametrize("right", [True, False])
def test_an_edited_notebook_2_ends_in_its_check(tmp_path, right):
    exercise = dict(f_retained=200, f_chunk=60)  # the notebook's EXERCISE configuration (asserted below)
    assert f"EXERCISE = dict(f_retained={exercise['f_retained']}, f_chunk={exercise['f_chunk']})" in \
        next((ROOT / "notebooks").glob("02_*.py")).read_text(encoding="utf-8")
    k = {p: int(v) + (0 if right else 1) for p, v in sol.solution("t2w_K", **exercise).items()}  # plain ints
    path = _edited(tmp_path, "02_", 'answer_K = {"flow_chunk": ..., "estimator_step": ..., "flow_encoder": ..., '
                                    '"vocoder_core": ...}', f"answer_K = {k!r}")
    run = tour.execute_notebook(path, env=LAB, cwd=ROOT / "notebooks")
    assert run.error is None, run.error[-2000:]
    verdict = "solved" if right else "not solved yet"  # extents and rho still blank
    assert tour.CHECK_MARKER in run.check and f"not answered yet, {verdict}, not answered yet" in run.check, run.check


def test_an_edited_notebook_7_ends_in_its_check(tmp_path):
    right = {k: round(v, 2) for k, v in sol.solution("slack").items()}  # rounded within the stated 0.01
    path = _edited(tmp_path, "07_", 'answer = {"eager": ..., "replay": ...}', f"answer = {right!r}")
    run = tour.execute_notebook(path, env=LAB, cwd=ROOT / "notebooks")
    assert run.error is None, run.error[-2000:]
    assert tour.CHECK_MARKER in run.check and "exercise solved" in run.check, run.check


def test_an_edited_notebook_6_ends_in_its_check(tmp_path):
    """Notebook 6 as a student runs it: the prediction left blank (the reveal refuses), the capacity typed in
    another style (a numpy int, the plateau rounded within the stated 2%)."""
    right = sol.solution("capacity")
    typed = f'answer = {{"sessions": np.int64({right["sessions"]}), "plateau": {round(right["plateau"], 1)}}}'
    path = _edited(tmp_path, "06_", 'answer = {"sessions": ..., "plateau": ...}', "import numpy as np\n" + typed)
    run = tour.execute_notebook(path, env=LAB, cwd=ROOT / "notebooks")
    assert run.error is None, run.error[-2000:]
    assert tour.CHECK_MARKER in run.check and "exercise: solved" in run.check, run.check
    shown = "".join(o.get("data", {}).get("text/plain", "") for c in run.nb.cells if c.cell_type == "code"
                    for o in c.get("outputs", []))
    assert "predict first" in shown  # the reveal refuses until a prediction is given
