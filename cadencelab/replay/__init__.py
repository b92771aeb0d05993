"""The compute rule: exact-shape replay with admission checks that fail closed to eager."""

_EXPORTS = {  # module -> the names this package exports from it
    "bind": ("At", "Classifier", "bind", "lookahead"),
    "determinism": ("pin_determinism",),
    "effects": ("RngSnapshot",),
    "engine": ("CAPTURED", "FAILED", "NEW", "REJECTED", "ExactShapeReplay", "ReplayError", "eager_label",
               "no_collection", "replay_disabled", "shared_pool"),
    "graphsafe": ("GraphSafeISTFT",),
    "preflight": ("Preflight", "preflight"),
    "signature": ("Unkeyable", "describe", "signature"),
}

__all__ = [name for names in _EXPORTS.values() for name in names]


def __getattr__(name: str):
    """A name is imported from its module on first use (PEP 562): importing one light module of this
    package (determinism, the device conditions: no torch) imports none of the others."""
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
