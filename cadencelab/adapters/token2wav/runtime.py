"""Token2wav arms on one code path: B0, S, R, Rc, SR, SRc and the controls.

The two rules are switches on the same streaming loop:

* the **state rule** (S*): solver and vocoder buffers sized from the declaration, the
  estimator cache kept in place in the solver's own buffer (an in-buffer carry, newest
  frames first), the conformer, vocoder and conv caches in carries, retention by in-place
  moves instead of ``torch.cat``;
* the **compute rule** (*R, *Rc): :class:`~cadencelab.replay.ExactShapeReplay` at solver-step
  granularity (the upsampling encoder, every DiT call and the vocoder core are bound
  separately; the Euler arithmetic between steps stays eager) or at chunk granularity (the
  whole flow chunk with its retention, and the vocoder core).

Replay arms move the three host constants the stock code rebuilds every call (timestep
frequencies, harmonic multipliers, STFT window) to device-resident, bit-identical buffers, and run
the vocoder's own ``_istft`` with ``torch.istft`` swapped for :class:`~cadencelab.replay.GraphSafeISTFT`
(its host-side window check done once per frame count, at admission), so the whole vocoder,
iSTFT and clamp included, is one replayed call. Tokens go to the device through a pinned host
buffer and the waveform comes back through another (:class:`HostStaging`).

Controls (stock state, no rule): the vendor's graph branch as shipped (buckets 30/48/96),
the vendor graph re-bucketed to the live 50-frame chunk, and ``torch.compile`` in
``reduce-overhead`` mode on the estimator.

With every switch off the loop performs the stock operations in the stock order; a test
checks it is bit-identical to :class:`StockToken2wav` (and, on CUDA, to the vendor class).

Token2wav as a declaration plus a step is :mod:`.kit` (the kit's arms). This runtime keeps its own wiring (R/SR
replay each DiT call inside the vendor loop; flow and vocoder are two engines, eager work between; S keeps the
vendor iSTFT; the controls; the recorded H200 graphs); its estimator carry is adopted through the kit.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ...contract import PRIMING, T2W_CLOCKS, Token2wavClocks, token2wav_declaration
from ...replay import At, ExactShapeReplay, bind
from ...replay.determinism import pin_determinism
from ...state import Carry
from ..arms import FACTORIAL
from ..kit.adopt import adopted_carry
from .stock import crossfade
from .configs import Token2wavConfig
from .parts import (HostStaging, VocoderSplit, CountingGraph, ReplayedForwardChunk, capture_vendor_buckets, config_of,
                    make_constants_device_resident)
from .envelopes import STOCK_ENVELOPE, demand_envelope
from .turns import check_flag, check_tokens
from .prompts import PromptState

__all__ = ["ArmSpec", "ARMS", "FACTORIAL", "CONTROLS", "declaration_for", "chunk_frames",
           "make_constants_device_resident", "capture_vendor_buckets", "VocoderSplit", "HostStaging", "Token2wavRuntime",
           "runtime_envelope", "arm_modules", "build_runtime", "config_of", "pin_determinism"]

# ---------------------------------------------------------------------------------------
# arms
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArmSpec:
    """One cell of the factorial (or a control)."""

    name: str
    state_rule: bool
    replay: str | None  # None, "step" or "chunk"
    control: str | None = None  # None, "vendor_graph", "vendor_graph_50", "compile"
    description: str = ""


ARMS: dict[str, ArmSpec] = {
    "B0": ArmSpec("B0", False, None, description="stock runtime"),
    "S": ArmSpec("S", True, None, description="state rule only: carry + demand sizing"),
    "R": ArmSpec("R", False, "step", description="replay at solver-step granularity, stock state"),
    "Rc": ArmSpec("Rc", False, "chunk", description="replay at chunk granularity, stock state"),
    "SR": ArmSpec("SR", True, "step", description="state rule + replay at solver-step granularity"),
    "SRc": ArmSpec("SRc", True, "chunk", description="state rule + replay at chunk granularity"),
    "B0_repeat": ArmSpec("B0_repeat", False, None, description="control: the stock runtime again, in another "
                         "process (cross-process determinism of the baseline)"),
    "vendor_graph": ArmSpec("vendor_graph", False, None, "vendor_graph",
                            "control: the vendor's CUDA-graph branch as shipped (buckets 30/48/96)"),
    "vendor_graph_50": ArmSpec("vendor_graph_50", False, None, "vendor_graph_50",
                               "control: the vendor's graph branch re-bucketed to the live 50-frame chunk (padded cache)"),
    "compile": ArmSpec("compile", False, None, "compile",
                       "control: torch.compile(mode='reduce-overhead') on the estimator"),
}
CONTROLS = ("B0_repeat", "vendor_graph", "vendor_graph_50", "compile")


def declaration_for(cfg: Token2wavConfig, n_timesteps: int | None = None, prompt_frames: int | None = None,
                    retained: int | None = None, clocks: Token2wavClocks = T2W_CLOCKS):
    """The Token2wav declaration of ``clocks`` at ``cfg``'s sizes (a clock argument given replaces that field)."""
    enc, dit = cfg.encoder, cfg.estimator
    return token2wav_declaration(
        clocks=clocks.with_(n_steps=n_timesteps, prompt_frames=prompt_frames, retained_frames=retained),
        depth=dit.depth, heads=dit.num_heads,
        head_dim=dit.head_dim, hidden=dit.hidden_size, enc_layers=enc.num_blocks + enc.num_up_blocks,
        enc_heads=enc.attention_heads, enc_head_dim=enc.output_size // enc.attention_heads, enc_hidden=enc.output_size,
    )


