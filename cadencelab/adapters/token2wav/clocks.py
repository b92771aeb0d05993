"""Token2wav's clocks and declaration: the one place its sizes are typed (the paper's operating point), and the
streaming Token2wav tail of MiniCPM-o 4.5 (CosyVoice2 lineage) declared from them. No torch: the command line's
help and the catalog read it before any model is built."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...contract.clocks import Clock, per_call, validate_clocks
from ...contract.declaration import Admission, Declaration, DeviceConstant, Operator, Region
from ...contract.errors import DeclarationError
from ...contract.policies import Fixed, PromptRetained, SlidingWindow

__all__ = ["T2W_CLOCKS", "Token2wavClocks", "token2wav_declaration"]


@dataclass(frozen=True)
class Token2wavClocks:
    """Token2wav's native clocks: the only place its sizes are written down.

    ``prompt_frames`` mel frames of the reference voice stay in every attention cache, plus
    the newest ``retained_frames``; a stream call commits ``tokens_per_chunk`` speech tokens and
    carries ``lookahead_tokens`` more; a token is ``frames_per_token`` mel frames, a frame
    ``samples_per_frame`` PCM samples; the solver takes ``n_steps`` Euler steps; the vocoder
    carries ``mel_cache_frames`` mel frames into the next chunk; a turn starts behind
    ``lookahead_tokens`` copies of ``silence_token`` (the priming lookahead).
    """

    prompt_frames: int = 302
    retained_frames: int = 100
    tokens_per_chunk: int = 25
    lookahead_tokens: int = 3
    frames_per_token: int = 2
    n_steps: int = 10
    samples_per_frame: int = 480
    mel_cache_frames: int = 8
    silence_token: int = 4218

    @property
    def call_tokens(self) -> int:
        """Tokens of a steady stream call: the committed chunk plus its lookahead."""
        return self.tokens_per_chunk + self.lookahead_tokens

    @property
    def chunk_frames(self) -> int:
        """f_chunk: mel frames a steady call commits (its stride)."""
        return self.frames_per_token * self.tokens_per_chunk

    @property
    def call_frames(self) -> int:
        """f_call: mel frames of the largest call (a final flush keeps its lookahead)."""
        return self.frames_per_token * self.call_tokens

    @property
    def demand_frames(self) -> int:
        """Largest attended extent: prompt + retained + one largest call."""
        return self.prompt_frames + self.retained_frames + self.call_frames

    @property
    def source_cache_samples(self) -> int:
        """PCM samples the vocoder's source and speech overlaps hold (the mel overlap in samples)."""
        return self.mel_cache_frames * self.samples_per_frame

    def frames_of(self, n_tokens: int, last_chunk: bool) -> int:
        """Mel frames a call of ``n_tokens`` yields: the lookahead is stripped unless it is the last chunk."""
        return self.frames_per_token * (n_tokens if last_chunk else n_tokens - self.lookahead_tokens)

    def retention(self, layout: str = "chronological") -> PromptRetained:
        """The attention caches' retention policy (the stock cut: prompt + newest retained frames)."""
        return PromptRetained(self.prompt_frames, self.retained_frames, layout=layout)

    def with_chunk_frames(self, f_chunk: int) -> Token2wavClocks:
        """These clocks with a chunk of ``f_chunk`` frames (a whole number of tokens)."""
        return replace(self, tokens_per_chunk=_tokens_per_chunk(f_chunk, None, self.frames_per_token, self))

    def with_(self, **changes) -> Token2wavClocks:
        """These clocks with fields replaced; ``f_chunk`` (frames) is accepted instead of ``tokens_per_chunk``."""
        f_chunk = changes.pop("f_chunk", None)
        c = replace(self, **{k: v for k, v in changes.items() if v is not None})
        if f_chunk is not None:
            tokens = _tokens_per_chunk(f_chunk, changes.get("tokens_per_chunk"), c.frames_per_token, c)
            c = replace(c, tokens_per_chunk=tokens)
        return c


#: Token2wav at the paper's operating point
T2W_CLOCKS = Token2wavClocks()


