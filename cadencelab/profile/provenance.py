"""Where a measurement was made: the launching commit and its tree, the GPU, torch, CUDA, Python, host
and date. Every recorded file (bench studies, the graph lesson, the live tour) carries this record."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

__all__ = ["git", "git_commit", "git_changes", "tree_provenance", "package_version", "run_provenance"]

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


def package_version(name: str) -> str | None:
    """The installed version of ``name`` (None: not installed)."""
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def run_provenance(device: str | None = None, packages: tuple = ()) -> dict:
    """What every study records about its run: :func:`tree_provenance`, ``gpu``, ``torch``,
    ``cuda``, ``python``, the versions of ``packages`` (None: not installed), ``host`` and ``date``.

    ``gpu`` names ``device`` when it is a CUDA device and CUDA is available (None otherwise);
    with ``device=None``, device 0 whenever CUDA is available.
    """
    import platform

    import torch

    cuda = torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda")
    gpu = torch.cuda.get_device_name(0 if device is None else torch.device(device)) if cuda else None
    return dict(**tree_provenance(), gpu=gpu, torch=torch.__version__, cuda=torch.version.cuda,
                python=platform.python_version(), **{p: package_version(p) for p in packages},
                host=platform.node(), date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
