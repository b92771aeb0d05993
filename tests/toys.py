"""Toy streaming operators shared by the replay and fault tests.

An attention step over a prompt-retained, newest-first carry: the shape of the Token2wav
estimator's call, in miniature. The model gets the carry's buffer and length, writes the new
K|V frames in place, attends and retains in place (device work only); the host-side length
bookkeeping happens outside it, in :class:`Stream`.
"""

from __future__ import annotations

import pandas as pd
import torch

from cadencelab.contract import Admission, Clock, Declaration, Operator, PromptRetained, Region
from cadencelab.state import Carry

P, R, F = 6, 4, 2  # prompt frames, retained frames, frames per call
POLICY = PromptRetained(P, R, layout="newest_first")
CLOCKS = (Clock("tokens", "token"), Clock("frames", "frame", parent="tokens", ratio=2))


def randn(*shape, seed: int) -> torch.Tensor:
    """Deterministic host values from a private generator (the global RNG is left alone)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def declaration(d: int) -> Declaration:
    """The toy operator's declaration: one ``kv`` region of width ``d`` on the frame clock."""
    region = Region("kv", clock="frames", shape=("frames", d), policy=POLICY, growth=F, max_call=F + 2, initial=P,
                    lifetime="turn")
    return Declaration("toy-attention", CLOCKS, (region,),
                       (Operator("attend", reads=("kv",), clock="frames", call=F, flush=(1, F + 2, 1)),),
                       admission=Admission("frames", F))


class Attend(torch.nn.Module):
    """Write the new K|V frames into the carry it is handed (newest first), attend, retain in place."""

    def __init__(self, d: int, seed: int, out_proj: bool = False):
        super().__init__()
        self.d = d
        self.kv = torch.nn.Linear(d, d)
        self.q = torch.nn.Linear(d, d)
        self.o = torch.nn.Linear(d, d) if out_proj else None
        with torch.no_grad():
            for i, p in enumerate(self.parameters()):
                p.copy_(randn(*p.shape, seed=seed + i) * 0.3)
        self.requires_grad_(False)

    @torch.no_grad()
    def forward(self, x, buf, length):
        carry = Carry("kv", POLICY, 0, buf)  # wraps the storage it is handed, allocates nothing
        n = carry.write_appended(self.kv(x), length)  # H = cat([new, C]) in place
        h = buf.narrow(0, 0, n)
        out = torch.softmax(self.q(x) @ h.transpose(0, 1) * (1.0 / self.d**0.5), dim=-1) @ h
        carry.move_retained(n)  # retention in place, same address
        return self.o(out) if self.o is not None else out


class Stream:
    """One stream's state: a carry reset to a prompt, sized from the declaration (A + the largest
    call, flushes included) or, with ``from_declaration=False``, A + one regular call (P + R + F)."""

    def __init__(self, d: int, device="cpu", prompt: torch.Tensor | None = None, from_declaration: bool = True):
        if from_declaration:
            self.carry = Carry.for_region(declaration(d), "kv", device=device, envelope="attended")
        else:
            self.carry = Carry.allocate("kv", POLICY, (P + R + F, d), 0, device=device)
        self.carry.reset_in_place((randn(P, d, seed=7) if prompt is None else prompt).to(device))

    def call(self, fn, x):
        out = fn(x, self.carry.buffer, self.carry.length)
        self.carry.commit(POLICY.extent_after(self.carry.length + x.shape[0]))  # host bookkeeping, outside fn
        return out


def one_row(df: pd.DataFrame, **match) -> pd.Series:
    """The single row of ``df`` whose columns equal ``match`` (tuple labels compare whole)."""
    rows = df
    for k, v in match.items():
        rows = rows[rows[k].apply(lambda x: x == v)]
    assert len(rows) == 1, f"expected one row matching {match}, got {len(rows)}\n{df}"
    return rows.iloc[0]


# --- Token2wav streams with a fault injected mid-stream ------------------------------------------


def token2wav_tokens(steady_chunks: int) -> list[int]:
    """Speech tokens for ``steady_chunks`` 25-token chunks and a 13-token flush."""
    import numpy as np

    return np.random.default_rng(11).integers(0, 6561, 25 * steady_chunks + 10).tolist()


def drive_token2wav(model, prompt, tokens: list[int], swap=None, swap_at: int = 3) -> list[tuple[str, str]]:
    """Stream ``tokens`` (28-token calls, stride 25, then the flush) through ``model`` after
    seeding every generator; call ``swap(model)`` before chunk ``swap_at``. Returns the SHA-256
    of each chunk's int16 PCM and float32 waveform."""
    import hashlib

    torch.manual_seed(5)  # the CPU and every CUDA generator
    model.set_stream_cache(prompt)
    buf = [4218] * 3 + list(tokens)
    out, i = [], 0
    while True:
        if swap is not None and i == swap_at:
            swap(model)
        last = len(buf) < 28
        pcm = model.stream(buf if last else buf[:28], last_chunk=last)
        wav = model.last_speech.float().cpu().numpy().tobytes()
        out.append((hashlib.sha256(pcm).hexdigest(), hashlib.sha256(wav).hexdigest()))
        i += 1
        if last:
            return out
        buf = buf[25:]


def swap_solver_buffer(rt) -> None:
    """Replace the estimator's solver workspace with a copy at a new address."""
    rt.flow.decoder.att_cache_buffer = rt.flow.decoder.att_cache_buffer.clone()


def swap_conformer_carry(rt) -> None:
    """Replace the conformer's attention carry with a copy at a new address (in the runtime's kit)."""
    old = rt.conf_att
    rt.kit.carries[old.name] = Carry(old.name, old.policy, old.dim, old.buffer.clone(), length=old.length)
