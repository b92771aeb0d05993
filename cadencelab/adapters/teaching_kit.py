"""The teaching model on the adapter kit: a declaration plus a step (:class:`~cadencelab.adapters.kit.KitModel`).

The same model, declaration, steps and stream as :mod:`cadencelab.adapters.teaching` (whose
:class:`~cadencelab.adapters.teaching.TeachingRuntime` is this runtime behind the course's interface), bundled
the way the write-your-own-adapter notebook teaches: the step in the kit's views form, the model's own stock
step, prompt priming as ``init``; ``python -m cadencelab.bench kit --model teaching`` runs the factorial on it.
"""

from __future__ import annotations

from .kit import KitModel, Traffic
from .teaching import TeachingStream, TinyStreamer, declaration, kit_steps, make_stream, prime_init

__all__ = ["kit_model", "kit_model_on"]


def kit_model(model: TinyStreamer | None = None, stream: TeachingStream | None = None):
    """The teaching model as the adapter kit runs it (:class:`~cadencelab.adapters.kit.KitModel`): its
    declaration, :func:`~cadencelab.adapters.teaching.kit_steps` (the step appends the new K|V into its carry
    and attends over it; the stock step concatenates and cuts), prompt priming as ``init`` and ``stream``
    (default :func:`make_stream`) as the traffic, every turn primed from its prompt."""
    model = model or TinyStreamer()
    device = next(model.parameters()).device
    stream = (stream or make_stream(model.cfg)).to(device)
    step, stock = kit_steps(model)
    traffic = Traffic(stream.turns, [stream.prompt] * len(stream.turns))
    return KitModel(declaration(model.cfg), step, stock, traffic, form="views", init=prime_init(model),
                    modules=(model,), device=str(device))


def kit_model_on(device="cpu"):
    """:func:`kit_model` of the default teaching model on ``device`` (``python -m cadencelab.bench kit --model
    teaching``)."""
    return kit_model(TinyStreamer().to(device))
