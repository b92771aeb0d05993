"""The compute rule: exact-shape replay with admission checks that fail closed to eager."""

_EXPORTS = {  # module -> the names this package exports from it
    "binding": ("At", "Classifier", "bind", "lookahead"),
    "determinism": ("pin_determinism",),
    "effects": ("RngSnapshot",),
    "engine": ("CAPTURED", "FAILED", "NEW", "REJECTED", "ExactShapeReplay", "ReplayError", "eager_label",
               "replay_disabled", "shared_pool"),
    "graphsafe": ("GraphSafeISTFT",),
    "hazards": ("Preflight", "preflight"),
    "nogc": ("no_collection",),
    "signatures": ("Unkeyable", "describe", "signature"),
}

__all__ = [name for names in _EXPORTS.values() for name in names]


from ..support.lazy import exports_table, lazy_package

# a name is imported from its module on first use: importing one light module of this package imports none of the others
__getattr__, __dir__ = lazy_package(__name__, globals(), *exports_table(_EXPORTS))
