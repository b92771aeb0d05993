"""Synthetic speaker prompts: the state the stock front end would produce from a reference wav."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .clocks import T2W_CLOCKS, Token2wavClocks
from .build import subseed
from .configs import Token2wavConfig, require

__all__ = ["PromptState", "make_prompt"]


@dataclass
class PromptState:
    """The speaker prompt the stock front end would produce from a reference wav.

    - ``prompt_speech_tokens``: (1, T) int32 speech tokens in [0, vocab_size)
    - ``prompt_speech_tokens_lens``: (1,) int32, = T
    - ``spk_emb``: (1, 192) float32 speaker embedding
    - ``prompt_mels``: (1, 2T, 80) float32 log-mel frames (50 Hz)
    - ``prompt_mels_lens``: (1,) int32 mel frames before padding to 2T
    """

    prompt_speech_tokens: torch.Tensor
    prompt_speech_tokens_lens: torch.Tensor
    spk_emb: torch.Tensor
    prompt_mels: torch.Tensor
    prompt_mels_lens: torch.Tensor

    def __post_init__(self) -> None:
        tok, mel, spk = self.prompt_speech_tokens, self.prompt_mels, self.spk_emb
        require(tok.dim() == 2 and tok.shape[0] == 1, f"PromptState.prompt_speech_tokens must be (1, T), got {tuple(tok.shape)}")
        require(not tok.is_floating_point(), f"PromptState.prompt_speech_tokens must be integer, got {tok.dtype}")
        require(spk.dim() == 2 and spk.shape[0] == 1, f"PromptState.spk_emb must be (1, D), got {tuple(spk.shape)}")
        require(mel.dim() == 3 and mel.shape[0] == 1, f"PromptState.prompt_mels must be (1, frames, 80), got {tuple(mel.shape)}")

    @property
    def n_tokens(self) -> int:
        return int(self.prompt_speech_tokens.shape[1])

    @property
    def n_frames(self) -> int:
        """Prompt mel frames P (the stock cut keeps P + the retained frames of estimator cache)."""
        return int(self.prompt_mels.shape[1])

    def as_tuple(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The vendor's ``Token2wav.cache`` tuple order."""
        return (
            self.prompt_speech_tokens,
            self.prompt_speech_tokens_lens,
            self.spk_emb,
            self.prompt_mels,
            self.prompt_mels_lens,
        )

    def to(self, device: str | torch.device) -> "PromptState":
        return PromptState(*(t.to(device) for t in self.as_tuple()))


def make_prompt(
    cfg: Token2wavConfig, seed: int, device: str | torch.device = "cpu", n_tokens: int | None = None,
    clocks: Token2wavClocks = T2W_CLOCKS,
) -> PromptState:
    """A synthetic prompt, deterministic in ``seed`` and identical on every device.

    Tokens are uniform in [0, vocab_size), mels and speaker embedding standard normal. By
    default ``n_tokens`` gives the clocks' prompt frames (the reference voice of the stock demo).
    """
    if n_tokens is None:
        n_tokens = clocks.prompt_frames // cfg.up_rate
    require(n_tokens >= 1, f"make_prompt: n_tokens must be >= 1, got {n_tokens}")
    gen = torch.Generator(device="cpu").manual_seed(subseed(seed, "prompt"))
    frames = n_tokens * cfg.up_rate
    tokens = torch.randint(0, cfg.vocab_size, (1, n_tokens), generator=gen, dtype=torch.int64).to(torch.int32)
    mels = torch.randn((1, frames, cfg.output_size), generator=gen, dtype=torch.float32)
    spk = torch.randn((1, cfg.spk_embed_dim), generator=gen, dtype=torch.float32)
    state = PromptState(
        prompt_speech_tokens=tokens,
        prompt_speech_tokens_lens=torch.tensor([n_tokens], dtype=torch.int32),
        spk_emb=spk,
        prompt_mels=mels,
        prompt_mels_lens=torch.tensor([frames], dtype=torch.int32),
    )
    return state.to(device)
