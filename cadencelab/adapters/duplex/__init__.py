"""The duplex second as an adapter: declared stand-in language models feeding the Token2wav runtime.

    models    the declaration (DecoderShape, DuplexConfig, presets H200 / TINY) and the seeded models
    harness   DuplexSecond: one session of seconds under one Token2wav arm, timed stage by stage
Profiling a second is the profile layer's job: :func:`cadencelab.profile.trim.profile_window`.
"""

_EXPORTS = {  # module -> the names this package exports from it
    "harness": ("SECOND_RANGE", "STAGE_COLUMNS", "STAGES", "SUBSTAGES", "DuplexSecond", "run_second", "second_totals"),
    "models": ("CHUNK_TOKENS", "H200", "PRESETS", "TINY", "DecoderShape", "DuplexConfig", "DuplexModels",
               "build_models", "preset", "transformers_module"),
}

__all__ = [name for names in _EXPORTS.values() for name in names]


from ...support.lazy import exports_table, lazy_package

# a name is imported from its module on first use: importing one light module of this package imports none of the others
__getattr__, __dir__ = lazy_package(__name__, globals(), *exports_table(_EXPORTS))
