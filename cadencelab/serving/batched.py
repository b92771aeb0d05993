"""EXPERIMENTAL: cross-session batched Token2wav (B sessions' chunks in one call), eager and replayed.

Arm ``SRb`` of the ``sessions`` study (:mod:`cadencelab.bench.sessions_batched`), outside the paper's factorial.
The chunks of B sessions in one shape class (same carry extents, chunk frames, ``last_chunk``) are stacked along
the batch dim into one flow call and one vocoder call; each session keeps B0's stock state, gathered before the
call and scattered after. ``replay=True``: both calls through :class:`~cadencelab.replay.ExactShapeReplay` keyed
on ``(B,) + label``, one graph per (class, B) for the declared ``batch_sizes``; another size runs eagerly
(``outside_catalog``). The vendor code is unchanged: its batch-1 solver and DiT chunk call are restated for 2B
CFG rows (a session's cond / uncond at rows b and B + b). Priming (``open``) runs solo, as B0 does.

Default exactness reference: the batched eager path (replay is bit-identical to it). Against a session alone
nothing is promised: batching changes GEMM / attention / conv shapes, so kernels may reduce in another order
(:func:`compare_to_solo` reports it; B = 1 is B0), and HiFT draws one batch-shaped noise stream for all rows.

``invariant=True`` (arm ``SRbi``): each row aims to equal its session alone through B0, bit for bit (CPU tests,
the H100 study, its CUDA test since rows sit at the solo pointer residue); gated, never assumed.
:class:`~.invariant.PerSession` runs the ops whose kernel or reduction order can follow the row count once per
session at the solo call's shapes and layout; HiFT's draws come pre-drawn per row from the session's own
generator (``open`` / ``fork`` take its seed). Still one call per stage and one graph per (class, B), but most of
the batching gain is gone: those ops cost B launches, only elementwise ops and per-row norms stay batched.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..contract import admitted_labels
from ..replay import At, ExactShapeReplay, bind
from ..adapters.token2wav.runtime import VocoderSplit, config_of, declaration_for, make_constants_device_resident
from ..adapters.token2wav.clocks import T2W_CLOCKS, Token2wavClocks
from ..adapters.token2wav.stock import crossfade
from ..adapters.token2wav.configs import Token2wavConfig
from ..adapters.token2wav.prompts import PromptState
from ..adapters.token2wav.turns import check_flag, check_tokens
from .invariant import PerSession, fill_noise, new_noise, noise_templates
from .sessions import check_template

__all__ = ["DEFAULT_BATCH_SIZES", "BatchedSession", "BatchedToken2wav", "batched_catalog",
           "compare_to_solo"]

DEFAULT_BATCH_SIZES = (1, 2, 4, 8)


def batched_catalog(decl, operator: str, batch_sizes: Sequence[int]) -> set[tuple]:
    """Labels ``(B,) + label`` for every declared batch size and every admitted label of ``operator``."""
    return admitted_labels(decl, operator, batch_sizes)


@dataclass
class BatchedSession:
    """One stream's stock state (B0's ``stream_cache`` and HiFT cache dict) and its latest outputs."""

    sid: int
    prompt: PromptState
    flow: dict = field(default_factory=dict, repr=False)
    hift: dict = field(default_factory=dict, repr=False)
    chunks: int = 0
    last_mel: torch.Tensor | None = field(default=None, repr=False)
    last_speech: torch.Tensor | None = field(default=None, repr=False)
    #: the session's own generator on the device (seeded as ``torch.manual_seed(seed)`` seeds it): what HiFT
    #: draws from under ``invariant=True``, as the solo session draws from the default one
    rng: torch.Generator | None = field(default=None, repr=False)

    def state_bytes(self) -> int:
        """Bytes this session owns on the device between calls (its stock flow and HiFT caches)."""
        return sum(t.numel() * t.element_size() for d in (self.flow, self.hift) for t in d.values())

    def shape_class(self, n_tokens: int, last_chunk: bool) -> tuple:
        """Sessions batch together only when these agree."""
        return (self.flow["estimator_att_cache"].shape[4], self.flow["conformer_att_cache"].shape[3],
                self.hift["mel"].shape[2], self.hift["source"].shape[2], self.hift["speech"].shape[1],
                int(n_tokens), bool(last_chunk))


def _stack_cfg(ts: list[torch.Tensor], dim: int) -> torch.Tensor:
    """Sessions' (.., 2, ..) CFG pairs -> (.., 2B, ..) as [cond_1..cond_B, uncond_1..uncond_B]."""
    return torch.cat([t.narrow(dim, 0, 1) for t in ts] + [t.narrow(dim, 1, 1) for t in ts], dim=dim)


