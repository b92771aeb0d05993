"""Token2wav arms: B0 and the controls on the vendor's loop, every rule arm on the adapter kit.

The paper's factorial is two switches on one declaration and two steps (:mod:`.steps`: ``flow_chunk`` and
``vocoder_core``) run by the kit's :class:`~cadencelab.adapters.kit.StreamingRuntime`:

* the **state rule** (S*): the kit's carries, demand-sized from the declaration, the estimator cache adopted in
  the solver's own buffer (newest frames first), retention by in-place moves instead of ``torch.cat``; without
  it (R, Rc) the kit runs the stock steps on plain tensors;
* the **compute rule** (*R, *Rc): replay at solver-step granularity (the flow's upsampling encoder and every DiT
  call of the vendor's Euler loop as the declared inner operators, the loop's arithmetic eager; the vocoder
  whole) or at chunk granularity (the whole flow chunk and the whole vocoder call, each with its retention).

Replay arms move the three host constants the stock code rebuilds every call to device-resident, bit-identical
buffers, and swap ``torch.istft`` for :class:`~cadencelab.replay.GraphSafeISTFT` (its host-side window check done
once per frame count, at admission), so the whole vocoder is one replayed call; S keeps the vendor's iSTFT.
Tokens and waveform cross through pinned host buffers (:class:`HostStaging`). B0 is the vendor's stock loop
itself (no kit bookkeeping on the measured path), as are the controls: the vendor's graph branch as shipped, the
same re-bucketed to the live chunk, and ``torch.compile`` on the estimator. Every arm is checked bit-identical to
:class:`~.stock.StockToken2wav`. Token2wav as one whole-call operator on the kit's own factorial is :mod:`.kit`.
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import numpy as np
import torch

from .clocks import T2W_CLOCKS, Token2wavClocks
from ...replay import At
from ...replay.determinism import pin_determinism
from ...state import Carry
from ..arms import ARMS, CONTROLS, FACTORIAL, Arm
from ..kit import Committed, Inner, KitModel, StreamingRuntime
from ..kit.session import engine_counters
from .configs import Token2wavConfig
from .parts import (HostStaging, VocoderSplit, CountingGraph, capture_vendor_buckets, config_of,
                    make_constants_device_resident)
from .steps import FLOW, VOCODER, declaration_for, token2wav_steps, trim
from .steps import declaration as carried_declaration
from .envelopes import STOCK_ENVELOPE, demand_envelope
from .turns import check_flag, check_tokens
from .prompts import PromptState

__all__ = ["ArmSpec", "ARMS", "FACTORIAL", "CONTROLS", "declaration_for", "chunk_frames",
           "make_constants_device_resident", "capture_vendor_buckets", "VocoderSplit", "HostStaging", "Token2wavRuntime",
           "runtime_envelope", "arm_modules", "build_runtime", "config_of", "pin_determinism"]

# ---------------------------------------------------------------------------------------
# arms
# ---------------------------------------------------------------------------------------


#: an arm of the one table (:mod:`cadencelab.adapters.arms`); Token2wav's "step" replay is the paper's solver step
ArmSpec = Arm


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
    float32 waveform; ``engines`` the replay engines; ``kit`` the rule arms' kit runtime (None for B0
    and the controls).
    """

    def __init__(self, flow, hift, device, arm="B0", n_timesteps: int | None = None, cfg: Token2wavConfig | None = None,
                 backend: str = "auto", prompt_frames: int | None = None, clocks: Token2wavClocks = T2W_CLOCKS):
        self.spec = ARMS[arm] if isinstance(arm, str) else arm
        for m in (flow.decoder.estimator, flow.encoder):  # an earlier R/SR runtime's engine, or the compile control
            if "forward_chunk" in vars(m):
                raise ValueError(f"Token2wavRuntime: {type(m).__name__}.forward_chunk was replaced by an earlier "
                                 f"runtime on these modules: build fresh modules for arm '{self.spec.name}' "
                                 f"(runtime.arm_modules)")
        self.device = torch.device(device)
        self.flow, self.hift = flow, hift
        self.clocks = clocks.with_(n_steps=n_timesteps, prompt_frames=prompt_frames)
        self.n_timesteps = self.clocks.n_steps
        self.prompt_frames = self.clocks.prompt_frames
        self.cfg = cfg
        self.backend = backend
        self.source_cache_len = self.clocks.source_cache_samples
        self.constants: list[str] = []
        self.vendor_graph_fires: dict = {}
        self.primings = 0
        self.cache = None
        self.stream_cache = None  # B0 and the controls: every region's stock cache (plain tensors, new every call)
        self.last_mel = self.last_speech = None
        self.ranges = False
        self.range_hook = None  # name -> context manager: opens the runtime's ranges instead (a harness's timer)
        self.decl = None
        self.kit: StreamingRuntime | None = None
        self.vocab_size = (cfg or config_of(flow)).vocab_size
        decl = declaration_for(cfg or config_of(flow), clocks=self.clocks)
        q = decl.params
        self.staging = HostStaging(self.device, q["tokens_per_chunk"] + q["lookahead"],
                                   (q["f_call"] + self.clocks.mel_cache_frames) * q["samples_per_frame"])
        # the turn's speaker embedding, at one address (written at every turn start)
        self.spk = torch.zeros(1, flow.spk_embed_affine_layer.in_features, device=self.device,
                               dtype=flow.decoder.att_cache_buffer.dtype)
        if self.spec.state_rule or self.spec.replay:
            self.decl = decl
            self.kit = self._kit_runtime(cfg or config_of(flow))
        else:  # B0 and the controls: the stock steps on the vendor's own HiFT, called in the stock order
            self.steps = token2wav_steps(flow, hift, decl, self.clocks, self.spk, self.device)
        self.engines: dict = dict(self.kit.engines) if self.kit is not None else {}
        if self.spec.control:
            self._setup_control()

    # -- the rule arms: the declaration and two steps on the kit ----------------------------
    def _kit_runtime(self, cfg: Token2wavConfig) -> StreamingRuntime:
        spec, dec, c = self.spec, self.flow.decoder, self.clocks
        decl = carried_declaration(cfg, c)
        if spec.state_rule:
            need, att = c.demand_frames, dec.att_cache_buffer
            if att.shape[0] != self.n_timesteps or att.shape[4] != need:
                raise ValueError(
                    f"state-rule arm '{spec.name}' needs the solver buffers at the declared demand "
                    f"({self.n_timesteps} steps x {need} frames), found {att.shape[0]} x {att.shape[4]}: build the "
                    f"modules with envelope=runtime_envelope('{spec.name}', {self.n_timesteps})")
            dec.rand_noise = dec.rand_noise[:, :, :decl.region("cfm_noise").policy.extent].clone()
        if spec.replay:
            self.constants = make_constants_device_resident(self.flow, self.hift, self.device)
        # the whole vocoder in one replayed call; S keeps the vendor iSTFT (HiFT up to it, device RNG included)
        vocoder = VocoderSplit.graph_safe_for(self.hift) if spec.replay else VocoderSplit(self.hift)
        s = self.steps = token2wav_steps(self.flow, vocoder.whole, decl, c, self.spk, self.device)
        dit, enc = dec.estimator, self.flow.encoder
        # the buffers the vendor writes through its modules, read anew every call: one the module rebinds is seen
        held = dict(spk=self.spk, solver_workspace=lambda: dec.att_cache_buffer, solver_cnn=lambda: dec.cnn_cache_buffer,
                    step_att=lambda: dit.att_cache_buffer, step_cnn=lambda: dit.cnn_cache_buffer)
        # the solver's own buffers are the estimator regions' carries (in the arms with the state rule)
        adopt = {"estimator_att_cache": dec.att_cache_buffer, "estimator_cnn_cache": dec.cnn_cache_buffer}
        axis_mel = decl.region("vocoder_mel_cache").clock_axis  # mel tensors (1, bins, frames): their frames axis
        axis = {n: decl.region(n).clock_axis for n in ("estimator_att_cache", "conformer_att_cache")}
        # the solver-step arms (R, SR): a DiT call reads one solver step's slice of the estimator cache (the steps
        # dim gone), the encoder the whole conformer cache; the DiT's input counts mel frames where the chunk's
        # mel does. The per-call arms replay the flow chunk whole.
        inner = {"estimator_step": Inner(dit, At("x", dim=axis_mel),
                                         {"estimator_att_cache": At("att_cache", dim=axis["estimator_att_cache"] - 1)}),
                 "flow_encoder": Inner(enc, At("xs", dim=1, clock="tokens", last="last_chunk"),
                                       {"conformer_att_cache": At("att_cache", dim=axis["conformer_att_cache"])})}

        def init(prompt: PromptState) -> dict:
            cache = self._prime(prompt)
            # a stock arm's solver buffers hold the vendor's 16 slots: the declared steps are the first
            return {n: cache[n][:c.n_steps] if n.startswith("estimator") else cache[n] for n in FLOW}

        model = KitModel(
            decl, {"flow_chunk": s.flow, "vocoder_core": s.vocoder}, form="stock",
            stock={"flow_chunk": s.flow_stock, "vocoder_core": s.vocoder_stock},
            frames={"flow_chunk": At(0, dim=1, clock="tokens"), "vocoder_core": Committed(axis_mel)},
            writes={"flow_chunk": FLOW, "vocoder_core": VOCODER}, init=init, device=self.device,
            modules={"flow_chunk": [self.flow], "vocoder_core": [self.hift]}, adopt=adopt, held=held, inner=inner,
            granularity={"flow_chunk": "inner", "vocoder_core": "call"})
        return StreamingRuntime(model, spec, backend=self.backend, engine_options={
            "flow_chunk": dict(clone_outputs=spec.state_rule), "vocoder_core": dict(clone_outputs=True)})

    def carries(self) -> list[Carry]:
        """The kit's carries (empty without the state rule)."""
        return list(self.kit.carries.values()) if self.kit is not None else []

    def _carry(self, name: str) -> Carry:
        if self.kit is None or name not in self.kit.carries:
            raise AttributeError(f"arm '{self.spec.name}' keeps no carries (no state rule): '{name}'")
        return self.kit.carries[name]

    est = property(lambda self: self._carry("estimator_att_cache"), doc="the estimator cache's carry (S*)")
    conf_att = property(lambda self: self._carry("conformer_att_cache"), doc="the conformer K|V carry (S*)")
    conf_cnn = property(lambda self: self._carry("conformer_cnn_cache"), doc="the conformer conv carry (S*)")
    mel = property(lambda self: self._carry("vocoder_mel_cache"), doc="the vocoder's mel overlap carry (S*)")
    src = property(lambda self: self._carry("vocoder_source_cache"), doc="the vocoder's source overlap carry (S*)")
    spc = property(lambda self: self._carry("vocoder_speech_cache"), doc="the PCM tail carry (S*)")

    def dit(self):
        """The flow's DiT estimator (R and SR replay its ``forward_chunk`` through an engine installed on it)."""
        return self.flow.decoder.estimator

    # -- the stock arms' state (a session swap's view of it) --------------------------------------
    def stock_state(self) -> dict:
        """A stock arm's stream state as named tensors: every region's stock cache (the vendor loop's, or the kit's
        for R and Rc) and a copy of the turn's speaker embedding (``spk``, held at one address)."""
        caches = self.kit.caches if self.kit is not None else self.stream_cache or {}
        return {**caches, "spk": self.spk.clone()}

    def load_stock_state(self, state: dict) -> None:
        """The state :meth:`stock_state` gave, held by the runtime again (the tensors themselves)."""
        caches = {k: v for k, v in state.items() if k != "spk"}
        if self.kit is not None:
            self.kit.caches = caches
        else:
            self.stream_cache = caches
        self.spk.copy_(state["spk"])

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

    # -- the session protocol (the vendor-shaped verbs below are the ones the duplex demo calls) ------------
    def start(self, prompt: PromptState) -> None:
        """Turn start: :meth:`set_stream_cache`."""
        self.set_stream_cache(prompt)

    def __call__(self, tokens, last: bool = False):
        """One chunk -> its float32 waveform: :meth:`stream` with ``return_waveform``."""
        return self.stream(tokens, last_chunk=last, return_waveform=True)

    # -- the vendor-shaped API --------------------------------------------------------------
    @torch.inference_mode()
    def set_stream_cache(self, prompt: PromptState):
        """Turn start: prime the flow with the prompt (eager by construction).

        Rule arms: the kit's turn reset (its ``init`` primes the flow; under the state rule the primed caches are
        written into the carries in place, the estimator cache directly into the solver buffer by the vendor code
        itself). B0 and the controls: every region's stock cache (returned): the vendor's four flow caches and the
        vocoder's three, empty.
        """
        if prompt.n_frames != self.prompt_frames:
            raise ValueError(f"prompt has {prompt.n_frames} mel frames but the runtime was declared with "
                             f"f_prompt={self.prompt_frames}")
        self.cache = prompt.as_tuple()
        self.primings += 1
        if self.kit is not None:
            self.kit.reset(prompt)
            self.stream_cache = None
            return None
        mels = self.cache[3]
        self.stream_cache = {**self._prime(prompt),
                             "vocoder_mel_cache": torch.zeros(1, mels.shape[2], 0, device=self.device),
                             "vocoder_source_cache": torch.zeros(1, 1, 0, device=self.device),
                             "vocoder_speech_cache": torch.zeros(1, 0, device=self.device)}
        return self.stream_cache

    def _prime(self, prompt: PromptState) -> dict:
        """The vendor's cache-free priming (prompt tokens plus the lookahead's silence) -> its four flow caches;
        the turn's speaker embedding written into ``spk``."""
        tokens, _, spk_emb, mels, _ = prompt.as_tuple()
        pad = torch.full((1, self.clocks.lookahead_tokens), self.clocks.silence_token, device=tokens.device,
                         dtype=tokens.dtype)
        cache = self.flow.setup_cache(torch.cat([tokens, pad], dim=1), mels, spk_emb, n_timesteps=self.n_timesteps)
        self.spk.copy_(spk_emb)
        return cache

    @torch.inference_mode()
    def stream(self, tokens: Sequence[int] | torch.Tensor, last_chunk: bool = False, return_waveform: bool = False,
               events: tuple | None = None):
        """One chunk of speech tokens -> int16 PCM bytes (or the float32 waveform).

        ``events``: optional (start, end) CUDA events recorded around the synthesis segment
        (flow + cut + vocoder), before the waveform is copied to the host.
        """
        if self.cache is None:
            raise ValueError("Token2wavRuntime.stream: call set_stream_cache(prompt) first")
        if self.kit is not None and self.kit.ended:
            raise ValueError("Token2wavRuntime.stream: the turn ended with a final chunk (last_chunk=True): call "
                             "set_stream_cache(prompt) to start the next turn")
        tokens = check_tokens(tokens, self.vocab_size, "Token2wavRuntime.stream")
        check_flag(last_chunk, "last_chunk", "Token2wavRuntime.stream")
        token = self.staging.tokens_to_device(tokens)
        torch.tensor([token.shape[1]], dtype=torch.int32, device=self.device)  # the stock code builds lens too
        if events is not None:
            events[0].record()
        with self._range("synthesis"):
            if self.kit is not None:
                speech, first = self._synthesise_kit(token, last_chunk)
            else:
                speech, first = self._synthesise_stock(token, last_chunk)
        speech = trim(speech, first, last_chunk, self.source_cache_len)
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
        """B0 and the controls: the stock steps in the stock order (flow chunk and cut; ``torch.concat``, the
        vendor's HiFT, cross-fade and the kept tails)."""
        caches = self.stream_cache
        first = caches["vocoder_speech_cache"].shape[-1] == 0
        with self._range("flow"):
            self.last_mel, new = self.steps.flow_stock(token, caches, last_chunk)
        with self._range("vocoder"):
            speech, voc = self.steps.vocoder_stock(self.last_mel, caches, last_chunk)
        self.stream_cache = {**new, **voc}
        return speech, first

    def _synthesise_kit(self, token, last_chunk):
        """The rule arms: the two operators' calls on the kit (the vocoder's includes the cross-fade)."""
        first = (self.spc.length if self.spec.state_rule else self.kit.caches["vocoder_speech_cache"].shape[-1]) == 0
        with self._range("flow"):
            self.last_mel = self.kit(token, last_chunk, "flow_chunk")
        with self._range("vocoder"):
            speech = self.kit(self.last_mel, last_chunk, "vocoder_core")
        return speech, first

    # -- reports ----------------------------------------------------------------------------
    def counters(self):
        """Replay counters of every engine (empty frame for arms without replay)."""
        return engine_counters(self.engines.values())

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
