"""The duplex second's declaration and its two language models (random weights from the declaration).

    DecoderShape / DuplexConfig   a decoder-only transformer by its sizes; the declared second
                                  (stage shapes, per-second token clocks)
    H200, TINY, preset(name)      the declared presets
    build_models(cfg, device)     the backbone, the speech-token decoder and the bridge, seeded
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from ...contract import Admission, Clock, Declaration, Operator, Region, Ring, SlidingWindow, Unbounded
from ..token2wav.clocks import T2W_CLOCKS
from ..token2wav.configs import REAL as _T2W_REAL

if TYPE_CHECKING:  # the annotations only: building the models imports torch, the declaration does not
    import torch

__all__ = [
    "DecoderShape", "DuplexConfig", "H200", "TINY", "PRESETS", "preset", "DuplexModels", "build_models",
    "transformers_module", "CHUNK_TOKENS", "DTYPES", "cache_keyword", "backbone_declaration",
    "unbounded_backbone_declaration",
]

_T2W_VOCAB = _T2W_REAL.vocab_size  # the speech decoder emits Token2wav's tokens
CHUNK_TOKENS = T2W_CLOCKS.tokens_per_chunk  # Token2wav: one chunk (+ its lookahead) per call = 1.0 s of audio
#: the dtypes a config may build its AR stages in (floating point; checked at construction, before torch is imported)
DTYPES = ("float32", "float64", "float16", "bfloat16")


# ---------------------------------------------------------------------------------------
# declared configuration
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecoderShape:
    """A decoder-only transformer (Qwen2 architecture) by its declared sizes."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    max_positions: int = 32768
    rope_theta: float = 1_000_000.0

    def __post_init__(self):
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"DecoderShape: hidden {self.hidden} must divide into heads {self.heads}, "
                             f"and heads into kv_heads {self.kv_heads}")

    def parameters(self) -> int:
        """Parameter count of the Qwen2 model this shape builds (untied embeddings, no biases but q/k/v)."""
        h, hd = self.hidden, self.hidden // self.heads
        kv = self.kv_heads * hd
        attn = h * h + 2 * h * kv + h * h + (h + 2 * kv)  # q, k, v, o (+ q/k/v biases)
        mlp = 3 * h * self.intermediate
        return 2 * self.vocab * h + self.layers * (attn + mlp + 2 * h) + h

    def hf_config(self):
        """The ``transformers.Qwen2Config`` (same keyword names in transformers 4.5x and 5.x)."""
        Qwen2Config = transformers_module().Qwen2Config
        return Qwen2Config(vocab_size=self.vocab, hidden_size=self.hidden, intermediate_size=self.intermediate,
                           num_hidden_layers=self.layers, num_attention_heads=self.heads,
                           num_key_value_heads=self.kv_heads, max_position_embeddings=self.max_positions,
                           rope_theta=self.rope_theta, tie_word_embeddings=False, use_sliding_window=False)


