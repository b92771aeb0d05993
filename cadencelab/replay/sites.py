"""Where an op came from: the first frame outside torch and outside cadencelab.replay (the preflight's sites,
named as a traceback or a notebook cell names them)."""

from __future__ import annotations

import linecache
import os
import sys
import warnings
from dataclasses import dataclass

import torch

__all__ = ["UNKNOWN", "Site", "frame_site", "notebook_cell", "short_path", "user_site"]

# frames never attributed to the user: torch, this package's replay layer, and the warnings machinery that
# calls the sync-debug hook (a sync reported through a warning belongs to the frame that triggered it)
_SKIP_DIRS = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.abspath(__file__)) + os.sep) + tuple(
    os.path.abspath(m.__file__) for m in (warnings, sys.modules.get("_py_warnings")) if getattr(m, "__file__", None))
_skip_cache: dict[str, bool] = {}
_positions: dict = {}


@dataclass(frozen=True)
class Site:
    file: str
    line: int
    end_line: int
    col: int | None
    end_col: int | None

    @property
    def where(self) -> str:
        where = short_path(self.file)
        return f"{where}, line {self.line}" if where.startswith("cell In[") else f"{where}:{self.line}"

    def source(self, limit: int = 160) -> str:
        """The source lines of the call this frame was executing, whitespace collapsed."""
        lines = [linecache.getline(self.file, n) for n in range(self.line, self.end_line + 1)]
        text = " ".join(s.strip() for s in lines if s.strip())
        return text if len(text) <= limit else text[:limit - 3] + "..."


UNKNOWN = Site("?", 0, 0, None, None)


def notebook_cell(path: str) -> str | None:
    """"cell In[17]" for the temporary file IPython compiled a notebook cell into (ipykernel_*/*.py), as its own
    tracebacks name it; None for any other file."""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    count = getattr(getattr(shell, "compile", None), "_filename_map", {}).get(path) if shell else None
    return f"cell In[{count}]" if count is not None else None


def short_path(path: str) -> str:
    cell = notebook_cell(path)
    if cell is not None:
        return cell
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        if marker in path:
            return path.split(marker, 1)[1]
    try:
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else path
    except ValueError:
        return path


def user_site(depth: int = 2) -> Site:
    f = sys._getframe(depth)
    while f is not None:
        name = f.f_code.co_filename
        skip = _skip_cache.get(name)
        if skip is None:
            skip = _skip_cache[name] = os.path.abspath(name).startswith(_SKIP_DIRS)
        if not skip:
            return frame_site(f)
        f = f.f_back
    return UNKNOWN


def frame_site(f) -> Site:
    code = f.f_code
    pos = _positions.get(code)
    if pos is None:
        pos = _positions[code] = list(code.co_positions()) if hasattr(code, "co_positions") else []
    i = f.f_lasti // 2
    if 0 <= i < len(pos) and pos[i][0] is not None:
        line, end, col, end_col = pos[i]
        return Site(code.co_filename, line, end or line, col, end_col)
    return Site(code.co_filename, f.f_lineno, f.f_lineno, None, None)
