"""Pieces every study shares: the commit a run was launched from, and JSON that numpy can't break."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

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


def git_changes(limit: int = 10) -> list[str]:
    """``git status --porcelain`` lines (at most ``limit``): what made a run's tree differ from its commit."""
    return [line for line in git("status", "--porcelain").splitlines() if line.strip()][:limit]


def json_default(o):
    """``json.dumps(default=...)`` for numpy scalars; anything else becomes its string."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    return str(o)