@dataclass(frozen=True)
class DuplexConfig:
    """The declared duplex second: stage shapes and per-second token clocks.

    backbone, speech:  the two decoder-only models.
    input_tokens:      backbone prefill per second (the second's input, as ids: a stand-in for the
                       audio encoder's output).
    text_tokens:       text/control tokens the backbone decodes per second.
    speech_tokens:     speech tokens per second; fixed at one Token2wav chunk (``T2W_CLOCKS``: the chunk's
                       tokens plus the lookahead = 1.0 s of audio).
    token2wav:         "real" (the released Token2wav sizes) or "teaching" (small, fast on a CPU).
    n_timesteps:       flow solver steps (10, as the HF-style MiniCPM-o model).
    dtype:             the AR stages' dtype; Token2wav stays float32 (stock).
    backbone_context:  the backbone cache is cleared (a new session context) when the next second
                       would take it past this many positions.
    """

    name: str
    backbone: DecoderShape
    speech: DecoderShape
    input_tokens: int = 25
    text_tokens: int = 10
    speech_tokens: int = CHUNK_TOKENS
    lookahead: int = T2W_CLOCKS.lookahead_tokens
    token2wav: str = "real"
    n_timesteps: int = T2W_CLOCKS.n_steps
    dtype: str = "bfloat16"
    backbone_context: int = 4096
    note: str = ""

    def __post_init__(self):
        if self.speech_tokens != CHUNK_TOKENS:
            raise ValueError(f"DuplexConfig: speech_tokens must be {CHUNK_TOKENS} (one Token2wav chunk: "
                             f"{CHUNK_TOKENS} tokens + {self.lookahead} lookahead = {T2W_CLOCKS.call_frames} mel frames), "
                             f"got {self.speech_tokens}")
        if self.token2wav not in ("real", "teaching"):
            raise ValueError(f"DuplexConfig: token2wav must be 'real' or 'teaching', got {self.token2wav!r}")
        if self.input_tokens < 1 or self.text_tokens < 1:
            raise ValueError("DuplexConfig: input_tokens and text_tokens must be >= 1")
        if self.input_tokens + self.text_tokens > self.backbone_context:
            raise ValueError("DuplexConfig: one second does not fit in backbone_context")
        if self.dtype not in DTYPES:
            raise ValueError(f"DuplexConfig: dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")

    @property
    def torch_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.dtype)

    def token2wav_config(self):
        from ..token2wav import REAL, TEACHING

        return {"real": REAL, "teaching": TEACHING}[self.token2wav]

    def replace(self, **changes) -> "DuplexConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["backbone"]["parameters"] = self.backbone.parameters()
        d["speech"]["parameters"] = self.speech.parameters()
        return d


H200 = DuplexConfig(
    name="h200",
    # An 8B-class backbone at full depth: the Qwen3-8B-like shape (hidden 4096, 36 layers, 32 query /
    # 8 key-value heads, FFN 12288, vocab 151,936) built as Qwen2 (no q/k norm): 8.2 B parameters,
    # 16.4 GB in bfloat16. All 36 layers are built (random init runs on the GPU in seconds).
    backbone=DecoderShape(hidden=4096, layers=36, heads=32, kv_heads=8, intermediate=12288, vocab=151_936),
    # A ChatTTS-sized speech-token decoder (hidden 768, 20 layers, 12 heads, FFN 3072) over the
    # Token2wav vocabulary: an assumption, the paper does not give this stage's shape.
    speech=DecoderShape(hidden=768, layers=20, heads=12, kv_heads=12, intermediate=3072, vocab=_T2W_VOCAB),
    token2wav="real",
    dtype="bfloat16",
    note="declared stand-ins with random weights; backbone 36 layers (full depth), bf16; Token2wav REAL fp32",
)

TINY = DuplexConfig(
    name="tiny",
    backbone=DecoderShape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=1024, max_positions=4096),
    speech=DecoderShape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=_T2W_VOCAB, max_positions=4096),
    token2wav="teaching",
    dtype="float32",
    note="CPU teaching size: same clocks and call pattern as h200, tiny shapes",
)

PRESETS = {"h200": H200, "tiny": TINY}


def preset(name: str | DuplexConfig) -> DuplexConfig:
    """A preset by name ("h200", "tiny"), or the config itself."""
    if isinstance(name, DuplexConfig):
        return name
    if name not in PRESETS:
        raise ValueError(f"unknown duplex preset {name!r}; presets: {sorted(PRESETS)}")
    return PRESETS[name]


# ---------------------------------------------------------------------------------------
# the two language models (random weights from the declaration)
# ---------------------------------------------------------------------------------------


def transformers_module():
    """HF ``transformers``, imported on first use (ImportError with the install line when absent)."""
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("cadencelab.adapters.duplex builds its language models with HF transformers: "
                          "`pip install transformers` (4.5x or 5.x)") from e
    return transformers


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    import torch

    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@dataclass