def chunk_frames(n_tokens: int, last_chunk: bool, clocks: Token2wavClocks = T2W_CLOCKS) -> int:
    """Mel frames a stream call yields: the encoder strips the lookahead unless it is the last chunk."""
    return clocks.frames_of(n_tokens, last_chunk)


# ---------------------------------------------------------------------------------------
# the runtime
# ---------------------------------------------------------------------------------------


class Token2wavRuntime:
    """The streaming Token2wav under one arm.

    flow, hift: vendor modules. For state-rule arms build them with
        ``envelope=runtime_envelope(arm, n_timesteps)`` (demand-sized solver buffers); the
        stock arms keep the vendor's 16 x 1000 envelope.
    arm: a key of :data:`ARMS` or an :class:`ArmSpec`.
    backend: replay backend ("auto", "cuda", "eager").
    Use :meth:`set_stream_cache` at every turn start and :meth:`stream` per chunk, like the
    vendor class. After each call ``last_mel`` / ``last_speech`` hold the chunk's mel and
    float32 waveform; ``engines`` the replay engines.
    """

    def __init__(self, flow, hift, device, arm="B0", n_timesteps: int | None = None, cfg: Token2wavConfig | None = None,
                 backend: str = "auto", prompt_frames: int | None = None, clocks: Token2wavClocks = T2W_CLOCKS):
        self.spec = ARMS[arm] if isinstance(arm, str) else arm
        self.device = torch.device(device)
        self.flow, self.hift = flow, hift
        self.clocks = clocks.with_(n_steps=n_timesteps, prompt_frames=prompt_frames)
        self.n_timesteps = self.clocks.n_steps
        self.prompt_frames = self.clocks.prompt_frames
        self.cfg = cfg
        self.backend = backend
        self.mel_cache_len = self.clocks.mel_cache_frames
        self.source_cache_len = self.clocks.source_cache_samples
        self.speech_window = torch.from_numpy(np.hamming(2 * self.source_cache_len)).to(self.device)
        self.engines: dict[str, ExactShapeReplay] = {}
        self.constants: list[str] = []
        self.vendor_graph_fires: dict = {}
        self.primings = 0
        self.cache = None
        self.stream_cache = None
        self.hift_cache_dict: dict = {}
        self.last_mel = self.last_speech = None
        self.vocoder: VocoderSplit | None = None
        self.ranges = False
        self.range_hook = None  # name -> context manager: opens the runtime's ranges instead (a harness's timer)
        self.decl = None
        self.vocab_size = (cfg or config_of(flow)).vocab_size
        decl = declaration_for(cfg or config_of(flow), clocks=self.clocks)
        # the stock cut, through each attention cache's declared retention policy
        self.stock_cut = {name: decl.region(name).policy for name in ("estimator_att_cache", "conformer_att_cache")}
        if self.spec.state_rule or self.spec.replay:
            self.decl = decl
        q = decl.params
        self.staging = HostStaging(self.device, q["tokens_per_chunk"] + q["lookahead"],
                                   (q["f_call"] + self.mel_cache_len) * q["samples_per_frame"])
        if self.spec.state_rule:
            self._setup_state()
        if self.spec.replay:
            self.constants = make_constants_device_resident(flow, hift, self.device)
            self.vocoder = VocoderSplit.graph_safe_for(self.hift)  # the whole vocoder in one replayed call
            self._setup_replay()
        elif self.spec.state_rule:
            self.vocoder = VocoderSplit(self.hift)  # HiFT up to the iSTFT (device RNG included), then the tail
        if self.spec.control:
            self._setup_control()

    # -- state rule -------------------------------------------------------------------
    def _setup_state(self) -> None:
        d, dec = self.decl, self.flow.decoder
        need = d.params["f_prompt"] + d.params["f_retained"] + d.params["f_call"]
        att = dec.att_cache_buffer
        if att.shape[0] != self.n_timesteps or att.shape[4] != need:
            raise ValueError(
                f"state-rule arm '{self.spec.name}' needs the solver buffers at the declared demand "
                f"({self.n_timesteps} steps x {need} frames), found {att.shape[0]} x {att.shape[4]}: build the "
                f"modules with envelope=runtime_envelope('{self.spec.name}', {self.n_timesteps})"
            )
        noise_frames = d.region("cfm_noise").policy.extent
        dec.rand_noise = dec.rand_noise[:, :, :noise_frames].clone()
        dt = att.dtype
        est = d.region("estimator_att_cache")  # the solver's own buffer, adopted: checked against the declaration
        self.est = adopted_carry(d, est, att, Carry.shape_for(d, est.name, "attended"), self.device)
        self.conf_att = Carry.for_region(d, "conformer_att_cache", self.device, dt)
        self.conf_cnn = Carry.for_region(d, "conformer_cnn_cache", self.device, dt)
        self.mel = Carry.for_region(d, "vocoder_mel_cache", self.device, envelope="attended")
        self.src = Carry.for_region(d, "vocoder_source_cache", self.device)
        self.spc = Carry.for_region(d, "vocoder_speech_cache", self.device)
        spk_dim = self.flow.spk_embed_affine_layer.in_features
        self.spk = torch.zeros(1, spk_dim, device=self.device, dtype=dt)

    def carries(self) -> list[Carry]:
        return [self.est, self.conf_att, self.conf_cnn, self.mel, self.src, self.spc] if self.spec.state_rule else []

    def owned(self) -> list[torch.Tensor]:
        """Contract-owned buffers the engines may alias (empty without the state rule)."""
        if not self.spec.state_rule:
            return []
        dec = self.flow.decoder
        return [self.spk, dec.cnn_cache_buffer] + [c.buffer for c in self.carries()]

    def _write_through(self) -> dict:
        dec = self.flow.decoder
        wt = {"solver_workspace": lambda: dec.att_cache_buffer, "solver_cnn": lambda: dec.cnn_cache_buffer}
        dit = self.dit()
        wt.update(step_att=lambda: dit.att_cache_buffer, step_cnn=lambda: dit.cnn_cache_buffer)
        if self.spec.state_rule:
            wt.update({c.name: (lambda c=c: c.buffer) for c in self.carries()})
        return wt

    def dit(self):
        """The flow's DiT estimator itself (unwrapped from its replay engine when R wrapped it)."""
        est = self.flow.decoder.estimator
        return est.inner if isinstance(est, ReplayedForwardChunk) else est

    # -- the vocoder split at the iSTFT ---------------------------------------------------
    def _vocoder_core_state(self, chunk_mel, mel_cached, source_cached):
        """Vocoder core on the carries: write the chunk after the cached mel, run, retain in place."""
        n, f = mel_cached.shape[2], chunk_mel.shape[2]
        self.mel.buffer.narrow(2, n, f).copy_(chunk_mel)
        magnitude, phase, source = self.vocoder.core(self.mel.buffer.narrow(2, 0, n + f), source_cached)
        self.mel.move_retained(n + f)
        self.src.write_retained_from(source)
        return magnitude, phase

    def _vocoder_state(self, chunk_mel, mel_cached, source_cached):
        """The whole vocoder on the carries (core, retention in place, capture-safe iSTFT) -> speech."""
        magnitude, phase = self._vocoder_core_state(chunk_mel, mel_cached, source_cached)
        return self.vocoder.tail(magnitude, phase)

    # -- the flow chunk ---------------------------------------------------------------
    def _autocast(self):
        if self.device.type == "cuda":
            return torch.amp.autocast("cuda", dtype=torch.float32)
        return contextlib.nullcontext()

    def _flow_chunk_stock(self, token, spk, cache, last_chunk, n_timesteps):
        """Stock flow chunk and cut (``torch.cat``), returning new tensors."""
        with self._autocast():
            chunk_mel, new = self.flow.inference_chunk(token=token, spk=spk, cache=cache, last_chunk=last_chunk,
                                                       n_timesteps=n_timesteps)
        cut = self.stock_cut
        new["estimator_att_cache"] = cut["estimator_att_cache"].apply(new["estimator_att_cache"], dim=4)
        new["conformer_att_cache"] = cut["conformer_att_cache"].apply(new["conformer_att_cache"], dim=3)
        return chunk_mel, new

    def _flow_chunk_state(self, token, spk, conf_cnn, conf_att, est_cnn, est_att, last_chunk, n_timesteps):
        """Flow chunk on the carries: retention written in place (device work only)."""
        cache = dict(conformer_cnn_cache=conf_cnn, conformer_att_cache=conf_att,
                     estimator_cnn_cache=est_cnn, estimator_att_cache=est_att)
        with self._autocast():
            chunk_mel, new = self.flow.inference_chunk(token=token, spk=spk, cache=cache, last_chunk=last_chunk,
                                                       n_timesteps=n_timesteps)
        self.conf_cnn.buffer.copy_(new["conformer_cnn_cache"])
        self.conf_att.write_retained_from(new["conformer_att_cache"])
        self.est.write_retained_from(new["estimator_att_cache"])
        return chunk_mel

    # -- replay wiring ------------------------------------------------------------------
    def _setup_replay(self) -> None:
        d, owners, mods = self.decl, self.owned, [self.flow]
        common = dict(backend=self.backend, owners=owners, write_through=self._write_through())
        # where each engine's calls carry the regions they read and their frames; labels come from the seam
        tokens = At("token", dim=1, clock="tokens", last="last_chunk")
        if self.spec.state_rule:
            vocoder = dict(reads={"vocoder_mel_cache": At("mel_cached"), "vocoder_source_cache": At("source_cached")},
                           frames=At("chunk_mel", dim=2))
            flow = dict(reads={"estimator_att_cache": At("est_att"), "conformer_att_cache": At("conf_att")})
        else:  # the stock call carries the cached mel inside ``mel``; its extent follows from the source cache's
            vocoder = dict(reads={"vocoder_source_cache": At("cache_source")},
                           frames=At("mel", dim=2, less="vocoder_mel_cache"))
            flow = dict(reads={r: At("cache", key=r) for r in ("estimator_att_cache", "conformer_att_cache")})
        self.engines["vocoder_core"] = bind(
            d, "vocoder_core", self._vocoder_state if self.spec.state_rule else self.vocoder.whole,
            modules=[self.hift], clone_outputs=True, **vocoder, **{**common, "write_through": self._vocoder_write_through()})
        if self.spec.replay == "chunk":
            fn = self._flow_chunk_state if self.spec.state_rule else self._flow_chunk_stock
            self.engines["flow_chunk"] = bind(d, "flow_chunk", fn, frames=tokens, **flow, modules=mods,
                                              clone_outputs=self.spec.state_rule, **common)
            return
        dec = self.flow.decoder
        dit, enc = dec.estimator, self.flow.encoder
        step = bind(d, "estimator_step", dit.forward_chunk, reads={"estimator_att_cache": At("att_cache", dim=3)},
                    frames=At("x", dim=2), modules=[dit], clone_outputs=False, **common)
        encoder = bind(d, "flow_encoder", enc.forward_chunk, reads={"conformer_att_cache": At("att_cache", dim=3)},
                       frames=At("xs", dim=1, clock="tokens", last="last_chunk"), modules=[enc],
                       clone_outputs=False, **common)
        dec.estimator = ReplayedForwardChunk(dit, step)
        self.flow.encoder = ReplayedForwardChunk(enc, encoder)
        self.engines["flow_encoder"], self.engines["estimator_step"] = encoder, step

    def _vocoder_write_through(self) -> dict:
        if not self.spec.state_rule:
            return {}
        return {c.name: (lambda c=c: c.buffer) for c in (self.mel, self.src)}

    # -- controls ---------------------------------------------------------------------
    def _setup_control(self) -> None:
        c, dit = self.spec.control, self.dit()
        if c == "vendor_graph":
            self.flow.scatter_cuda_graph(True)
        elif c == "vendor_graph_50":
            capture_vendor_buckets(dit, {50: 500})
        elif c == "compile":
            dit.forward_chunk = torch.compile(dit.forward_chunk, mode="reduce-overhead")
            return
        fires = self.vendor_graph_fires
        dit.graph_chunk = {k: CountingGraph(g, fires, k) for k, g in dit.graph_chunk.items()}

    # -- the vendor-shaped API --------------------------------------------------------------
    @torch.inference_mode()
    def set_stream_cache(self, prompt: PromptState):
        """Turn start: prime the flow with the prompt (eager by construction).

        Under the state rule the primed caches are written into the carries in place, the
        estimator cache directly into the solver buffer by the vendor code itself.
        """
        if prompt.n_frames != self.prompt_frames:
            raise ValueError(f"prompt has {prompt.n_frames} mel frames but the runtime was declared with "
                             f"f_prompt={self.prompt_frames}")
        self.cache = prompt.as_tuple()
        tokens, _, spk_emb, prompt_mels, _ = self.cache
        pad = torch.ones(1, self.clocks.lookahead_tokens, device=tokens.device, dtype=tokens.dtype) * self.clocks.silence_token
        stream_cache = self.flow.setup_cache(torch.cat([tokens, pad], dim=1), prompt_mels, spk_emb,
                                             n_timesteps=self.n_timesteps)
        self.primings += 1
        for name in ("flow_chunk",):
            if name in self.engines:
                self.engines[name].record_external(PRIMING)
        if self.spec.state_rule:
            self.est.adopt(stream_cache["estimator_att_cache"])
            self.conf_att.reset_in_place(stream_cache["conformer_att_cache"])
            self.conf_cnn.reset_in_place(stream_cache["conformer_cnn_cache"])
            for c in (self.mel, self.src, self.spc):
                c.reset_in_place(None)
            self.spk.copy_(spk_emb)
            self.stream_cache = None
            return None
        mel_bins = prompt_mels.shape[2]
        self.stream_cache = stream_cache
        self.hift_cache_dict = dict(mel=torch.zeros(1, mel_bins, 0, device=self.device),
                                    source=torch.zeros(1, 1, 0, device=self.device),
                                    speech=torch.zeros(1, 0, device=self.device))
        return stream_cache, self.hift_cache_dict

    @torch.inference_mode()
    def stream(self, tokens: Sequence[int] | torch.Tensor, last_chunk: bool = False, return_waveform: bool = False,
               events: tuple | None = None):
        """One chunk of speech tokens -> int16 PCM bytes (or the float32 waveform).

        ``events``: optional (start, end) CUDA events recorded around the synthesis segment
        (flow + cut + vocoder), before the waveform is copied to the host.
        """
        if self.cache is None:
            raise ValueError("Token2wavRuntime.stream: call set_stream_cache(prompt) first")
        tokens = check_tokens(tokens, self.vocab_size, "Token2wavRuntime.stream")
        check_flag(last_chunk, "last_chunk", "Token2wavRuntime.stream")
        token = self.staging.tokens_to_device(tokens)
        torch.tensor([token.shape[1]], dtype=torch.int32, device=self.device)  # the stock code builds lens too
        if events is not None:
            events[0].record()
        with self._range("synthesis"):
            if self.spec.state_rule:
                speech, first = self._synthesise_state(token, last_chunk)
            else:
                speech, first = self._synthesise_stock(token, last_chunk)
        if not last_chunk:
            if first:
                pad = torch.zeros(1, self.source_cache_len, device=speech.device)
                speech = torch.cat([pad, speech[:, : -self.source_cache_len]], dim=1)
            else:
                speech = speech[:, : -self.source_cache_len]
        if events is not None:
            events[1].record()
        self.last_speech = speech
        wav = self.staging.to_host(speech)
        if return_waveform:
            return wav
        return (np.clip(wav, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()

    def _range(self, name: str):
        """A named profiler range when ``ranges`` is on (the bench's profiled blocks), else nothing;
        ``range_hook(name)`` when one is set (a harness timing the runtime's own ranges)."""
        if self.range_hook is not None:
            return self.range_hook(name)
        return torch.profiler.record_function(name) if self.ranges else contextlib.nullcontext()

    def _synthesise_stock(self, token, last_chunk):
        spk = self.cache[2]
        flow = self.engines.get("flow_chunk", self._flow_chunk_stock)
        with self._range("flow"):
            chunk_mel, self.stream_cache = flow(token, spk, self.stream_cache, last_chunk, self.n_timesteps)
        self.last_mel = chunk_mel
        h = self.hift_cache_dict
        with self._range("vocoder"):
            mel = torch.concat([h["mel"], chunk_mel], dim=2)
            if self.spec.replay:
                speech, source = self.engines["vocoder_core"](mel, h["source"])
            else:
                speech, source = self.hift(mel, h["source"])
        if h["speech"].shape[-1] > 0:
            speech = crossfade(speech, h["speech"], self.speech_window)
        first = h["speech"].shape[-1] == 0
        self.hift_cache_dict = dict(mel=mel[..., -self.mel_cache_len:].clone().detach(),
                                    source=source[:, :, -self.source_cache_len:].clone().detach(),
                                    speech=speech[:, -self.source_cache_len:].clone().detach())
        return speech, first

    def _synthesise_state(self, token, last_chunk):
        f = self.clocks.frames_of(token.shape[1], last_chunk)
        le, lc = self.est.length, self.conf_att.length
        flow = self.engines.get("flow_chunk", self._flow_chunk_state)
        with self._range("flow"):
            chunk_mel = flow(token, self.spk, self.conf_cnn.buffer, self.conf_att.view(),
                             self.flow.decoder.cnn_cache_buffer, self.est.view(), last_chunk, self.n_timesteps)
        self.est.commit(self.est.policy.extent_after(le + f))
        self.conf_att.commit(self.conf_att.policy.extent_after(lc + f))
        self.conf_cnn.commit(self.conf_cnn.capacity)
        self.last_mel = chunk_mel
        nm = self.mel.length
        with self._range("vocoder"):
            if self.spec.replay:
                speech = self.engines["vocoder_core"](chunk_mel, self.mel.view(), self.src.view())
            else:
                magnitude, phase = self._vocoder_core_state(chunk_mel, self.mel.view(), self.src.view())
            self.mel.commit(self.mel.policy.extent_after(nm + f))
            self.src.commit(self.src.policy.extent_after((nm + f) * self.clocks.samples_per_frame))
            if not self.spec.replay:
                speech = self.vocoder.tail(magnitude, phase)
        first = self.spc.length == 0
        if not first:
            speech = crossfade(speech, self.spc.view(), self.speech_window)
        self.spc.retain_from(speech)
        return speech, first

    # -- reports ----------------------------------------------------------------------------
    def counters(self):
        """Replay counters of every engine (empty frame for arms without replay)."""
        import pandas as pd

        frames = [e.counters() for e in self.engines.values()]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def summaries(self) -> dict[str, str]:
        return {k: e.summary() for k, e in self.engines.items()}


def runtime_envelope(arm, n_timesteps: int | None = None, clocks: Token2wavClocks = T2W_CLOCKS):
    """Solver-buffer envelope an arm is built with: demand-sized under the state rule (``clocks``'
    steps x prompt + retained + one call), stock otherwise."""
    spec = ARMS[arm] if isinstance(arm, str) else arm
    if spec.state_rule:
        c = clocks.with_(n_steps=n_timesteps)
        return demand_envelope(c.n_steps, c.demand_frames)
    return STOCK_ENVELOPE


def arm_modules(arm, seed: int, device="cpu", cfg: Token2wavConfig | None = None, checkpoint=None,
                clocks: Token2wavClocks = T2W_CLOCKS):
    """The vendor ``(flow, hift, cfg)`` an arm runs on, at the arm's solver-buffer envelope: seeded from ``cfg``, or
    loaded from the ``checkpoint`` folder (``seed``: its start noise; ``cfg`` None is read from it). On the CPU
    this is the part of an arm's set-up that does no device work (a bench stages it while another arm is timed);
    :func:`build_runtime` takes its result as ``modules``."""
    from .build import build_token2wav
    from .checkpoint import load_checkpoint

    device, envelope = torch.device(device), runtime_envelope(arm, clocks=clocks)
    if checkpoint is None:
        flow, hift = build_token2wav(cfg, seed, device=device, envelope=envelope)
        return flow, hift, cfg
    return load_checkpoint(checkpoint, device=device, seed_for_noise=seed, envelope=envelope)


def build_runtime(cfg: Token2wavConfig | None, arm, seed: int, device="cpu", clocks: Token2wavClocks = T2W_CLOCKS,
                  backend: str = "auto", n_timesteps: int | None = None, checkpoint=None, modules=None):
    """Every bench's one build path for an arm: ``(runtime, prompt)``, the modules from :func:`arm_modules` (or
    ``modules``, its earlier result, moved to ``device``), the runtime of ``arm`` on them and the seeded prompt
    (``set_stream_cache(prompt)`` starts a turn). ``cfg`` None with a checkpoint: read from it (``runtime.cfg``)."""
    from .prompts import make_prompt

    if modules is not None and (checkpoint is not None or cfg is not None):
        raise ValueError("build_runtime: modules= already holds the modules and their config; give neither cfg nor "
                         "checkpoint with it")
    c, device = clocks.with_(n_steps=n_timesteps), torch.device(device)
    flow, hift, cfg = modules if modules is not None else arm_modules(arm, seed, device, cfg, checkpoint, c)
    rt = Token2wavRuntime(flow.to(device), hift.to(device), device, arm, cfg=cfg, backend=backend, clocks=c)
    return rt, make_prompt(cfg, seed, device, clocks=c)
