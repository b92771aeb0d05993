"""Adapter for the MiniCPM-o 4.5 / Lychee-FD streaming Token2wav (flow + HiFT vocoder).

The vendor stack as a dependency, one module per job: ``vendor_import`` loads the vendor classes,
``configs`` declares the model sizes (REAL, TEACHING), ``envelopes`` sizes the solver cache buffers,
``build`` constructs the modules with seeded weights, ``checkpoint`` saves and loads them, and
``prompts`` makes synthetic speaker prompts. ``stock``: the stock streaming loop (B0) and a handle
on the vendor's own ``Token2wav`` for parity checks. ``runtime``: the arms.

The package exports every name in those modules' ``__all__``; each module is imported when one of its
names (or the module itself) is first used, so importing a light module (``configs``, ``turns``)
imports no torch.
"""

from importlib import import_module

#: the modules whose ``__all__`` this package exports, the light ones first
_EXPORTING = ("configs", "vendor_import", "envelopes", "prompts", "build", "checkpoint", "stock")


def _exported(module: str) -> list[str]:
    return list(import_module(f".{module}", __name__).__all__)


from ...support.lazy import lazy_package

# a name is imported from its module on first use; ``__all__`` imports every module
__getattr__, __dir__ = lazy_package(__name__, globals(),
                                    lambda name: next((m for m in _EXPORTING if name in _exported(m)), None),
                                    lambda: [n for m in _EXPORTING for n in _exported(m)])