class DuplexModels:
    """The backbone, the speech-token decoder and the bridge between them (shareable across arms)."""

    cfg: DuplexConfig
    backbone: torch.nn.Module
    speech: torch.nn.Module
    bridge: torch.nn.Linear
    device: torch.device
    build_s: float = 0.0
    cache_kw: str = "past_key_values"  # "cache" in transformers >= 5.x, "past_key_values" before

    def describe(self) -> dict:
        tf = transformers_module()
        return dict(transformers=tf.__version__, cache_kw=self.cache_kw, build_s=round(self.build_s, 3),
                    attn_implementation=getattr(self.backbone.config, "_attn_implementation", None),
                    backbone_parameters=sum(p.numel() for p in self.backbone.parameters()),
                    speech_parameters=sum(p.numel() for p in self.speech.parameters()))


def build_models(cfg: str | DuplexConfig = "tiny", device: str | torch.device = "cpu", seed: int = 0) -> DuplexModels:
    """Build the declared models with seeded random weights directly on ``device`` in ``cfg.dtype``."""
    import torch

    cfg = preset(cfg)
    tf = transformers_module()
    device = torch.device(device)
    t0 = time.perf_counter()
    with torch.no_grad(), _default_dtype(cfg.torch_dtype), device:
        torch.manual_seed(seed)
        backbone = tf.Qwen2ForCausalLM(cfg.backbone.hf_config()).eval()
        torch.manual_seed(seed + 1)
        speech = tf.Qwen2ForCausalLM(cfg.speech.hf_config()).eval()
        torch.manual_seed(seed + 2)
        bridge = torch.nn.Linear(cfg.backbone.hidden, cfg.speech.hidden, bias=False).eval()
        torch.nn.init.normal_(bridge.weight, std=cfg.backbone.hidden ** -0.5)
    for m in (backbone, speech, bridge):
        m.requires_grad_(False)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return DuplexModels(cfg, backbone, speech, bridge, device, time.perf_counter() - t0, cache_keyword(backbone))


def cache_keyword(model) -> str:
    """The keyword a HF decoder-only model's body takes its KV cache by: "cache" (transformers >= 5.2x) or
    "past_key_values" (before)."""
    params = inspect.signature(type(model.get_decoder()).forward).parameters
    return "cache" if "cache" in params else "past_key_values"


# ---------------------------------------------------------------------------------------
# the backbone's declaration (a unit-stride language backbone; outside the lossless scope at its window)
# ---------------------------------------------------------------------------------------


def backbone_declaration(window: int = 2000, layers: int = 36, kv_heads: int = 8, head_dim: int = 128) -> Declaration:
    """A decoder-only language backbone decoding one token per call over a sliding window."""
    clocks = (
        Clock("tokens", "LLM token", rate_hz=12.5),
        Clock("turns", "conversation turn"),
    )
    regions = (
        Region("kv_cache", clock="tokens", shape=(layers, 2, 1, kv_heads, "tokens", head_dim),
               policy=SlidingWindow(window), growth=1, lifetime="stream", role="state", dtype="bfloat16"),
        Region("speech_kv", clock="tokens", shape=(4, 2, 1, 8, "tokens", 64), policy=Ring(16), growth=1,
               lifetime="turn", role="state", dtype="bfloat16"),
    )
    operators = (
        Operator("backbone_decode", reads=("kv_cache",), clock="tokens", call=1),
        Operator("speech_token_decode", reads=("speech_kv",), clock="tokens", call=1, query_dependent=True,
                 description="query length follows the traffic (how many tokens the backbone emitted)"),
    )
    return Declaration("duplex-backbone", clocks, regions, operators, admission=Admission("tokens", 1))


def unbounded_backbone_declaration() -> Declaration:
    """The same backbone with an unbounded KV cache: fails C2 and has no finite catalog."""
    clocks = (Clock("tokens", "LLM token", rate_hz=12.5), Clock("turns", "conversation turn"))
    regions = (
        Region("kv_cache", clock="tokens", shape=(36, 2, 1, 8, "tokens", 128), policy=Unbounded(), growth=1,
               lifetime="stream", role="state", dtype="bfloat16"),
    )
    operators = (Operator("backbone_decode", reads=("kv_cache",), clock="tokens", call=1),)
    return Declaration("unbounded-backbone", clocks, regions, operators)
