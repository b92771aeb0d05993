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


def __getattr__(name: str):
    """A name is imported from its module on first use (PEP 562); ``__all__`` imports every module."""
    if name == "__all__":
        value = sorted(n for m in _EXPORTING for n in _exported(m))
    elif name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    else:
        module = next((m for m in _EXPORTING if name in _exported(m)), None)
        if module is not None:
            value = getattr(import_module(f".{module}", __name__), name)
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
    return sorted(set(globals()) | set(__getattr__("__all__")))
