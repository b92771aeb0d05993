"""Packages whose names are imported from their modules on first use (PEP 562), so that importing one light
module of a package (a declaration, a device condition, an output guard: no torch) imports none of the
others. The one implementation every such package's ``__init__`` uses."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module


def lazy_package(package: str, namespace: dict, find: Callable[[str], str | None],
                 all_names: Callable[[], list]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package``: a name ``find`` maps to a module is read from that module;
    any other name is a submodule not imported yet; ``__all__`` is ``all_names()``. What is read is kept in
    ``namespace`` (the package's globals), so each name is looked up once."""

    def __getattr__(name: str):
        if name == "__all__":
            value = sorted(all_names())
        elif name.startswith("__"):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        else:
            module = find(name)
            if module is not None:
                value = getattr(import_module(f".{module}", package), name)
            else:  # a submodule not imported yet
                try:
                    value = import_module(f".{name}", package)
                except ModuleNotFoundError as e:
                    if e.name != f"{package}.{name}":
                        raise
                    raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(all_names()))

    return __getattr__, __dir__


def exports_table(exports: dict) -> tuple[Callable[[str], str | None], Callable[[], list]]:
    """``find`` and ``all_names`` for :func:`lazy_package` from a table ``{module: (names it exports)}``."""
    return (lambda name: next((m for m, names in exports.items() if name in names), None),
            lambda: [n for names in exports.values() for n in names])
