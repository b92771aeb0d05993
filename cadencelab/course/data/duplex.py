"""The duplex second: the paper's figures and the measured seconds, device conditions, the live tour."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .files import (
    DATASETS,
    data_dir,
    data_path,
    dataset_of,
    dataset_path,
    load_json,
    need_key,
    pick_rows,
    read_csv,
    recording_how,
    result_of,
)

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
    df = read_csv(p)
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
    df = read_csv(p, dtype={"note": str}).fillna({"note": ""})
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
    obj = load_json(rel, recording_how("device_conditions"))
    df = pd.DataFrame(need_key(obj, "conditions", rel))
    df.attrs["summary"] = dict(need_key(obj, "summary", rel))
    return df


def _duplex(condition: str) -> tuple[dict, str]:
    rel, how = dataset_of("duplex_second", condition)
    return load_json(rel, how), rel


def duplex_profiles(condition: str = "exact") -> tuple[dict, str]:
    """The duplex second's profiled seconds, one record per arm (its ``stages``: kernels, launches, busy and
    wall time per range), and the file they come from (relative to the data folder)."""
    obj, rel = _duplex(condition)
    return need_key(obj, "profiles", rel), rel


def duplex_second(condition: str = "exact", arm: str | None = None) -> pd.DataFrame:
    """The measured duplex second: the median stage rows per arm (waterfall-ready).

    Columns: stage, start_ms, dur_ms (medians over the timed seconds), source ("measured"), arm,
    parent ("" for backbone / speech_decoder / synthesis; "synthesis" for flow / vocoder), n.
    From ``data/h200/duplex_second.json`` (pinned) or ``duplex_second_unpinned.json``.
    """
    obj, rel = _duplex(condition)
    return pick_rows(pd.DataFrame(need_key(obj, "medians", rel)), "arm", arm, rel)


def duplex_summary(condition: str = "exact") -> pd.DataFrame:
    """One row per arm of the measured duplex second: stage medians (ms), over_cadence, and per stage
    the kernel launches and idle share of the profiled second (``<stage>_launches``, ``<stage>_slack_frac``)."""
    obj, rel = _duplex(condition)
    return pd.DataFrame.from_dict(need_key(obj, "summary", rel), orient="index").rename_axis("arm")


def duplex_served_summary() -> pd.DataFrame:
    """The duplex second with the language models also served (``--decode eager,graph``,
    ``h200/duplex_second_served.json``): one row per run label ("B0", "B0+graphLM", ...), with
    ``token2wav_arm``, ``decode``, ``lm_exact``, stage medians, PCM equality within the decode mode and,
    for the served runs, ``lm_tokens_equal_seconds`` / ``lm_token_agreement`` against the eager run."""
    obj, rel, _ = result_of("duplex_served")
    return pd.DataFrame.from_dict(need_key(obj, "summary", rel), orient="index").rename_axis("arm")


def tour_live(name: str = "tour_live") -> pd.DataFrame:
    """The course run on a GPU (``cadencelab tour``): ``tour_live`` end to end (``h200/tour/``), ``tour_graded``
    the GPU-graded notebooks (``h100/tour_graded/``). One row per notebook with ``title``, ``seconds``, ``ok``,
    ``figures``, ``check`` (its check cell's lines), ``error`` and, where recorded, ``gradebook``; the tour's
    parameters and provenance (tour.json) in ``attrs``."""
    rows, rel, how = result_of(name, object)  # checked here, with what a tour summary is
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
    return recording_how(name) or f"{name} holds the paper's published figures: nothing to record"


def duplex_seconds(condition: str = "exact", served: bool = False) -> pd.DataFrame:
    """Every recorded stage row of every second (warm-up seconds flagged ``warmup``); ``served``: those of
    the recording with the language models also served (``h200/duplex_second_served.json``, the exact
    condition), whose ``arm`` column is the run label ("B0", "SRc+graphLM", ...)."""
    obj, rel = result_of("duplex_served")[:2] if served else _duplex(condition)
    return pd.DataFrame(need_key(obj, "rows", rel))
