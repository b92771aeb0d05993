"""One full-duplex second, stage by stage, on the clocks its stages declare.

A duplex runtime must turn each second of input into a second of speech before the next
second arrives. This module composes the stages of one such second so that they can be timed
and profiled together:

    backbone        a decoder-only language model: prefill of the second's input
                    (``input_tokens`` ids), then greedy decoding of ``text_tokens`` text/control
                    tokens with a KV cache that persists across the seconds of a session;
    speech_decoder  a decoder-only speech-token model conditioned on the backbone's hidden
                    states (through a linear bridge): greedy decoding of ``speech_tokens`` (one
                    Token2wav chunk) tokens, the speech-token clock (its cache restarts every second);
    synthesis       the streaming Token2wav (flow + HiFT vocoder) through
                    :class:`~cadencelab.adapters.token2wav.runtime.Token2wavRuntime`, one chunk
                    (its tokens plus the lookahead, Token2wav's clocks) = 1.0 s of audio, under an arm
                    ("B0" stock, "SRc" both rules, ...). Its sub-stages ``flow`` and ``vocoder``
                    are the runtime's own ranges and are timed too (parent ``synthesis``).

The two language models are Qwen2-architecture transformers (HF ``transformers``) with random
weights drawn from a declared :class:`DuplexConfig`; nothing is downloaded. Their shapes are
declared stand-ins (see :data:`H200` and :data:`TINY`), not a released checkpoint: the point is the
orchestration of a second (how many forwards, of which shapes, in which order), which the
declaration fixes, not the tokens they produce. Decoding is greedy (argmax) and never leaves the
device until the chunk's speech tokens are handed to the synthesis stage.

Every stage runs inside ``torch.profiler.record_function(<stage>)`` (the whole second inside
``"duplex_second"``) and is timed with CUDA events on a GPU (device timeline, so host-side launch
gaps count) or ``time.perf_counter`` on a CPU.

    >>> h = DuplexSecond("tiny", arm="B0", device="cpu")
    >>> h.warmup()
    >>> df = h.run_second()                     # stage, start_ms, dur_ms, source, arm, ...
    >>> df, prof = h.profile_second()           # + a cadencelab.profile.capture.Profile
    >>> prof.stages(["backbone", "speech_decoder", "synthesis"])
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import inspect
import time
from dataclasses import dataclass
from typing import Iterator

import pandas as pd
import torch

from ..adapters.token2wav.vendor import REAL as _T2W_REAL
from ..contract import T2W_CLOCKS
from .capture import Profile, profiled
from .export import export_chrome_trace
from .metrics import windows
from .trace import Trace

__all__ = [
    "DecoderShape", "DuplexConfig", "H200", "TINY", "PRESETS", "preset", "DuplexModels", "build_models",
    "DuplexSecond", "run_second", "profile_second", "trim_trace", "write_trimmed_trace", "second_totals",
    "STAGES", "SUBSTAGES", "SECOND_RANGE", "STAGE_COLUMNS",
]

_T2W_VOCAB = _T2W_REAL.vocab_size  # the speech decoder emits Token2wav's tokens
STAGES = ("backbone", "speech_decoder", "synthesis")
SUBSTAGES = ("flow", "vocoder")  # the Token2wav runtime's own ranges inside "synthesis"
SECOND_RANGE = "duplex_second"
STAGE_COLUMNS = ["stage", "start_ms", "dur_ms", "source", "arm", "second", "parent", "device", "preset"]
CHUNK_TOKENS = T2W_CLOCKS.tokens_per_chunk  # Token2wav: one chunk (+ its lookahead) per call = 1.0 s of audio


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
        Qwen2Config = _transformers().Qwen2Config
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
        _ = self.torch_dtype

    @property
    def torch_dtype(self) -> torch.dtype:
        dt = getattr(torch, self.dtype, None)
        if not isinstance(dt, torch.dtype):
            raise ValueError(f"DuplexConfig: unknown dtype {self.dtype!r}")
        return dt

    def token2wav_config(self):
        from ..adapters.token2wav import REAL, TEACHING

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


def _transformers():
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("cadencelab.profile.duplex builds its language models with HF transformers: "
                          "`pip install transformers` (4.5x or 5.x)") from e
    return transformers


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
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
        tf = _transformers()
        return dict(transformers=tf.__version__, cache_kw=self.cache_kw, build_s=round(self.build_s, 3),
                    attn_implementation=getattr(self.backbone.config, "_attn_implementation", None),
                    backbone_parameters=sum(p.numel() for p in self.backbone.parameters()),
                    speech_parameters=sum(p.numel() for p in self.speech.parameters()))


def build_models(cfg: str | DuplexConfig = "tiny", device: str | torch.device = "cpu", seed: int = 0) -> DuplexModels:
    """Build the declared models with seeded random weights directly on ``device`` in ``cfg.dtype``."""
    cfg = preset(cfg)
    tf = _transformers()
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
    params = inspect.signature(type(backbone.model).forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    return DuplexModels(cfg, backbone, speech, bridge, device, time.perf_counter() - t0, cache_kw)


# ---------------------------------------------------------------------------------------
# timing: CUDA events on a GPU, perf_counter on a CPU (same interface)
# ---------------------------------------------------------------------------------------


class _HostEvent:
    """A perf_counter stand-in for ``torch.cuda.Event`` (record / elapsed_time / synchronize)."""

    __slots__ = ("t_ns",)

    def __init__(self):
        self.t_ns = None

    def record(self, stream=None):
        self.t_ns = time.perf_counter_ns()

    def elapsed_time(self, end: "_HostEvent") -> float:
        return (end.t_ns - self.t_ns) / 1e6

    def synchronize(self):
        pass


class _StageClock:
    """Marks stage boundaries of one second; ``rows()`` turns them into milliseconds."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.spans: list[tuple[str, str, object, object]] = []
        self.origin = self.event()  # recorded by the caller where the second starts

    def event(self):
        return torch.cuda.Event(enable_timing=True) if self.cuda else _HostEvent()

    def mark(self):
        e = self.event()
        e.record()
        return e

    @contextlib.contextmanager
    def stage(self, name: str, parent: str = "") -> Iterator[None]:
        with torch.profiler.record_function(name):
            m0 = self.mark()
            try:
                yield
            finally:
                self.spans.append((name, parent, m0, self.mark()))

    def rows(self) -> list[dict]:
        if self.spans:
            self.spans[-1][3].synchronize()
        if self.cuda:
            torch.cuda.synchronize()
        return [dict(stage=n, parent=p, start_ms=float(self.origin.elapsed_time(a)), dur_ms=float(a.elapsed_time(b)))
                for n, p, a, b in self.spans]


