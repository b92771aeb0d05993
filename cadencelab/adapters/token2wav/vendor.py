"""The vendor Token2wav stack (``minicpmo==0.1.2``, package ``stepaudio2``) as a dependency.

This module loads the vendor's flow (token encoder + flow-matching DiT) and HiFT vocoder
classes without executing ``stepaudio2/__init__.py`` (which pulls in torchaudio, s3tokenizer,
onnxruntime, hyperpyyaml and transformers), builds them from a declared config with seeded
random weights, sizes their solver cache buffers, saves/loads checkpoints and makes synthetic
speaker prompts.

Units used throughout: *tokens* are 25 Hz speech tokens; *frames* are 50 Hz mel frames
(2 frames per token); *samples* are 24 kHz waveform samples (480 per frame).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from ...contract.examples import T2W_CLOCKS, Token2wavClocks
from . import checkpoint_checks as checks

__all__ = [
    "CacheEnvelope",
    "CheckpointError",
    "DiTConfig",
    "EncoderConfig",
    "HiFTConfig",
    "PromptState",
    "REAL",
    "STOCK_ENVELOPE",
    "TEACHING",
    "Token2wavConfig",
    "build_token2wav",
    "cache_buffer_shapes",
    "config_from_flow_yaml",
    "demand_envelope",
    "demand_frames",
    "load_checkpoint",
    "load_vendor",
    "load_vendor_token2wav_module",
    "make_prompt",
    "parameter_counts",
    "reinit_parameters",
    "save_checkpoint",
    "size_cache_buffers",
    "stock_envelope",
]

INSTALL_HINT = (
    "install the vendor runtime without its heavy dependencies: "
    "`pip install --no-deps minicpmo==0.1.2` and `pip install einops scipy`"
)

# Top-level vendor package and the sub-packages we register bare (no __init__ executed).
_VENDOR_ROOT = "stepaudio2"
_BARE_PACKAGES = (
    "stepaudio2",
    "stepaudio2.cosyvoice2",
    "stepaudio2.cosyvoice2.flow",
    "stepaudio2.cosyvoice2.transformer",
    "stepaudio2.cosyvoice2.utils",
    "stepaudio2.flashcosyvoice",
    "stepaudio2.flashcosyvoice.modules",
    "stepaudio2.flashcosyvoice.modules.hifigan_components",
    "stepaudio2.flashcosyvoice.utils",
)


# --------------------------------------------------------------------------------------
# Loading the vendor modules
# --------------------------------------------------------------------------------------


def _vendor_folder() -> Path:
    """Folder of the installed ``stepaudio2`` package, found without importing it."""
    if _VENDOR_ROOT in sys.modules:
        paths = list(getattr(sys.modules[_VENDOR_ROOT], "__path__", []))
    else:
        spec = importlib.util.find_spec(_VENDOR_ROOT)
        paths = list(spec.submodule_search_locations or []) if spec is not None else []
    if not paths:
        raise ImportError(f"the vendor package `stepaudio2` (from minicpmo) is not installed; {INSTALL_HINT}")
    return Path(paths[0])


def _register_bare_package(name: str, folder: Path) -> types.ModuleType:
    """Put a package module for ``name`` whose ``__path__`` is ``folder`` into sys.modules.

    The package's ``__init__.py`` is not executed; submodules import normally through it.
    An already-imported package (e.g. a fully installed ``stepaudio2``) is left untouched.
    """
    if name in sys.modules:
        return sys.modules[name]
    module = types.ModuleType(name)
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    module.__spec__ = spec
    module.__path__ = [str(folder)]
    module.__package__ = name
    module.__file__ = None
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, module)
    return module


def _register_vendor_packages() -> Path:
    root = _vendor_folder()
    for name in _BARE_PACKAGES:
        rel = name.split(".")[1:]
        _register_bare_package(name, root.joinpath(*rel))
    return root


class _TemporaryStubs:
    """Insert empty stand-in modules into sys.modules for one import, then restore.

    ``names`` maps a module name to the attributes of its stand-in. Every stand-in is
    marked ``__cadencelab_stub__ = True``; whatever sys.modules held before is restored on exit.
    """

    def __init__(self, names: Mapping[str, Mapping[str, Any]]):
        self._names = dict(names)
        self._saved: dict[str, types.ModuleType | None] = {}

    def __enter__(self) -> "_TemporaryStubs":
        for name, attrs in self._names.items():
            self._saved[name] = sys.modules.get(name)
            stub = types.ModuleType(name)
            stub.__dict__.update(attrs)
            stub.__cadencelab_stub__ = True
            stub.__path__ = []  # a package, so `import a.b` resolves through sys.modules
            sys.modules[name] = stub
        for name in self._names:
            parent, _, child = name.rpartition(".")
            if parent in self._names:
                setattr(sys.modules[parent], child, sys.modules[name])
        return self

    def __exit__(self, *exc: object) -> None:
        for name, prior in self._saved.items():
            if prior is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = prior


def _importable(name: str) -> bool:
    """True when ``name`` imports cleanly (a broken install counts as missing)."""
    if name in sys.modules and not getattr(sys.modules[name], "__cadencelab_stub__", False):
        return True
    try:
        if importlib.util.find_spec(name) is None:
            return False
        importlib.import_module(name)
        return True
    except Exception:  # noqa: BLE001 - any failure means we need a stand-in
        return False


def _check_light_dependencies() -> None:
    missing = [name for name in ("einops", "scipy", "numpy") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"the vendor Token2wav code needs {', '.join(missing)}; {INSTALL_HINT}")


@functools.lru_cache(maxsize=1)
def load_vendor() -> types.SimpleNamespace:
    """Import the vendor flow/DiT/encoder/HiFT classes; cached.

    Returns a namespace with the classes ``CausalMaskedDiffWithXvec``, ``CausalConditionalCFM``,
    ``DiT``, ``UpsampleConformerEncoderV2``, ``HiFTGenerator``, the module objects under
    ``modules`` (``flow``, ``flow_matching``, ``decoder_dit``, ``upsample_encoder_v2``,
    ``hifigan``), the package folder ``root``, the installed ``version`` and
    ``dynamo_config_changes`` (the vendor encoder module sets ``torch._dynamo.config``
    ``suppress_errors=True`` and ``cache_size_limit=128`` at import time; we leave that as the
    stock runtime has it and record the (before, after) values here).

    Raises ImportError with install instructions when minicpmo, einops or scipy is missing.
    """
    root = _register_vendor_packages()
    _check_light_dependencies()
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("minicpmo")
        except PackageNotFoundError:
            installed = None
    except Exception:  # noqa: BLE001
        installed = None

    import torch._dynamo

    dyn = torch._dynamo.config
    before = {"suppress_errors": dyn.suppress_errors, "cache_size_limit": dyn.cache_size_limit}

    # flow_matching.py does `import onnxruntime` at top level and never uses it. When
    # onnxruntime is not importable we insert an empty stub for that single import and
    # remove it again right after (the flow_matching module keeps a reference to the stub).
    stubs = {} if _importable("onnxruntime") else {"onnxruntime": {}}
    try:
        with _TemporaryStubs(stubs):
            flow_matching = importlib.import_module("stepaudio2.cosyvoice2.flow.flow_matching")
        decoder_dit = importlib.import_module("stepaudio2.cosyvoice2.flow.decoder_dit")
        encoder = importlib.import_module("stepaudio2.cosyvoice2.transformer.upsample_encoder_v2")
        flow = importlib.import_module("stepaudio2.cosyvoice2.flow.flow")
        hifigan = importlib.import_module("stepaudio2.flashcosyvoice.modules.hifigan")
    except ImportError as exc:
        raise ImportError(f"could not import the vendor Token2wav modules from {root} ({exc}); {INSTALL_HINT}") from exc

    after = {"suppress_errors": dyn.suppress_errors, "cache_size_limit": dyn.cache_size_limit}
    return types.SimpleNamespace(
        CausalMaskedDiffWithXvec=flow.CausalMaskedDiffWithXvec,
        CausalConditionalCFM=flow_matching.CausalConditionalCFM,
        DiT=decoder_dit.DiT,
        UpsampleConformerEncoderV2=encoder.UpsampleConformerEncoderV2,
        HiFTGenerator=hifigan.HiFTGenerator,
        modules=types.SimpleNamespace(
            flow=flow,
            flow_matching=flow_matching,
            decoder_dit=decoder_dit,
            upsample_encoder_v2=encoder,
            hifigan=hifigan,
        ),
        root=root,
        version=installed,
        dynamo_config_changes={k: (before[k], after[k]) for k in before if before[k] != after[k]},
    )


@functools.lru_cache(maxsize=1)
def load_vendor_token2wav_module() -> types.ModuleType:
    """Import the vendor's ``stepaudio2/token2wav.py`` (its ``Token2wav`` class and ``fade_in_out``).

    That file imports torchaudio, s3tokenizer, onnxruntime, hyperpyyaml and (through
    ``flashcosyvoice.utils.audio``) librosa at top level, none of which its streaming path
    uses once a prompt is supplied. For this one import we insert empty stand-in modules for
    s3tokenizer and hyperpyyaml always, and for torchaudio / onnxruntime / librosa only when
    they are not importable; sys.modules is restored right after. The returned module keeps
    references to the stand-ins, so only ``Token2wav.set_stream_cache`` / ``Token2wav.stream``
    / ``fade_in_out`` are usable from it.
    """
    load_vendor()

    def _unavailable(*_: object, **__: object) -> None:
        raise RuntimeError("stand-in module: the audio front end is not available in cadencelab")

    stubs: dict[str, dict[str, Any]] = {
        "s3tokenizer": {"load_model": _unavailable},
        "hyperpyyaml": {"load_hyperpyyaml": _unavailable},
    }
    if not _importable("torchaudio"):
        kaldi: dict[str, Any] = {"fbank": _unavailable}
        stubs["torchaudio"] = {"load": _unavailable}
        stubs["torchaudio.compliance"] = {}
        stubs["torchaudio.compliance.kaldi"] = kaldi
    if not _importable("onnxruntime"):
        stubs["onnxruntime"] = {}
    if not _importable("librosa"):
        stubs["librosa"] = {}
        stubs["librosa.filters"] = {"mel": _unavailable}
    with _TemporaryStubs(stubs):
        module = importlib.import_module("stepaudio2.token2wav")
    return module


# --------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------


def _require(cond: bool, what: str) -> None:
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
        _require(
            enc.input_size == self.input_size,
            f"Token2wavConfig.encoder.input_size ({enc.input_size}) must equal input_size ({self.input_size})",
        )
        _require(
            enc.output_size == enc.input_size,
            f"Token2wavConfig.encoder.output_size ({enc.output_size}) must equal encoder.input_size "
            f"({enc.input_size}): the encoder re-embeds its upsampled output with an input_size-wide layer",
        )
        _require(
            enc.output_size % enc.attention_heads == 0,
            f"Token2wavConfig.encoder.output_size ({enc.output_size}) must be divisible by attention_heads "
            f"({enc.attention_heads})",
        )
        _require(
            dit.in_channels == 4 * self.output_size,
            f"Token2wavConfig.estimator.in_channels ({dit.in_channels}) must be 4 * output_size "
            f"({4 * self.output_size}): noise, encoder_proj output, speaker and condition are stacked",
        )
        _require(
            dit.out_channels == self.output_size,
            f"Token2wavConfig.estimator.out_channels ({dit.out_channels}) must equal output_size ({self.output_size})",
        )
        _require(self.output_size == 80, f"Token2wavConfig.output_size ({self.output_size}) must be 80: HiFT reads 80 mel channels")
        _require(
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


# --------------------------------------------------------------------------------------
# Cache envelopes
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheEnvelope:
    """Capacity of the solver's preallocated cache buffers.

    ``n_slots``: solver steps the CFM can hold (one cache per Euler step);
    ``max_frames``: mel frames of attention history (cached + current chunk) per slot.
    """

    n_slots: int
    max_frames: int

    def __post_init__(self) -> None:
        _require(self.n_slots >= 1, f"CacheEnvelope.n_slots must be >= 1, got {self.n_slots}")
        _require(self.max_frames >= 1, f"CacheEnvelope.max_frames must be >= 1, got {self.max_frames}")


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


# --------------------------------------------------------------------------------------
# Construction
# --------------------------------------------------------------------------------------


def _subseed(seed: int, label: str) -> int:
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


def _construct(
    cfg: Token2wavConfig, *, meta: bool, envelope: CacheEnvelope = STOCK_ENVELOPE
) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Vendor ``(flow, hift)`` for ``cfg``.

    The CFM and its DiT are created on the ``meta`` device, their cache buffers resized to
    ``envelope`` there, and only then given (uninitialised) CPU storage: the vendor's
    hard-coded 16 x 1000 buffers are never allocated for a config that does not ask for them.
    With ``meta=True`` nothing gets storage (for counting). The caller must overwrite every
    parameter and buffer of the decoder (see :func:`_materialise_decoder`). The vendor
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


def _materialise_decoder(flow: torch.nn.Module, noise_seed: int) -> None:
    """Zero the solver caches at their current shapes and draw ``rand_noise`` (1, 80, 30000)
    from ``noise_seed`` on CPU (the vendor draws it from the global RNG in ``__init__``)."""
    decoder = flow.decoder
    att = decoder.att_cache_buffer
    size_cache_buffers(flow, att.shape[0], att.shape[4])
    gen = torch.Generator(device="cpu").manual_seed(int(noise_seed))
    noise = torch.randn(tuple(decoder.rand_noise.shape), generator=gen, dtype=torch.float32)
    decoder.rand_noise = noise.to(device=decoder.rand_noise.device, dtype=decoder.rand_noise.dtype)


def _assert_materialised(module: torch.nn.Module, label: str) -> None:
    for name, t in [*module.named_parameters(), *module.named_buffers()]:
        if t.is_meta:
            raise RuntimeError(f"{label}.{name} was left on the meta device")


def parameter_counts(cfg: Token2wavConfig) -> dict[str, int]:
    """Parameter counts of the vendor modules for ``cfg`` (built on ``meta``: no memory).

    Keys: ``flow``, ``estimator`` (DiT), ``encoder``, ``hift``.
    """
    flow, hift = _construct(cfg, meta=True)

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
    flow, hift = _construct(cfg, meta=False, envelope=envelope)
    _materialise_decoder(flow, _subseed(seed, "rand_noise"))
    reinit_parameters(flow, _subseed(seed, "flow"))
    reinit_parameters(hift, _subseed(seed, "hift"))
    _assert_materialised(flow, "flow")
    _assert_materialised(hift, "hift")
    flow = flow.to(dtype=dtype)
    return flow.eval().to(device), hift.eval().to(device)


# --------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------


class CheckpointError(ValueError):
    """A checkpoint folder cannot be loaded; the message names the offending file."""


# Accepted `!new:` classes (also with a `stepaudio2.` prefix) -> the part of the config they fill.
_TAGS = {
    "cosyvoice2.flow.flow.CausalMaskedDiffWithXvec": "flow",
    "cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2": "encoder",
    "cosyvoice2.flow.flow_matching.CausalConditionalCFM": "decoder",
    "cosyvoice2.flow.decoder_dit.DiT": "estimator",
}
# Scalar keyword arguments each part may carry, and its nested `!new:` part.
_SCALAR_KEYS = {
    "flow": ("input_size", "output_size", "spk_embed_dim", "output_type", "vocab_size"),
    "encoder": tuple(f.name for f in dataclasses.fields(EncoderConfig)),
    "decoder": ("inference_cfg_rate",),
    "estimator": tuple(f.name for f in dataclasses.fields(DiTConfig)),
}
_NESTED_KEYS = {"flow": ("encoder", "decoder"), "decoder": ("estimator",), "encoder": (), "estimator": ()}


@dataclass(frozen=True)
class _Spec:
    """An inert ``!new:`` node: which part it is and its keyword arguments."""

    kind: str
    kwargs: dict[str, Any]


def _yaml_scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, str):
        return f"'{v}'"
    return repr(v)


def _yaml_dump(cfg: Token2wavConfig) -> str:
    def block(pairs: Mapping[str, Any], indent: int) -> list[str]:
        return [f"{' ' * indent}{k}: {_yaml_scalar(v)}" for k, v in pairs.items()]

    top = {k: getattr(cfg, k) for k in _SCALAR_KEYS["flow"]}
    return "\n".join(
        [
            f"# cadencelab Token2wav flow config '{cfg.name}'; the same tags as the released flow.yaml.",
            f"# HiFT is not described here: its base_channels ({cfg.hift.base_channels}) is read from hift.pt.",
            "flow: !new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec",
            *block(top, 4),
            "    encoder: !new:cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2",
            *block(dataclasses.asdict(cfg.encoder), 8),
            "    decoder: !new:cosyvoice2.flow.flow_matching.CausalConditionalCFM",
            *block({"inference_cfg_rate": cfg.inference_cfg_rate}, 8),
            "        estimator: !new:cosyvoice2.flow.decoder_dit.DiT",
            *block(dataclasses.asdict(cfg.estimator), 12),
        ]
    ) + "\n"


def _parse_flow_yaml(path: Path) -> _Spec:
    """Parse ``flow.yaml`` without executing anything: ``!new:`` nodes become inert :class:`_Spec`."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    def line(node: Any) -> int:
        return node.start_mark.line + 1

    def new(loader: yaml.SafeLoader, suffix: str, node: Any) -> _Spec:
        kind = _TAGS.get(suffix.removeprefix("stepaudio2."))
        if kind is None:
            raise CheckpointError(f"{path}: unknown class in tag '!new:{suffix}' (line {line(node)})")
        if not isinstance(node, yaml.MappingNode):
            raise CheckpointError(f"{path}: tag '!new:{suffix}' must carry keyword arguments (line {line(node)})")
        return _Spec(kind, loader.construct_mapping(node, deep=True))

    def reject(loader: yaml.SafeLoader, suffix: str, node: Any) -> None:
        raise CheckpointError(f"{path}: unsupported tag {node.tag!r} (line {line(node)})")

    _Loader.add_multi_constructor("!new:", new)  # checked before the catch-all below
    _Loader.add_multi_constructor("!", reject)
    checks.limit_aliases(_Loader, path)
    text = checks.read_yaml_text(path)  # a small regular UTF-8 file
    try:
        doc = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except CheckpointError:
        raise
    except yaml.YAMLError as exc:
        raise CheckpointError(f"{path}: malformed YAML ({' '.join(str(exc).split())[:300]})") from None
    except RecursionError:
        raise CheckpointError(f"{path}: YAML nested too deeply") from None
    except (TypeError, ValueError) as exc:  # e.g. an unhashable mapping key
        raise CheckpointError(f"{path}: unusable YAML ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("flow"), _Spec) or doc["flow"].kind != "flow":
        raise CheckpointError(f"{path}: expected a top-level `flow: !new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec`")
    return doc["flow"]


def _spec_kwargs(spec: Any, kind: str, where: str, path: Path) -> dict[str, Any]:
    """Scalar kwargs of ``spec`` with the vendor class defaults filled in for absent keys."""
    if not isinstance(spec, _Spec) or spec.kind != kind:
        raise CheckpointError(f"{path}: {where} must be a `!new:` {kind} node")
    scalars, nested = _SCALAR_KEYS[kind], _NESTED_KEYS[kind]
    odd = [k for k in spec.kwargs if not isinstance(k, str)]
    if odd:
        raise CheckpointError(f"{path}: {where} has a key that is not a name ({type(odd[0]).__name__})")
    extra = sorted(set(spec.kwargs) - set(scalars) - set(nested))
    if extra:
        raise CheckpointError(f"{path}: {where} has unsupported keys {extra}")
    v = load_vendor()
    cls = {"flow": v.CausalMaskedDiffWithXvec, "encoder": v.UpsampleConformerEncoderV2,
           "decoder": v.CausalConditionalCFM, "estimator": v.DiT}[kind]
    defaults = {
        name: p.default for name, p in inspect.signature(cls.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    out = {}
    for key in scalars:
        if key in spec.kwargs:
            out[key] = spec.kwargs[key]
        elif key in defaults:
            out[key] = defaults[key]
        else:
            raise CheckpointError(f"{path}: {where}.{key} is required")
    checks.check_values(path, where, {k: v for k, v in out.items() if k in spec.kwargs}, _FIELD_TYPES[kind])
    return out


def _field_types(cls) -> dict[str, type]:
    """name -> int / float / str / bool of a config dataclass's fields."""
    named = {"int": int, "float": float, "str": str, "bool": bool}
    return {f.name: named.get(f.type if isinstance(f.type, str) else f.type.__name__, object)
            for f in dataclasses.fields(cls)}


# The Python type each flow.yaml keyword must have (from the config dataclasses).
_FIELD_TYPES = {"flow": _field_types(Token2wavConfig), "encoder": _field_types(EncoderConfig),
                "decoder": _field_types(Token2wavConfig), "estimator": _field_types(DiTConfig)}


def config_from_flow_yaml(
    path: str | Path, hift: HiFTConfig = HiFTConfig(), name: str | None = None
) -> Token2wavConfig:
    """Read a ``flow.yaml`` (the released one or ours) into a :class:`Token2wavConfig`.

    Absent keys take the vendor class defaults, as hyperpyyaml would.
    """
    path = Path(path)
    flow = _parse_flow_yaml(path)
    decoder = flow.kwargs.get("decoder")
    top = _spec_kwargs(flow, "flow", "flow", path)
    enc = _spec_kwargs(flow.kwargs.get("encoder"), "encoder", "flow.encoder", path)
    dec = _spec_kwargs(decoder, "decoder", "flow.decoder", path)
    dit = _spec_kwargs(decoder.kwargs.get("estimator"), "estimator", "flow.decoder.estimator", path)
    checks.check_shapes(path, top, enc, dit)
    try:
        return Token2wavConfig(
            name=name or path.parent.name,
            encoder=EncoderConfig(**enc),
            estimator=DiTConfig(**dit),
            hift=hift,
            **top,
            **dec,
        )
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: {str(exc)[:300]}") from None


def save_checkpoint(folder: str | Path, flow: torch.nn.Module, hift: torch.nn.Module, cfg: Token2wavConfig) -> Path:
    """Write ``flow.yaml``, ``flow.pt`` and ``hift.pt`` (CPU state dicts) into ``folder``.

    ``flow.yaml`` uses the same ``!new:`` tags as the released file. ``rand_noise`` and the
    solver caches are non-persistent buffers and are not saved. Returns the folder.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "flow.yaml").write_text(_yaml_dump(cfg))
    torch.save({k: v.detach().cpu() for k, v in flow.state_dict().items()}, folder / "flow.pt")
    torch.save({k: v.detach().cpu() for k, v in hift.state_dict().items()}, folder / "hift.pt")
    return folder


def _torch_load(path: Path) -> dict[str, torch.Tensor]:
    if not path.exists():
        raise CheckpointError(f"{path}: missing file")
    if not path.is_file():  # a folder, FIFO or device: torch.load would fail or block
        raise CheckpointError(f"{path}: not a regular file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for corrupt files
        raise CheckpointError(f"{path}: cannot be read as a torch state dict ({type(exc).__name__}: {exc})") from exc
    if not isinstance(state, Mapping) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise CheckpointError(f"{path}: expected a mapping of parameter names to tensors")
    return dict(state)


def _hift_base_channels(state: Mapping[str, torch.Tensor], path: Path) -> int:
    for key in ("conv_pre.parametrizations.weight.original1", "conv_pre.weight_v", "conv_pre.weight"):
        if key in state:
            return int(state[key].shape[0])
    raise CheckpointError(f"{path}: no conv_pre weight found; not a HiFT state dict")


def _load_strict(module: torch.nn.Module, state: Mapping[str, torch.Tensor], path: Path) -> None:
    try:
        module.load_state_dict(state, strict=True)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise CheckpointError(f"{path}: does not match the declared modules ({str(exc)[:500]})") from None


def load_checkpoint(
    folder: str | Path,
    device: str | torch.device = "cpu",
    seed_for_noise: int = 0,
    dtype: torch.dtype = torch.float32,
    envelope: CacheEnvelope = STOCK_ENVELOPE,
    max_bytes: int = checks.MAX_CHECKPOINT_BYTES,
) -> tuple[torch.nn.Module, torch.nn.Module, Token2wavConfig]:
    """Load ``folder/{flow.yaml, flow.pt, hift.pt}`` into vendor modules: ``(flow, hift, cfg)``.

    ``flow.yaml`` is parsed with inert constructors (no code runs); only the four vendor flow
    classes are accepted (``cosyvoice2.`` or ``stepaudio2.cosyvoice2.`` paths). HiFT's
    ``base_channels`` is read from ``hift.pt``, whose keys may carry a ``generator.`` prefix.
    Both state dicts load strictly. ``rand_noise`` is not part of a checkpoint: it is drawn
    from ``seed_for_noise`` (the vendor draws it from the global RNG at construction, so a
    real checkpoint run through the vendor class uses other start noise unless copied over).
    ``flow.yaml``'s values are checked (types, ranges, divisibility; see
    :mod:`.checkpoint_checks`) and the bytes of the modules counted on ``meta`` before anything
    is allocated: a config needing more than ``max_bytes`` is refused.
    Raises :class:`CheckpointError` naming the file on any problem.
    """
    folder = Path(folder)
    flow_path, hift_path, yaml_path = folder / "flow.pt", folder / "hift.pt", folder / "flow.yaml"
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a checkpoint folder")
    config_from_flow_yaml(yaml_path)  # the values, checked before any weights are read
    hift_state = {k.removeprefix("generator."): t for k, t in _torch_load(hift_path).items()}
    base = _hift_base_channels(hift_state, hift_path)
    if not 8 <= base <= checks.MAX_WIDTH or base % 8:
        raise CheckpointError(f"{hift_path}: conv_pre has {base} output channels (a positive multiple of 8 "
                              f"up to {checks.MAX_WIDTH} expected)")
    cfg = config_from_flow_yaml(yaml_path, hift=HiFTConfig(base))
    try:
        need = checks.estimate_bytes(lambda: _construct(cfg, meta=True, envelope=envelope),
                                     torch.empty((), dtype=dtype).element_size())
    except (RuntimeError, ValueError, TypeError, IndexError, ZeroDivisionError) as exc:
        raise CheckpointError(f"{yaml_path}: the vendor modules cannot be built from these values "
                              f"({type(exc).__name__}: {str(exc)[:200]})") from None
    checks.check_bytes(yaml_path, need, max_bytes)
    flow_state = _torch_load(flow_path)
    flow, hift = _construct(cfg, meta=False, envelope=envelope)
    _materialise_decoder(flow, _subseed(seed_for_noise, "rand_noise"))
    flow = flow.to(dtype=dtype)
    _load_strict(flow, flow_state, flow_path)
    _load_strict(hift, hift_state, hift_path)
    _assert_materialised(flow, "flow")
    return flow.eval().to(device), hift.eval().to(device), cfg


# --------------------------------------------------------------------------------------
# Prompt state
# --------------------------------------------------------------------------------------


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
        _require(tok.dim() == 2 and tok.shape[0] == 1, f"PromptState.prompt_speech_tokens must be (1, T), got {tuple(tok.shape)}")
        _require(not tok.is_floating_point(), f"PromptState.prompt_speech_tokens must be integer, got {tok.dtype}")
        _require(spk.dim() == 2 and spk.shape[0] == 1, f"PromptState.spk_emb must be (1, D), got {tuple(spk.shape)}")
        _require(mel.dim() == 3 and mel.shape[0] == 1, f"PromptState.prompt_mels must be (1, frames, 80), got {tuple(mel.shape)}")

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
    _require(n_tokens >= 1, f"make_prompt: n_tokens must be >= 1, got {n_tokens}")
    gen = torch.Generator(device="cpu").manual_seed(_subseed(seed, "prompt"))
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
