"""Moshi's Mimi codec (PyPI ``moshi==0.2.13``) under three arms: eager, the vendor's CUDA graphs, generic replay.

Install with ``python3 -m pip install --no-deps moshi==0.2.13`` plus numpy, einops, safetensors, sentencepiece
and huggingface_hub (moshi pins an older torch; or the ``mimi`` extra); without moshi :func:`load_moshi` raises
:class:`MimiUnavailable` naming that command. :func:`build_mimi` uses seeded random weights (the audio means
nothing, the streaming structure is Mimi's own), each codebook redrawn at the latent's scale since zero codebooks
make every code 0; :func:`declaration` adds the per-frame ``encode_frame`` / ``decode_frame`` operators it replays.

Arms of :class:`MimiStream`, one 80 ms frame per step: ``eager`` (moshi's ``CUDAGraphed`` switched off),
``vendor_graph`` (moshi as shipped) and ``replay`` (vendor graphs off; the declaration and moshi's own per-frame
``encode`` / ``decode`` on the kit's :class:`~cadencelab.adapters.kit.StreamingRuntime`, see :func:`kit_runtime`:
declared regions as carries, every other streaming-state tensor guarded as held state, nothing hand-graphed).
torch.compile is off in every arm: compiling is a separate variable. Host counters (``offset_cpu``) do not
advance under replay; Mimi reads them only for ``weights_per_step`` models, which it is not.

One state tensor rebinds: ``downsample.conv``'s ``first`` flag is replaced every call, so a graph would read a
stale, possibly reused address. Fail closed: every state tensor's pointer is checked each call and drift drops
the graph to eager (``pin_rebound=False`` shows it). Pinned, the default: :func:`audit_state_addresses` finds
rebinding fields by checking identity and address after *every* eager frame (the allocator may hand a block
back, so first-vs-last misses it), and the step copies each into a fixed anchor and rebinds the anchor back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from ..contract import Admission, Clock, Declaration, Fixed, Operator, Region, Ring
from ..replay import At
from ..replay.determinism import pin_determinism
from .kit import KitModel, StreamingRuntime
from .kit.session import engine_counters

__all__ = [
    "MOSHI_VERSION", "INSTALL_HINT", "ARMS", "MimiUnavailable", "load_moshi", "moshi_available", "build_mimi",
    "moshi_mimi_declaration", "declaration", "set_vendor_graphs", "pin_determinism", "state_tensors", "audit_state_addresses",
    "region_tensors", "kit_runtime", "MimiStream", "pcm_stream", "run_stream", "stream_hashes",
]

MOSHI_VERSION = "0.2.13"
INSTALL_HINT = (f"python3 -m pip install --no-deps moshi=={MOSHI_VERSION} && "
                "python3 -m pip install numpy einops safetensors sentencepiece huggingface_hub")
ARMS = ("eager", "vendor_graph", "replay")
ENCODE, DECODE = "encode_frame", "decode_frame"
FRAME_SAMPLES = 1920
CODEBOOK_STD = 0.005
_MOSHI: SimpleNamespace | None = None


class MimiUnavailable(ImportError):
    """moshi (or one of the packages its imports need) is not installed."""

    def __init__(self, cause: BaseException | None = None):
        why = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        super().__init__(f"the Mimi adapter needs moshi=={MOSHI_VERSION}{why}; install it with: {INSTALL_HINT}")


def load_moshi(torch_compile: bool = False) -> SimpleNamespace:
    """Import the moshi modules this adapter uses; raise :class:`MimiUnavailable` when missing.

    ``torch_compile=False`` (default) turns moshi's lazy ``torch.compile`` off (``NO_TORCH_COMPILE``
    before the first import, and the ``_compile_disabled`` flag read at call time).
    """
    global _MOSHI
    if not torch_compile:
        os.environ.setdefault("NO_TORCH_COMPILE", "1")
    if _MOSHI is None:
        try:
            from moshi.models import compression, loaders
            from moshi.modules import conv, streaming
            from moshi.quantization.core_vq import EuclideanCodebook
            from moshi.utils import compile as mcompile
        except ImportError as e:
            raise MimiUnavailable(e) from e
        try:
            from importlib.metadata import version

            ver = version("moshi")
        except Exception:
            ver = "unknown"
        _MOSHI = SimpleNamespace(loaders=loaders, compression=compression, conv=conv, streaming=streaming,
                                 compile=mcompile, EuclideanCodebook=EuclideanCodebook, version=ver)
    _MOSHI.compile._compile_disabled = not torch_compile
    return _MOSHI


def moshi_available() -> bool:
    try:
        load_moshi()
        return True
    except MimiUnavailable:
        return False


def set_vendor_graphs(enabled: bool) -> None:
    """Switch moshi's ``CUDAGraphed`` on or off for this process (read by it on every call).

    Called before every frame of a stream (streams of different arms may share the process);
    writes only when the setting changes, so a frame pays two lookups, not an environment write.
    """
    m = load_moshi()
    if m.compile._disable_cuda_graph is (not enabled) and ("NO_CUDA_GRAPH" in os.environ) is (not enabled):
        return
    m.compile._disable_cuda_graph = not enabled
    if enabled:
        os.environ.pop("NO_CUDA_GRAPH", None)
    else:
        os.environ["NO_CUDA_GRAPH"] = "1"


# ---------------------------------------------------------------------------------------
# model and declaration
# ---------------------------------------------------------------------------------------


@torch.no_grad()
def build_mimi(seed: int = 0, device="cpu", codebook_std: float = CODEBOOK_STD):
    """Mimi with seeded random weights and re-drawn codebooks (codes are not all zero)."""
    m = load_moshi()
    torch.manual_seed(seed)
    mimi = m.loaders.get_mimi(None, device=device)
    g = torch.Generator().manual_seed(seed + 1)
    for cb in (x for x in mimi.modules() if isinstance(x, m.EuclideanCodebook)):
        cb.embedding_sum.copy_(torch.empty(cb.embedding_sum.shape).normal_(0.0, codebook_std, generator=g))
        cb._embedding = None
        _ = cb.embedding  # materialise the cached centroids now, not inside a first streamed call
    return mimi.eval()


def moshi_mimi_declaration(capacity: int = 250, layers: int = 8, heads: int = 8, head_dim: int = 64) -> Declaration:
    """Mimi: 80 ms frames, 2 transformer steps per frame, ring KV caches of ``capacity``."""
    clocks = (
        Clock("frames", "Mimi frame (80 ms)", rate_hz=12.5),
        Clock("samples", "PCM sample at 24 kHz", parent="frames", ratio=1920),
        Clock("steps", "transformer step", parent="frames", ratio=2),
    )
    # one call is one frame: each ring grows by the 2 steps of a frame (derived from the clocks)
    regions = tuple(
        Region(f"{side}_kv_{i}", clock="steps", shape=(2, 1, heads, "steps", head_dim), policy=Ring(capacity),
               lifetime="stream", role="state", address_stable=True)
        for side in ("encoder", "decoder") for i in range(layers)
    ) + (
        Region("conv_left_context", clock="samples", shape=(1, 512, "samples"), policy=Fixed(6), lifetime="stream",
               role="state", address_stable=True),
    )
    operators = (
        Operator("decoder_transformer", reads=tuple(f"decoder_kv_{i}" for i in range(layers)), clock="steps",
                 description="Mimi decoder transformer: 2 steps (25 Hz) per 80 ms frame"),
        Operator("encoder_transformer", reads=tuple(f"encoder_kv_{i}" for i in range(layers)), clock="steps",
                 description="Mimi encoder transformer: 2 steps (25 Hz) per 80 ms frame"),
    )
    return Declaration("moshi-mimi", clocks, regions, operators, admission=Admission("steps"), call_clock="frames")


def declaration(capacity: int = 250, layers: int = 8, heads: int = 8, head_dim: int = 64):
    """``moshi_mimi_declaration`` plus the per-frame operators this adapter replays (catalog width 1 each)."""
    base = moshi_mimi_declaration(capacity, layers, heads, head_dim)
    enc = tuple(f"encoder_kv_{i}" for i in range(layers))
    dec = tuple(f"decoder_kv_{i}" for i in range(layers))
    ops = base.operators + (
        Operator(ENCODE, reads=enc, clock="frames", call=1,
                 description="one 80 ms PCM frame -> 8 codes: SEANet encoder, transformer, downsample, RVQ"),
        Operator(DECODE, reads=dec + ("conv_left_context",), clock="frames", call=1,
                 description="8 codes -> one 80 ms PCM frame: RVQ decode, upsample, transformer, SEANet decoder"),
    )
    return dataclasses.replace(base, operators=ops,
                               params=dict(base.params, frame_samples=FRAME_SAMPLES, sample_rate=24_000,
                                           steps_per_frame=2, kv_capacity=capacity))


# ---------------------------------------------------------------------------------------
# streaming state: enumeration and the address audit
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateRef:
    """One streaming-state tensor: its owner module's name, the state object and the field path."""

    module: str
    state: object
    path: tuple  # ("previous",) or ("kv_cache", "cache")

    @property
    def name(self) -> str:
        return f"{self.module}.{'.'.join(self.path)}"

    def get(self) -> torch.Tensor:
        obj = self.state
        for p in self.path:
            obj = getattr(obj, p)
        return obj

    def set(self, t: torch.Tensor) -> None:
        obj = self.state
        for p in self.path[:-1]:
            obj = getattr(obj, p)
        setattr(obj, self.path[-1], t)


