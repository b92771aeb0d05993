"""A small streaming model shipped for teaching: declare it, carry it, audit it, replay it.

The course writes an adapter for it from scratch and uses it wherever a run must take milliseconds on a CPU: the
Token2wav flow's structure at toy sizes. A chunk (1, f, dim) -> a causal conv whose left context is a Fixed
region -> one attention layer over a K|V cache retaining *prompt + retained* frames, newest first (the stock cut
``cat([x[:prompt], x[-retained:]])``) -> an output projection (+ optional dither noise drawn every call).

Three runtimes, each the declaration and :func:`kit_steps` on the adapter kit's
:class:`~cadencelab.adapters.kit.StreamingRuntime` (:class:`TeachingRuntime` keeps the course's interface):
``state_rule=False``, the stock loop (``torch.cat`` per chunk, a new cache tensor every call);
``state_rule=True``, the carry (the K|V cache in one buffer at one address, retained in place, optionally watched
by a :class:`~cadencelab.state.ShadowAuditor`); ``replay=True`` (with the state rule), each chunk replayed by
the kit's engine with the declared catalog (CUDA graphs on a GPU, the eager backend's bookkeeping on a CPU).

    >>> cfg = TeachingConfig(); model = TinyStreamer(cfg); stream = make_stream(cfg)
    >>> ref = TeachingRuntime(model, state_rule=False).run(stream)
    >>> bit_exact(ref, TeachingRuntime(model, replay=True).run(stream))["equal"].all()
    True
    >>> certify(model, stream).ok
    True
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from ..contract import Admission, Clock, Declaration, Fixed, Operator, PromptRetained, Region, admitted_labels, derive
from ..replay import ExactShapeReplay
from ..state import Carry, ShadowAuditor
from .arms import arm_for
from .kit import KitModel, StreamingRuntime

__all__ = [
    "TeachingConfig", "declaration", "TinyStreamer", "TeachingStream", "make_stream", "kit_steps", "prime_init",
    "TeachingRuntime", "StreamRun", "bit_exact", "Certificate", "certify",
]

OPERATOR = "chunk_step"
KV, CONTEXT = "kv_cache", "conv_context"
CLOCK_DIM = 2  # the frames dimension of the K|V cache (2, heads, frames, head_dim)


# ---------------------------------------------------------------------------------------
# configuration and declaration
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TeachingConfig:
    """Sizes of the teaching model. The clocks mirror Token2wav's at toy scale.

    Token2wav (``adapters.token2wav.clocks.T2W_CLOCKS``): a prompt, a retained history, a chunk of tokens plus a
    lookahead, 2 frames per token. Here: prompt 12, retained 8, chunk 2 tokens (+1 lookahead)
    x 2 frames = 4 frames, so the cached extent walks 12 -> 16 -> 20 and stops: K = 3 shape
    classes, as Token2wav's walks prompt -> prompt + chunk -> prompt + retained.
    """

    dim: int = 16
    heads: int = 2
    kernel: int = 3
    prompt: int = 12
    retained: int = 8
    tokens_per_chunk: int = 2
    lookahead: int = 1
    frames_per_token: int = 2
    stock_frames: int = 64
    noise_std: float = 0.0
    seed: int = 0

    def __post_init__(self):
        if self.dim % self.heads:
            raise ValueError(f"TeachingConfig: dim {self.dim} must divide into heads {self.heads}")
        if self.kernel < 2:
            raise ValueError(f"TeachingConfig: kernel must be >= 2 (a causal conv with left context), got {self.kernel}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def context(self) -> int:
        """Frames of conv left context (kernel - 1)."""
        return self.kernel - 1

    @property
    def f_chunk(self) -> int:
        """Frames one steady call advances (the stride s_r)."""
        return self.frames_per_token * self.tokens_per_chunk

    @property
    def f_call(self) -> int:
        """The most frames one call can carry (a final flush with its lookahead)."""
        return self.frames_per_token * (self.tokens_per_chunk + self.lookahead)

    def replace(self, **changes) -> "TeachingConfig":
        return dataclasses.replace(self, **changes)


def declaration(cfg: TeachingConfig | None = None) -> Declaration:
    """The teaching model's native-clock contract (notebooks 3 and 4 stream the model under it)."""
    c = cfg or TeachingConfig()
    clocks = (
        Clock("chunks", "stream call", rate_hz=12.5),
        Clock("tokens", "token", parent="chunks", ratio=c.tokens_per_chunk, offset=c.lookahead),
        Clock("frames", "frame", parent="tokens", ratio=c.frames_per_token),
        Clock("turns", "conversation turn"),
    )
    regions = (
        Region(KV, clock="frames", shape=(2, c.heads, "frames", c.head_dim),
               policy=PromptRetained(c.prompt, c.retained, layout="newest_first"),
               growth=c.f_chunk, max_call=c.f_call, initial=c.prompt, lifetime="turn", envelope="attended",
               stock={"frames": c.stock_frames}, address_stable=True,
               description="attention K|V: prompt + retained history, newest first; holds a call's attended extent"),
        Region(CONTEXT, clock="frames", shape=(1, c.dim, "frames"), policy=Fixed(c.context),
               lifetime="turn", address_stable=True,
               description="causal conv left context (kernel - 1 frames)"),
    )
    flush = (c.frames_per_token * c.lookahead, c.f_call, c.frames_per_token)
    operators = (
        Operator(OPERATOR, reads=(KV,), clock="frames", call=c.f_chunk, flush=flush, scalars={"dtype": "float32"},
                 description="conv + attention + retention of one chunk"),
    )
    return Declaration(
        model="teaching-streamer", clocks=clocks, regions=regions, operators=operators,
        admission=Admission("frames", c.f_chunk),
        params=dict(f_prompt=c.prompt, f_retained=c.retained, f_chunk=c.f_chunk, f_call=c.f_call),
    )


