"""Seeded construction of the vendor ``(flow, hift)`` from a declared config, and parameter counts."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import types

import torch

from .configs import Token2wavConfig
from .envelopes import STOCK_ENVELOPE, CacheEnvelope, size_cache_buffers
from .vendor_import import load_vendor

__all__ = ["build_token2wav", "parameter_counts", "reinit_parameters"]


def subseed(seed: int, label: str) -> int:
    """A stable 63-bit seed for one purpose (``label``) derived from a user ``seed``."""
    digest = hashlib.sha256(f"cadencelab.token2wav:{int(seed)}:{label}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


_DECODER_BUFFERS = {
    "rand_noise",
    "att_cache_buffer",
    "cnn_cache_buffer",
    "estimator.att_cache_buffer",
    "estimator.cnn_cache_buffer",
}


def construct_modules(
    cfg: Token2wavConfig, *, meta: bool, envelope: CacheEnvelope = STOCK_ENVELOPE
) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Vendor ``(flow, hift)`` for ``cfg``.

    The CFM and its DiT are created on the ``meta`` device, their cache buffers resized to
    ``envelope`` there, and only then given (uninitialised) CPU storage: the vendor's
    hard-coded 16 x 1000 buffers are never allocated for a config that does not ask for them.
    With ``meta=True`` nothing gets storage (for counting). The caller must overwrite every
    parameter and buffer of the decoder (see :func:`materialise_decoder`). The vendor
    ``__init__`` draws from the global CPU RNG; it is forked, so the caller's RNG is untouched.
    """
    v = load_vendor()
    with torch.random.fork_rng(devices=[]):
        with torch.device("meta"):
            estimator = v.DiT(**dataclasses.asdict(cfg.estimator))
            decoder = v.CausalConditionalCFM(estimator=estimator, inference_cfg_rate=cfg.inference_cfg_rate)
        names = {n for n, _ in decoder.named_buffers()}
        if names != _DECODER_BUFFERS:
            raise RuntimeError(
                f"unexpected buffers in the vendor CausalConditionalCFM: {sorted(names ^ _DECODER_BUFFERS)}; "
                f"the installed minicpmo differs from 0.1.2"
            )
        _size_decoder_buffers(decoder, envelope)
        if not meta:
            decoder.to_empty(device="cpu")
        with torch.device("meta") if meta else contextlib.nullcontext():
            encoder = v.UpsampleConformerEncoderV2(**dataclasses.asdict(cfg.encoder))
            flow = v.CausalMaskedDiffWithXvec(
                input_size=cfg.input_size,
                output_size=cfg.output_size,
                spk_embed_dim=cfg.spk_embed_dim,
                output_type=cfg.output_type,
                vocab_size=cfg.vocab_size,
                encoder=encoder,
                decoder=decoder,
            )
            hift = v.HiFTGenerator(**cfg.hift.kwargs())
    return flow, hift


def _size_decoder_buffers(decoder: torch.nn.Module, env: CacheEnvelope) -> None:
    size_cache_buffers(types.SimpleNamespace(decoder=decoder), env.n_slots, env.max_frames)  # type: ignore[arg-type]


def materialise_decoder(flow: torch.nn.Module, noise_seed: int) -> None:
    """Zero the solver caches at their current shapes and draw ``rand_noise`` (1, 80, 30000)
    from ``noise_seed`` on CPU (the vendor draws it from the global RNG in ``__init__``)."""
    decoder = flow.decoder
    att = decoder.att_cache_buffer
    size_cache_buffers(flow, att.shape[0], att.shape[4])
    gen = torch.Generator(device="cpu").manual_seed(int(noise_seed))
    noise = torch.randn(tuple(decoder.rand_noise.shape), generator=gen, dtype=torch.float32)
    decoder.rand_noise = noise.to(device=decoder.rand_noise.device, dtype=decoder.rand_noise.dtype)


def assert_materialised(module: torch.nn.Module, label: str) -> None:
    for name, t in [*module.named_parameters(), *module.named_buffers()]:
        if t.is_meta:
            raise RuntimeError(f"{label}.{name} was left on the meta device")


def parameter_counts(cfg: Token2wavConfig) -> dict[str, int]:
    """Parameter counts of the vendor modules for ``cfg`` (built on ``meta``: no memory).

    Keys: ``flow``, ``estimator`` (DiT), ``encoder``, ``hift``.
    """
    flow, hift = construct_modules(cfg, meta=True)

    def count(m: torch.nn.Module) -> int:
        return sum(p.numel() for p in m.parameters())

    return {
        "flow": count(flow),
        "estimator": count(flow.decoder.estimator),
        "encoder": count(flow.encoder),
        "hift": count(hift),
    }


def reinit_parameters(module: torch.nn.Module, seed: int, std: float = 0.02) -> None:
    """Overwrite every parameter of ``module`` (in ``named_parameters`` order) with N(0, std^2).

    Draws on CPU from a private generator seeded with ``seed`` and copies, so the values are
    the same on every device and neither depend on nor disturb the global RNG. Weight-norm
    parametrisations are covered through their ``original0`` / ``original1`` parameters.
    """
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    with torch.no_grad():
        for _, p in module.named_parameters():
            p.copy_(torch.empty(p.shape, dtype=torch.float32).normal_(0.0, std, generator=gen))


def build_token2wav(
    cfg: Token2wavConfig,
    seed: int,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    envelope: CacheEnvelope = STOCK_ENVELOPE,
) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Vendor ``(flow, hift)`` for ``cfg`` with seeded random weights, in eval mode on ``device``.

    Every parameter is redrawn from N(0, 0.02^2) with seeds derived from ``seed`` (the vendor
    zero-initialises the DiT's adaLN and final layers, which would make every output trivially
    zero); ``flow.decoder.rand_noise`` (the solver's start noise, (1, 80, 30000)) is drawn from
    a derived seed too. The solver caches are sized to ``envelope`` on CPU before the move to
    ``device``; the default is the stock envelope (16 slots x 1000 frames: for REAL exactly
    the vendor's own shapes), which is what the B0 arm runs with. ``dtype`` applies to the flow
    only (the vendor never casts HiFT). The caller's global RNG is not consumed.
    """
    flow, hift = construct_modules(cfg, meta=False, envelope=envelope)
    materialise_decoder(flow, subseed(seed, "rand_noise"))
    reinit_parameters(flow, subseed(seed, "flow"))
    reinit_parameters(hift, subseed(seed, "hift"))
    assert_materialised(flow, "flow")
    assert_materialised(hift, "hift")
    flow = flow.to(dtype=dtype)
    return flow.eval().to(device), hift.eval().to(device)
