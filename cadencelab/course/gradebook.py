"""The gradebook: what a student solved, attempted or left blank, and how far each prediction was off.

A notebook's check cell calls :func:`record` with its graded feedbacks: each exercise is written as
"solved", "attempted" or "blank", beside every prediction revealed in that kernel (recorded by
:func:`cadencelab.course.predict.reveal` when the reveal ran, after the prediction was made: the value
given, the measurement, how far off in the question's units, and the verdict). The file is local JSON,
one entry per notebook, rewritten whole on every record (a prediction scored in an earlier run stands: one
made again once its reveal was seen does not replace it): ``$CADENCELAB_GRADEBOOK`` or
``~/.cadencelab/gradebook.json``. :func:`record` returns the line the check cell prints ("2 of 3 solved"):
the truth, whether or not anything was solved. :func:`read` gives the file back as DataFrames for the tour's
report.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pandas as pd

__all__ = ["GRADEBOOK_ENV", "STATES", "gradebook_path", "note_reveal", "read", "record", "shown_path", "state",
           "summary_line"]

#: the environment variable naming the gradebook file (the tour points it into its output folder)
GRADEBOOK_ENV = "CADENCELAB_GRADEBOOK"
#: an exercise's state in the gradebook
STATES = ("solved", "attempted", "blank")

#: predictions revealed in this kernel since the last record: one dict per part
_REVEALED: list[dict] = []


def gradebook_path() -> Path:
    """Where the gradebook is written: ``$CADENCELAB_GRADEBOOK``, else ``~/.cadencelab/gradebook.json``."""
    env = os.environ.get(GRADEBOOK_ENV, "").strip()
    return Path(env) if env else Path.home() / ".cadencelab" / "gradebook.json"


def shown_path(path: Path) -> str:
    """``path`` as the check cell prints it: under the home folder as ``~/...``, near the working folder relative
    to it; a printed cell ends up in shared reports, where a machine's absolute paths mean nothing."""
    path = Path(path).resolve()
    home = Path.home().resolve()
    if home != Path(home.anchor) and path.is_relative_to(home):
        return "~/" + path.relative_to(home).as_posix()
    rel = Path(os.path.relpath(path, Path.cwd().resolve()))
    return rel.as_posix() if rel.parts[:3].count("..") <= 2 else str(path)


def state(feedback) -> str:
    """"solved" (every part correct), "blank" (every hint asks to fill in) or "attempted"."""
    if feedback.ok:
        return "solved"
    hints = feedback.hints
    blank = not hints or all("fill this in" in h for h in hints)
    return "blank" if blank else "attempted"


def note_reveal(df: pd.DataFrame) -> None:
    """Keep the rows of one reveal (called by ``predict.reveal``); a refused reveal is kept as not predicted. The
    first reveal of a prediction that was made is the one scored: a prediction changed after its measurement was
    shown (and revealed again) does not replace it; a refused one is replaced once the prediction is made."""
    for r in df.to_dict("records"):
        same = [p for p in _REVEALED if (p["question"], p["part"]) == (r["question"], r["key"])]
        if any(p["verdict"] != "predict first" for p in same):
            continue
        _REVEALED[:] = [p for p in _REVEALED if p not in same]
        err = r.get("error")
        _REVEALED.append(dict(question=r["question"], part=r["key"], unit=r.get("unit"),
                              predicted=_plain(r.get("predicted")), measured=_plain(r.get("measured")),
                              off=None if err is None or (isinstance(err, float) and math.isnan(err)) else float(err),
                              verdict=r["verdict"]))


def _plain(v):
    if v is None:
        return None
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v if isinstance(v, (int, float, str, bool)) else str(v)


def summary_line(exercises: dict, predictions: list) -> str:
    """"2 of 3 solved (1 attempted, 0 blank); predictions: 1 of 2 close" for one notebook's entry."""
    n = len(exercises)
    count = {s: sum(1 for v in exercises.values() if v == s) for s in STATES}
    line = f"{count['solved']} of {n} solved ({count['attempted']} attempted, {count['blank']} blank)"
    if predictions:
        made = [p for p in predictions if p["verdict"] != "predict first"]
        hit = sum(1 for p in made if p["verdict"] in ("close", "right"))
        line += f"; predictions: {hit} of {len(predictions)} close or right" + (
            f" ({len(predictions) - len(made)} not made)" if len(made) < len(predictions) else "")
    return line


def record(notebook: int, *feedbacks, path: str | os.PathLike | None = None) -> str:
    """Write notebook ``notebook``'s exercises (their feedbacks) and this kernel's revealed predictions to the
    gradebook; returns the line the check cell prints. Predictions are taken once: the next record starts empty."""
    exercises = {}
    for fb in feedbacks:
        name = fb.exercise
        while name in exercises:  # two feedbacks of one exercise (a reused checker): kept apart
            name += "'"
        exercises[name] = state(fb)
    where = Path(path) if path is not None else gradebook_path()
    book = _load(where)
    # a prediction scored in an earlier run of this notebook stands: one made again after its reveal was seen
    # (a re-run) does not replace it
    earlier = {(p["question"], p["part"]): p for p in (book.get(str(notebook)) or {}).get("predictions", [])
               if isinstance(p, dict) and p.get("verdict") != "predict first"}
    predictions = [earlier.pop((p["question"], p["part"]), p) for p in _REVEALED] + list(earlier.values())
    _REVEALED.clear()
    book[str(notebook)] = dict(exercises=exercises, predictions=predictions,
                               recorded=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp = where.with_name(where.name + ".tmp")
    tmp.write_text(json.dumps(book, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, where)
    return f"gradebook: {summary_line(exercises, predictions)} (written to {shown_path(where)})"


def _load(path: Path) -> dict:
    try:
        book = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return book if isinstance(book, dict) else {}


def read(path: str | os.PathLike | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(exercises, predictions) of the gradebook: a row per notebook and exercise (state), and a row per
    notebook and predicted part (predicted, measured, off in the question's unit, verdict)."""
    book = _load(Path(path) if path is not None else gradebook_path())
    ex = [dict(notebook=int(k), exercise=e, state=s)
          for k, v in book.items() for e, s in v.get("exercises", {}).items()]
    pr = [dict(notebook=int(k), **p) for k, v in book.items() for p in v.get("predictions", [])]
    return (pd.DataFrame(ex, columns=["notebook", "exercise", "state"]),
            pd.DataFrame(pr, columns=["notebook", "question", "part", "unit", "predicted", "measured", "off",
                                      "verdict"]))