def token2wav_declaration(
    f_prompt: int | None = None,
    f_retained: int | None = None,
    f_chunk: int | None = None,
    n_steps: int | None = None,
    tokens_per_chunk: int | None = None,
    lookahead: int | None = None,
    frames_per_token: int | None = None,
    samples_per_frame: int | None = None,
    depth: int = 16,
    heads: int = 8,
    head_dim: int = 64,
    hidden: int = 512,
    enc_layers: int = 10,
    enc_heads: int = 8,
    enc_head_dim: int = 64,
    enc_hidden: int = 512,
    mel_bins: int = 80,
    mel_cache: int | None = None,
    noise_frames: int = 50 * 600,
    stock_slots: int = 16,
    stock_frames: int = 1000,
    dtype: str = "float32",
    clocks: Token2wavClocks = T2W_CLOCKS,
) -> Declaration:
    """The Token2wav declaration from ``clocks``; a clock argument given here replaces that field.

    Every extent and class count below is derived from the clocks (the model sizes --
    depth, heads, widths -- only shape the regions).

    A chunk (one call, the ``chunks`` clock) commits ``tokens_per_chunk`` tokens and carries
    ``lookahead`` more (the ``tokens`` clock's offset); everything per call is derived from
    the clocks: f_chunk = frames_per_token x tokens_per_chunk (the stride), f_call = f_chunk +
    frames_per_token x lookahead (what a final flush commits), the flush sizes and every
    region's growth and max_call. ``f_chunk`` may be given instead of ``tokens_per_chunk``
    (it must be a multiple of ``frames_per_token``); giving both, they must agree.
    """
    c = clocks.with_(prompt_frames=f_prompt, retained_frames=f_retained, n_steps=n_steps,
                     lookahead_tokens=lookahead, frames_per_token=frames_per_token,
                     samples_per_frame=samples_per_frame, mel_cache_frames=mel_cache)
    tokens_per_chunk = _tokens_per_chunk(f_chunk, tokens_per_chunk, c.frames_per_token, c)
    f_prompt, f_retained, n_steps, lookahead = c.prompt_frames, c.retained_frames, c.n_steps, c.lookahead_tokens
    frames_per_token, samples_per_frame, mel_cache = c.frames_per_token, c.samples_per_frame, c.mel_cache_frames
    source_cache = mel_cache * samples_per_frame
    clocks = (
        Clock("chunks", "stream call (one second of speech)", rate_hz=1.0),
        Clock("tokens", "speech token", parent="chunks", ratio=tokens_per_chunk, offset=lookahead),
        Clock("frames", "mel frame", parent="tokens", ratio=frames_per_token),
        Clock("samples", "PCM sample at 24 kHz", parent="frames", ratio=samples_per_frame),
        Clock("steps", "Euler solver step", parent="chunks", ratio=n_steps),
        Clock("turns", "conversation turn", rate_hz=None),
    )
    frames = per_call(validate_clocks(clocks), "frames", "chunks")  # committed 50 + lookahead 6 frames
    f_chunk, f_call = frames.committed, frames.frames
    kv = 2 * head_dim
    common = dict(clock="frames", dtype=dtype)
    regions = (
        Region(
            "estimator_att_cache", shape=("n_steps", depth, 2, heads, "frames", kv),
            policy=c.retention("newest_first"), initial=f_prompt,
            lifetime="turn", role="state", envelope="retained", stock={"n_steps": stock_slots},
            address_stable=True, resident_in="solver_workspace",
            description="DiT self-attention K|V per solver step and block (CFG batch 2); newest frames first", **common,
        ),
        Region(
            "solver_workspace", shape=("n_steps", depth, 2, heads, "frames", kv),
            policy=c.retention("newest_first"), initial=f_prompt,
            lifetime="stream", role="workspace", envelope="attended",
            stock={"n_steps": stock_slots, "frames": stock_frames}, address_stable=True,
            description="the CFM's per-step cache buffer holding a whole attended extent (the 16x1000 envelope)", **common,
        ),
        Region(
            "estimator_step_workspace", shape=(depth, 2, heads, "frames", kv),
            policy=c.retention("newest_first"), initial=f_prompt,
            lifetime="stream", role="workspace", envelope="attended", stock={"frames": stock_frames},
            address_stable=True, description="the DiT's per-call K|V scratch", **common,
        ),
        Region(
            "conformer_att_cache", shape=(enc_layers, 1, enc_heads, "frames", 2 * enc_head_dim),
            policy=c.retention("chronological"), initial=f_prompt,
            lifetime="turn", role="state", envelope="retained", address_stable=True,
            description="upsampling conformer K|V (prompt first)", **common,
        ),
        Region(
            "estimator_cnn_cache", shape=("n_steps", depth, 2, 2 * hidden, "frames"),
            policy=Fixed(2), lifetime="turn", role="state", clock="frames", stock={"n_steps": stock_slots},
            address_stable=True, dtype=dtype, description="causal-conv left context per step and block",
        ),
        Region(
            "conformer_cnn_cache", shape=(1, enc_hidden, "frames"), policy=Fixed(2 + 2 * frames_per_token),
            lifetime="turn", role="state", clock="frames", address_stable=True, dtype=dtype,
            description="pre-lookahead (2) and upsample (4) conv left context",
        ),
        Region(
            "vocoder_mel_cache", shape=(1, mel_bins, "frames"), policy=SlidingWindow(mel_cache), lifetime="turn",
            role="state", address_stable=True, description="HiFT mel overlap", **common,
        ),
        Region(
            "vocoder_source_cache", shape=(1, 1, "samples"), policy=SlidingWindow(source_cache), clock="samples",
            lifetime="turn", role="state", address_stable=True, dtype=dtype, description="HiFT NSF source overlap",
        ),
        Region(
            "vocoder_speech_cache", shape=(1, "samples"), policy=SlidingWindow(source_cache), clock="samples",
            lifetime="turn", role="state", address_stable=True, dtype=dtype,
            description="PCM tail for the fade-in of the next chunk",
        ),
        Region(
            "cfm_noise", shape=(1, mel_bins, "frames"), policy=Fixed(f_prompt + f_retained + f_call), clock="frames",
            lifetime="stream", mutability="immutable", role="constant", stock={"frames": noise_frames}, dtype=dtype,
            description="solver start noise, read at [offset, offset + f) with offset = cached extent",
        ),
    )
    q = {"n_timesteps": n_steps, "dtype": dtype}
    per_chunk = dict(clock="frames", flush="lookahead")  # call and flush sizes derived from the chunk clock
    operators = (
        Operator("flow_chunk", reads=("estimator_att_cache", "conformer_att_cache"), scalars=q,
                 description="encoder + CFM loop + retention of one chunk (chunk granularity)", **per_chunk),
        Operator("estimator_step", reads=("estimator_att_cache",), per_chunk=n_steps, scalars=q,
                 description="one DiT call of the Euler loop (solver-step granularity)", **per_chunk),
        Operator("flow_encoder", reads=("conformer_att_cache",), scalars={"dtype": dtype},
                 description="upsampling conformer encoder of one chunk", **per_chunk),
        Operator("vocoder_core", reads=("vocoder_mel_cache", "vocoder_source_cache"), scalars={"dtype": dtype},
                 description="HiFT up to the iSTFT (device RNG drawn)", **per_chunk),
    )
    constants = (
        DeviceConstant("timestep_freqs", (128,), source="DiT timestep embedding frequency table"),
        DeviceConstant("harmonic_multiplier", (1, 1, 9), source="SineGen2 harmonic numbers 1..9"),
        DeviceConstant("stft_window", (16,), source="HiFT Hann window for STFT/iSTFT"),
    )
    return Declaration(
        model="token2wav",
        clocks=clocks,
        regions=regions,
        operators=operators,
        admission=Admission("frames"),  # f <= the steady call, f_chunk
        dims={"n_steps": n_steps},
        constants=constants,
        call_clock="chunks",
        params=dict(f_prompt=f_prompt, f_retained=f_retained, f_chunk=f_chunk, f_call=f_call, n_steps=n_steps,
                    tokens_per_chunk=tokens_per_chunk, lookahead=lookahead, frames_per_token=frames_per_token,
                    samples_per_frame=samples_per_frame, address_stable_regions=2),
    )


