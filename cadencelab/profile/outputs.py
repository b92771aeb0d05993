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

import atexit
import hashlib
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

__all__ = ["DATA_ENV", "RECORDING_STEP", "OutputRefused", "data_folders", "inside_data", "guard_output",
           "atomic_path", "write_atomic", "claim_folder", "claim_marker", "release_folder",
           "check_claim"]

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
    check_claim(final.parent)
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



# ---------------------------------------------------------------------------------------
# one run per output folder: an exclusive claim taken before the first write, checked at every write
# ---------------------------------------------------------------------------------------


def claim_marker(folder: str | os.PathLike) -> Path:
    """Where the claim on ``folder`` lives: a file named after its resolved path in this machine's temporary
    folder (so a user's folder holds nothing of it; two runs on one machine see the same one)."""
    key = hashlib.sha256(str(Path(folder).resolve()).encode()).hexdigest()[:32]
    return Path(tempfile.gettempdir()) / "cadencelab-claims" / key


def _holder(marker: Path) -> int | None:
    """The process id in a claim marker; None when it cannot be read (being written: a live claim)."""
    try:
        return int(marker.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _mine(pid: int | None) -> bool:
    return pid in (os.getpid(), os.getppid())  # this run, or the run whose arm process this is


def claim_folder(folder: str | os.PathLike, what: str = "--out") -> Path:
    """Take ``folder`` (made if need be) for this run: a marker created exclusively (``O_EXCL``,
    :func:`claim_marker`), so of two runs started together on one folder the second is refused
    (:class:`OutputRefused`, one line); a marker whose process has ended is taken over. Released when this
    process exits; every :func:`atomic_path` write into the folder checks it is still this run's."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    marker = claim_marker(out)
    marker.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            pid = _holder(marker)
            if _mine(pid):
                return out
            if _alive(pid):
                raise OutputRefused(what, f"{str(out)!r} is being written by another run (process {pid}); wait for "
                                          f"it to end or name another folder") from None
            marker.unlink(missing_ok=True)  # a run that ended without releasing it
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{os.getpid()} {out.resolve()}\n")
        atexit.register(release_folder, out)
        return out
    raise OutputRefused(what, f"{str(out)!r}: another run took it at the same moment; name another folder")


def release_folder(folder: str | os.PathLike) -> None:
    """Give up this process's claim on ``folder`` (at exit, or when its run ends)."""
    marker = claim_marker(folder)
    if _holder(marker) == os.getpid():
        marker.unlink(missing_ok=True)


def check_claim(folder: Path) -> None:
    """Before a write into ``folder``: a claim on it (or on the folder above) must be this run's (so the end of a
    run checks it again)."""
    for f in (folder, folder.parent):
        pid = _holder(claim_marker(f))
        if pid is not None and not _mine(pid) and _alive(pid):
            raise OutputRefused("--out", f"{str(f)!r} was taken by another run (process {pid}) while this one ran: "
                                         f"its files are that run's; nothing written")
