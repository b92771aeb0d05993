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


from ..contract.lazy import exports_table, lazy_package

# a name is imported from its module on first use: importing one light module of this package imports none of the others
__getattr__, __dir__ = lazy_package(__name__, globals(), *exports_table(_EXPORTS))
