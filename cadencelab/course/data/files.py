"""Finding and reading the recorded files (the data folder, datasets, JSON and CSV readers) and the names
every recorded study's loader shares."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pandas as pd

from ...profile.outputs import DATA_ENV
from ...profile.plausible import check_frame, check_record
from ...replay.determinism import EXACT
from ..studies import DEVICE_TASKS, RECORDINGS

__all__ = [
    "CONDITIONS",
    "DATASETS",
    "DATA_ENV",
    "DEVICE_CONDITIONS",
    "PAPER_DATASETS",
    "PAPER_SOURCE",
    "PARETO_COLUMNS",
    "beside",
    "check_condition",
    "data_dir",
    "data_path",
    "dataset_of",
    "dataset_path",
    "load_json",
    "need_key",
    "pick_rows",
    "read_csv",
    "recorded_condition",
    "recording_how",
    "result",
    "result_of",
]

#: the columns cadencelab.viz.pareto reads (intervals as bounds, not half-widths)
PARETO_COLUMNS = ["arm", "lat_ms", "lat_lo", "lat_hi", "peak_MiB", "peak_lo", "peak_hi", "exact"]
CONDITIONS = ("exact", "pinned", "unpinned")
#: the device condition (cadencelab.replay.determinism.CONDITIONS) of each recorded set-up
DEVICE_CONDITIONS = {"exact": EXACT, "pinned": "no_tf32_cudnn_det_ws", "unpinned": "no_tf32"}

#: recorded files by dataset name -> (path under data/, how to record it, flag), from the studies table
#: (cadencelab.course.studies.RECORDINGS: the commands the recorded files were made with), and the paper's figures
DATASETS = {r.dataset: (r.path, r.how(), "") for r in RECORDINGS}
DATASETS.update({t.dataset: (t.path, t.how(), "") for t in DEVICE_TASKS if t.dataset})
DATASETS["paper_duplex_second"] = ("paper/duplex_second.csv", None, "")
DATASETS["paper_figures"] = ("paper/figures.csv", None, "")
PAPER_SOURCE = ("DuplexCadence (arXiv:2609.35115v1), figures as published (sections and tables named per row); "
                 "see data/paper/README.md")
#: the paper's datasets (published figures, nothing measured here)
PAPER_DATASETS = ("paper_duplex_second", "paper_figures")


# ---------------------------------------------------------------------------------------
# finding files
# ---------------------------------------------------------------------------------------


def _candidates() -> list[Path]:
    package = Path(__file__).resolve().parents[2]  # cadencelab/
    return [package.parent / "data", package / "data"]


def data_dir() -> Path:
    """The data folder: ``$CADENCELAB_DATA`` when set, else the repository's ``data/``.

    The repository root is the folder above the ``cadencelab`` package; an installed package may
    carry its data at ``cadencelab/data/`` instead. FileNotFoundError lists where it looked.
    """
    env = os.environ.get(DATA_ENV)
    if env:
        p = Path(env).expanduser()
        if not p.is_dir():
            raise FileNotFoundError(f"${DATA_ENV} is set to {env!r}, which is not a folder")
        return p
    for p in _candidates():
        if p.is_dir():
            return p
    raise FileNotFoundError("no cadencelab data folder: looked in " + ", ".join(str(p) for p in _candidates())
                            + f"; set ${DATA_ENV} to the folder that holds h200/ and paper/")


def dataset_path(name: str) -> Path:
    """Where dataset ``name`` (a key of :data:`DATASETS`) lives under the data folder; it need not exist."""
    if name not in DATASETS:
        raise KeyError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    return data_dir() / DATASETS[name][0]


def data_path(relative: str | os.PathLike, how: str | None = None) -> Path:
    """``data_dir() / relative``: a file that exists inside the data folder (the error names the path and
    how to make it). A path that leads out of the folder (``..``, an absolute path, a symlink) or names a
    folder is refused with ValueError."""
    root = data_dir()
    p = root / relative
    if not p.resolve().is_relative_to(root.resolve()):
        raise ValueError(f"{p}: outside the data folder {root} (recorded files are named inside it)")
    if not p.exists():
        msg = f"recorded data file not found: {p}"
        if how:
            msg += f"\nrecord it with: {how}"
        raise FileNotFoundError(msg)
    if p.is_dir():
        raise ValueError(f"{p}: a folder, not a recorded file")
    return p


def beside(rel: str, key: str, name, how: str | None = None, gz: bool = False) -> Path:
    """The file a recorded JSON names under ``key`` (a file name only, no folders), beside that JSON;
    ``gz``: its gzipped copy (the recording step gzips CSVs beside the JSON)."""
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise ValueError(f"{data_dir() / rel}: {key!r} must be a file name beside it (no folder, no '..'), "
                         f"got {name!r:.80}")
    return data_path(Path(rel).parent / (f"{name}.gz" if gz and not name.endswith(".gz") else name), how)


def read_csv(path: Path, **kw) -> pd.DataFrame:
    """A recorded CSV (gzip when its name ends .gz); any unreadable content is a ValueError naming the file."""
    try:
        df = pd.read_csv(path, **kw)
    except (OSError, EOFError, UnicodeDecodeError, ValueError) as e:  # BadGzipFile, ParserError, EmptyDataError
        raise ValueError(f"{path}: not a readable CSV{' (gzip)' if path.suffix == '.gz' else ''}: "
                         f"{type(e).__name__}: {' '.join(str(e).split())[:160]}") from None
    return check_frame(df, path)  # plausible too: no negative duration, time or size


def check_condition(condition: str) -> str:
    """``condition`` when it is one of :data:`CONDITIONS`; ValueError naming what was given otherwise."""
    if condition not in CONDITIONS:
        raise ValueError(f"condition must be one of {CONDITIONS}, got {condition!r}")
    return condition


def recording_how(name: str) -> str | None:
    """How to record dataset ``name`` (None for the paper's published figures)."""
    rel, cmd, flag = DATASETS[name]
    return cmd.format(flag=flag, path=f"data/{rel}") if cmd else None


def dataset_of(kind: str, condition: str = "exact") -> tuple[str, str | None]:
    name = kind if check_condition(condition) == "exact" else f"{kind}_{condition}"
    return DATASETS[name][0], recording_how(name)


def result(name: str) -> dict:
    """A recorded dataset's whole JSON (a key of :data:`DATASETS`, e.g. ``"headline"``); a missing file's
    error names the command that records it."""
    if name not in DATASETS:
        raise KeyError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    return load_json(DATASETS[name][0], recording_how(name))


def result_of(kind: str, top: type = dict) -> tuple[dict, str, str | None]:
    """A recorded dataset's JSON, its path under data/ and how to record it (the exact condition)."""
    rel, how = dataset_of(kind)
    return load_json(rel, how, top), rel, how


def recorded_condition(obj: dict) -> str:
    """The device condition a recorded study ran under: its provenance's ``determinism.condition``; the
    older files say only whether they were pinned (``deterministic``): the workspace pin, or TF32 off."""
    prov = obj.get("provenance", {})
    named = (prov.get("determinism") or {}).get("condition")
    if named:
        return named
    cfg = prov.get("study") or obj.get("config") or prov.get("config") or {}
    unpinned = cfg.get("deterministic") is False or str(prov.get("condition", "")).startswith("unpinned")
    return DEVICE_CONDITIONS["unpinned"] if unpinned else DEVICE_CONDITIONS["pinned"]


@functools.lru_cache(maxsize=16)
def _load_json_cached(path: str, mtime_ns: int) -> dict:
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}); is this a recorded JSON file?") from None
    try:
        obj = json.loads(text)
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to read") from None
    except ValueError as e:  # JSONDecodeError, or a number too long to convert
        raise ValueError(f"{path}: not valid JSON ({' '.join(str(e).split())[:160]})") from None
    check_record(obj, path)  # plausible too: no negative duration, time or size
    return obj


