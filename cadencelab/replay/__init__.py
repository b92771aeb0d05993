"""The compute rule: exact-shape replay with admission checks that fail closed to eager."""

import sys
import types

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


class _Package(types.ModuleType):
    """Three modules export a function of their own name (``bind``, ``preflight``, ``signature``): when one is
    imported, the import system sets the package's attribute to the module; the package keeps the function
    there instead, as importing every module up front used to leave it."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and name in _EXPORTS.get(name, ()):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
