"""Pieces every study shares: the commit a run was launched from, and JSON that numpy can't break."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

_ROOT = Path(__file__).resolve().parents[2]


def git(*args: str) -> str:
    """Output of a git command in the repository, or '' where there is no git history (the device copy)."""
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=_ROOT).stdout.strip()
    except Exception:
        return ""


def git_commit() -> str:
    """The launching commit: ``CADENCELAB_COMMIT`` when set (the device tree has no history), else HEAD."""
    head = git("rev-parse", "HEAD")
    return os.environ.get("CADENCELAB_COMMIT") or (head if len(head) == 40 else "")


def git_changes(limit: int = 10) -> list[str] | None:
    """``git status --porcelain`` lines (at most ``limit``): what made a run's tree differ from its commit.

    None when that cannot be known: ``CADENCELAB_COMMIT`` names a commit the local history's
    HEAD is not (a copied tree, whose stale git metadata would list the commits since as changes).
    """
    named = os.environ.get("CADENCELAB_COMMIT")
    if named and not git("rev-parse", "HEAD").startswith(named):
        return None
    return [line for line in git("status", "--porcelain").splitlines() if line.strip()][:limit]


def tree_provenance() -> dict:
    """``git_commit``, ``git_dirty`` (None: unknown) and ``git_changes`` of the launching tree."""
    changes = git_changes()
    return dict(git_commit=git_commit(), git_dirty=None if changes is None else bool(changes), git_changes=changes)


def serve(conn, build: Callable[[], Any], ready: Callable[[Any], dict], handlers: dict[str, Callable]) -> None:
    """A study's arm process: ``build()`` the arm, answer ``("ready", ready(arm))``, then serve
    requests ``(kind, *args)`` with ``handlers[kind](arm, *args)`` -> ``("ok", result)`` until
    ``("stop",)``. Any exception is answered ``("error", traceback)``; a failed build ends the process."""
    try:
        arm = build()
        conn.send(("ready", ready(arm)))
    except Exception:
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            break
        try:
            handler = handlers.get(msg[0])
            if handler is None:
                raise ValueError(f"unknown request {msg[0]!r} (known: {sorted(handlers)})")
            conn.send(("ok", handler(arm, *msg[1:])))
        except Exception:
            conn.send(("error", traceback.format_exc()))


class ArmProcess:
    """One arm in a fresh spawned process (its worker calls :func:`serve`), asked over a pipe.

    ``ask(msg, timeout)`` sends a request and waits; a timeout or a dead worker kills the process
    and every later answer is ``("error", why)``.
    """

    def __init__(self, arm: str, target: Callable, args: tuple):
        ctx = mp.get_context("spawn")
        self.arm, self.dead = arm, None
        self.conn, child = ctx.Pipe()
        self.p = ctx.Process(target=target, args=(child, *args), daemon=True)
        self.p.start()

    def ask(self, msg: tuple, timeout: float):
        if self.dead:
            return ("error", self.dead)
        self.conn.send(msg)
        return self.wait(timeout)

    def wait(self, timeout: float):
        if self.dead:
            return ("error", self.dead)
        if not self.conn.poll(timeout):
            self.kill(f"no answer within {timeout:.0f} s")
            return ("error", self.dead)
        try:
            return self.conn.recv()
        except EOFError:
            self.kill("the worker process died")
            return ("error", self.dead)

    def kill(self, why: str) -> None:
        self.dead = why
        if self.p.is_alive():
            self.p.kill()

    def request_stop(self) -> None:
        if not self.dead and self.p.is_alive():
            try:
                self.conn.send(("stop",))
            except Exception:
                pass
        self.dead = self.dead or "stopped"

    def stop(self) -> None:
        self.request_stop()
        self.p.join(timeout=10)
        if self.p.is_alive():
            self.p.kill()


def json_default(o):
    """``json.dumps(default=...)`` for numpy scalars; anything else becomes its string."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    return str(o)
