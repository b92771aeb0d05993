"""Recorded data, as DataFrames: the studies on the lent GPUs, the paper's published figures, recorded traces.

The notebooks read everything through here, never through paths of their own. Files live in the repository's
``data/`` folder (``h200/``, ``h100/``: what the benches recorded; ``paper/``: figures as published), or in the
folder named by ``$CADENCELAB_DATA``. The readers, by study:

    Token2wav factorial    factorial(condition), factorial_blocks, factorial_chunks, factorial_summary, pareto_frame
    set-up and origin      device_conditions(), recorded_condition(name), provenance(name)
    the paper's figures    paper_duplex_second(block), paper_figures(keys)
    duplex second          duplex_second(condition), duplex_summary(condition), duplex_served_summary()
    soak (SRc against B0)  soak_summary(), soak_chunks(), soak_turns()
    sessions on one GPU    sessions_summary(), sessions_capacity(), sessions_table(), sessions_per_session(),
                           sessions_chunks(), lanes_limiter(), lanes_limiter_chunks()
    cross-architecture     mimi_summary(), mimi_arms(), freeze_summary(), freeze_paths()
    the rest               tour_live(), recorded_trace(arm, kind), is_recorded(name), how_to_record(name), result(name)

``condition`` names the recorded set-up: "exact" (the default: :data:`cadencelab.replay.determinism.EXACT`, the
least pinning under which every arm is bit-exact across processes), or an older recording the course compares:
"pinned" (TF32 off, cuDNN deterministic, a fixed cuBLAS workspace) or "unpinned" (TF32 off only: float32 PCM
drifts across processes). A missing file raises FileNotFoundError naming its path and the command recording it.
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
from .sessions import (lanes_limiter, lanes_limiter_chunks, sessions_capacity, sessions_chunks,
                       sessions_per_session, sessions_summary, sessions_table)
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
                    "lanes_limiter",
                    "lanes_limiter_chunks",
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
                    "sessions_chunks",
                    "sessions_per_session",
                    "sessions_summary",
                    "sessions_table",
                    "soak_chunks",
                    "soak_result",
                    "soak_summary",
                    "soak_turns",
                    "tour_live",
]