# ---------------------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------------------


class TinyStreamer(torch.nn.Module):
    """Causal conv + one attention layer over a newest-first K|V cache, seeded weights.

    ``project`` computes a chunk's query and new K|V frames; ``attend`` reads a whole attended
    cache. Neither allocates state: where the cache lives is the runtime's business.
    """

    def __init__(self, cfg: TeachingConfig | None = None):
        super().__init__()
        self.cfg = cfg or TeachingConfig()
        d = self.cfg.dim
        self.conv = torch.nn.Conv1d(d, d, self.cfg.kernel)  # no padding: left context comes from the region
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)
        g = torch.Generator().manual_seed(self.cfg.seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)

    def project(self, x: torch.Tensor, context: torch.Tensor):
        """x (1, f, dim), context (1, dim, kernel-1) -> y (1, f, dim), q (heads, f, hd),
        new K|V (2, heads, f, hd), next context (1, dim, kernel-1) (a view of the conv input)."""
        c = self.cfg
        h = torch.cat([context, x.transpose(1, 2)], dim=2)  # (1, dim, kernel-1+f): conv workspace
        y = self.conv(h).transpose(1, 2)  # (1, f, dim)
        q, k, v = self.qkv(y).chunk(3, dim=-1)
        f = x.shape[1]

        def heads(t):
            return t.reshape(f, c.heads, c.head_dim).transpose(0, 1)  # (heads, f, hd)

        return y, heads(q), torch.stack([heads(k), heads(v)]), h[:, :, h.shape[2] - c.context:]

    def attend(self, q: torch.Tensor, kv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Attention of q (heads, f, hd) over the attended cache kv (2, heads, n, hd); (1, f, dim)."""
        c = self.cfg
        w = torch.softmax(q @ kv[0].transpose(1, 2) / math.sqrt(c.head_dim), dim=-1)  # (heads, f, n)
        a = (w @ kv[1]).transpose(0, 1).reshape(1, q.shape[1], c.dim)
        out = y + self.out(a)
        if c.noise_std:
            out = out + c.noise_std * torch.randn_like(out)  # host RNG on a CPU, device RNG (Philox) on CUDA
        return out

    def prime(self, prompt: torch.Tensor):
        """Cache-free prompt priming (eager by construction): the base K|V and conv context."""
        ctx = prompt.new_zeros(1, self.cfg.dim, self.cfg.context)
        y, q, kv, nxt = self.project(prompt, ctx)
        self.attend(q, kv, y)
        return kv.contiguous(), nxt.contiguous()


# ---------------------------------------------------------------------------------------
# streams
# ---------------------------------------------------------------------------------------


@dataclass
class TeachingStream:
    """Prompt frames and the chunks of each turn: ``turns[i]`` is a list of (1, f, dim) tensors."""

    prompt: torch.Tensor
    turns: list

    @property
    def calls(self) -> int:
        return sum(len(t) for t in self.turns)

    def to(self, device) -> "TeachingStream":
        return TeachingStream(self.prompt.to(device), [[x.to(device) for x in t] for t in self.turns])


def make_stream(cfg: TeachingConfig | None = None, turns=((5, 6), (2, 2)), seed: int = 1,
                device="cpu") -> TeachingStream:
    """Random frames: per turn ``(steady chunks, flush frames)``; flush 0 means no flush call.

    The default has a flush of 6 frames (> f_chunk = 4: outside the admission predicate) in the
    first turn and one of 2 frames (admitted) in the second.
    """
    c = cfg or TeachingConfig()
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randn(1, c.prompt, c.dim, generator=g)
    out = []
    for steady, flush in turns:
        sizes = [c.f_chunk] * steady + ([flush] if flush else [])
        out.append([torch.randn(1, f, c.dim, generator=g) for f in sizes])
    return TeachingStream(prompt, out).to(device)


@dataclass
class StreamRun:
    """What a run produced: per-chunk outputs and a per-chunk table.

    table: turn, chunk, call, f, kind (steady/flush), extent (cached K|V frames after the call),
    cache_ptr (data_ptr of the K|V cache after the call), path ("eager", "replay" or "eager: <reason>").
    """

    outputs: list
    table: pd.DataFrame
    runtime: Any = None


def kit_steps(model: TinyStreamer, policy=None):
    """The teaching model's two steps for the adapter kit: ``(step, stock)``.

    ``step`` (views form): projects the chunk, appends its new K|V into the carry in place
    (:meth:`~cadencelab.adapters.kit.steps.Caches.append`: where the carry's layout puts new frames) and
    attends over the carry itself; it returns the frames the call adds (the runtime retains them, and
    writes the conv context). ``stock``: the model's own loop, ``torch.cat`` and the model's own cut
    (``policy``, default the shipped declaration's), a new cache tensor every call.
    """
    cut = policy or declaration(model.cfg).region(KV).policy

    def step(x, caches, last):
        y, q, new, _ = model.project(x, caches[CONTEXT])
        kv = caches.append(KV, new)  # the attended cache, in the carry, at one address
        return model.attend(q, kv, y), {KV: new, CONTEXT: x.transpose(1, 2)}

    def stock(x, caches, last):
        y, q, new, nxt = model.project(x, caches[CONTEXT])
        kv = torch.cat([new, caches[KV]], dim=CLOCK_DIM)  # the stock concat: a new tensor per chunk
        out = model.attend(q, kv, y)
        return out, {KV: cut.apply(kv, CLOCK_DIM), CONTEXT: nxt}  # the stock cut (another cat once it fires)

    return step, stock


def prime_init(model: TinyStreamer):
    """``init`` for the kit: each turn primed from its prompt (cache-free, eager), the base K|V and context."""
    return lambda prompt: dict(zip((KV, CONTEXT), model.prime(prompt)))


class TeachingRuntime:
    """The teaching model streamed under the state rule and/or the compute rule, on the adapter kit.

    The declaration and :func:`kit_steps` on :class:`~cadencelab.adapters.kit.StreamingRuntime` (``kit``);
    this class keeps the course's interface (a :class:`TeachingStream`, a per-chunk table).

    state_rule: carry (True) or stock ``torch.cat`` (False).
    replay:     the chunk step through the kit's engine (needs the state rule).
    backend:    replay backend ("auto", "cuda", "eager").
    layout:     override the K|V carry's layout (to build a *wrong* carry for the audit lesson).
    auditor:    a ShadowAuditor watching the K|V carry against the declared stock cut (the kit's declared
                audit, on the K|V region).
    decl:       the declaration the carry and the catalog follow (default: ``declaration(model.cfg)``,
                the right one); the stock loop always cuts as the model's own code does.
    """

    def __init__(self, model: TinyStreamer, *, state_rule: bool = True, replay: bool = False, backend: str = "auto",
                 layout: str | None = None, auditor: ShadowAuditor | None = None, decl: Declaration | None = None,
                 device=None):
        if replay and not state_rule:
            raise ValueError("TeachingRuntime: replay here runs over the carry; turn the state rule on too")
        if auditor is not None and not state_rule:
            raise ValueError("TeachingRuntime: the shadow auditor watches a carry; turn the state rule on")
        self.model, self.cfg = model, model.cfg
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.decl = decl if decl is not None else declaration(self.cfg)
        self.state_rule, self.auditor = state_rule, auditor
        step, stock = kit_steps(model)
        spec = KitModel(self.decl, step, stock, init=prime_init(model), modules=[model], device=self.device,
                        audit_regions=(KV,))
        self.kit = StreamingRuntime(spec, arm_for(state_rule, replay), backend=backend,
                                    audit=auditor if auditor is not None else ())
        if layout is not None:
            self.kv.policy = dataclasses.replace(self.decl.region(KV).policy, layout=layout)

    @property
    def kv(self) -> Carry:
        return self.kit.carries[KV]

    @property
    def ctx(self) -> Carry:
        return self.kit.carries[CONTEXT]

    @property
    def engine(self) -> ExactShapeReplay | None:
        return self.kit.engine

    @property
    def calls(self) -> int:
        return self.kit.calls

    # -- turns and chunks ---------------------------------------------------------------
    def start(self, prompt: torch.Tensor) -> None:
        """The session protocol's turn start: :meth:`set_prompt`."""
        self.set_prompt(prompt)

    def __call__(self, x: torch.Tensor, last: bool | None = None) -> torch.Tensor:
        """The session protocol's call: :meth:`stream`."""
        return self.stream(x, last)

    def set_prompt(self, prompt: torch.Tensor) -> None:
        """Turn start: prime the caches from the prompt (eager), in place under the state rule."""
        self.kit.reset(prompt)

    def stream(self, x: torch.Tensor, last: bool | None = None) -> torch.Tensor:
        """One chunk (1, f, dim) -> output (1, f, dim); ``last``: the turn's final call (default: a chunk of
        another size than f_chunk, a flush)."""
        return self.kit(x, x.shape[1] != self.cfg.f_chunk if last is None else last)

    def cache(self) -> torch.Tensor:
        return self.kv.view() if self.state_rule else self.kit.caches[KV]

    def run(self, stream: TeachingStream, seed: int = 0) -> StreamRun:
        """Every turn of ``stream`` (re-primed at each turn start); seeds the generators first."""
        torch.manual_seed(seed)
        if self.device.type == "cuda":
            torch.cuda.manual_seed(seed)
        outs, rows = [], []
        for turn, chunks in enumerate(stream.turns):
            self.set_prompt(stream.prompt)
            for i, x in enumerate(chunks):
                before = self.engine.tally() if self.engine is not None else None
                out = self.stream(x, last=i == len(chunks) - 1)
                outs.append(out.clone())
                cache = self.cache()
                rows.append(dict(turn=turn, chunk=i, call=len(rows), f=x.shape[1],
                                 kind="flush" if (i == len(chunks) - 1 and x.shape[1] != self.cfg.f_chunk) else "steady",
                                 extent=cache.shape[CLOCK_DIM], cache_ptr=cache.data_ptr(),
                                 path=self.engine.path_since(before) if before is not None else "eager"))
        return StreamRun(outs, pd.DataFrame(rows), self)

    # -- reports -------------------------------------------------------------------------
    def counters(self) -> pd.DataFrame:
        return self.engine.counters() if self.engine is not None else pd.DataFrame()

    def summary(self) -> str:
        return self.engine.summary() if self.engine is not None else "no replay engine"


# ---------------------------------------------------------------------------------------
# comparisons and the certificate
# ---------------------------------------------------------------------------------------


def bit_exact(reference: StreamRun, candidate: StreamRun) -> pd.DataFrame:
    """Per chunk: equal (torch.equal, the product's bar) and max_abs_diff (what a tolerance sees)."""
    if len(reference.outputs) != len(candidate.outputs):
        raise ValueError(f"bit_exact: {len(reference.outputs)} reference chunks vs {len(candidate.outputs)}")
    rows = []
    for i, (a, b) in enumerate(zip(reference.outputs, candidate.outputs)):
        same_shape = a.shape == b.shape
        diff = (a.float() - b.float()).abs().max().item() if same_shape else math.inf
        rows.append(dict(call=i, equal=bool(same_shape and torch.equal(a, b)), max_abs_diff=diff))
    return pd.DataFrame(rows)


@dataclass
class Certificate:
    """The replay certification of one stream: one row per clause (passed, detail)."""

    table: pd.DataFrame
    counters: pd.DataFrame
    audit: pd.DataFrame
    exact: pd.DataFrame
    run: StreamRun | None = None
    backend: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.table["passed"].all())

    def _repr_html_(self) -> str:  # notebooks show the clause table
        verdict = "CERTIFIED" if self.ok else "NOT CERTIFIED"
        return f"<b>{verdict}</b> (backend {self.backend})" + self.table.to_html(index=False)

    def __repr__(self) -> str:
        return f"Certificate({'ok' if self.ok else 'FAILED'}, backend={self.backend!r})\n" + self.table.to_string(index=False)


def certify(model: TinyStreamer, stream: TeachingStream | None = None, backend: str = "auto",
            decl: Declaration | None = None) -> Certificate:
    """Run the stock stream and the carry + replay stream (audited) under ``decl``, check every clause.

    ``decl`` (default: the shipped :func:`declaration`) sizes the carry and gives the catalog, so a
    declaration that misstates the model (a wrong retention, say) fails the exactness clause.

    Clauses: the declaration's checks C1-C3; a finite, affordable catalog; every call either
    admitted (in the catalog) or refused with a reason; the carry at one address (no pointer
    drift, no invalidation); effects classified (host randomness rejected, device admitted);
    the shadow audit agreeing on every retention; and every chunk bit-identical to the stock
    stream.
    """
    decl = decl or declaration(model.cfg)
    device = next(model.parameters()).device
    stream = (stream or make_stream(model.cfg)).to(device)
    ref = TeachingRuntime(model, state_rule=False).run(stream)
    auditor = ShadowAuditor()
    rt = TeachingRuntime(model, replay=True, backend=backend, auditor=auditor, decl=decl)
    got = rt.run(stream)
    exact = bit_exact(ref, got)
    counters = rt.counters()
    der = derive(decl)
    verdict = der.verdict.set_index("operator").loc[OPERATOR]
    rows = []

    def clause(name, passed, detail):
        rows.append(dict(clause=name, passed=bool(passed), detail=detail))

    chk = der.checks
    clause("C1-C3 hold", chk["passed"].all(), "; ".join(f"{r.check} {'PASS' if r.passed else 'FAIL'}" for r in chk.itertuples()))
    clause("catalog is finite and affordable", verdict["affordable"], verdict["reason"])
    labels = admitted_labels(decl, OPERATOR)
    seen = counters[counters["status"] != "unclassed"]
    outside = [lab for lab, st in zip(seen["label"], seen["status"]) if st != "rejected" and lab not in labels]
    clause("(i) signature match: admitted classes are catalog classes", not outside,
           f"{len(labels)} admitted catalog classes; classes met: {sorted(map(str, seen['label']))}"
           + (f"; NOT in the catalog: {outside}" if outside else ""))
    ptrs = got.table["cache_ptr"].nunique()
    inval = int(counters["invalidations"].sum()) if len(counters) else 0
    clause("(ii) address stability: the carry never moves", ptrs == 1 and inval == 0 and rt.kv.address_ok(),
           f"{ptrs} distinct cache address(es) over {len(got.table)} calls, {inval} invalidations")
    rng = dict(Counter(counters.loc[counters["status"] != "unclassed", "rng"]))
    host_admitted = ((counters["rng"] == "host") & (counters["status"] == "captured")).any()
    clause("(iii) effects classified: host RNG never admitted", not host_admitted, f"classes by RNG effect: {rng}")
    aud = auditor.summary()
    clause("shadow audit agrees on every retention", auditor.ok and auditor.applications > 0,
           f"{auditor.agreements} of {auditor.applications} retentions agree with the stock cut")
    clause("bit-exact with the stock stream", exact["equal"].all(),
           f"{int(exact['equal'].sum())} of {len(exact)} chunks torch.equal")
    replays = int(counters["replays"].sum()) if len(counters) else 0
    clause("replay admitted calls", replays > 0, rt.summary())
    return Certificate(pd.DataFrame(rows), counters, aud, exact, got, rt.engine.backend,
                       extra=dict(reference=ref, runtime=rt))