def second_totals(df: pd.DataFrame, cadence_ms: float = 1000.0) -> pd.DataFrame:
    """Per (arm, second): end of the last top-level stage (``second_ms``) and its share over the cadence."""
    top = df[df.get("parent", pd.Series("", index=df.index)).fillna("") == ""]
    keys = [k for k in ("arm", "second", "warmup") if k in top.columns]
    g = top.assign(end_ms=top["start_ms"] + top["dur_ms"]).groupby(keys, sort=False, dropna=False)
    out = g.agg(second_ms=("end_ms", "max")).reset_index()
    out["over_cadence"] = out["second_ms"] / cadence_ms - 1.0
    return out


# ---------------------------------------------------------------------------------------
# the harness
# ---------------------------------------------------------------------------------------


class DuplexSecond:
    """One session of duplex seconds under one Token2wav arm.

    cfg:     a :class:`DuplexConfig` or a preset name ("h200", "tiny").
    arm:     a Token2wav runtime arm ("B0", "SRc", ...).
    models:  :class:`DuplexModels` to share between arms (built from ``cfg`` when None).
    backend: the replay backend of the runtime ("auto": CUDA graphs on a GPU, eager bookkeeping on a CPU).

    The session starts at construction (:meth:`reset`): the Token2wav stream cache is primed with
    the prompt, the speech buffer holds 3 silence tokens, the backbone cache is empty and the
    generators are seeded. :meth:`run_second` then runs one second and returns its stage frame;
    ``history`` keeps per-second facts (tokens, PCM digest, total).
    """

    def __init__(self, cfg: str | DuplexConfig = "tiny", arm: str = "B0", device: str | torch.device = "cpu",
                 seed: int = 0, models: DuplexModels | None = None, backend: str = "auto"):
        from ..adapters.token2wav import SILENCE_TOKEN
        from ..adapters.token2wav.runtime import build_runtime, declaration_for
        from ..contract import catalog_width

        self.cfg = preset(cfg)
        self.arm = arm
        self.device = torch.device(device)
        self.seed = seed
        if models is not None and (models.cfg != self.cfg or models.device != self.device):
            raise ValueError(f"DuplexSecond: shared models were built for {models.cfg.name!r} on {models.device}, "
                             f"not {self.cfg.name!r} on {self.device}")
        self.models = models or build_models(self.cfg, self.device, seed)
        t2w = self.cfg.token2wav_config()
        if self.cfg.speech.vocab != t2w.vocab_size:
            raise ValueError(f"DuplexConfig {self.cfg.name!r}: speech vocab {self.cfg.speech.vocab} must equal the "
                             f"Token2wav vocabulary {t2w.vocab_size}")
        t0 = time.perf_counter()
        self.rt, self.prompt = build_runtime(t2w, arm, seed, self.device, backend=backend,
                                             n_timesteps=self.cfg.n_timesteps)
        self.token2wav_build_s = time.perf_counter() - t0
        # distinct cache extents of a turn's steady calls: the declared K
        self.turn_classes = int(catalog_width(declaration_for(t2w, self.cfg.n_timesteps),
                                              "estimator_att_cache")["K"])
        self.silence = SILENCE_TOKEN
        self._clock: _StageClock | None = None
        self.substages_timed = self._hook_runtime_ranges()
        self.history: list[dict] = []
        self.second = 0
        self.reset()

    # -- session ---------------------------------------------------------------------------
    def _hook_runtime_ranges(self) -> bool:
        """Time the runtime's own ``flow`` / ``vocoder`` ranges as sub-stages of ``synthesis``.

        The runtime opens its ranges through ``Token2wavRuntime._range(name)`` when ``ranges`` is
        on; the harness turns ranges on and, where that method exists, stands in a timed version
        on this instance. Returns False (sub-stages then only in profiles) when it does not.
        """
        rt = self.rt
        rt.ranges = True
        if not callable(getattr(rt, "_range", None)):
            return False

        def _range(name: str):
            if name != "synthesis" and self._clock is not None:
                return self._clock.stage(name, parent="synthesis")
            return torch.profiler.record_function(name)  # "synthesis" is timed by stream(events=...)

        rt._range = _range
        return True

    def _seed(self, seed: int) -> None:
        torch.manual_seed(seed)
        if self.device.type == "cuda":
            torch.cuda.manual_seed(seed)

    def reset(self) -> None:
        """Turn start: prime Token2wav with the prompt, empty the caches, seed the generators."""
        self._seed(self.seed)
        with torch.profiler.record_function("priming"):
            self.rt.set_stream_cache(self.prompt)
        self.buffer: list[int] = [self.silence] * self.cfg.lookahead
        self.backbone_cache = None
        self.chunks_in_turn = 0

    def _new_cache(self):
        return _transformers().DynamicCache()

    def _second_input(self, second: int) -> torch.Tensor:
        """The second's input ids (1, input_tokens), from a generator seeded by (seed, second)."""
        g = torch.Generator().manual_seed(1_000_003 * (self.seed + 1) + second)
        ids = torch.randint(0, self.cfg.backbone.vocab, (1, self.cfg.input_tokens), generator=g)
        return ids.to(self.device)

    # -- stages ----------------------------------------------------------------------------
    def _forward(self, model, cache, **inputs) -> torch.Tensor:
        out = model.model(**inputs, **{self.models.cache_kw: cache}, use_cache=True)
        return out.last_hidden_state  # (1, T, H)

    @torch.inference_mode()
    def _backbone(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Prefill the input, decode ``text_tokens`` greedily: (hidden (1, N, Hb), tokens (1, N))."""
        m, n = self.models.backbone, self.cfg.text_tokens
        if self.backbone_cache is None or (self.backbone_cache.get_seq_length() + ids.shape[1] + n
                                           > self.cfg.backbone_context):
            self.backbone_cache = self._new_cache()
        cache = self.backbone_cache
        h = self._forward(m, cache, input_ids=ids)[:, -1:]  # (1, 1, Hb)
        hidden, tokens = [h], [m.lm_head(h).argmax(-1)]  # (1, 1)
        for _ in range(n - 1):
            h = self._forward(m, cache, input_ids=tokens[-1])
            hidden.append(h)
            tokens.append(m.lm_head(h).argmax(-1))
        return torch.cat(hidden, 1), torch.cat(tokens, 1)

    @torch.inference_mode()
    def _speech_decoder(self, hidden: torch.Tensor) -> torch.Tensor:
        """Condition on the bridged hidden states, decode ``speech_tokens`` speech tokens greedily: (1, speech_tokens)."""
        m, n = self.models.speech, self.cfg.speech_tokens
        cache = self._new_cache()
        cond = self.models.bridge(hidden.to(self.cfg.torch_dtype))  # (1, N, Hs)
        h = self._forward(m, cache, inputs_embeds=cond)[:, -1:]
        tokens = [m.lm_head(h).argmax(-1)]
        for _ in range(n - 1):
            h = self._forward(m, cache, input_ids=tokens[-1])
            tokens.append(m.lm_head(h).argmax(-1))
        return torch.cat(tokens, 1)

    def _synthesise(self, clock: _StageClock | None) -> bytes:
        """One Token2wav chunk from the speech buffer (the chunk plus its lookahead; then drop the chunk)."""
        piece = self.buffer[: CHUNK_TOKENS + self.cfg.lookahead]
        events = None
        if clock is not None:
            events = (clock.event(), clock.event())
        pcm = self.rt.stream(piece, last_chunk=False, events=events)
        if clock is not None:
            clock.spans.append(("synthesis", "", events[0], events[1]))
        self.buffer = self.buffer[CHUNK_TOKENS:]
        self.chunks_in_turn += 1
        return pcm

    # -- one second ------------------------------------------------------------------------
    def run_second(self) -> pd.DataFrame:
        """Run one duplex second; one row per stage (and sub-stage).

        Columns: stage, start_ms (from the second's first mark), dur_ms, source ("measured"), arm,
        second, parent ("" for backbone / speech_decoder / synthesis, "synthesis" for flow /
        vocoder), device, preset.
        """
        ids = self._second_input(self.second)
        clock = self._clock = _StageClock(self.device)
        try:
            with torch.profiler.record_function(SECOND_RANGE):
                clock.origin.record()
                with clock.stage("backbone"):
                    hidden, text = self._backbone(ids)
                with clock.stage("speech_decoder"):
                    speech = self._speech_decoder(hidden)
                tokens = speech[0].tolist()  # the device -> host hand-off to synthesis
                self.buffer += tokens
                pcm = self._synthesise(clock)
            rows = clock.rows()
        finally:
            self._clock = None
        df = pd.DataFrame(rows)
        df["source"], df["arm"], df["second"] = "measured", self.arm, self.second
        df["device"], df["preset"] = str(self.device), self.cfg.name
        df = df.sort_values("start_ms", kind="stable").reset_index(drop=True)[STAGE_COLUMNS]
        top = df[df["parent"] == ""]
        self.history.append(dict(
            arm=self.arm, second=self.second, chunk_in_turn=self.chunks_in_turn - 1,
            second_ms=float((top["start_ms"] + top["dur_ms"]).max()),
            text_tokens=text[0].tolist(), speech_tokens=tokens,
            pcm_bytes=len(pcm), pcm_sha16=hashlib.sha256(pcm).hexdigest()[:16],
        ))
        self.second += 1
        return df

    def seconds_frame(self) -> pd.DataFrame:
        """Per-second facts of this session: totals, tokens, PCM digest."""
        return pd.DataFrame(self.history)

    def warmup(self, seconds: int = 1, catalog_passes: int = 2) -> pd.DataFrame:
        """Warm-up seconds, then ``catalog_passes`` turns of synthesis-only chunks, then a new turn.

        A turn's Token2wav calls go through ``turn_classes`` distinct cache extents (the declared
        K: the prompt, then one more chunk each, up to prompt + retained frames for the rest of the turn). Replay arms probe and capture a class at its
        first occurrence, and a graph's first replay is slower than later ones: the first pass
        captures, the second replays each class once, so neither lands in a timed second.
        Returns the warm-up seconds' rows (``warmup`` True).
        """
        frames = [self.run_second().assign(warmup=True) for _ in range(max(0, int(seconds)))]
        for _ in range(max(0, int(catalog_passes))):
            while self.chunks_in_turn < self.turn_classes:
                last = self.history[-1]["speech_tokens"] if self.history else [self.silence] * CHUNK_TOKENS
                self.buffer += last
                self._synthesise(None)
            self.reset()
        if not catalog_passes:
            self.reset()
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=STAGE_COLUMNS + ["warmup"])

    def run(self, seconds: int = 3, warmup: int = 1, progress: bool = False) -> pd.DataFrame:
        """``seconds`` seconds in all, the first ``warmup`` of them warm-up (see :meth:`warmup`)."""
        warm = min(int(warmup), int(seconds))
        frames = [self.warmup(warm)] if warm else []
        it = range(int(seconds) - warm)
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(it, desc=f"duplex {self.arm}", unit="s", leave=False)
        for _ in it:
            frames.append(self.run_second().assign(warmup=False))
        return pd.concat(frames, ignore_index=True)

    def profile_second(self, trace_path: str | None = None, trim: bool = True, max_cpu_depth: int | None = None,
                       **profile_kw) -> tuple[pd.DataFrame, Profile]:
        """Run one second under ``torch.profiler``: (stage frame, :class:`Profile`).

        With ``trim`` the profile's trace is cut to the ``duplex_second`` range (metadata kept,
        args dropped; see :func:`trim_trace`) and, with ``trace_path``, written there
        (gzip when it ends in .gz); ``max_cpu_depth`` thins the host ops (see :func:`trim_trace`).
        Without ``trim`` the raw profiler trace is kept at ``trace_path``.
        ``p.stages(STAGES + SUBSTAGES)`` attributes device work to each stage.
        """
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        with profiled(self.device, trace_path=None if trim else trace_path, window=SECOND_RANGE,
                      **profile_kw) as p:
            df = self.run_second()
        p.result = df
        if trim:
            p.trace = trim_trace(p.trace, SECOND_RANGE, max_cpu_depth=max_cpu_depth)
            if trace_path is not None:
                p.path = export_chrome_trace(p.trace, trace_path)
        return df, p

    def close(self) -> None:
        """Drop the runtime (and its graphs) so another arm can be built in the same process."""
        self.rt = None
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------
# module-level conveniences
# ---------------------------------------------------------------------------------------


def run_second(cfg: str | DuplexConfig = "tiny", arm: str = "B0", device: str | torch.device = "cpu", seed: int = 0,
               warmup: int = 1, models: DuplexModels | None = None) -> pd.DataFrame:
    """Build a :class:`DuplexSecond`, warm it up, run one second: its stage frame."""
    h = DuplexSecond(cfg, arm, device, seed, models=models)
    h.warmup(warmup)
    return h.run_second()


def profile_second(cfg: str | DuplexConfig = "tiny", arm: str = "B0", device: str | torch.device = "cpu", seed: int = 0,
                   warmup: int = 1, trace_path: str | None = None,
                   models: DuplexModels | None = None) -> tuple[pd.DataFrame, Profile]:
    """Build, warm up, and profile one second: (stage frame, Profile)."""
    h = DuplexSecond(cfg, arm, device, seed, models=models)
    h.warmup(warmup)
    return h.profile_second(trace_path=trace_path)


# ---------------------------------------------------------------------------------------
# trimmed traces
# ---------------------------------------------------------------------------------------


def trim_trace(trace: Trace, window: str = SECOND_RANGE, occurrence: int = 0,
               max_cpu_depth: int | None = None) -> Trace:
    """The part of ``trace`` inside one occurrence of the host range ``window``.

    Keeps host ops, ranges and launch calls that start inside the window, the device activity
    those launches issued (plus uncorrelated device events starting inside, and kernels that run
    on after the window closes), and only the metadata events ("ph": "M"); drops every event's
    args (the ids the frames need are columns and are written back by
    :func:`~cadencelab.profile.export.export_chrome_trace`). ``max_cpu_depth`` also drops host
    ops nested deeper than that (0 = outermost only): a smaller file whose launches are then
    attributed to the innermost op kept.
    """
    w = windows(trace, window)
    if len(w) <= occurrence:
        raise ValueError(f"{trace.source}: no occurrence {occurrence} of the range {window!r} (found {len(w)})")
    ws, we = int(w["start_ns"].iloc[occurrence]), int(w["end_ns"].iloc[occurrence])

    def inside(df: pd.DataFrame) -> pd.DataFrame:
        keep = (df["start_ns"] >= ws) & (df["start_ns"] <= we)
        out = df[keep].reset_index(drop=True).copy()
        out["args"] = [{} for _ in range(len(out))]
        return out

    launches = inside(trace.launches)
    corr = set(launches["correlation"].dropna().astype(int))
    k = trace.kernels
    kc = k["correlation"]
    by_launch = kc.notna() & kc.isin(corr)
    loose = kc.isna() & (k["start_ns"] >= ws) & (k["start_ns"] <= we)
    kernels = k[by_launch | loose].reset_index(drop=True).copy()
    kernels["args"] = [{} for _ in range(len(kernels))]
    cpu_ops = inside(trace.cpu_ops)
    if max_cpu_depth is not None:
        cpu_ops = cpu_ops[cpu_ops["depth"] <= int(max_cpu_depth)].reset_index(drop=True)
    return Trace(kernels=kernels, cpu_ops=cpu_ops, launches=launches, ranges=inside(trace.ranges),
                 meta=dict(trace.meta), extra_events=[e for e in trace.extra_events if e.get("ph") == "M"],
                 source=f"{trace.source} [{window} #{occurrence}]")


def write_trimmed_trace(trace: Trace, path: str, window: str = SECOND_RANGE, occurrence: int = 0,
                        max_cpu_depth: int | None = None) -> str:
    """:func:`trim_trace` then write Chrome-trace JSON (gzip for .gz): the path."""
    return export_chrome_trace(trim_trace(trace, window, occurrence, max_cpu_depth), path)
