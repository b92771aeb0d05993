"""The course in JupyterLab: ``launch_lab(port)`` serves the notebooks folder and blocks until the
server stops.

The server uses jupytext's contents manager, so the ``NN_name.py`` sources open, run and save as
notebooks; :func:`lab_settings_dir` writes the application settings that make a click on them open
the notebook view. The server runs with :func:`~cadencelab.course.sources.kernel_env` in the
notebooks folder, and never outlives its launcher.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .sources import kernel_env, notebooks_dir

__all__ = ["LAB_CONTENTS_MANAGER", "LAB_OVERRIDES", "LAB_OVERRIDES_FILE", "LAB_STOP_S", "check_port", "lab_command",
           "lab_settings_dir", "launch_lab"]


#: jupytext's contents manager: the server reads and writes the ``.py`` sources as notebooks
LAB_CONTENTS_MANAGER = "jupytext.AsyncTextFileContentsManager"
#: JupyterLab settings for the course server: a click on a ``.py`` file opens it as a notebook
LAB_OVERRIDES = {"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"python": "Jupytext Notebook"}}}
LAB_OVERRIDES_FILE = "overrides.d/cadencelab-course.json"


def lab_settings_dir(scratch: str | os.PathLike) -> Path:
    """Write JupyterLab's application settings for the course server into ``scratch`` and return it.

    The environment's own application settings (``<app dir>/settings``: page_config.json,
    overrides.json, overrides.d/) are copied first, then :data:`LAB_OVERRIDES` is added as one more
    overrides file, so the course server differs from a plain ``jupyter lab`` only in opening
    ``.py`` files as notebooks. The user's own settings (``~/.jupyter/lab``) still win.
    """
    import shutil

    from jupyterlab.commands import get_app_dir

    scratch = Path(scratch)
    own = Path(get_app_dir()) / "settings"
    if own.is_dir():
        shutil.copytree(own, scratch, dirs_exist_ok=True)
    path = scratch / LAB_OVERRIDES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(LAB_OVERRIDES, indent=1), encoding="utf-8")
    return scratch


def lab_command(port: int | None = None, open_browser: bool = True, extra_args=(),
                settings_dir: str | os.PathLike | None = None) -> list[str]:
    """The ``jupyter lab`` command line that serves the course folder.

    The server uses jupytext's contents manager, so the ``NN_name.py`` sources open, run and save
    as notebooks (saved in the form ``notebooks/jupytext.toml`` sets); ``settings_dir`` (from
    :func:`lab_settings_dir`) makes a click on them open the notebook view.
    """
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={notebooks_dir()}",
           f"--ServerApp.contents_manager_class={LAB_CONTENTS_MANAGER}"]
    if settings_dir is not None:
        cmd.append(f"--LabApp.app_settings_dir={settings_dir}")
    if port is not None:
        cmd.append(f"--port={int(port)}")
    if not open_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers often run as root; the server refuses otherwise
        cmd.append("--allow-root")
    return cmd + list(extra_args)


def check_port(port: int | None) -> int | None:
    """``port`` if it is a TCP port number (1..65535) or None; ValueError naming it otherwise."""
    if port is None:
        return None
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port must be an integer in 1..65535, got {port!r}")
    return port


#: seconds JupyterLab is given to shut down after SIGTERM before it is killed
LAB_STOP_S = 10.0


def launch_lab(port: int | None = None, open_browser: bool = True, extra_args=()) -> int:
    """Start JupyterLab on the notebooks folder; blocks until it stops. Returns its exit code.

    The ``.py`` sources open as notebooks (jupytext's contents manager, and the application
    settings of :func:`lab_settings_dir` in a scratch folder removed when the server stops).

    Ctrl-C, SIGTERM or SIGHUP to this process stop the server too (it is sent SIGTERM, then
    killed after :data:`LAB_STOP_S`): no server is left running without its launcher.
    """
    import importlib.util
    import tempfile

    check_port(port)
    for module, package in (("jupyterlab", "jupyterlab"), ("jupytext", "jupytext")):
        if importlib.util.find_spec(module) is None:
            raise RuntimeError(f"{package} is not installed: python -m pip install {package}")
    with tempfile.TemporaryDirectory(prefix="cadencelab-lab-") as scratch:
        cmd = lab_command(port, open_browser, extra_args, settings_dir=lab_settings_dir(scratch))
        return _serve(cmd)


def _serve(cmd: list[str]) -> int:
    """Run the server command until it stops (or is stopped: see :func:`launch_lab`).

    Ctrl-C is handled like SIGTERM and SIGHUP, by a handler installed before the server starts, not as a
    KeyboardInterrupt: an exception raised inside ``Popen.wait`` can leave its internal lock held, and the
    launcher would then hang in its final wait (seen as a rare 20 s hang of the signal test under load)."""
    got: list[float] = []  # when a stop was asked for
    child: subprocess.Popen | None = None

    def stop(signum, frame):
        if not got:
            got.append(time.monotonic())
        if child is not None and child.poll() is None:
            child.terminate()

    sigs = [s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    old = {s: signal.signal(s, stop) for s in sigs}
    try:
        child = subprocess.Popen(cmd, env=kernel_env(), cwd=str(notebooks_dir()))
        if got:  # asked to stop while it started
            child.terminate()
        while child.poll() is None:
            try:
                child.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
            if got and time.monotonic() - got[0] > LAB_STOP_S and child.poll() is None:
                child.kill()
    finally:
        if child is not None:
            if child.poll() is None:  # an error in this loop: the server does not outlive its launcher
                child.kill()
            child.wait()
        for s, h in old.items():
            signal.signal(s, h)
    return 0 if got else child.returncode
