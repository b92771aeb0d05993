"""Result files: where the tools may write them, and how.

Recorded data is evidence. :func:`guard_output` is the one check every writer passes through (the
studies' ``--out``, ``cadencelab catalog --json``, ``cadencelab profile --out``, the soak's
``--analyse-only``, the graph lesson and the tour): it refuses any path inside the recorded data
folder (the repository's ``data/``, a packaged ``cadencelab/data/`` and ``$CADENCELAB_DATA``;
resolved, so a symlink or ``..`` into it is refused too), since only the documented recording step
copies results into ``data/``; and it refuses to replace a result file an earlier run left there
unless the caller says ``overwrite``. :func:`atomic_path` / :func:`write_atomic` write every result
file atomically: a temporary file in the same folder, then :func:`os.replace`, so a failed or
interrupted run leaves the old file whole.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

__all__ = ["DATA_ENV", "RECORDING_STEP", "OutputRefused", "data_folders", "inside_data", "guard_output",
           "atomic_path", "write_atomic"]

#: environment variable naming the data folder in use (read by :mod:`cadencelab.course.data` too)
DATA_ENV = "CADENCELAB_DATA"
#: where the one step that copies results into data/ is documented
RECORDING_STEP = "docs/device.md"

_PACKAGE = Path(__file__).resolve().parents[1]  # cadencelab/


class OutputRefused(ValueError):
    """A path a tool may not write; the message starts with what was given (``--out``, ``--json``, ...)."""

    def __init__(self, what: str, reason: str):
        self.flag, self.reason = what, reason
        super().__init__(f"{what}: {reason}")


def data_folders() -> list[Path]:
    """The recorded data folders, resolved: the repository's ``data/`` (beside the package), a packaged
    ``cadencelab/data/`` and ``$CADENCELAB_DATA`` when set (each whether or not it exists)."""
    found = [_PACKAGE.parent / "data", _PACKAGE / "data"]
    env = os.environ.get(DATA_ENV)
    if env:
        found.append(Path(env).expanduser())
    out: list[Path] = []
    for p in found:
        r = p.resolve()
        if r not in out:
            out.append(r)
    return out


def inside_data(path: str | os.PathLike) -> Path | None:
    """The recorded data folder that ``path`` (resolved: symlinks and ``..`` followed) lies in, or None."""
    target = Path(path).expanduser().resolve()
    return next((d for d in data_folders() if target == d or target.is_relative_to(d)), None)


def guard_output(path: str | os.PathLike, what: str = "--out", *, results: Iterable[str] = (),
                 overwrite: bool = False, file: bool = False) -> Path:
    """``path`` as a Path when a tool may write there; :class:`OutputRefused` (one line, naming ``what``
    and the path) otherwise.

    ``file``: ``path`` is the result file itself (it must not exist unless ``overwrite``); else it is
    an output folder and ``results`` are the glob patterns of the files the run writes there (none
    may exist unless ``overwrite``). Nothing is created or changed.
    """
    if path is None or not str(path).strip():
        raise OutputRefused(what, f"is empty ({path!r}); name a {'file' if file else 'folder'}")
    p = Path(path)
    data = inside_data(p)
    if data is not None:
        raise OutputRefused(what, f"{str(p)!r} is inside the recorded data folder {data}: the tools never write "
                                  f"there; only the documented recording step ({RECORDING_STEP}) copies results "
                                  f"into data/ (name another {'file' if file else 'folder'}, e.g. under out/)")
    if overwrite:
        return p
    if file:
        if p.exists() and not p.is_dir():
            raise OutputRefused(what, f"{str(p)!r} already exists; pass --overwrite to replace it, or name a new file")
        return p
    if p.is_dir():
        old = sorted({q.name for pattern in results for q in p.glob(pattern) if q.is_file()})
        if old:
            shown = ", ".join(old[:4]) + (f" and {len(old) - 4} more" if len(old) > 4 else "")
            raise OutputRefused(what, f"{str(p)!r} already holds {shown} from an earlier run; pass --overwrite "
                                      f"to replace {'it' if len(old) == 1 else 'them'}, or name a new folder")
    return p


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path in ``path``'s folder (its name ends like ``path``'s, so ``.gz`` still means gzip)
    to write the result into; on leaving the block it replaces ``path`` in one step. An error inside
    the block removes the temporary file and leaves any old ``path`` whole. Refuses the recorded
    data folder (:func:`guard_output` with ``overwrite``)."""
    final = guard_output(path, "result file", overwrite=True, file=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=".tmp-", suffix=f"-{final.name}")
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # as an ordinary new file, not mkstemp's owner-only mode
    try:
        yield Path(tmp)
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """``data`` (text as UTF-8, or bytes) at ``path``, written atomically (:func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)