def state_tensors(mimi) -> list[StateRef]:
    """Every tensor of the live streaming state (conv contexts, flags, offsets, ring KV caches)."""
    refs = []
    for name, st in mimi.get_streaming_state().items():
        for k, v in vars(st).items():
            if isinstance(v, torch.Tensor):
                refs.append(StateRef(name, st, (k,)))
        kv = getattr(st, "kv_cache", None)
        if kv is not None:
            refs += [StateRef(name, st, ("kv_cache", k)) for k, v in vars(kv).items() if isinstance(v, torch.Tensor)]
    return refs


@torch.no_grad()
def audit_state_addresses(mimi, frames: int = 2) -> pd.DataFrame:
    """Run ``frames`` eager frames on a throwaway stream; one row per state tensor: does it keep its address?

    A field is stable when, after *every* frame, it is still the same tensor object at the same
    address. Comparing only the first and last address is not enough on CUDA: a field rebound each
    frame can ping-pong between two cached blocks and land back on its first address after an even
    number of frames (seen on an H200 with ``frames=2``). Columns: name, module, field, shape,
    dtype, bytes, stable, rebinds (frames after which the field was another tensor). Leaves ``mimi``
    not streaming.
    """
    set_vendor_graphs(False)
    dev = next(mimi.parameters()).device
    with mimi.streaming(1):
        refs = state_tensors(mimi)
        first = [r.get() for r in refs]
        ptrs = [t.data_ptr() for t in first]
        rebinds = [0] * len(refs)
        pcm = torch.zeros(1, 1, FRAME_SAMPLES, device=dev)
        for _ in range(frames):
            mimi.decode(mimi.encode(pcm))
            for i, r in enumerate(refs):
                t = r.get()
                if t is not first[i] or t.data_ptr() != ptrs[i]:
                    rebinds[i] += 1
        rows = [dict(name=r.name, module=r.module, field=".".join(r.path), shape=tuple(r.get().shape),
                     dtype=str(r.get().dtype).replace("torch.", ""), bytes=r.get().numel() * r.get().element_size(),
                     stable=n == 0, rebinds=n) for r, n in zip(refs, rebinds)]
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------
# one streaming session under one arm
# ---------------------------------------------------------------------------------------


