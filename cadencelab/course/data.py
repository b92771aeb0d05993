"""Recorded data, as DataFrames: the H200 studies, the paper's published figures, recorded traces.

The notebooks read everything through here, never through paths of their own. Files live in the
repository's ``data/`` folder (``data/h200/``: what the benches recorded on an H200;
``data/paper/``: figures as published), or in the folder named by ``$CADENCELAB_DATA``.

    factorial(condition)          one row per Token2wav arm (latency, peak memory, deltas, exactness)
    factorial_blocks(condition)   one row per (arm, block)
    factorial_chunks(condition)   one row per streamed chunk
    factorial_summary(condition)  the study's headline ratios (dict)
    pareto_frame(condition)       the columns cadencelab.viz.pareto expects
    device_conditions()           what each kernel-selection pin costs B0 and buys in exactness
    provenance(name)              where a recorded file came from (commit, GPU, torch, CUDA, date, ...)
    paper_duplex_second(block)    the paper's duplex-second breakdown (data/paper/duplex_second.csv)
    paper_figures(keys)           the paper's other headline figures, as published (data/paper/figures.csv)
    duplex_second(condition)      the measured duplex second (data/h200/duplex_second*.json)
    duplex_summary(condition)     its per-arm headline: stage medians, launches and idle share per stage
    duplex_served_summary()       the same second with the language models also served (static cache +
                                  graph decode, a non-exact control) beside eager
    tour_live()                   the course run live on the H200: one row per notebook (seconds, check line)
    is_recorded(name) / how_to_record(name)
                                  whether a dataset's file is here; the command that records it
    recorded_trace(arm, kind)     a recorded Chrome trace as a cadencelab.profile.Trace
    soak_summary() / soak_chunks() / soak_turns()
                                  the 1,800-chunk SRc soak against B0 (data/h200/soak.json + soak_chunks.csv.gz)
    sessions_summary() / sessions_capacity(workload) / sessions_table() / sessions_per_session()
                                  N Token2wav sessions on one GPU, B0 vs SRc (and the experimental
                                  batched arm SRb) (data/h200/sessions.json)
    mimi_summary() / mimi_arms()  Moshi's Mimi: eager vs the vendor's CUDA graphs vs generic replay
    freeze_summary() / freeze_paths()
                                  the Freeze-Omni-style decoder: overlap recompute vs carry (vs replay)

``condition`` names the recorded set-up: "exact" (the default: every arm under the exact device
condition, :data:`cadencelab.replay.determinism.EXACT`, the least pinning under which every arm is
bit-exact across processes; data/h200/device_conditions.json), or one of the older recordings kept
because the course compares them: "pinned" (cuDNN deterministic, TF32 off and a fixed cuBLAS
workspace, which slowed the stock runtime) and "unpinned" (TF32 off only, where float32 PCM drifts
across processes). :func:`recorded_condition` reads the device condition a file was measured under.
A missing file raises FileNotFoundError naming the path and the command that records it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..profile.outputs import DATA_ENV
from ..replay.determinism import EXACT
from .studies import DEVICE_TASKS, RECORDINGS

__all__ = [
    "DATA_ENV", "CONDITIONS", "DEVICE_CONDITIONS", "PARETO_COLUMNS", "check_condition", "recorded_condition", "data_dir", "dataset_path", "data_path", "load_json",
    "factorial", "factorial_blocks", "factorial_chunks", "factorial_summary", "factorial_result",
    "pareto_frame", "provenance", "paper_duplex_second", "duplex_second", "duplex_seconds", "duplex_summary",
    "recorded_trace",
    "soak_result", "soak_summary", "soak_chunks", "soak_turns",
    "sessions_summary", "sessions_capacity", "sessions_table", "sessions_per_session",
    "mimi_summary", "mimi_arms", "freeze_summary", "freeze_paths", "device_conditions", "paper_figures",
    "duplex_served_summary", "tour_live", "is_recorded", "how_to_record", "result", "duplex_profiles",
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
_PAPER_SOURCE = ("DuplexCadence (arXiv:2609.35115v1), figures as published (sections and tables named per row); "
                 "see data/paper/README.md")
#: the paper's datasets (published figures, nothing measured here)
PAPER_DATASETS = ("paper_duplex_second", "paper_figures")


# ---------------------------------------------------------------------------------------
# finding files
# ---------------------------------------------------------------------------------------


def _candidates() -> list[Path]:
    package = Path(__file__).resolve().parents[1]  # cadencelab/
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


def _beside(rel: str, key: str, name, how: str | None = None, gz: bool = False) -> Path:
    """The file a recorded JSON names under ``key`` (a file name only, no folders), beside that JSON;
    ``gz``: its gzipped copy (the recording step gzips CSVs beside the JSON)."""
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise ValueError(f"{data_dir() / rel}: {key!r} must be a file name beside it (no folder, no '..'), "
                         f"got {name!r:.80}")
    return data_path(Path(rel).parent / (f"{name}.gz" if gz and not name.endswith(".gz") else name), how)


def _read_csv(path: Path, **kw) -> pd.DataFrame:
    """A recorded CSV (gzip when its name ends .gz); any unreadable content is a ValueError naming the file."""
    try:
        return pd.read_csv(path, **kw)
    except (OSError, EOFError, UnicodeDecodeError, ValueError) as e:  # BadGzipFile, ParserError, EmptyDataError
        raise ValueError(f"{path}: not a readable CSV{' (gzip)' if path.suffix == '.gz' else ''}: "
                         f"{type(e).__name__}: {' '.join(str(e).split())[:160]}") from None


def check_condition(condition: str) -> str:
    """``condition`` when it is one of :data:`CONDITIONS`; ValueError naming what was given otherwise."""
    if condition not in CONDITIONS:
        raise ValueError(f"condition must be one of {CONDITIONS}, got {condition!r}")
    return condition


def _how(name: str) -> str | None:
    """How to record dataset ``name`` (None for the paper's published figures)."""
    rel, cmd, flag = DATASETS[name]
    return cmd.format(flag=flag, path=f"data/{rel}") if cmd else None


def _dataset(kind: str, condition: str = "exact") -> tuple[str, str | None]:
    name = kind if check_condition(condition) == "exact" else f"{kind}_{condition}"
    return DATASETS[name][0], _how(name)


def result(name: str) -> dict:
    """A recorded dataset's whole JSON (a key of :data:`DATASETS`, e.g. ``"headline"``); a missing file's
    error names the command that records it."""
    if name not in DATASETS:
        raise KeyError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    return load_json(DATASETS[name][0], _how(name))


def _result(kind: str, top: type = dict) -> tuple[dict, str, str | None]:
    """A recorded dataset's JSON, its path under data/ and how to record it (the exact condition)."""
    rel, how = _dataset(kind)
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
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to read") from None
    except ValueError as e:  # JSONDecodeError, or a number too long to convert
        raise ValueError(f"{path}: not valid JSON ({' '.join(str(e).split())[:160]})") from None


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


def _pick(df: pd.DataFrame, column: str, value, rel: str) -> pd.DataFrame:
    """Rows of ``df`` whose ``column`` is ``value`` (all rows for None); an absent value names the ones there are."""
    if value is not None:
        if value not in set(df[column]):
            raise ValueError(f"{rel}: no {column} {value!r} ({column}s: {sorted(set(df[column]))})")
        df = df[df[column] == value]
    return df.reset_index(drop=True)


#: the JSON shape of each key the loaders read: an object of records, an object, a string; others are arrays of records
_SHAPES = {"arms": "records", "paths": "records", "profiles": "records", "summary": dict, "provenance": dict,
           "chunks_csv": str}


def _need(obj: dict, key: str, rel: str):
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


# ---------------------------------------------------------------------------------------
# the Token2wav factorial (data/h200/token2wav_factorial*.json)
# ---------------------------------------------------------------------------------------


def factorial_result(condition: str = "exact") -> dict:
    """The whole recorded factorial result (summary, arms, blocks, chunks, profiles, provenance)."""
    rel, how = _dataset("factorial", condition)
    return load_json(rel, how)


def factorial(condition: str = "exact") -> pd.DataFrame:
    """One row per arm: steady_latency_ms_median / _p95, peak_MiB_median, latency_delta(_lo/_hi),
    peak_delta(_lo/_hi), exact, exact_blocks, blocks, and where profiled busy_ms_median,
    wall_over_busy, slack_frac_median, launches per chunk; replay summaries as dicts. Arms that
    failed keep a row with their ``failed`` message and NaN numbers. Adds ``condition``.
    """
    rel, _ = _dataset("factorial", condition)
    arms = _need(factorial_result(condition), "arms", rel)
    df = pd.DataFrame([dict(v, arm=v.get("arm", k)) for k, v in arms.items()])
    first = ["arm", "steady_latency_ms_median", "peak_MiB_median", "exact", "exact_blocks", "blocks"]
    df = df[[c for c in first if c in df.columns] + [c for c in df.columns if c not in first]]
    df["condition"] = condition
    return df


def factorial_blocks(condition: str = "exact") -> pd.DataFrame:
    """One row per (arm, block): warmup, peak_bytes, latency medians, hashes, exact_* flags."""
    rel, _ = _dataset("factorial", condition)
    df = pd.DataFrame(_need(factorial_result(condition), "blocks", rel))
    if "peak_bytes" in df.columns:
        df["peak_MiB"] = df["peak_bytes"] / 2**20
    df["condition"] = condition
    return df


def factorial_chunks(condition: str = "exact") -> pd.DataFrame:
    """One row per streamed chunk: arm, block, turn, chunk, kind (first/steady/flush), latency_ms, ..."""
    rel, _ = _dataset("factorial", condition)
    df = pd.DataFrame(_need(factorial_result(condition), "chunks", rel))
    df["condition"] = condition
    return df


def factorial_summary(condition: str = "exact") -> dict:
    """The headline ratios: speedup_SRc_vs_B0, peak_reduction_SRc_vs_B0, exact blocks, ..."""
    rel, _ = _dataset("factorial", condition)
    return dict(_need(factorial_result(condition), "summary", rel))


def pareto_frame(condition: str = "exact", arms: list[str] | None = None) -> pd.DataFrame:
    """The factorial's arms in the columns :func:`cadencelab.viz.pareto` expects.

    lat_ms = latency_ms (the mean over fresh processes; older files: steady_latency_ms_median),
    peak_MiB = peak_MiB_median, exact = bit-exact in every block. The error bars (lat_lo/lat_hi,
    peak_lo/peak_hi) are the 95% intervals (hierarchical over processes and blocks; older files: paired
    over the blocks of one process per arm) of each arm's ratio to B0 (``latency_delta_lo/hi``, ``peak_delta_lo/hi``), carried to the arm's
    own median: ``lat_lo = lat_ms * (1 + latency_delta_lo) / (1 + latency_delta)``. B0, the
    reference, therefore has zero-width bars. Failed arms are left out.
    """
    df = factorial(condition)
    if "failed" in df.columns:
        df = df[df["failed"].isna()]
    if arms is not None:
        missing = sorted(set(arms) - set(df["arm"]))
        if missing:
            raise ValueError(f"pareto_frame: arms {missing} not in the recorded factorial ({sorted(df['arm'])})")
        df = df.set_index("arm").loc[list(arms)].reset_index()
    lat = df["latency_ms"] if "latency_ms" in df else df["steady_latency_ms_median"]  # older files: chunk medians
    out = pd.DataFrame({"arm": df["arm"].astype(str), "lat_ms": lat.astype(float),
                        "peak_MiB": df["peak_MiB_median"].astype(float)})
    for value, delta, lo, hi in (("lat_ms", "latency_delta", "lat_lo", "lat_hi"),
                                 ("peak_MiB", "peak_delta", "peak_lo", "peak_hi")):
        d = df.get(delta, pd.Series(np.nan, index=df.index)).astype(float).fillna(0.0)
        for col, src in ((lo, f"{delta}_lo"), (hi, f"{delta}_hi")):
            b = df.get(src, pd.Series(np.nan, index=df.index)).astype(float)
            out[col] = (out[value] * (1 + b.fillna(d)) / (1 + d)).to_numpy()
        out[lo] = np.minimum(out[lo], out[value])  # a percentile interval can miss its point by rounding
        out[hi] = np.maximum(out[hi], out[value])
    out["exact"] = df["exact"].fillna(False).astype(bool).to_numpy()
    out["condition"] = condition
    return out[PARETO_COLUMNS + ["condition"]].reset_index(drop=True)


# ---------------------------------------------------------------------------------------
# provenance
# ---------------------------------------------------------------------------------------


def provenance(name: str = "factorial") -> dict:
    """Where a recorded file came from.

    ``name``: a dataset (a key of :data:`DATASETS`: "factorial", "factorial_pinned", "duplex_second",
    "device_conditions", "paper_duplex_second", ...) or a JSON path relative to the data folder.
    Recorded studies give their ``provenance`` block (git commit, GPU, torch, CUDA, date, study
    config); the paper data gives its citation.
    """
    if name in PAPER_DATASETS:
        file = data_path(DATASETS[name][0])
        return dict(source=_PAPER_SOURCE, file=str(file), readme=str(data_path("paper/README.md")))
    rel, how = (DATASETS[name][0], _how(name)) if name in DATASETS else (name, None)
    obj = load_json(rel, how)
    return dict(_need(obj, "provenance", rel))


# ---------------------------------------------------------------------------------------
# the duplex second: paper and measured
# ---------------------------------------------------------------------------------------

_PAPER_BLOCKS = ("anatomy", "live_synthesis", "live_speak")


def paper_duplex_second(block: str | list[str] | None = None) -> pd.DataFrame:
    """The paper's published duplex-second figures (stage, start_ms, dur_ms, source="paper", arm, block,
    where, note).

    block: "anatomy" (§2.2.1: earlier_stages 842 ms then synthesis 327 ms, stock), "live_synthesis"
    (table 5: synthesis 201.7 -> 72.2 ms; start_ms is NaN, the paper does not place it),
    "live_speak" (table 5: mean SPEAK 1,141 -> 976 ms, totals from 0), a list of these, or None (all).
    """
    rel = DATASETS["paper_duplex_second"][0]
    p = data_path(rel)
    df = _read_csv(p)
    need = ["stage", "start_ms", "dur_ms", "source", "arm", "block"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ValueError(f"{p}: missing columns {missing}")
    if block is not None:
        blocks = [block] if isinstance(block, str) else list(block)
        unknown = sorted(set(blocks) - set(_PAPER_BLOCKS))
        if unknown:
            raise ValueError(f"paper_duplex_second: unknown block {unknown}; blocks: {list(_PAPER_BLOCKS)}")
        df = df[df["block"].isin(blocks)]
    return df.reset_index(drop=True)


_PAPER_FIGURE_COLUMNS = ["key", "value", "value_hi", "unit", "figure", "setting", "where", "note"]
_PAPER_UNITS = ("x", "fraction")  # what course.paper.format_figure prints


def paper_figures(keys: str | list[str] | None = None) -> pd.DataFrame:
    """The paper's headline figures other than the duplex second, as published (data/paper/figures.csv):
    one row per figure, indexed by ``key`` (t2w_speedup, t2w_peak_reduction, mimi_recovered_share, ...),
    with ``value`` (a ratio "x" or a "fraction": 0.388 is 38.8%), ``value_hi`` (the upper end where the
    paper gives a range, else NaN), ``figure`` (what it measures),
    ``setting`` (the paper's set-up), ``where`` (section / table) and ``note``.

    ``keys``: one key, a list, or None (all). An unknown key, a missing column, a duplicate key or an
    unknown unit raises ValueError naming it."""
    rel = DATASETS["paper_figures"][0]
    p = data_path(rel)
    df = _read_csv(p, dtype={"note": str}).fillna({"note": ""})
    missing = [c for c in _PAPER_FIGURE_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{p}: missing columns {missing}")
    dup = sorted(df.loc[df["key"].duplicated(), "key"])
    if dup:
        raise ValueError(f"{p}: duplicate keys {dup}")
    bad = sorted(set(df["unit"]) - set(_PAPER_UNITS))
    if bad:
        raise ValueError(f"{p}: unknown unit {bad}; units: {list(_PAPER_UNITS)}")
    for col, required in (("value", True), ("value_hi", False)):
        num = pd.to_numeric(df[col], errors="coerce")
        wrong = df.loc[num.isna() & (df[col].notna() | required), "key"].tolist()
        if wrong:
            raise ValueError(f"{p}: column {col!r} is not a number for {wrong}")
        df[col] = num
    df = df.set_index("key")
    if keys is not None:
        want = [keys] if isinstance(keys, str) else list(keys)
        unknown = [k for k in want if k not in df.index]
        if unknown:
            raise ValueError(f"paper_figures: unknown key {unknown}; keys: {list(df.index)}")
        df = df.loc[want]
    return df


def device_conditions() -> pd.DataFrame:
    """The device-conditions study (data/h200/device_conditions.json): one row per candidate condition
    with its knobs (``pins``, ``tf32``, ``cudnn_deterministic``, ``cublas_workspace``), B0's steady
    median (``B0_ms``) and its cost against the fastest B0 of the run, each arm's exact blocks against
    the condition's own B0, and ``exact``. ``attrs["summary"]`` holds the study's choice."""
    rel = DATASETS["device_conditions"][0]
    obj = load_json(rel, _how("device_conditions"))
    df = pd.DataFrame(_need(obj, "conditions", rel))
    df.attrs["summary"] = dict(_need(obj, "summary", rel))
    return df


def _duplex(condition: str) -> tuple[dict, str]:
    rel, how = _dataset("duplex_second", condition)
    return load_json(rel, how), rel


def duplex_profiles(condition: str = "exact") -> tuple[dict, str]:
    """The duplex second's profiled seconds, one record per arm (its ``stages``: kernels, launches, busy and
    wall time per range), and the file they come from (relative to the data folder)."""
    obj, rel = _duplex(condition)
    return _need(obj, "profiles", rel), rel


def duplex_second(condition: str = "exact", arm: str | None = None) -> pd.DataFrame:
    """The measured duplex second: the median stage rows per arm (waterfall-ready).

    Columns: stage, start_ms, dur_ms (medians over the timed seconds), source ("measured"), arm,
    parent ("" for backbone / speech_decoder / synthesis; "synthesis" for flow / vocoder), n.
    From ``data/h200/duplex_second.json`` (pinned) or ``duplex_second_unpinned.json``.
    """
    obj, rel = _duplex(condition)
    return _pick(pd.DataFrame(_need(obj, "medians", rel)), "arm", arm, rel)


def duplex_summary(condition: str = "exact") -> pd.DataFrame:
    """One row per arm of the measured duplex second: stage medians (ms), over_cadence, and per stage
    the kernel launches and idle share of the profiled second (``<stage>_launches``, ``<stage>_slack_frac``)."""
    obj, rel = _duplex(condition)
    return pd.DataFrame.from_dict(_need(obj, "summary", rel), orient="index").rename_axis("arm")


def duplex_served_summary() -> pd.DataFrame:
    """The duplex second with the language models also served (``--decode eager,graph``,
    ``h200/duplex_second_served.json``): one row per run label ("B0", "B0+graphLM", ...), with
    ``token2wav_arm``, ``decode``, ``lm_exact``, stage medians, PCM equality within the decode mode and,
    for the served runs, ``lm_tokens_equal_seconds`` / ``lm_token_agreement`` against the eager run."""
    obj, rel, _ = _result("duplex_served")
    return pd.DataFrame.from_dict(_need(obj, "summary", rel), orient="index").rename_axis("arm")


def tour_live() -> pd.DataFrame:
    """The course run end to end on a GPU (``cadencelab tour``, ``h200/tour/``): one row per notebook with
    ``title``, ``seconds``, ``ok``, ``figures``, ``check`` (its check cell's line) and ``error``; the tour's
    parameters and provenance (tour.json) in ``attrs``."""
    rows, rel, how = _result("tour_live", object)  # checked here, with what a tour summary is
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "notebook" in r for r in rows):
        raise ValueError(f"{data_dir() / rel}: not a tour summary (a list of per-notebook records with 'notebook')")
    record = load_json(Path(rel).parent / "tour.json", how)
    df = pd.DataFrame(rows).set_index("notebook")
    df.attrs.update(provenance=record.get("provenance", {}), parameters=record.get("parameters", {}))
    return df


def is_recorded(name: str) -> bool:
    """Whether dataset ``name`` (a key of :data:`DATASETS`) has its file in the data folder."""
    return dataset_path(name).exists()


def how_to_record(name: str) -> str:
    """The command that records dataset ``name`` and what to do with its output (KeyError for an unknown
    name; the paper's datasets say they are published figures)."""
    if name not in DATASETS:
        raise KeyError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    return _how(name) or f"{name} holds the paper's published figures: nothing to record"


def duplex_seconds(condition: str = "exact", served: bool = False) -> pd.DataFrame:
    """Every recorded stage row of every second (warm-up seconds flagged ``warmup``); ``served``: those of
    the recording with the language models also served (``h200/duplex_second_served.json``, the exact
    condition), whose ``arm`` column is the run label ("B0", "SRc+graphLM", ...)."""
    obj, rel = _result("duplex_served")[:2] if served else _duplex(condition)
    return pd.DataFrame(_need(obj, "rows", rel))


# ---------------------------------------------------------------------------------------
# recorded traces
# ---------------------------------------------------------------------------------------

_TRACE_FILES = {
    "chunk": ("h200/trace_{arm}_chunk.json.gz",
              "python -m cadencelab.bench token2wav --device cuda --arms B0,SRc --out DIR (it keeps "
              "DIR/trace_<arm>.json.gz); trim it to one steady chunk "
              "(cadencelab.profile.trim.write_trimmed_trace(load_trace(...), PATH, window='chunk', occurrence=1)) "
              "and save it as {path}"),
    "lanes": ("h200/trace_{arm}_lanes.json.gz",
              "python -m cadencelab.bench sessions --device cuda --arms SRl,SRc,SRb,B0 --out DIR (the SRl arm writes "
              "DIR/trace_SRl_lanes.json.gz: one steady round of two lanes at once); copy it to {path}"),
    "duplex": ("h200/trace_duplex_{arm}.json.gz",
               "python -m cadencelab.bench duplex --device cuda --preset h200 --arms B0,SRc --out DIR "
               "(it writes DIR/trace_duplex_<arm>.json.gz, already trimmed to one second); copy it to {path}"),
}


def recorded_trace(arm: str = "B0", kind: str = "chunk"):
    """A recorded, trimmed Chrome trace as a :class:`cadencelab.profile.Trace`.

    kind "chunk": one steady Token2wav chunk (``data/h200/trace_<arm>_chunk.json.gz``);
    kind "duplex": one duplex second (``data/h200/trace_duplex_<arm>.json.gz``);
    kind "lanes": one steady round of two lanes replaying at once (arm "SRl", ``data/h200/trace_SRl_lanes.json.gz``).
    """
    if kind not in _TRACE_FILES:
        raise ValueError(f"recorded_trace: kind must be one of {sorted(_TRACE_FILES)}, got {kind!r}")
    pattern, how = _TRACE_FILES[kind]
    rel = pattern.format(arm=arm)
    path = data_path(rel, how.format(path=f"data/{rel}"))
    t = _load_trace_cached(str(path), path.stat().st_mtime_ns)
    # a copy per call: the parse is shared, the frames a caller may change are its own
    return dataclasses.replace(t, kernels=t.kernels.copy(), cpu_ops=t.cpu_ops.copy(), launches=t.launches.copy(),
                               ranges=t.ranges.copy(), meta=dict(t.meta))


@functools.lru_cache(maxsize=8)
def _load_trace_cached(path: str, mtime_ns: int):
    from ..profile.trace import load_trace

    return load_trace(path)


# ---------------------------------------------------------------------------------------
# the soak (data/h200/soak.json + soak_chunks.csv.gz)
# ---------------------------------------------------------------------------------------


def soak_result() -> dict:
    """The whole recorded soak result (summary, config, turns, arms, failures, provenance)."""
    return _result("soak")[0]


def soak_summary() -> dict:
    """The soak's gates and headline numbers: chunks, exact_chunks, peak_growth_bytes_after_warmup,
    fallbacks_after_warmup, declared eager cases, latency medians (with ``latency_comparable``)."""
    obj, rel, _ = _result("soak")
    return dict(_need(obj, "summary", rel))


def soak_turns() -> pd.DataFrame:
    """One row per turn of the soak: start chunk, calls, flush tokens, seed, exact chunks, fallbacks, peak."""
    obj, rel, _ = _result("soak")
    return pd.DataFrame(_need(obj, "turns", rel))


def soak_chunks() -> pd.DataFrame:
    """One row per soak chunk, arm and B0 side by side: turn, call, kind (first / steady / flush), frames,
    warmup, exact_i16 / exact_f32, both SHA-256, latency_ms / latency_ms_ref, allocator bytes
    (allocated, peak, reserved), replays, fallbacks, declared_eager."""
    obj, rel, how = _result("soak")
    name = _need(obj, "chunks_csv", rel)  # the name the study wrote; recording gzips it beside the JSON
    p = _beside(rel, "chunks_csv", name, how, gz=True)
    df = _read_csv(p)
    missing = [c for c in ("chunk", "turn", "kind", "warmup", "exact_i16", "latency_ms", "peak_bytes")
               if c not in df.columns]
    if missing:
        raise ValueError(f"{p}: missing columns {missing}")
    return df


# ---------------------------------------------------------------------------------------
# multi-session capacity (data/h200/sessions.json + sessions.csv.gz)
# ---------------------------------------------------------------------------------------


def sessions_summary(dataset: str = "sessions") -> dict:
    """The capacity study's headline: max_sessions_at_cadence_<arm> per workload (with
    ``capacity_bound``: "exact" or "lower_bound"), their ratio, peak bytes per added session against
    the declared state bytes, exactness counts, swap cost. Other ``dataset``s:
    ``"sessions_srb_mixed"`` (the experimental SRb arm alone in the mixed workload, past N = 64),
    ``"sessions_staggered"`` (every arm with arrivals spread over each second) and
    ``"sessions_srb_staggered"`` (SRb alone, staggered, past the budget of the previous one)."""
    obj, rel, _ = _result(dataset)
    return dict(_need(obj, "summary", rel))


def sessions_capacity(workload: str | None = None, dataset: str = "sessions") -> pd.DataFrame:
    """One row per (arm, workload, N): sessions_holding, all_hold, p95_chunk_ms, goodput, peak_MiB,
    oom, skipped, exact_chunks/checked_chunks, swaps. ``workload`` filters ("mixed", "speak_heavy")."""
    obj, rel, _ = _result(dataset)
    return _pick(pd.DataFrame(_need(obj, "capacity", rel)), "workload", workload, rel)


def sessions_table(dataset: str = "sessions") -> pd.DataFrame:
    """One row per arm: sessions holding the cadence per workload ("(lower bound)" where the sweep
    ended without a break), peak and declared MiB per added session, the exactness reference its
    chunks were gated on, and how many chunks equal the session run alone through B0.
    ``dataset``: as in :func:`sessions_summary`."""
    s = sessions_summary(dataset)
    rows = []
    for arm, per in ((k[len("max_sessions_at_cadence_"):], v) for k, v in s.items()
                     if k.startswith("max_sessions_at_cadence_")):
        bound = s.get("capacity_bound", {}).get(arm, {})
        row = {"arm": arm + (" (experimental)" if arm in s.get("experimental_arms", []) else "")}
        for w, n in per.items():
            row[f"max sessions ({w})"] = f"{n}" + (" (lower bound)" if bound.get(w) == "lower_bound" else "")
        peak = s.get("peak_bytes_per_added_session", {}).get(arm)
        declared = s.get("declared_state_bytes_per_session", {}).get(arm)
        same = s.get("identical_to_solo_B0", {}).get(arm, {})
        row.update({"peak MiB per added session": round(peak / 2**20) if peak else None,
                    "declared state MiB per session": round(declared / 2**20) if declared else None,
                    "gated on": ", ".join(s.get("exactness_reference", {}).get(arm, ["solo_B0"])),
                    "identical to solo B0 (mel and PCM)": (f"{same['mel_and_pcm']} / {same['compared']}"
                                                           if same else None)})
        rows.append(row)
    return pd.DataFrame(rows).set_index("arm")


def sessions_per_session() -> pd.DataFrame:
    """One row per (arm, workload, N, session): chunks, p50/p95/max chunk ms, holds_cadence, exactness."""
    _, rel, how = _result("sessions")
    return _read_csv(data_path(Path(rel).parent / "sessions.csv.gz", how))


# ---------------------------------------------------------------------------------------
# cross-architecture (data/h200/moshi_mimi.json, freeze_style.json)
# ---------------------------------------------------------------------------------------


def mimi_summary() -> dict:
    """Mimi: speedup of the vendor's CUDA graphs and of generic replay vs eager, vendor_speedup_recovered,
    peaks, exact_blocks / total_blocks."""
    obj, rel, _ = _result("mimi")
    return dict(_need(obj, "summary", rel))


def mimi_arms() -> pd.DataFrame:
    """One row per Mimi arm (eager, vendor_graph, replay): per-frame latency, speedup, peak, exactness."""
    obj, rel, _ = _result("mimi")
    keep = ["arm", "latency_ms_median", "latency_ms_p95", "encode_ms_median", "decode_ms_median", "speedup_vs_eager",
            "peak_MiB_median", "exact_blocks", "blocks", "vendor_graphs_captured", "replays_per_block",
            "invalidations", "rebinding"]
    rows = [{k: a.get(k) for k in keep} for a in _need(obj, "arms", rel).values()]
    return pd.DataFrame(rows)


def freeze_summary() -> dict:
    """The Freeze-Omni-style decoder: speedups, peaks, state bytes, exact blocks, the overlap control's max|d|."""
    obj, rel, _ = _result("freeze")
    return dict(_need(obj, "summary", rel))


def freeze_paths() -> pd.DataFrame:
    """One row per streaming path (overlap_recompute, carry, carry_replay, full_history): steady latency,
    peak, state bytes, exactness against the full-history reference, role."""
    obj, rel, _ = _result("freeze")
    return pd.DataFrame(list(_need(obj, "paths", rel).values()))
