"""Where the course notebooks are and how they are read.

The course sources are Python scripts in jupytext's percent format (``notebooks/NN_name.py``:
``# %%`` code cells, ``# %% [markdown]`` cells, ``# %% tags=["parameters"]``); ``read_notebook``
turns one into a notebook in memory, with the text options of ``notebooks/jupytext.toml``
(``notebook_text`` writes it back in the same form). ``.ipynb`` files are read as they are.
The folder is ``$CADENCELAB_NOTEBOOKS`` when set, else the checkout's ``notebooks/``;
``kernel_env`` is the environment kernels and JupyterLab run in (this checkout first on PYTHONPATH).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "NOTEBOOKS_ENV",
    "SOURCE_GLOB",
    "SOURCE_SUFFIX",
    "course",
    "kernel_env",
    "notebook_text",
    "notebooks_dir",
    "read_notebook",
    "repo_root",
]

NOTEBOOKS_ENV = "CADENCELAB_NOTEBOOKS"
#: the course sources: ``NN_name`` + this suffix, jupytext percent format
SOURCE_SUFFIX = ".py"
SOURCE_GLOB = "[0-9][0-9]_*" + SOURCE_SUFFIX


def repo_root() -> Path:
    """The folder above the ``cadencelab`` package (the repository root in a checkout)."""
    return Path(__file__).resolve().parents[2]


def notebooks_dir() -> Path:
    """``$CADENCELAB_NOTEBOOKS`` when set, else the checkout's ``notebooks/``."""
    env = os.environ.get(NOTEBOOKS_ENV)
    p = Path(env).expanduser() if env else repo_root() / "notebooks"
    if not p.is_dir():
        raise FileNotFoundError(f"no notebooks folder at {p}; set ${NOTEBOOKS_ENV} to the folder holding the course")
    return p


def course(folder: Path | None = None) -> list[Path]:
    """The course notebooks in order (``NN_name.py``, jupytext percent format)."""
    folder = folder or notebooks_dir()
    nbs = sorted(p for p in folder.glob(SOURCE_GLOB))
    if not nbs:
        raise FileNotFoundError(f"{folder}: no course notebooks ({SOURCE_GLOB})")
    return nbs


def _text_format(path: Path) -> dict:
    """jupytext's format for a percent-format source, with the options of the nearest jupytext.toml."""
    from jupytext.config import load_jupytext_config

    fmt = {"extension": SOURCE_SUFFIX, "format_name": "percent"}
    config = load_jupytext_config(str(path))
    if config is not None:
        config.set_default_format_options(fmt)
    return fmt


def read_notebook(path: str | os.PathLike):
    """One notebook, in memory: a ``.py`` source (jupytext percent format) or an ``.ipynb`` file."""
    import jupytext

    path = Path(path)
    if path.suffix == ".ipynb":
        return jupytext.read(path)
    if path.suffix != SOURCE_SUFFIX:
        raise ValueError(f"{path}: a course notebook is a {SOURCE_SUFFIX} file (jupytext percent format) "
                         f"or an .ipynb file")
    return jupytext.read(path, fmt=_text_format(path))


def notebook_text(nb, path: str | os.PathLike) -> str:
    """``nb`` as the percent-format text it would have at ``path`` (the form the sources are kept in)."""
    import jupytext

    return jupytext.writes(nb, fmt=_text_format(Path(path)))


def kernel_env() -> dict[str, str]:
    """The environment for kernels and JupyterLab: this checkout first on PYTHONPATH."""
    env = dict(os.environ)
    root = str(repo_root())
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    env["PYTHONPATH"] = os.pathsep.join([root] + parts)
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return env