def _unstack_cfg(t: torch.Tensor, dim: int, b: int, n: int) -> torch.Tensor:
    return torch.cat([t.narrow(dim, b, 1), t.narrow(dim, n + b, 1)], dim=dim)


class BatchedToken2wav:
    """EXPERIMENTAL: B Token2wav sessions synthesised in one batched call per stage.

    flow, hift: vendor modules (built with any envelope; their own cache buffers are used only
        by solo priming). The modules get the replay arms' device-resident constants
        (bit-identical) so the same code path is capturable.
    replay: route the flow chunk and the vocoder core through :class:`ExactShapeReplay`
        (one graph per (class, B)); False is the batched eager reference.
    batch_sizes: the declared session counts (the session dimension's admitted sizes).
    max_frames: frames of attention history the workspaces hold (prompt + retained + call).
    """

    def __init__(self, flow, hift, device, *, replay: bool = False, backend: str = "auto", n_timesteps: int | None = None,
                 cfg: Token2wavConfig | None = None, prompt_frames: int | None = None, retained: int | None = None,
                 batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES, clocks: Token2wavClocks = T2W_CLOCKS,
                 invariant: bool = False):
        self.flow, self.hift = flow, hift
        self.invariant = bool(invariant)
        self.device = torch.device(device)
        self.clocks = c = clocks.with_(n_steps=n_timesteps, prompt_frames=prompt_frames, retained_frames=retained)
        self.n_timesteps = c.n_steps
        self.prompt_frames, self.retained = c.prompt_frames, c.retained_frames
        self.max_frames = c.demand_frames
        self.batch_sizes = tuple(sorted({int(b) for b in batch_sizes}))
        self.replay = replay
        self.decl = declaration_for(cfg or config_of(flow), clocks=c)
        self.vocab_size = (cfg or config_of(flow)).vocab_size
        make_constants_device_resident(flow, hift, self.device)  # as the replay arms (bit-identical constants)
        self.vocoder = VocoderSplit(hift)  # the vendor HiFT, batch-safe, split at its iSTFT as in the runtime
        from einops import pack, repeat  # the vendor DiT's own helpers (a vendor dependency)

        self._pack, self._repeat = pack, repeat
        self.source_cache_len = c.source_cache_samples
        self.speech_window = torch.from_numpy(np.hamming(2 * self.source_cache_len)).to(self.device)
        self._ws: dict[int, dict] = {}
        self._ws_list: list[torch.Tensor] = []  # append-only: owner indices stay stable
        self.calls = Counter()  # (path, batch size) -> batched calls
        self._noise: dict[tuple, list] = {}  # (B, mel shape, source shape) -> HiFT's pre-drawn noise (invariant)
        self._templates: dict[tuple, list] = {}
        self.engines: dict[str, ExactShapeReplay] = {}
        if replay:  # bound directly: the kit's runtime serves one session, a batched call stacks B sessions' rows
            common = dict(backend=backend, owners=lambda: self._ws_list, clone_outputs=True)
            sizes = dict(batch_sizes=self.batch_sizes, **common)
            self.engines["flow_chunk"] = bind(
                self.decl, "flow_chunk", self._flow_chunk, name="batched_flow_chunk", batch=At("token", dim=0),
                reads={"estimator_att_cache": At("est_att"), "conformer_att_cache": At("conf_att")},
                frames=At("token", dim=1, clock="tokens", last="last_chunk"), modules=[flow], **sizes)
            # the stock call carries the cached mel inside ``mel``; its extent follows from the source cache's
            self.engines["vocoder_core"] = bind(
                self.decl, "vocoder_core", self._core, name="batched_vocoder_core", batch=At("mel", dim=0),
                reads={"vocoder_source_cache": At("cache_source")},
                frames=At("mel", dim=2, less="vocoder_mel_cache"), modules=[hift], **sizes)

    # -- workspaces (2B CFG rows per batch size) ----------------------------------------------
    def workspace(self, b: int) -> dict:
        """Batch size ``b``'s workspaces, allocated once and kept (graph owners: their addresses are bound)."""
        if b not in self._ws:
            self._ws[b] = self._new_workspace(b)
            self._ws_list.extend(self._ws[b].values())
        return self._ws[b]

    def _new_workspace(self, b: int) -> dict:
        dec = self.flow.decoder
        dit = dec.estimator
        slots, depth, _, heads, _, kv = dec.att_cache_buffer.shape
        conv = dec.cnn_cache_buffer.shape[3]
        dt, dev = dec.att_cache_buffer.dtype, dec.att_cache_buffer.device
        n, f = self.n_timesteps, self.max_frames
        return dict(dec_att=torch.zeros(n, depth, 2 * b, heads, f, kv, dtype=dt, device=dev),
                    dec_cnn=torch.zeros(n, depth, 2 * b, conv, 2, dtype=dt, device=dev),
                    dit_att=torch.zeros(depth, 2 * b, heads, f, kv, dtype=dt, device=dev),
                    dit_cnn=torch.zeros(depth, 2 * b, dit.cnn_cache_buffer.shape[2], 2, dtype=dt, device=dev))

    def workspace_bytes(self) -> dict[int, int]:
        return {b: sum(t.numel() * t.element_size() for t in ws.values()) for b, ws in self._ws.items()}

    # -- sessions ------------------------------------------------------------------------------
    def _generator(self, seed: int | None) -> torch.Generator | None:
        """The session's own device generator in the state ``torch.manual_seed(seed)`` leaves the default one
        (None without a seed: a template, or a session of the plain path)."""
        if seed is None:
            return None
        return torch.Generator(device=self.device).manual_seed(int(seed))

    @torch.inference_mode()
    def open(self, sid: int, prompt: PromptState, seed: int | None = None) -> BatchedSession:
        """Prime a session solo (vendor ``setup_cache``, as B0 does); its caches are copied out of the shared buffers.
        ``seed``: the session's generator, the solo session's ``manual_seed`` (streaming under ``invariant`` needs it)."""
        if prompt.n_frames != self.prompt_frames:
            raise ValueError(f"prompt has {prompt.n_frames} frames, declared f_prompt={self.prompt_frames}")
        tokens, _, spk, mels, _ = prompt.as_tuple()
        c = self.clocks
        pad = torch.ones(1, c.lookahead_tokens, device=tokens.device, dtype=tokens.dtype) * c.silence_token
        cache = self.flow.setup_cache(torch.cat([tokens, pad], dim=1), mels, spk, n_timesteps=self.n_timesteps)
        bins = mels.shape[2]
        n = self.n_timesteps  # the stock envelope has more solver slots than steps; only the first n are read
        own = {k: (v[:n] if k.startswith("estimator") else v).clone() for k, v in cache.items()}
        return BatchedSession(sid, prompt, flow=own, rng=self._generator(seed),
                              hift=dict(mel=torch.zeros(1, bins, 0, device=self.device),
                                        source=torch.zeros(1, 1, 0, device=self.device),
                                        speech=torch.zeros(1, 0, device=self.device)))

    def fork(self, template: BatchedSession, sid: int, seed: int | None = None) -> BatchedSession:
        """A new session starting from ``template``'s primed state (copies; the template is not advanced).

        Priming is deterministic and draws no random numbers, so this equals :meth:`open` with the
        template's prompt.
        """
        check_template(template)
        return BatchedSession(sid, template.prompt, flow={k: v.clone() for k, v in template.flow.items()},
                              hift={k: v.clone() for k, v in template.hift.items()}, rng=self._generator(seed))

    # -- the batched flow chunk (vendor inference_chunk + solver + DiT chunk, restated for 2B rows) --
    def _autocast(self):
        if self.device.type == "cuda":
            return torch.amp.autocast("cuda", dtype=torch.float32)
        return contextlib.nullcontext()

    def _dit_chunk(self, x, mu, t, spks, cond, cnn_cache, att_cache, ws):
        """``DiT.forward_chunk`` (eager branch) writing into this batch size's workspaces."""
        dit = self.flow.decoder.estimator
        t = dit.t_embedder(t).unsqueeze(1)
        x = self._pack([x, mu], "b * t")[0]
        spks = self._repeat(spks, "b c -> b c t", t=x.shape[-1])
        x = self._pack([x, spks], "b * t")[0]
        x = self._pack([x, cond], "b * t")[0]
        last_att_len = att_cache.shape[3]
        chunk_size = x.shape[2]
        x = dit.blocks_forward_chunk(x, t, None, cnn_cache, att_cache, ws["dit_cnn"], ws["dit_att"])
        return x, ws["dit_cnn"], ws["dit_att"][:, :, :, :last_att_len + chunk_size, :]

    def _solve(self, mu, spks, cond, cnn_cache, att_cache, ws):
        """``CausalConditionalCFM.forward_chunk`` + ``solve_euler_chunk`` for B sessions (2B CFG rows)."""
        dec = self.flow.decoder
        b = mu.shape[0]
        offset = att_cache.shape[4]
        z = dec.rand_noise[:, :, offset:offset + mu.size(2)] * 1.0
        t_span = torch.linspace(0, 1, self.n_timesteps + 1, device=mu.device, dtype=mu.dtype)
        t_span = 1 - torch.cos(t_span * 0.5 * torch.pi)
        x = z.expand(b, -1, -1)  # every session starts from the same constant noise, as solo
        t, dt = t_span[0], t_span[1] - t_span[0]
        t = t.unsqueeze(dim=0)
        last_att_len = att_cache.shape[4]
        mu_in = torch.cat([mu, torch.zeros_like(mu)], dim=0)
        spks_in = torch.cat([spks, torch.zeros_like(spks)], dim=0)
        cond_in = torch.cat([cond, torch.zeros_like(cond)], dim=0)
        rate = dec.inference_cfg_rate
        for step in range(1, len(t_span)):
            dphi_dt, new_cnn, new_att = self._dit_chunk(x.repeat(2, 1, 1), mu_in, t.repeat(2 * b), spks_in, cond_in,
                                                        cnn_cache[step - 1], att_cache[step - 1], ws)
            dphi_dt, cfg_dphi_dt = dphi_dt.chunk(2, dim=0)
            dphi_dt = ((1.0 + rate) * dphi_dt - rate * cfg_dphi_dt)
            x = x + dt * dphi_dt
            t = t + dt
            if step < len(t_span) - 1:
                dt = t_span[step + 1] - t
            ws["dec_cnn"][step - 1] = new_cnn
            ws["dec_att"][step - 1][:, :, :, :x.shape[2] + last_att_len, :] = new_att
        return x, ws["dec_cnn"], ws["dec_att"][:, :, :, :, :x.shape[2] + last_att_len, :]

    def _per_session(self, n: int, noise=None):
        """The invariant condition's mode (per-session kernels, pre-drawn noise); nothing otherwise."""
        return PerSession(n, noise) if self.invariant else contextlib.nullcontext()

    def _core(self, mel, cache_source, noise=None):
        """The vocoder core; under ``invariant`` with per-session kernels and each row's own pre-drawn noise."""
        with self._per_session(mel.shape[0], noise):
            return self.vocoder.core(mel, cache_source)

    def _flow_chunk(self, token, spk, conf_cnn, conf_att, est_cnn, est_att, last_chunk, ws):
        """``inference_chunk`` for B stacked sessions, then the stock cut (prompt + the last retained frames)."""
        flow = self.flow
        with self._autocast(), self._per_session(token.shape[0]):
            spk = F.normalize(spk, dim=1)
            spk = flow.spk_embed_affine_layer(spk)
            token = flow.input_embedding(token)
            h, conf_cnn, conf_att = flow.encoder.forward_chunk(xs=token, last_chunk=last_chunk, cnn_cache=conf_cnn,
                                                               att_cache=conf_att)
            h = flow.encoder_proj(h)
            cond = torch.zeros_like(h)
            feat, est_cnn, est_att = self._solve(h.transpose(1, 2).contiguous(), spk, cond.transpose(1, 2).contiguous(),
                                                 est_cnn, est_att, ws)
        # the stock cut (prompt + the last f_retained frames): the declared retention policies
        est_att = self.decl.region("estimator_att_cache").policy.apply(est_att, 4)
        conf_att = self.decl.region("conformer_att_cache").policy.apply(conf_att, 3)
        return feat, dict(conformer_cnn_cache=conf_cnn, conformer_att_cache=conf_att,
                          estimator_cnn_cache=est_cnn, estimator_att_cache=est_att)

    # -- the batched stream --------------------------------------------------------------------------
    @torch.inference_mode()
    def stream(self, sessions: Sequence[BatchedSession], tokens: Sequence[Sequence[int]], last_chunk: bool = False,
               return_waveform: bool = False, eager: bool = False) -> list:
        """One chunk for each of ``sessions`` (same shape class), synthesised in one batched call per stage.

        ``eager=True`` runs this call on the batched eager path even when replay is on (the
        exactness reference, on this instance's own workspaces). Returns one int16 PCM bytes
        object (or float32 waveform) per session, in order.
        """
        n = len(sessions)
        if n == 0 or n != len(tokens):
            raise ValueError(f"stream: {n} sessions and {len(tokens)} token lists")
        check_flag(last_chunk, "last_chunk", "BatchedToken2wav.stream")
        toks = [check_tokens(t, self.vocab_size, f"BatchedToken2wav.stream: session {i}") for i, t in enumerate(tokens)]
        classes = {s.shape_class(len(t), last_chunk) for s, t in zip(sessions, toks)}
        if len(classes) != 1:
            raise ValueError(f"stream: sessions in different shape classes cannot be batched: {sorted(classes)}")
        if len({s.sid for s in sessions}) != n:
            raise ValueError("stream: a session appears twice in one batch")
        if self.invariant and any(s.rng is None for s in sessions):
            raise ValueError("stream: invariant batching needs every session opened with its seed")
        self.calls["replay" if self.replay and not eager else "eager", n] += 1
        # a size outside the declared set runs eagerly (the catalog refuses it) on a workspace kept for this call only
        kept = n in self.batch_sizes or not self.replay
        ws = self.workspace(n) if kept else self._new_workspace(n)
        token = torch.tensor(toks, dtype=torch.int32, device=self.device)
        spk = torch.cat([s.prompt.spk_emb for s in sessions], dim=0)
        fc = [s.flow for s in sessions]
        args = (token, spk, torch.cat([c["conformer_cnn_cache"] for c in fc], dim=0),
                torch.cat([c["conformer_att_cache"] for c in fc], dim=1),
                _stack_cfg([c["estimator_cnn_cache"] for c in fc], 2),
                _stack_cfg([c["estimator_att_cache"] for c in fc], 2), last_chunk, ws)
        engines = {} if eager else self.engines
        flow = engines.get("flow_chunk", self._flow_chunk)
        chunk_mel, new = flow(*args)
        hc = [s.hift for s in sessions]
        mel = torch.concat([torch.cat([h["mel"] for h in hc], dim=0), chunk_mel], dim=2)
        core = engines.get("vocoder_core", self._core)
        src = torch.cat([h["source"] for h in hc], dim=0)
        if self.invariant:
            magnitude, phase, source = core(mel, src, self._drawn_noise(sessions, mel, src, kept))
        else:
            magnitude, phase, source = core(mel, src)
        with self._per_session(n):
            speech = self.vocoder.tail(magnitude, phase)
        cached = torch.cat([h["speech"] for h in hc], dim=0)
        first = cached.shape[-1] == 0
        if not first:
            speech = crossfade(speech, cached, self.speech_window)
        new_mel = mel[..., -self.clocks.mel_cache_frames:]
        new_src = source[:, :, -self.source_cache_len:]
        new_spc = speech[:, -self.source_cache_len:]
        if not last_chunk:
            if first:
                pad = torch.zeros(n, self.source_cache_len, device=speech.device)
                speech = torch.cat([pad, speech[:, : -self.source_cache_len]], dim=1)
            else:
                speech = speech[:, : -self.source_cache_len]
        wavs = speech.cpu().numpy()  # one device-to-host copy for the batch
        out = []
        for b, s in enumerate(sessions):
            s.flow = dict(conformer_cnn_cache=new["conformer_cnn_cache"][b:b + 1].clone(),
                          conformer_att_cache=new["conformer_att_cache"][:, b:b + 1].clone(),
                          estimator_cnn_cache=_unstack_cfg(new["estimator_cnn_cache"], 2, b, n),
                          estimator_att_cache=_unstack_cfg(new["estimator_att_cache"], 2, b, n))
            s.hift = dict(mel=new_mel[b:b + 1].clone(), source=new_src[b:b + 1].clone(),
                          speech=new_spc[b:b + 1].clone())
            s.chunks += 1
            s.last_mel, s.last_speech = chunk_mel[b:b + 1].clone(), speech[b:b + 1].clone()
            wav = wavs[b:b + 1]
            out.append(wav.copy() if return_waveform else (np.clip(wav, -1.0, 1.0) * 32767.0).astype("<i2").tobytes())
        return out

    def _drawn_noise(self, sessions, mel, src, kept: bool) -> list[torch.Tensor]:
        """HiFT's draws for this call, row b from session b's generator as its solo call draws them, in buffers
        kept per (B, class) at fixed addresses (graph inputs) or, for an undeclared size, for this call only."""
        key = (tuple(mel.shape), tuple(src.shape))
        if key not in self._templates:
            self._templates[key] = noise_templates(self.hift, mel)
        templates = self._templates[key]
        if not kept:
            noise = new_noise(templates, self.device)
        elif key not in self._noise:
            noise = self._noise[key] = new_noise(templates, self.device)
            self._ws_list.extend(noise)
        else:
            noise = self._noise[key]
        fill_noise(noise, templates, [s.rng for s in sessions])
        return noise[:len(templates)]  # the draws' buffers, in the vendor's order (the solo rows after them)

    # -- reports -----------------------------------------------------------------------------------
    def counters(self):
        import pandas as pd

        frames = [e.counters() for e in self.engines.values()]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def summaries(self) -> dict[str, str]:
        return {k: e.summary() for k, e in self.engines.items()}

    def captures(self) -> int:
        """Graphs captured so far by the replay engines (0 without replay)."""
        return sum(c.captures for e in self.engines.values() for c in e.classes.values())

    def invalidations(self) -> int:
        return sum(c.invalidations for e in self.engines.values() for c in e.classes.values())


def compare_to_solo(batched_mels: Sequence[torch.Tensor], solo_mels: Sequence[torch.Tensor]) -> dict:
    """Report (never gate) how a batch's per-session mels compare with each session run alone.

    Returns ``{"bit_identical": [...], "max_abs_diff": [...]}`` per session.
    """
    same, diff = [], []
    for a, b in zip(batched_mels, solo_mels):
        same.append(bool(torch.equal(a, b)))
        diff.append(float((a.float() - b.float()).abs().max()) if a.shape == b.shape else math.inf)
    return {"bit_identical": same, "max_abs_diff": diff}
