"""One full-duplex second, stage by stage, on the clocks its stages declare.

A duplex runtime must turn each second of input into a second of speech before the next second arrives. This
module composes the stages of one such second so that they can be timed and profiled together:

    backbone        a decoder-only language model: prefill of the second's input, then greedy decoding of
                    text/control tokens with a KV cache that persists across the seconds of a session;
    speech_decoder  a speech-token model conditioned on the backbone's hidden states: greedy decoding of one
                    Token2wav chunk of tokens (its cache restarts every second);
    synthesis       the streaming Token2wav through :class:`~cadencelab.adapters.token2wav.runtime.Token2wavRuntime`
                    under an arm ("B0", "SRc", ...): one chunk = 1.0 s of audio, sub-stages ``flow`` / ``vocoder``.

The language models are Qwen2-architecture transformers with random weights from a declared
:class:`~.models.DuplexConfig` (presets :data:`~.models.H200`, :data:`~.models.TINY`): the point is the
orchestration of a second (how many forwards, of which shapes, in which order), not the tokens. Every stage runs
inside ``record_function(<stage>)``, timed with CUDA events (host-side launch gaps count) or ``perf_counter``:

    >>> h = DuplexSecond("tiny", arm="B0", device="cpu"); h.warmup()
    >>> df = h.run_second()                      # stage, start_ms, dur_ms, source, arm, ...
    >>> p = profile_window(h.run_second, h.device, SECOND_RANGE, open_range=False)   # cadencelab.profile.trim
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import time
from typing import Iterator

import pandas as pd
import torch

from .models import CHUNK_TOKENS, DuplexConfig, DuplexModels, build_models, preset, transformers_module
from .fused import FusedDecoder
from .served import DECODE_MODES, GraphDecoder, run_label

__all__ = ["DuplexSecond", "run_second", "second_totals", "STAGES", "SUBSTAGES", "SECOND_RANGE", "STAGE_COLUMNS"]

STAGES = ("backbone", "speech_decoder", "synthesis")
SUBSTAGES = ("flow", "vocoder")  # the Token2wav runtime's own ranges inside "synthesis"
SECOND_RANGE = "duplex_second"
STAGE_COLUMNS = ["stage", "start_ms", "dur_ms", "source", "arm", "second", "parent", "device", "preset"]


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
    decode:  how the two language models decode: "eager" (HF dynamic cache, one eager forward per token:
             the stock path) or "graph" (a static KV cache and the decode step replayed as a CUDA graph,
             :class:`~cadencelab.adapters.duplex.served.GraphDecoder`: a serving-style control whose
             tokens may part from eager decoding; the same static-cache steps run eagerly on a CPU) or
             "fused" (:class:`~cadencelab.adapters.duplex.fused.FusedDecoder`: the "graph" arithmetic with
             the prefill captured too, and a second's decode steps as one graph: a control like "graph").

    The session starts at construction (:meth:`reset`): the Token2wav stream cache is primed with
    the prompt, the speech buffer holds 3 silence tokens, the backbone cache is empty and the
    generators are seeded. :meth:`run_second` then runs one second and returns its stage frame;
    ``history`` keeps per-second facts (tokens, PCM digest, total).
    """

    def __init__(self, cfg: str | DuplexConfig = "tiny", arm: str = "B0", device: str | torch.device = "cpu",
                 seed: int = 0, models: DuplexModels | None = None, backend: str = "auto", decode: str = "eager"):
        from ...contract import catalog_width
        from ..token2wav import SILENCE_TOKEN
        from ..token2wav.runtime import build_runtime, declaration_for

        if decode not in DECODE_MODES:
            raise ValueError(f"DuplexSecond: decode must be one of {DECODE_MODES}, got {decode!r}")
        self.cfg = preset(cfg)
        self.arm = arm
        self.decode = decode
        self.label = run_label(arm, decode)  # what its rows are called: the arm, "+graphLM" when served
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
        self.decoders: dict[str, GraphDecoder] = {}
        if decode != "eager":  # the backbone's context and the speech decoder's per-second context
            served = FusedDecoder if decode == "fused" else GraphDecoder
            self.decoders = dict(
                backbone=served(self.models.backbone, self.cfg.backbone_context, self.cfg.text_tokens - 1,
                                self.models.cache_kw),
                speech_decoder=served(self.models.speech, self.cfg.text_tokens + self.cfg.speech_tokens,
                                      self.cfg.speech_tokens - 1, self.models.cache_kw))
        self._clock: _StageClock | None = None
        self.substages_timed = self._hook_runtime_ranges()
        self.history: list[dict] = []
        self.second = 0
        self.reset()

    # -- session ---------------------------------------------------------------------------
    def _hook_runtime_ranges(self) -> bool:
        """Time the runtime's own ``flow`` / ``vocoder`` ranges as sub-stages of ``synthesis``.

        The runtime opens its ranges through its ``range_hook`` when one is set; the harness turns
        ranges on and sets a timed hook. Returns False (sub-stages then only in profiles) for a
        runtime without that hook.
        """
        rt = self.rt
        rt.ranges = True
        if not hasattr(rt, "range_hook"):
            return False

        def timed(name: str):
            if name != "synthesis" and self._clock is not None:
                return self._clock.stage(name, parent="synthesis")
            return torch.profiler.record_function(name)  # "synthesis" is timed by stream(events=...)

        rt.range_hook = timed
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
        for d in self.decoders.values():
            d.reset()
        self.chunks_in_turn = 0

    def _new_cache(self):
        return transformers_module().DynamicCache()

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
        if self.decoders:
            return self._served(self.decoders["backbone"], ids.shape[1] + n, input_ids=ids)
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
        cond = self.models.bridge(hidden.to(self.cfg.torch_dtype))  # (1, N, Hs)
        if self.decoders:
            dec = self.decoders["speech_decoder"]
            dec.reset()  # the speech-token clock: its context restarts every second
            return self._served(dec, cond.shape[1] + n, inputs_embeds=cond)[1]
        cache = self._new_cache()
        h = self._forward(m, cache, inputs_embeds=cond)[:, -1:]
        tokens = [m.lm_head(h).argmax(-1)]
        for _ in range(n - 1):
            h = self._forward(m, cache, input_ids=tokens[-1])
            tokens.append(m.lm_head(h).argmax(-1))
        return torch.cat(tokens, 1)

    def _served(self, dec: GraphDecoder, positions: int, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
        """The served decode (``dec.serve``): (hidden (1, n, H), tokens (1, n)) as the eager path returns them. A
        context that would overflow starts afresh, as the eager backbone's does."""
        if not dec.fits(positions):
            dec.reset()
        return dec.serve(dec.steps, **inputs)

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
        df["source"], df["arm"], df["second"] = "measured", self.label, self.second
        df["device"], df["preset"] = str(self.device), self.cfg.name
        df = df.sort_values("start_ms", kind="stable").reset_index(drop=True)[STAGE_COLUMNS]
        top = df[df["parent"] == ""]
        self.history.append(dict(
            arm=self.label, second=self.second, chunk_in_turn=self.chunks_in_turn - 1,
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

            it = tqdm(it, desc=f"duplex {self.label}", unit="s", leave=False)
        for _ in it:
            frames.append(self.run_second().assign(warmup=False))
        return pd.concat(frames, ignore_index=True)

    def close(self) -> None:
        """Drop the runtime (and its graphs) so another arm can be built in the same process."""
        self.rt = None
        self.decoders = {}
        if self.device.type == "cuda":  # the graphs' device memory back before another arm is built
            gc.collect()
            torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------
# module-level conveniences
# ---------------------------------------------------------------------------------------


def run_second(cfg: str | DuplexConfig = "tiny", arm: str = "B0", device: str | torch.device = "cpu", seed: int = 0,
               warmup: int = 1, models: DuplexModels | None = None, decode: str = "eager") -> pd.DataFrame:
    """Build a :class:`DuplexSecond` (``decode``: how its language models decode), warm it up, run one
    second: its stage frame."""
    h = DuplexSecond(cfg, arm, device, seed, models=models, decode=decode)
    h.warmup(warmup)
    return h.run_second()
