"""The declared Token2wav model: encoder, DiT and HiFT sizes (``Token2wavConfig``), REAL and TEACHING.

Units used throughout: *tokens* are 25 Hz speech tokens; *frames* are 50 Hz mel frames
(2 frames per token); *samples* are 24 kHz waveform samples (480 per frame).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["DiTConfig", "EncoderConfig", "HiFTConfig", "REAL", "TEACHING", "Token2wavConfig"]


def require(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(what)


@dataclass(frozen=True)
class EncoderConfig:
    """Keyword arguments of the vendor ``UpsampleConformerEncoderV2`` (token encoder, 25 Hz -> 50 Hz)."""

    input_size: int = 512
    output_size: int = 512
    input_layer: str = "linear"
    pre_lookahead_len: int = 3
    num_blocks: int = 6
    num_up_blocks: int = 4
    up_stride: int = 2
    up_scale_factor: int = 2
    attention_heads: int = 8
    pos_enc_layer_type: str = "rel_pos_espnet"
    selfattention_layer_type: str = "rel_selfattn"
    key_bias: bool = True
    linear_units: int = 2048
    dropout_rate: float = 0.1
    positional_dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    normalize_before: bool = True


@dataclass(frozen=True)
class DiTConfig:
    """Keyword arguments of the vendor ``DiT`` estimator (the flow-matching vector field)."""

    in_channels: int = 320
    out_channels: int = 80
    mlp_ratio: float = 4.0
    depth: int = 16
    num_heads: int = 8
    head_dim: int = 64
    hidden_size: int = 512


@dataclass(frozen=True)
class HiFTConfig:
    """Keyword arguments of the vendor ``HiFTGenerator``; only ``base_channels`` is varied.

    Every other argument keeps the vendor default (24 kHz, upsample [8, 5, 3], iSTFT n_fft 16
    hop 4 -> 480 samples per mel frame).
    """

    base_channels: int = 512

    def kwargs(self) -> dict[str, Any]:
        return {} if self.base_channels == 512 else {"base_channels": self.base_channels}


@dataclass(frozen=True)
class Token2wavConfig:
    """The declared Token2wav model: flow (encoder + CFM/DiT) and HiFT vocoder sizes.

    ``input_size`` is the token-embedding width, ``output_size`` the mel channels (80),
    ``spk_embed_dim`` the speaker-embedding width (192), ``vocab_size`` the speech-token
    vocabulary, ``inference_cfg_rate`` the classifier-free-guidance weight of the solver.
    """

    name: str = "real"
    input_size: int = 512
    output_size: int = 80
    spk_embed_dim: int = 192
    output_type: str = "mel"
    vocab_size: int = 6561
    inference_cfg_rate: float = 0.7
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    estimator: DiTConfig = field(default_factory=DiTConfig)
    hift: HiFTConfig = field(default_factory=HiFTConfig)

    def __post_init__(self) -> None:
        enc, dit = self.encoder, self.estimator
        require(
            enc.input_size == self.input_size,
            f"Token2wavConfig.encoder.input_size ({enc.input_size}) must equal input_size ({self.input_size})",
        )
        require(
            enc.output_size == enc.input_size,
            f"Token2wavConfig.encoder.output_size ({enc.output_size}) must equal encoder.input_size "
            f"({enc.input_size}): the encoder re-embeds its upsampled output with an input_size-wide layer",
        )
        require(
            enc.output_size % enc.attention_heads == 0,
            f"Token2wavConfig.encoder.output_size ({enc.output_size}) must be divisible by attention_heads "
            f"({enc.attention_heads})",
        )
        require(
            dit.in_channels == 4 * self.output_size,
            f"Token2wavConfig.estimator.in_channels ({dit.in_channels}) must be 4 * output_size "
            f"({4 * self.output_size}): noise, encoder_proj output, speaker and condition are stacked",
        )
        require(
            dit.out_channels == self.output_size,
            f"Token2wavConfig.estimator.out_channels ({dit.out_channels}) must equal output_size ({self.output_size})",
        )
        require(self.output_size == 80, f"Token2wavConfig.output_size ({self.output_size}) must be 80: HiFT reads 80 mel channels")
        require(
            self.hift.base_channels % 8 == 0 and self.hift.base_channels >= 8,
            f"Token2wavConfig.hift.base_channels ({self.hift.base_channels}) must be a positive multiple of 8",
        )

    @property
    def up_rate(self) -> int:
        """Mel frames per token (2)."""
        return self.encoder.up_stride


REAL = Token2wavConfig()
"""The released MiniCPM-o 4.5 / Lychee-FD Token2wav sizes (flow 155.8 M, HiFT 20.8 M parameters)."""

TEACHING = Token2wavConfig(
    name="teaching",
    input_size=128,
    encoder=EncoderConfig(
        input_size=128, output_size=128, num_blocks=2, num_up_blocks=2, attention_heads=2, linear_units=256
    ),
    estimator=DiTConfig(depth=2, num_heads=2, head_dim=64, hidden_size=128),
    hift=HiFTConfig(base_channels=64),
)
"""A small config with the same clocks and cache layouts as REAL, fast on a CPU."""