@dataclass
class Pin:
    """A rebinding state field moved to an anchor tensor allocated once."""

    ref: StateRef
    anchor: torch.Tensor

    @classmethod
    def on(cls, ref: StateRef) -> "Pin":
        anchor = ref.get().clone()
        ref.set(anchor)
        return cls(ref, anchor)

    def restore(self) -> None:
        t = self.ref.get()
        if t is not self.anchor:
            self.anchor.copy_(t)
            self.ref.set(self.anchor)


def region_tensors(mimi, decl=None) -> dict:
    """The live tensors of the declared regions: ``{ring: (K|V cache, moshi's write position)}`` for each
    transformer layer's ring and ``{"conv_left_context": the decoder's first conv context}``."""
    decl = decl or declaration()
    states = mimi.get_streaming_state()
    out = {}
    for r in decl.regions:
        if r.policy.ring_order:  # "<side>_kv_<layer>"
            side, layer = r.name.split("_kv_")
            kv = states[f"{side}_transformer.transformer.layers.{int(layer)}.self_attn"].kv_cache
            out[r.name] = (kv.cache, kv.end_offset)
    out["conv_left_context"] = states["decoder.model.0"].previous
    return out


def kit_runtime(mimi, refs: list[StateRef], pins: list[Pin] = (), *, backend: str = "auto",
                max_invalidations: int = 3) -> StreamingRuntime:
    """Mimi on the adapter kit: the declaration, moshi's own ``encode``/``decode`` as in-place steps (each
    ending with the pins' restore), the declared regions adopted, every other state tensor of ``refs`` held,
    replayed per operator; a turn reset is moshi's in-place ``reset_streaming``. ``mimi`` must be streaming."""
    decl = declaration()
    adopt = region_tensors(mimi, decl)
    adopted = {t.data_ptr() for v in adopt.values() for t in (v if isinstance(v, tuple) else (v,))}
    held = {r.name: r.get for r in refs if r.get().data_ptr() not in adopted}

    def pinned(fn):
        def step(x, caches, last):
            out = fn(x)
            for p in pins:
                p.restore()
            return out
        return step

    def reset(prompt):
        mimi.reset_streaming()
        for p in pins:
            p.restore()

    writes = {op: decl.operator(op).reads for op in (ENCODE, DECODE)}
    spec = KitModel(decl, {ENCODE: pinned(mimi.encode), DECODE: pinned(mimi.decode)}, form="inplace",
                    frames={ENCODE: At(0, dim=-1, clock="samples"), DECODE: -1}, writes=writes, adopt=adopt,
                    held=held, init=reset, modules=[mimi], device=next(mimi.parameters()).device)
    return StreamingRuntime(spec, "SRc", backend=backend, engine_options=dict(max_invalidations=max_invalidations))


