"""Call signatures: everything a captured graph depends on, as a hashable key.

A tensor contributes (shape, strides, dtype, device, pointer alignment residue); a
contract-owned tensor (a view of a registered buffer) contributes its owner and its
offset inside the owner instead, since it is bound by address. Plain scalars contribute
their type and value. Anything else is refused: the engine does not guess.
"""

from __future__ import annotations

import torch

_SCALARS = (bool, int, float, str, type(None))
ALIGN = 16  # bytes: vectorised kernels select on pointer alignment
# CUDA: cuBLASLt's heuristics and PyTorch's call into it consider a pointer's alignment up to 256 bytes, so a
# stock call on a view 16- but not 256-aligned can run another kernel (other bits) than a replay reading a
# 256-aligned static buffer; the caching allocator's blocks are 512-aligned, so fresh tensors share one residue.
CUDA_ALIGN = 256


def alignment(t: torch.Tensor) -> int:
    """The alignment (bytes) whose residue keys ``t``'s pointer: :data:`CUDA_ALIGN` on CUDA, :data:`ALIGN`
    elsewhere (the CPU allocator aligns to 64 bytes, finer than the vector widths its kernels select on)."""
    return CUDA_ALIGN if t.is_cuda else ALIGN


class Unkeyable(TypeError):
    """An argument the engine cannot key on (and so refuses to replay)."""


def flatten(obj, leaves: list, path: str = "") -> object:
    """Flatten ``obj`` into ``leaves`` (tensors and scalars); return a hashable structure key."""
    if isinstance(obj, torch.Tensor):
        leaves.append((path, obj))
        return "T"
    if isinstance(obj, _SCALARS) or isinstance(obj, (torch.dtype, torch.device)):
        leaves.append((path, obj))
        return "S"
    if isinstance(obj, (tuple, list)):
        return (type(obj).__name__, tuple(flatten(v, leaves, f"{path}[{i}]") for i, v in enumerate(obj)))
    if isinstance(obj, dict):
        keys = list(obj.keys())
        if not all(isinstance(k, str) for k in keys):
            raise Unkeyable(f"argument {path or '<root>'}: dict keys must be strings")
        return ("dict", tuple((k, flatten(obj[k], leaves, f"{path}.{k}")) for k in keys))
    raise Unkeyable(f"argument {path or '<root>'} of type {type(obj).__name__} cannot be keyed")


def unflatten(structure, values: list, pos: list | None = None):
    """Inverse of :func:`flatten` over a list of leaf values."""
    if pos is None:
        pos = [0]
    if structure in ("T", "S"):
        v = values[pos[0]]
        pos[0] += 1
        return v
    kind, items = structure
    if kind == "dict":
        return {k: unflatten(s, values, pos) for k, s in items}
    seq = [unflatten(s, values, pos) for s in items]
    return tuple(seq) if kind == "tuple" else seq


def strides(t: torch.Tensor) -> tuple:
    """``t``'s strides with those of size-1 dims zeroed: a size-1 dim is never stepped along, so its
    stride reaches no kernel (``x[:, a:a+20]`` of turns of different lengths is one class, not one per
    turn length). Staged inputs are copied into the class's static buffer by ``copy_``, whatever their
    strides."""
    return tuple(0 if n == 1 else st for n, st in zip(t.shape, t.stride()))


def tensor_key(t: torch.Tensor) -> tuple:
    # per call and tensor: the residue inline (alignment(t)'s rule), no extra Python call on the replay path
    return (tuple(t.shape), strides(t), str(t.dtype), str(t.device),
            t.data_ptr() % (CUDA_ALIGN if t.is_cuda else ALIGN))


def scalar_key(v) -> tuple:
    if isinstance(v, float):
        return ("float", v.hex())  # distinguishes -0.0 from 0.0 and keys NaN
    return (type(v).__name__, v if not isinstance(v, (torch.dtype, torch.device)) else str(v))


def owner_of(t: torch.Tensor, owners: list) -> tuple[int, int] | None:
    """(owner index, byte offset) when ``t`` is a view inside a registered contract-owned buffer."""
    if not owners:
        return None
    ptr = t.data_ptr()
    for i, o in enumerate(owners):
        base = o.data_ptr()
        if base <= ptr < base + o.untyped_storage().nbytes() - o.storage_offset() * o.element_size() and (
            t.untyped_storage().data_ptr() == o.untyped_storage().data_ptr()
        ):
            return i, ptr - base
    return None


def signature(args: tuple, kwargs: dict, owners: list) -> tuple[tuple, object, list, list]:
    """Key a call. Returns (key, structure, leaves, aliased) where ``aliased[i]`` is the owner
    (index, offset) of leaf i, or None when the leaf is staged (or a scalar)."""
    leaves: list = []
    structure = flatten((tuple(args), dict(kwargs)), leaves)
    parts = []
    aliased = []
    for path, v in leaves:
        if isinstance(v, torch.Tensor):
            own = owner_of(v, owners)
            aliased.append(own)
            if own is not None:
                parts.append(("A", own, tuple(v.shape), strides(v), str(v.dtype)))
            else:
                parts.append(("T",) + tensor_key(v))
        else:
            aliased.append(None)
            parts.append(("S",) + scalar_key(v))
    return (structure, tuple(parts)), structure, [v for _, v in leaves], aliased


def describe(key: tuple) -> str:
    """A readable form of a signature key (for logs and errors)."""
    _, parts = key
    out = []
    for p in parts:
        if p[0] == "T":
            out.append(f"T{list(p[1])}:{p[3].replace('torch.', '')}")
        elif p[0] == "A":
            out.append(f"A(owner {p[1][0]}+{p[1][1]}){list(p[2])}")
        elif p[1] == "float":
            out.append(f"float={float.fromhex(p[2])!r}")
        else:
            out.append(f"{p[1]}={p[2]!r}")
    return ", ".join(out)
