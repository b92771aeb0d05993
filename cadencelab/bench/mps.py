"""CUDA MPS around the lane processes of one arm (``--mps``).

Why: without MPS the device time-slices between the contexts of several processes, so kernels of two lane
processes never run at once; under MPS the processes' work shares the SMs as one process's streams do. The
daemon gets a private pipe and log folder (no other daemon on the machine is touched; the folder is removed
after), is started before the lane processes make their contexts and quit after they end; what it served
(``get_server_list``) is recorded, so a run that asked for MPS and did not get it says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

__all__ = ["Mps"]

CONTROL = "nvidia-cuda-mps-control"
_ENV = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")


class Mps:
    """``with Mps(): ...`` runs the body's new CUDA processes as clients of one private MPS daemon."""

    def __init__(self, control: str | None = None):
        self.control = control or shutil.which(CONTROL)
        if self.control is None:
            raise RuntimeError(f"--mps: {CONTROL} is not on PATH on this machine; run without --mps")
        self.folder = tempfile.mkdtemp(prefix="cadencelab-mps-")
        self.saved: dict = {}
        self.servers: list[str] = []

    def _ask(self, command: str) -> str:
        r = subprocess.run([self.control], input=command + "\n", capture_output=True, text=True, timeout=30)
        if r.returncode:
            why = (r.stderr or r.stdout).strip()
            raise RuntimeError(f"--mps: {CONTROL} {command!r} failed ({r.returncode}): {why}")
        return r.stdout

    def __enter__(self) -> "Mps":
        self.saved = {k: os.environ.get(k) for k in _ENV}
        for k, sub in zip(_ENV, ("pipe", "log")):
            os.environ[k] = os.path.join(self.folder, sub)
            os.makedirs(os.environ[k], exist_ok=True)
        r = subprocess.run([self.control, "-d"], capture_output=True, text=True, timeout=30)
        if r.returncode:
            self._restore()
            shutil.rmtree(self.folder, ignore_errors=True)
            raise RuntimeError(f"--mps: {CONTROL} -d failed ({r.returncode}): {(r.stderr or r.stdout).strip()}")
        return self

    def served(self) -> list[str]:
        """The MPS servers running now (one per device user once a client has connected)."""
        self.servers = self._ask("get_server_list").split()
        return self.servers

    def __exit__(self, *exc) -> None:
        try:
            self._ask("quit")
            for _ in range(100):  # the daemon leaves its pipe folder's control socket when it has quit
                if not os.path.exists(os.path.join(os.environ["CUDA_MPS_PIPE_DIRECTORY"], "control")):
                    break
                time.sleep(0.1)
        finally:
            self._restore()
            shutil.rmtree(self.folder, ignore_errors=True)  # the pipe and log folder: nothing left behind

    def _restore(self) -> None:
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def record(self) -> dict:
        return dict(on=True, servers=len(self.servers), pipe_directory=self.folder)
