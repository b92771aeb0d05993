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


def __getattr__(name: str):
    """A name is imported from its module on first use (PEP 562): importing one light module of this
    package (models, the declaration and its presets: no torch) imports none of the others."""
    from importlib import import_module

    module = next((m for m, names in _EXPORTS.items() if name in names), None)
    if module is not None:
        value = getattr(import_module(f".{module}", __name__), name)
    elif name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    else:  # a submodule not imported yet
        try:
            value = import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
