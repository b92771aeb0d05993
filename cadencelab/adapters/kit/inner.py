"""Inner operators: declared operators a step calls through a module's method, each replayed on its own.

Some models' streaming call is a loop the model owns: Token2wav's flow chunk runs the upsampling encoder once
and the DiT estimator ``n_steps`` times inside the vendor's Euler solver. The paper's R and SR arms replay
those calls (solver-step granularity) and keep the loop's arithmetic between them eager. In the kit that is an
operator the spec gives ``granularity="inner"`` (what a per-step arm, R or SR, then does): its step runs eagerly,
and each declared operator named in the spec's ``inner`` is bound to an engine (its own catalog and classifier, from the declaration) that stands in for the module's
method, so the model's own code calls the engine.

:class:`Inner` says where: the module, the method the model calls (``forward_chunk`` by default), where the
call carries the regions it reads and its frames (as :func:`~cadencelab.replay.bind` takes them) and whether
the engine clones its outputs (the model consumes them before its next call: by default it does not).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import torch

from ...contract import Declaration
from ...replay import At, bind
from .bound import per_op

__all__ = ["GRANULARITIES", "Inner", "granularities", "bind_inner", "install", "inner_of"]

#: how an operator's call is replayed: whole (retention included), its step alone, or its inner operators
GRANULARITIES = ("call", "step", "inner")


@dataclass(frozen=True)
class Inner:
    """A declared operator the model calls as ``module.<method>(...)`` from inside another operator's step."""

    module: torch.nn.Module
    frames: At
    reads: Mapping[str, At] = field(default_factory=dict)
    method: str = "forward_chunk"
    clone_outputs: bool = False


def granularities(granularity, names: list) -> dict:
    """Each operator's granularity (one for all, or a dict keyed by operator names: "call" where it names none),
    checked."""
    out = {n: "call" if g is None else g for n, g in per_op(granularity, names, "granularity").items()}
    for n, g in out.items():
        if g not in GRANULARITIES:
            raise ValueError(f"granularity of operator '{n}' must be one of {GRANULARITIES}, got {g!r}")
    return out


def inner_of(inner: Mapping | None, decl: Declaration, outer: list, granularity: dict, replay: bool) -> dict:
    """``inner`` checked: each key a declared operator the runtime does not call itself, each value an
    :class:`Inner` whose module has the method and no engine installed on it yet; an operator runs at
    ``granularity="inner"`` exactly when there are inner operators (with replay on)."""
    nested = [n for n, g in granularity.items() if g == "inner"]
    if inner and not nested:
        raise ValueError(f"inner operators {sorted(inner)} are called from inside a step: give that operator "
                         f"granularity='inner' (a step replayed whole would capture their engines)")
    if nested and replay and not inner:
        raise ValueError(f"operators {nested} run at granularity='inner' but inner= names no operator their steps "
                         f"call")
    if inner is None:
        return {}
    if not isinstance(inner, Mapping):
        raise ValueError(f"inner must be a dict operator -> Inner(module, frames=...), got {type(inner).__name__}")
    known = [o.name for o in decl.operators]
    for name, spec in inner.items():
        if name not in known:
            raise ValueError(f"inner: '{name}' is not an operator of the {decl.model} declaration ({known})")
        if name in outer:
            raise ValueError(f"inner: '{name}' is an operator the runtime calls itself (step=): an inner operator is "
                             f"one a step calls through a module's method")
        if not isinstance(spec, Inner):
            raise ValueError(f"inner['{name}'] must be an Inner(module, frames=...), got {type(spec).__name__}")
        if not callable(getattr(spec.module, spec.method, None)):
            raise ValueError(f"inner['{name}']: {type(spec.module).__name__} has no method '{spec.method}'")
        if spec.method in vars(spec.module):
            raise ValueError(f"inner['{name}']: {type(spec.module).__name__}.{spec.method} already has an engine "
                             f"installed (one runtime per module set)")
    return dict(inner)


def bind_inner(decl: Declaration, name: str, spec: Inner, guard: dict, backend: str, options: dict):
    """The inner operator's engine (its catalog derived, the module guarded; ``guard``: the runtime's owners and
    write-through buffers), not installed yet (:func:`install`)."""
    fn = getattr(spec.module, spec.method)
    return bind(decl, name, fn, reads=dict(spec.reads), frames=spec.frames, backend=backend, modules=[spec.module],
                **guard, **{"clone_outputs": spec.clone_outputs, **options})


def install(spec: Inner, engine) -> None:
    """The engine as the module's method: the model's own code now calls it."""
    setattr(spec.module, spec.method, engine)
