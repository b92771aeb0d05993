"""A transformers Qwen2 decode step on the kit: one token per call, a growing KV cache, positions a counter.

transformers' ``Qwen2ForCausalLM`` (seeded random weights, a small config) decoding a turn token by token
with its ``DynamicCache`` (every token kept): the declared state is each layer's K/V, a ``SlidingWindow`` of
``max_tokens`` (the model keeps every token: a turn of at most ``max_tokens + 1`` tokens attends them all;
a longer one would differ from the model, and certification says so), and the RoPE positions (a
:class:`~cadencelab.contract.Counter`). The output is
the call's logits. Certified against transformers' own loop (:func:`reference_loop`).
"""

from __future__ import annotations

import torch

from ...contract import Clock, Counter, Declaration, Operator, Region, Ring, SlidingWindow
from ..kit import KitModel, Traffic
from .bridge import Bridge, kv_shape

__all__ = ["OPERATOR", "build", "declaration", "kit_model", "kit_model_on", "kit_model_static_on", "reference_loop",
           "steps", "tiny_config"]

OPERATOR = "decode"


def tiny_config(**kw):
    from transformers import Qwen2Config

    sizes = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 256}
    return Qwen2Config(**{**sizes, **kw})


def build(config=None, seed: int = 0, device="cpu"):
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config or tiny_config()).eval().to(device)


def declaration(model, max_tokens: int = 12, static: int | None = None) -> tuple[Declaration, list]:
    """(declaration, [K/V regions]) of the decode step, sized from the model's config; ``static``: the
    capacity of transformers' ``StaticCache`` (each K/V region a ``Ring`` of it, never wrapped by a turn)."""
    cfg = model.config
    heads, dim = kv_shape(cfg)
    kvs = [f"kv{i}" for i in range(cfg.num_hidden_layers)]
    kept = {"policy": Ring(static)} if static else {"policy": SlidingWindow(max_tokens), "envelope": "attended"}
    regions = [Region(n, clock="tokens", shape=(2, 1, heads, "tokens", dim), lifetime="turn", **kept) for n in kvs]
    regions.append(Region("pos", clock="tokens", shape=(1, "tokens"), policy=Counter(), dtype="int64", lifetime="turn"))
    clocks = (Clock("calls", "decode call"), Clock("tokens", "token", parent="calls", ratio=1))
    op = Operator(OPERATOR, reads=tuple(kvs), clock="tokens")
    return Declaration("hf-qwen2-decode" + ("-static" if static else ""), clocks, tuple(regions), (op,),
                       call_clock="calls"), kvs


def steps(model, kvs: list, static: int | None = None):
    """(step, stock): the model's forward with the bridge's cache over the carries, and with its own cache."""
    def call(own):
        def step(x, caches, last):
            b = Bridge(caches, own=own)
            pos = b.positions("pos", x.shape[1], x.device)
            out = model(input_ids=x, cache=b.kv(kvs, model.config, static, "pos"), position_ids=pos, use_cache=True)
            return out.logits, b.result()
        return step

    return call(False), call(True)


def reference_loop(model, static: int | None = None):
    """transformers' own decode loop: a fresh ``DynamicCache`` (``StaticCache(max_cache_len=static)``) each turn,
    one token per call, no positions given (the model counts them itself): ``reference(traffic) -> [logits]``."""
    from transformers import DynamicCache, StaticCache

    def reference(traffic):
        outs, cache = [], None
        for t, i, op, x, last in traffic.items_of():
            if i == 0:
                cache = StaticCache(config=model.config, max_cache_len=static) if static else \
                    DynamicCache(config=model.config)
            outs.append(model(input_ids=x, cache=cache, use_cache=True).logits.clone())
        return outs

    return reference


def kit_model(model=None, tokens=None, max_tokens: int = 12, static: int | None = None, device="cpu") -> KitModel:
    """The decode step as a :class:`~cadencelab.adapters.kit.KitModel`: two seeded turns, of ``max_tokens + 1``
    tokens (every extent of the declared catalog seen) and of 7."""
    model = model or build(device=device)
    decl, kvs = declaration(model, max_tokens, static)
    if tokens is None:
        g = torch.Generator().manual_seed(11)
        tokens = [torch.randint(0, model.config.vocab_size, (1, n), generator=g) for n in (max_tokens + 1, 7)]
    traffic = Traffic.stream(decl, [t.to(device) for t in tokens], clock="tokens", dim=1)
    step, stock = steps(model, kvs, static)
    return KitModel(decl, step, stock, traffic, frames=1, modules=(model,), device=str(device),
                    reference=reference_loop(model, static))


def kit_model_on(device="cpu") -> KitModel:
    """``python -m cadencelab.bench kit --model cadencelab.adapters.hf.qwen2_decode:kit_model_on``."""
    return kit_model(device=device)


def kit_model_static_on(device="cpu") -> KitModel:
    """The same decode step on transformers' ``StaticCache`` (16 slots):
    ``python -m cadencelab.bench kit --model cadencelab.adapters.hf.qwen2_decode:kit_model_static_on``."""
    return kit_model(static=16, device=device)