def _tokens_per_chunk(f_chunk, tokens_per_chunk, frames_per_token, clocks: Token2wavClocks = T2W_CLOCKS) -> int:
    """Tokens per chunk from whichever of f_chunk / tokens_per_chunk was given (the clocks' when neither)."""
    default = clocks.tokens_per_chunk if tokens_per_chunk is None else tokens_per_chunk
    if f_chunk is None:
        return default
    if isinstance(f_chunk, bool) or not isinstance(f_chunk, int) or f_chunk <= 0:
        raise DeclarationError("f_chunk", f"must be a positive integer number of frames, got {f_chunk!r}")
    if isinstance(frames_per_token, bool) or not isinstance(frames_per_token, int) or frames_per_token <= 0:
        return default  # the frames clock's ratio check names it
    if f_chunk % frames_per_token:
        raise DeclarationError(
            "f_chunk", f"{f_chunk} frames is not a whole number of tokens at {frames_per_token} frames per token"
        )
    tokens = f_chunk // frames_per_token
    if tokens_per_chunk is not None and tokens_per_chunk != tokens:
        raise DeclarationError(
            "f_chunk", f"{f_chunk} frames contradicts tokens_per_chunk {tokens_per_chunk!r} x frames_per_token "
            f"{frames_per_token} (give one of them)"
        )
    return tokens
