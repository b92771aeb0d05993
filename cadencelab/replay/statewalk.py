"""The state a preflight watches: every tensor reachable from the given modules and objects.

:func:`state_tensors` walks modules (parameters, buffers, submodules, plain tensor attributes) and
plain objects (attributes, dicts, lists) to a bounded depth; :func:`roots_of` names the roots of one
step (the given modules, the step itself when it is a module, a bound method's owner, module arguments).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Callable

import torch

__all__ = ["state_tensors", "roots_of", "LEAVES"]


LEAVES = (str, bytes, int, float, bool, complex, type(None), torch.dtype, torch.device, torch.Size)
_MODULE_SLOTS = {"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"}


def state_tensors(roots: dict[str, Any], max_depth: int = 6) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Every tensor reachable from ``roots``: (path -> tensor, path -> plain module tensor attribute).

    Walks modules (parameters, buffers, submodules and every other attribute, private ones such as a
    streaming state included), dicts, lists, tuples, dataclasses and plain objects, each object once.
    """
    out: dict[str, torch.Tensor] = {}
    plain: dict[str, torch.Tensor] = {}
    seen: set[int] = set()

    def walk(obj, path: str, depth: int, in_module: bool = False) -> None:
        if isinstance(obj, torch.Tensor):
            out.setdefault(path, obj)
            if in_module and not isinstance(obj, torch.nn.Parameter):
                plain.setdefault(path, obj)
            return
        if isinstance(obj, LEAVES) or depth > max_depth or id(obj) in seen:
            return
        if callable(obj) and not isinstance(obj, torch.nn.Module) or isinstance(obj, type(sys)):
            return
        seen.add(id(obj))
        if isinstance(obj, torch.nn.Module):  # registered tensors and submodules first: their names win
            for k, p in obj._parameters.items():
                if p is not None:
                    out.setdefault(f"{path}.{k}", p)
            for k, b in obj._buffers.items():
                if b is not None:
                    out.setdefault(f"{path}.{k}", b)
            for k, m in obj._modules.items():
                if m is not None:
                    walk(m, f"{path}.{k}", depth)
            for k, v in vars(obj).items():
                if k not in _MODULE_SLOTS:
                    walk(v, f"{path}.{k}", depth + 1, in_module=True)
        elif isinstance(obj, dict):
            for k, v in list(obj.items()):
                walk(v, f"{path}[{k!r}]", depth + 1)
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, f"{path}[{i}]", depth + 1)
        elif dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__"):
            try:
                items = list(vars(obj).items())
            except TypeError:
                return
            for k, v in items:
                walk(v, f"{path}.{k}", depth + 1)

    for name, root in roots.items():
        walk(root, name, 0)
    return out, plain


def roots_of(fn: Callable, args, kwargs, modules) -> dict[str, Any]:
    """The named roots whose reachable tensors are a step's state."""
    if isinstance(modules, dict):
        roots = dict(modules)
    else:
        roots = {}
        for m in list(modules or []):
            name = type(m).__name__
            roots[name if name not in roots else f"{name}#{len(roots)}"] = m
    if isinstance(fn, torch.nn.Module) and not any(r is fn for r in roots.values()):
        roots[type(fn).__name__] = fn
    owner = getattr(fn, "__self__", None)
    if owner is not None and not any(r is owner for r in roots.values()):
        roots["self"] = owner
    for i, a in enumerate(list(args) + list(kwargs.values())):
        if isinstance(a, torch.nn.Module) and not any(r is a for r in roots.values()):
            roots[f"arg{i}"] = a
    return roots
