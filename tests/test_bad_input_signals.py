"""SIGTERM and Ctrl-C end runs cleanly (issue 39): the one error wrapper turns SIGTERM into an interrupt (its
``finally`` blocks run, exit 130, one line); an arm process whose parent is gone ends without a traceback;
entries outside the bench (``docs/results_table.py``, capstone, live cells) answer a bad device or data folder
in one line. CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cadencelab.bench.common import ArmProcess, serve
from cadencelab.bench.flags import run_main
from cadencelab.course import capstone, live_cells

ROOT = Path(__file__).resolve().parents[1]


def test_sigterm_inside_the_wrapper_is_a_clean_interrupt(capsys):
    cleaned = []

    def fn(argv):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            cleaned.append(True)

    assert run_main("prog", fn, []) == 130
    assert cleaned == [True] and capsys.readouterr().err.strip() == "prog: interrupted"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def _arm_worker(conn):
    serve(conn, lambda: object(), lambda arm: {}, {"noop": lambda arm: None})


def test_an_arm_process_whose_parent_is_gone_ends_quietly(capfd):
    p = ArmProcess("x", _arm_worker, ())
    assert p.wait(60)[0] == "ready"
    p.conn.close()  # the parent's end of the pipe gone, as when the parent is killed
    p.p.join(30)
    assert p.p.exitcode == 0 and "Traceback" not in capfd.readouterr().err


def test_a_bad_device_is_one_line_in_every_entry(capsys):
    assert capstone.main(["--device", "bogus"]) == 2
    assert capsys.readouterr().err.strip() == ("python -m cadencelab.course.capstone: error: --device: not a device: "
                                               "'bogus' (expected cpu, cuda or cuda:N)")
    assert live_cells.main(["--memory", "--out", "/nonexistent/never", "--device", "bogus"]) == 2
    assert "--device: not a device: 'bogus'" in capsys.readouterr().err


def test_results_table_with_another_data_folder_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "docs" / "results_table.py")], capture_output=True, text=True,
                       check=False,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), CADENCELAB_DATA=str(tmp_path)), timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "outside the data folder" in r.stderr
