"""Concurrent runs do not replace each other (issue 39): a study's output folder is claimed exclusively before its
first write (a second run started on it is refused with one line) and checked at every write; a claim whose
process ended is taken over; the tour writes only into folders it marked itself, and Ctrl-C or SIGTERM stops
it. CPU, no model runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from cadencelab.bench.common import check_out, write_json
from cadencelab.course import tour
from cadencelab.profile.outputs import OutputRefused, claim_marker, release_folder

ROOT = Path(__file__).resolve().parents[1]


def _holder(folder: Path) -> subprocess.Popen:
    """Another run: a process that claims ``folder`` as a study does, then waits."""
    code = ("import sys, time; from types import SimpleNamespace; from cadencelab.bench.common import check_out; "
            "check_out(SimpleNamespace(out=sys.argv[1], overwrite=False), ('x*',)); print('claimed', flush=True); "
            "time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.stdout.readline().strip() == "claimed"
    return p


def test_a_second_run_on_a_folder_being_written_is_refused(tmp_path):
    out = tmp_path / "new"
    other = _holder(out)
    try:
        with pytest.raises(OutputRefused, match=rf"is being written by another run \(process {other.pid}\)"):
            check_out(SimpleNamespace(out=str(out), overwrite=True), ("x*",))  # --overwrite does not take it either
        assert list(out.iterdir()) == []  # and the folder holds no marker of it
    finally:
        other.kill()
        other.wait()
    assert check_out(SimpleNamespace(out=str(out), overwrite=False), ("x*",)) == out  # an ended run's claim is taken
    release_folder(out)
    assert not claim_marker(out).exists()


def test_a_folder_taken_by_another_run_meanwhile_is_not_written(tmp_path):
    out = check_out(SimpleNamespace(out=str(tmp_path / "mine"), overwrite=False), ("x*",))
    write_json({"a": 1}, out / "x.json")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        claim_marker(out).write_text(f"{other.pid}\n")  # another run took the folder while this one ran
        with pytest.raises(OutputRefused, match="was taken by another run"):
            write_json({"a": 2}, out / "x.json")
        assert (out / "x.json").read_text().split() == ["{", '"a":', "1", "}"]
    finally:
        other.kill()
        other.wait()
        claim_marker(out).unlink(missing_ok=True)


def test_the_tour_does_not_take_a_users_folder_that_looks_like_a_report(tmp_path):
    users = tmp_path / "mine"
    users.mkdir()
    (users / "index.html").write_text("<p>my page</p>")
    (users / "summary.json").write_text("[]")
    with pytest.raises(tour.TourRefused, match=r"no \.cadencelab-tour"):
        tour.check_tour_dir(users)
    assert (users / "index.html").read_text() == "<p>my page</p>"
    (users / tour.TOUR_MARKER).write_text("")
    assert tour.check_tour_dir(users) == users  # a folder the tour marked is its own


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_tour_even_when_the_notebook_client_swallows_it(sig):
    with pytest.raises(KeyboardInterrupt), tour.stop_on_signals() as stopped:
        try:
            os.kill(os.getpid(), sig)
            time.sleep(5)
        except KeyboardInterrupt:  # a client catching it and recording the notebook as failed
            pass
        assert stopped == [sig.name]
        raise KeyboardInterrupt
    assert signal.getsignal(signal.SIGTERM) is not None and stopped == [sig.name]


def test_run_tour_stops_after_the_interrupted_notebook(monkeypatch, tmp_path):
    """A notebook client that swallows the interrupt (recording the notebook as failed) does not keep the tour
    going: it ends after that notebook, writing no report and no record."""
    class Run:
        ok, seconds, figures, name, nb = False, 0.1, [], "x", None

    ran = []

    def execute(p, timeout, parameters, **kw):
        ran.append(p.name)
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except KeyboardInterrupt:  # as a client recording the cell as failed
            pass
        return Run()

    monkeypatch.setattr(tour, "execute_notebook", execute)
    nbs = [tmp_path / "01_x.py", tmp_path / "02_y.py"]
    for nb in nbs:
        nb.write_text("# %%\nprint(1)\n")
    with pytest.raises(KeyboardInterrupt, match="SIGTERM during 01_x.py"):
        tour.run_tour(tmp_path / "out", progress=False, notebooks=nbs)
    assert ran == ["01_x.py"]
    assert not (tmp_path / "out" / "index.html").exists() and not (tmp_path / "out" / tour.TOUR_RECORD).exists()