def load_json(relative: str | os.PathLike, how: str | None = None, top: type = dict) -> dict:
    """A recorded JSON file under the data folder (parsed once per file version; do not mutate); its top
    level must be a ``top`` (a JSON object unless said otherwise)."""
    p = data_path(relative, how)
    obj = _load_json_cached(str(p), p.stat().st_mtime_ns)
    if not isinstance(obj, top):
        raise ValueError(f"{p}: expected a JSON {_JSON_NAMES[top]} at the top, got {_json_name(obj)}")
    return obj


_JSON_NAMES = {dict: "object", list: "array", str: "string"}


def _json_name(v) -> str:
    """What a JSON value is, with its article: "an object", "an array", "a string", "a number", "null", ..."""
    name = _JSON_NAMES.get(type(v), "number" if isinstance(v, (int, float)) and not isinstance(v, bool)
                           else "null" if v is None else type(v).__name__)
    return name if name == "null" else f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def pick_rows(df: pd.DataFrame, column: str, value, rel: str) -> pd.DataFrame:
    """Rows of ``df`` whose ``column`` is ``value`` (all rows for None); an absent value names the ones there are."""
    if value is not None:
        if value not in set(df[column]):
            raise ValueError(f"{rel}: no {column} {value!r} ({column}s: {sorted(set(df[column]))})")
        df = df[df[column] == value]
    return df.reset_index(drop=True)


#: the JSON shape of each key the loaders read: an object of records, an object, a string; others are arrays of records
_SHAPES = {"arms": "records", "paths": "records", "profiles": "records", "summary": dict, "provenance": dict,
           "chunks_csv": str}


def need_key(obj: dict, key: str, rel: str):
    """``obj[key]`` in the shape the loaders expect (:data:`_SHAPES`); KeyError / ValueError naming the file and key."""
    path = data_dir() / rel
    if key not in obj:
        raise KeyError(f"{path}: no {key!r} key (keys: {sorted(obj)})")
    v, shape = obj[key], _SHAPES.get(key, list)
    outer = dict if shape == "records" else shape
    if not isinstance(v, outer):
        raise ValueError(f"{path}: {key!r} must be a JSON {_JSON_NAMES[outer]}, got {_json_name(v)}")
    if shape in ("records", list):
        items = v.items() if shape == "records" else enumerate(v)
        bad = next(((k, r) for k, r in items if not isinstance(r, dict)), None)
        if bad is not None:
            raise ValueError(f"{path}: {key!r}[{bad[0]!r}] must be a record (a JSON object), got {_json_name(bad[1])}")
    return v
