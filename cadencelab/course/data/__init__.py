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

from .crossarch import freeze_paths, freeze_summary, mimi_arms, mimi_summary
from .duplex import (
                    device_conditions,
                    duplex_profiles,
                    duplex_second,
                    duplex_seconds,
                    duplex_served_summary,
                    duplex_summary,
                    how_to_record,
                    is_recorded,
                    paper_duplex_second,
                    paper_figures,
                    tour_live,
)
from .factorial import (
                    factorial,
                    factorial_blocks,
                    factorial_chunks,
                    factorial_result,
                    factorial_summary,
                    pareto_frame,
                    provenance,
)
from .files import (
                    CONDITIONS,
                    DATA_ENV,
                    DATASETS,
                    DEVICE_CONDITIONS,
                    PAPER_DATASETS,
                    PARETO_COLUMNS,
                    check_condition,
                    data_dir,
                    data_path,
                    dataset_path,
                    load_json,
                    recorded_condition,
                    recording_how,
                    result,
)
from .sessions import sessions_capacity, sessions_per_session, sessions_summary, sessions_table
from .soak import soak_chunks, soak_result, soak_summary, soak_turns
from .traces import recorded_trace

__all__ = [
                    "CONDITIONS",
                    "DATASETS",
                    "DATA_ENV",
                    "DEVICE_CONDITIONS",
                    "PAPER_DATASETS",
                    "PARETO_COLUMNS",
                    "check_condition",
                    "data_dir",
                    "data_path",
                    "dataset_path",
                    "device_conditions",
                    "duplex_profiles",
                    "duplex_second",
                    "duplex_seconds",
                    "duplex_served_summary",
                    "duplex_summary",
                    "factorial",
                    "factorial_blocks",
                    "factorial_chunks",
                    "factorial_result",
                    "factorial_summary",
                    "freeze_paths",
                    "freeze_summary",
                    "how_to_record",
                    "is_recorded",
                    "load_json",
                    "mimi_arms",
                    "mimi_summary",
                    "paper_duplex_second",
                    "paper_figures",
                    "pareto_frame",
                    "provenance",
                    "recorded_condition",
                    "recorded_trace",
                    "recording_how",
                    "result",
                    "sessions_capacity",
                    "sessions_per_session",
                    "sessions_summary",
                    "sessions_table",
                    "soak_chunks",
                    "soak_result",
                    "soak_summary",
                    "soak_turns",
                    "tour_live",
]
