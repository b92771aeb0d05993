"""The teaching model on the adapter kit: a declaration plus a step (:class:`~cadencelab.adapters.kit.KitModel`).

The same model, declaration and stream as :mod:`cadencelab.adapters.teaching`, written the way notebook 8
teaches: the step in the kit's stock form, the model's own stock step, prompt priming as ``init``. The
kit's runtime of the SRc arm is bit-identical to :class:`~cadencelab.adapters.teaching.TeachingRuntime`
with replay; ``python -m cadencelab.bench kit --model teaching`` runs the factorial on it.
"""

from __future__ import annotations

import torch

from .kit import KitModel, Traffic
from .teaching import CLOCK_DIM, CONTEXT, KV, TeachingStream, TinyStreamer, declaration, make_stream

__all__ = ["kit_model", "kit_model_on"]


# ---------------------------------------------------------------------------------------


def kit_model(model: TinyStreamer | None = None, stream: TeachingStream | None = None):
    """The teaching model as the adapter kit runs it (:class:`~cadencelab.adapters.kit.KitModel`): its
    declaration, its step in the kit's stock form (the new K|V in front of the cache, uncut: the runtime
    keeps what the declaration retains), its own stock step (the model's cut), prompt priming as ``init``
    and ``stream`` (default :func:`make_stream`) as the traffic, every turn primed from its prompt."""
    model = model or TinyStreamer()
    decl = declaration(model.cfg)
    device = next(model.parameters()).device
    stream = (stream or make_stream(model.cfg)).to(device)

    def step(x, caches, last):
        y, q, new, _ = model.project(x, caches[CONTEXT])
        kv = torch.cat([new, caches[KV]], dim=CLOCK_DIM)
        return model.attend(q, kv, y), {KV: kv, CONTEXT: torch.cat([caches[CONTEXT], x.transpose(1, 2)], dim=2)}

    def stock(x, caches, last):
        out, attended = step(x, caches, last)
        return out, {r.name: r.policy.apply(attended[r.name], r.clock_axis) for r in decl.regions}

    def init(prompt):
        return dict(zip((KV, CONTEXT), model.prime(prompt)))

    traffic = Traffic(stream.turns, [stream.prompt] * len(stream.turns))
    return KitModel(decl, step, stock, traffic, form="stock", init=init, modules=(model,), device=str(device))


def kit_model_on(device="cpu"):
    """:func:`kit_model` of the default teaching model on ``device`` (``python -m cadencelab.bench kit --model
    teaching``)."""
    return kit_model(TinyStreamer().to(device))
