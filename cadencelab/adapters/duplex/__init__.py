"""The duplex second as an adapter: declared stand-in language models feeding the Token2wav runtime.

    models    the declaration (DecoderShape, DuplexConfig, presets H200 / TINY) and the seeded models
    harness   DuplexSecond: one session of seconds under one Token2wav arm, timed stage by stage
Profiling a second is the profile layer's job: :func:`cadencelab.profile.trim.profile_window`.
"""

from .harness import SECOND_RANGE, STAGE_COLUMNS, STAGES, SUBSTAGES, DuplexSecond, run_second, second_totals
from .models import (
    CHUNK_TOKENS,
    H200,
    PRESETS,
    TINY,
    DecoderShape,
    DuplexConfig,
    DuplexModels,
    build_models,
    preset,
    transformers_module,
)

__all__ = [
    "DecoderShape", "DuplexConfig", "H200", "TINY", "PRESETS", "preset", "DuplexModels", "build_models",
    "transformers_module", "CHUNK_TOKENS",
    "DuplexSecond", "run_second", "second_totals", "STAGES", "SUBSTAGES", "SECOND_RANGE", "STAGE_COLUMNS",
]