class MimiStream:
    """One streaming session (batch 1) of ``mimi`` under ``arm``; :meth:`step` takes one 1,920-sample frame.

    ``arm="replay"``: :func:`kit_runtime` (two engines, ``encode_frame`` and ``decode_frame``), backend
    ``"auto"`` (CUDA graphs on a GPU, the eager backend's identical bookkeeping on a CPU); the other arms
    call moshi directly (the stock path).
    ``pin_rebound``: move the fields that :func:`audit_state_addresses` finds rebinding to anchors
    (default); False leaves them rebinding, and the engine's pointer guard keeps those classes eager.
    ``rebinding``: the rebinding field names, when already audited (skips the audit frame).
    """

    def __init__(self, mimi, arm: str = "eager", *, backend: str = "auto", pin_rebound: bool = True,
                 rebinding: list | None = None, max_invalidations: int = 3):
        if arm not in ARMS:
            raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
        self.mimi, self.arm = mimi, arm
        self.device = next(mimi.parameters()).device
        self.rebinding = rebinding
        if arm == "replay" and pin_rebound and rebinding is None:
            audit = audit_state_addresses(mimi)
            self.rebinding = audit.loc[~audit["stable"], "name"].tolist()
        self._vendor = arm == "vendor_graph"
        set_vendor_graphs(self._vendor)
        self._stack = mimi.streaming(1)
        self.refs = state_tensors(mimi)
        self.pins = [Pin.on(r) for r in self.refs if r.name in (self.rebinding or [])] if pin_rebound else []
        self.runtime: StreamingRuntime | None = None
        if arm == "replay":
            self.runtime = kit_runtime(mimi, self.refs, self.pins, backend=backend,
                                       max_invalidations=max_invalidations)
            self.runtime.reset()
        self.frames = 0

    @property
    def engines(self) -> dict:
        """The replay engines by operator (empty outside the replay arm)."""
        return self.runtime.engines if self.runtime is not None else {}

    # -- the stream -----------------------------------------------------------------------
    @torch.no_grad()
    def encode(self, pcm: torch.Tensor) -> torch.Tensor:
        set_vendor_graphs(self._vendor)
        return self.runtime(pcm, operator=ENCODE) if self.runtime is not None else self.mimi.encode(pcm)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        set_vendor_graphs(self._vendor)
        return self.runtime(codes, operator=DECODE) if self.runtime is not None else self.mimi.decode(codes)

    def step(self, pcm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One 80 ms frame (1, 1, 1920) -> (codes (1, 8, 1), PCM (1, 1, 1920))."""
        codes = self.encode(pcm)
        out = self.decode(codes)
        self.frames += 1
        return codes, out

    def start(self, prompt=None) -> None:
        """The session protocol's turn start (Mimi takes no prompt): :meth:`reset`."""
        self.reset()

    def __call__(self, pcm: torch.Tensor, last: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The session protocol's call: :meth:`step` (Mimi has no lookahead: a final call commits nothing more)."""
        return self.step(pcm)

    @torch.no_grad()
    def reset(self) -> None:
        """A new stream on the same state objects: moshi's in-place ``reset_streaming`` (addresses kept);
        in the replay arm the kit's turn reset, which runs it and zero-fills the adopted carries in place."""
        if self.runtime is not None:
            self.runtime.reset()
            return
        self.mimi.reset_streaming()
        for p in self.pins:
            p.restore()

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> "MimiStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- reports ------------------------------------------------------------------------------
    def pointers(self) -> dict[str, int]:
        return {r.name: r.get().data_ptr() for r in self.refs}

    def vendor_graphs_captured(self) -> int:
        """How many of moshi's four ``CUDAGraphed`` callables hold a captured graph."""
        st = self.mimi._streaming_state
        if st is None:
            return 0
        graphed = (st.graphed_encoder, st.graphed_tr_enc, st.graphed_tr_dec, st.graphed_decoder)
        return sum(g is not None and g._graph is not None for g in graphed)

    def counters(self) -> pd.DataFrame:
        return engine_counters(self.engines.values())

    def summaries(self) -> dict[str, str]:
        return {k: e.summary() for k, e in self.engines.items()}

    def state_bytes(self) -> int:
        return sum(r.get().numel() * r.get().element_size() for r in self.refs)


# ---------------------------------------------------------------------------------------
# streams, runs and hashes
# ---------------------------------------------------------------------------------------


def pcm_stream(frames: int, seed: int = 0, block: int = 0) -> torch.Tensor:
    """A seeded test signal (1, 1, frames * 1920): a drifting chirp plus noise, same for every arm."""
    rng = np.random.default_rng([seed, block])
    n = frames * FRAME_SAMPLES
    t = np.arange(n) / 24_000.0
    f = 150.0 + 350.0 * (1 + np.sin(2 * np.pi * 0.3 * t + rng.uniform(0, np.pi)))
    x = 0.3 * np.sin(2 * np.pi * np.cumsum(f) / 24_000.0) + 0.05 * rng.standard_normal(n)
    return torch.from_numpy(x.astype(np.float32)).view(1, 1, n)


@dataclass
class StreamResult:
    codes: list = field(default_factory=list)
    pcm: list = field(default_factory=list)
    rows: list = field(default_factory=list)


def run_stream(stream: MimiStream, pcm: torch.Tensor, *, timing: bool = False) -> StreamResult:
    """Step ``stream`` over every frame of ``pcm`` (host tensor); keep codes and PCM on the host.

    ``timing``: per-frame rows with latency (CUDA events on a GPU, perf_counter otherwise; the
    device is synchronised after every frame) and wall milliseconds.
    """
    dev = stream.device
    cuda = dev.type == "cuda"
    res = StreamResult()
    frames = pcm.to(dev).reshape(-1, FRAME_SAMPLES)
    for i in range(frames.shape[0]):
        x = frames[i].view(1, 1, FRAME_SAMPLES)  # strides (1920, 1920, 1) in every block: one signature
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if (cuda and timing) else None
        if cuda:
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        if ev:
            ev[0].record()
        codes = stream.encode(x)
        if ev:
            ev[1].record()
        t1 = time.perf_counter()
        out = stream.decode(codes)
        if ev:
            ev[2].record()
        if cuda:
            torch.cuda.synchronize(dev)
        t2 = time.perf_counter()
        stream.frames += 1
        res.codes.append(codes.cpu())
        res.pcm.append(out.cpu())
        if timing:
            enc = ev[0].elapsed_time(ev[1]) if ev else (t1 - t0) * 1e3
            tot = ev[0].elapsed_time(ev[2]) if ev else (t2 - t0) * 1e3
            res.rows.append(dict(frame=i, latency_ms=tot, encode_ms=enc, decode_ms=tot - enc, wall_ms=(t2 - t0) * 1e3,
                                 sha_codes=_sha(res.codes[-1])[:16], sha_pcm=_sha(res.pcm[-1])[:16]))
    return res


def _sha(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


def stream_hashes(res: StreamResult) -> dict[str, str]:
    """SHA-256 of all codes (int64) and all PCM (float32) of a stream, in frame order."""
    out = {}
    for key, parts in (("codes", res.codes), ("pcm", res.pcm)):
        h = hashlib.sha256()
        for t in parts:
            h.update(t.contiguous().numpy().tobytes())
        out[key] = h.hexdigest()
    return out
