"""Cache envelopes: the capacity of the solver's preallocated cache buffers, stock or sized to demand."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .clocks import T2W_CLOCKS, Token2wavClocks
from .configs import Token2wavConfig, require

__all__ = ["CacheEnvelope", "STOCK_ENVELOPE", "cache_buffer_shapes", "demand_envelope", "demand_frames",
           "size_cache_buffers", "stock_envelope"]


@dataclass(frozen=True)
class CacheEnvelope:
    """Capacity of the solver's preallocated cache buffers.

    ``n_slots``: solver steps the CFM can hold (one cache per Euler step);
    ``max_frames``: mel frames of attention history (cached + current chunk) per slot.
    """

    n_slots: int
    max_frames: int

    def __post_init__(self) -> None:
        require(self.n_slots >= 1, f"CacheEnvelope.n_slots must be >= 1, got {self.n_slots}")
        require(self.max_frames >= 1, f"CacheEnvelope.max_frames must be >= 1, got {self.max_frames}")


STOCK_ENVELOPE = CacheEnvelope(n_slots=16, max_frames=1000)
"""What the vendor hard-codes in ``CausalConditionalCFM.__init__`` / ``DiT.__init__``."""


def stock_envelope(cfg: Token2wavConfig | None = None) -> CacheEnvelope:
    """The vendor's fixed envelope (16 slots x 1000 frames), independent of the config."""
    return STOCK_ENVELOPE


def demand_frames(prompt_frames: int | None = None, retained_frames: int | None = None,
                  call_frames: int | None = None, clocks: Token2wavClocks = T2W_CLOCKS) -> int:
    """Largest attended extent (frames) under the stock cut: prompt + retained + one call.

    The stock loop cuts the estimator cache back to ``prompt_frames + retained_frames`` once it
    grows past that; a call then adds at most ``call_frames`` (a chunk plus its lookahead, when
    the final chunk is flushed). Arguments not given come from ``clocks``.
    """
    c = clocks
    return ((c.prompt_frames if prompt_frames is None else prompt_frames)
            + (c.retained_frames if retained_frames is None else retained_frames)
            + (c.call_frames if call_frames is None else call_frames))


def demand_envelope(n_steps: int, max_frames: int) -> CacheEnvelope:
    """An envelope sized to demand: one slot per solver step, ``max_frames`` frames each."""
    return CacheEnvelope(n_slots=n_steps, max_frames=max_frames)


def _dit_dims(flow: torch.nn.Module) -> tuple[int, int, int, int]:
    dit = flow.decoder.estimator
    attn = dit.blocks[0].attn
    return len(dit.blocks), attn.num_heads, attn.head_dim, dit.in_proj.out_features


def cache_buffer_shapes(cfg: Token2wavConfig, envelope: CacheEnvelope) -> dict[str, tuple[int, ...]]:
    """Shapes of the four solver cache buffers, keyed by their names in ``flow.named_buffers()``.

    - ``decoder.att_cache_buffer``: (slots, depth, 2 CFG rows, heads, frames, 2 * head_dim)
    - ``decoder.cnn_cache_buffer``: (slots, depth, 2, 2 * hidden, 2 causal-conv taps)
    - ``decoder.estimator.att_cache_buffer``: (depth, 2, heads, frames, 2 * head_dim)
    - ``decoder.estimator.cnn_cache_buffer``: (depth, 2, 2 * hidden, 2)
    """
    d = cfg.estimator
    return _shapes(d.depth, d.num_heads, d.head_dim, d.hidden_size, envelope)


def _shapes(depth: int, heads: int, head_dim: int, hidden: int, env: CacheEnvelope) -> dict[str, tuple[int, ...]]:
    return {
        "decoder.att_cache_buffer": (env.n_slots, depth, 2, heads, env.max_frames, 2 * head_dim),
        "decoder.cnn_cache_buffer": (env.n_slots, depth, 2, 2 * hidden, 2),
        "decoder.estimator.att_cache_buffer": (depth, 2, heads, env.max_frames, 2 * head_dim),
        "decoder.estimator.cnn_cache_buffer": (depth, 2, 2 * hidden, 2),
    }


def size_cache_buffers(flow: torch.nn.Module, n_slots: int, max_frames: int) -> dict[str, tuple[int, ...]]:
    """Replace the four solver cache buffers of ``flow`` with zeros sized to the envelope.

    Dimensions are read from the module (depth, heads, head_dim, hidden), so this works for
    any config, loaded or built. Buffers keep their dtype and device (also ``meta``).
    Returns the new shapes by buffer name. A later chunk whose attended extent exceeds
    ``max_frames`` fails inside the vendor's in-place cache write.
    """
    depth, heads, head_dim, hidden = _dit_dims(flow)
    shapes = _shapes(depth, heads, head_dim, hidden, CacheEnvelope(n_slots, max_frames))
    owners = {"decoder": flow.decoder, "decoder.estimator": flow.decoder.estimator}
    for name, shape in shapes.items():
        owner_name, _, attr = name.rpartition(".")
        owner = owners[owner_name]
        old = getattr(owner, attr)
        setattr(owner, attr, torch.zeros(shape, dtype=old.dtype, device=old.device))
    return shapes
