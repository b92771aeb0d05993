"""``cadencelab tour`` never overwrites files it did not write; ``cadencelab lab`` checks its port and
stops JupyterLab when it is stopped (no orphaned server)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cadencelab import cli
from cadencelab.course import tour

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("where, says", [
    (lambda tmp: ROOT, "holds the course sources"),
    (lambda tmp: ROOT / "notebooks", "holds the course sources"),
    (lambda tmp: ROOT / "cadencelab", "other files in it"),
    (lambda tmp: (tmp / "f.txt").write_text("x") and tmp / "f.txt", "not a folder"),
    (lambda tmp: (tmp / "mine.py").write_text("x") and tmp, "other files in it"),
], ids=["repo_root", "notebooks", "package", "a_file", "foreign_folder"])
def test_tour_refuses_folders_it_did_not_write(capsys, tmp_path, where, says):
    target = where(tmp_path)
    before = {p: p.stat().st_mtime_ns for p in (ROOT / "notebooks").glob("*")}
    rc = cli.main(["tour", str(target), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "OUT_DIR" in err and says in err and str(target) in err and "Traceback" not in err
    assert {p: p.stat().st_mtime_ns for p in (ROOT / "notebooks").glob("*")} == before


def test_tour_accepts_new_empty_and_earlier_tour_folders(tmp_path):
    assert tour.check_tour_dir(tmp_path / "new") == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    assert tour.check_tour_dir(tmp_path / "empty") == tmp_path / "empty"
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / tour.TOUR_MARKER).write_text("")
    (earlier / "index.html").write_text("")
    assert tour.check_tour_dir(earlier) == earlier
    with pytest.raises(tour.TourRefused):
        tour.run_tour(ROOT, progress=False)


@pytest.mark.parametrize("port", [0, -1, 70000, True, "8888"])
def test_launch_lab_refuses_bad_ports(port):
    with pytest.raises(ValueError, match="port must be an integer in 1..65535"):
        tour.launch_lab(port=port)


_LAUNCHER = """
import sys
from cadencelab.course import lab
child = [sys.executable, "-c", "import os, time; print('child', os.getpid(), flush=True); time.sleep(120)"]
lab.lab_command = lambda *a, **k: child
print("rc", lab.launch_lab(), flush=True)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of an exited child is not a running server
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["TERM", "INT", "HUP"])
def test_lab_stops_its_server_on_signal(sig):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, "-c", _LAUNCHER], stdout=subprocess.PIPE, text=True, env=env)
    child = None
    try:
        line = p.stdout.readline()
        assert line.startswith("child"), line
        child = int(line.split()[1])
        assert _alive(child)
        p.send_signal(sig)
        rest, _ = p.communicate(timeout=20)
        assert "rc 0" in rest and p.returncode == 0
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the server outlived its launcher"
    finally:
        if p.poll() is None:
            p.kill()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)
