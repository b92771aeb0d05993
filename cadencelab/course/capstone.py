"""The capstone: adapt a streaming model the course has not shown, certified by the kit on hidden traffic.

The model is a **sliding-window decoder**, as its author wrote it: latent frames in, audio samples out.
One attention layer attends over a K|V cache of the newest ``window`` frames (no sink: the turn's first
frames are evicted like any other) plus the whole call; each frame becomes ``hop`` samples, smoothed by a
causal ``taps``-tap filter that needs the previous ``taps - 1`` samples. A call commits ``chunk`` frames
and reads ``lookahead`` more; the turn's final call commits all it carries. Its stock step concatenates
its caches and cuts them itself (:func:`stock_step`).

The student writes the adapter: ``declare(sizes) -> Declaration`` and ``make_step(model) -> step`` (the
kit's views form: ``step(x, caches, last) -> (out, new frames per region)``). :func:`check_adapter`
certifies it with :func:`cadencelab.adapters.kit.certify` on the sizes shown and on hidden ones, each on
traffic the student never sees (other turn lengths, other values): catalog, both audits, bit-exactness
against the stock step, stable addresses, replay. A failure names the clause and, for the declaration,
the first field that differs (never its right value).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import pandas as pd
import torch

from ..adapters.kit import Traffic
from ..contract import Admission, Clock, Declaration, DeclarationError, Fixed, Operator, Region, SlidingWindow
from ..replay import At
from .exercises.declaration import declaration_diff
from .exercises.machinery import FEEDBACK_COLUMNS, Feedback, is_blank
from .sample_encoder import seed_weights

__all__ = ["certified_declaration", "DecoderSizes", "SHOWN", "HIDDEN", "WindowDecoder", "decode", "stock_step",
           "check_adapter", "certificate",
           "shown_traffic", "ADAPTER_HINTS", "FRAMES"]


@dataclass(frozen=True)
class DecoderSizes:
    """Every size of the decoder, in one place."""

    dim: int = 8
    heads: int = 2
    window: int = 9  # K|V cache: the newest frames
    chunk: int = 4  # frames a call commits
    lookahead: int = 1  # frames a call reads beyond them
    hop: int = 5  # samples per frame
    taps: int = 3  # causal output filter: taps - 1 samples of left context


#: the sizes the notebook shows
SHOWN = DecoderSizes()
#: the sizes the checker also certifies on (not shown)
HIDDEN = DecoderSizes(window=7, chunk=3, lookahead=2, hop=4, taps=4)
#: where a call's frames are in its input: (1, frames, dim)
FRAMES = At(0, dim=1, clock="frames")


class WindowDecoder(torch.nn.Module):
    """The decoder's weights (seeded); :func:`decode` and :func:`stock_step` are its code."""

    def __init__(self, s: DecoderSizes = SHOWN, seed: int = 0):
        super().__init__()
        self.s = s
        self.qkv, self.out = torch.nn.Linear(s.dim, 3 * s.dim), torch.nn.Linear(s.dim, s.dim)
        self.to_samples = torch.nn.Linear(s.dim, s.hop)
        self.filt = torch.nn.Conv1d(1, 1, s.taps, bias=False)  # no padding: the cache is the left context
        seed_weights(self, seed)


def decode(m: WindowDecoder, x, kv, tail, last):
    """One call: x (1, n, dim) -> samples of the committed frames, their new K|V, their unfiltered samples."""
    s, hd = m.s, m.s.dim // m.s.heads
    n = x.shape[1]
    c = n if last else n - s.lookahead  # committed frames
    q, k, v = (t.reshape(n, s.heads, hd).transpose(0, 1) for t in m.qkv(x[0]).chunk(3, dim=-1))
    keys, vals = torch.cat([kv[0], k], dim=1), torch.cat([kv[1], v], dim=1)
    a = torch.softmax(q @ keys.transpose(1, 2) / math.sqrt(hd), dim=-1) @ vals
    h = x[0] + m.out(a.transpose(0, 1).reshape(n, s.dim))
    raw = m.to_samples(h[:c]).reshape(1, c * s.hop)  # hop samples per committed frame
    out = m.filt(torch.cat([tail, raw], dim=1)[:, None])[:, 0]  # causal: the previous taps - 1 samples first
    return out, torch.stack([k, v])[:, :, :c], raw


def stock_step(m: WindowDecoder, x, kv, tail, last):
    """The model's own streaming step: concatenate, then its own cut (the newest window, the filter's tail)."""
    s = m.s
    out, kv_new, raw = decode(m, x, kv, tail, last)
    kv = torch.cat([kv, kv_new], dim=2)
    tail = torch.cat([tail, raw], dim=1)
    return out, kv[:, :, max(0, kv.shape[2] - s.window):], tail[:, tail.shape[1] - (s.taps - 1):]


def _stock(m: WindowDecoder):
    def stock(x, caches, last):
        out, kv, tail = stock_step(m, x, caches["kv"], caches["tail"], last)
        return out, {"kv": kv, "tail": tail}

    return stock


def certified_declaration(s: DecoderSizes) -> Declaration:
    """The declaration the checker diagnoses against (the capstone's answer; not shown in the notebook)."""
    clocks = (Clock("calls", "decoder call"),
              Clock("frames", "latent frame", parent="calls", ratio=s.chunk, offset=s.lookahead),
              Clock("samples", "audio sample", parent="frames", ratio=s.hop))
    kv = Region("kv", clock="frames", shape=(2, s.heads, "frames", s.dim // s.heads), policy=SlidingWindow(s.window),
                lifetime="turn", address_stable=True)
    tail = Region("tail", clock="samples", shape=(1, "samples"), policy=Fixed(s.taps - 1), lifetime="turn",
                  address_stable=True)
    op = Operator("decode", reads=("kv",), clock="frames", flush="lookahead")
    return Declaration("window-decoder", clocks, (kv, tail), (op,), admission=Admission("frames"), call_clock="calls")


def _traffic(s: DecoderSizes, lengths, seed: int, device: str = "cpu") -> Traffic:
    g = torch.Generator().manual_seed(seed)
    signals = [torch.randn(1, n, s.dim, generator=g).to(device) for n in lengths]
    return Traffic.stream(certified_declaration(s), signals, clock="frames")


def shown_traffic(s: DecoderSizes = SHOWN) -> Traffic:
    """Two turns the notebook shows (the checker streams other ones)."""
    return _traffic(s, (21, 10), seed=1)


#: what a failed clause of the kit's certificate points to in an adapter
ADAPTER_HINTS = {
    "steady classes": "the catalog derived from your declaration is not what the model sees: check the frames "
                      "clock (chunk per call, the lookahead as its offset) and the K|V policy.",
    "audit": "the carry kept other frames than the model's own cut: check each region's retention policy "
             "(what the stock step keeps) and its clock.",
    "bit-exact": "an output differs from the stock step: check your step returns the frames each region adds, "
                 "on the region's clock.",
    "preflight": "the step does something a captured graph cannot replay (a host sync such as .item(), a host "
                 "constant, a rebound state tensor): the certificate's preflight table names the line.",
}


def certificate(answer, backend: str = "eager", device: str = "cpu", s: DecoderSizes = SHOWN):
    """The kit's certificate of an adapter ``(declare, make_step)`` on the shown traffic (what a notebook
    displays: catalog, audits, exactness, addresses, replay)."""
    from ..adapters.kit import certify

    declare, make_step = answer
    model = WindowDecoder(s).to(device)
    return certify(declare(s), make_step(model), _stock(model), _traffic(s, (21, 10), 1, device), frames=FRAMES,
                   modules=[model], backend=backend, device=device)


def _certify(declare: Callable, make_step: Callable, s: DecoderSizes, which: str, lengths, seed: int,
             backend: str, device: str) -> dict:
    from ..adapters.kit import certify

    row = dict(part=which, answer=None, expected="certified", correct=False, mistake="", hint="")
    model = WindowDecoder(s).to(device)
    try:
        decl, step = declare(s), make_step(model)
    except Exception as e:  # the student's functions failed: say what they raised
        return {**row, "answer": f"{type(e).__name__}", "hint": f"{which}: your code raised {type(e).__name__}: {e}"}
    if is_blank(decl) or is_blank(step):
        return {**row, "hint": f"{which}: fill this in (declare and make_step), then run the cell again."}
    if not isinstance(decl, Declaration):
        return {**row, "answer": type(decl).__name__, "hint": f"{which}: declare must return a Declaration"}
    diff = declaration_diff(decl, certified_declaration(s))
    try:
        cert = certify(decl, step, _stock(model), _traffic(s, lengths, seed, device), frames=FRAMES,
                       modules=[model], backend=backend, device=device)
    except (DeclarationError, Exception) as e:  # a runtime that refuses the declaration fails closed
        field = diff["field"].iloc[0] if len(diff) else ""
        said = f" ({type(e).__name__}: {str(e)[:160]})" if which == "shown sizes" else ""  # hidden sizes stay hidden
        return {**row, "answer": f"refused: {type(e).__name__}", "mistake": "refused",
                "hint": f"{which}: the runtime refused it{said}"
                        + (f"; the first field that differs from what the model needs: {field}" if field else "")}
    if cert.ok:
        return {**row, "answer": "certified", "correct": True}
    failed = cert.table.loc[~cert.table["passed"], "clause"].tolist()
    hint = next((h for k, h in ADAPTER_HINTS.items() if any(k in c for c in failed)),
                f"the certificate failed: {'; '.join(failed) or 'no clause named'}.")
    field = diff["field"].iloc[0] if len(diff) else ""
    return {**row, "answer": "not certified: " + "; ".join(failed), "mistake": failed[0] if failed else "",
            "hint": f"{which}: {hint}" + (f" The first field that differs: {field}." if field else "")}


#: hidden traffic: turn lengths (frames) and the seed of the values, per configuration
_HIDDEN_TRAFFIC = {"shown sizes": ((33, 17, 6), 11), "hidden sizes": ((26, 14, 9), 12)}


def check_adapter(answer, backend: str = "eager", device: str = "cpu") -> Feedback:
    """Certify an adapter ``(declare, make_step)`` with the kit on hidden traffic, at the shown sizes and at
    hidden ones; a row per configuration."""
    if is_blank(answer) or (isinstance(answer, tuple) and any(is_blank(a) for a in answer)):
        rows = [dict(part=w, answer=None, expected="certified", correct=False, mistake="",
                     hint=f"{w}: fill this in (declare and make_step), then run the cell again.")
                for w in _HIDDEN_TRAFFIC]
        return Feedback("adapter", pd.DataFrame(rows, columns=FEEDBACK_COLUMNS))
    if not (isinstance(answer, tuple) and len(answer) == 2 and all(callable(a) for a in answer)):
        raise TypeError("check_adapter: pass (declare, make_step), two functions: declare(sizes) -> Declaration, "
                        "make_step(model) -> step")
    declare, make_step = answer
    rows = [_certify(declare, make_step, s, which, *_HIDDEN_TRAFFIC[which], backend, device)
            for s, which in ((SHOWN, "shown sizes"), (HIDDEN, "hidden sizes"))]
    shown, hidden = rows
    if shown["correct"] and not hidden["correct"]:  # right at the sizes shown only: a size typed as a number
        field = hidden["hint"].split("The first field that differs: ", 1)[1] if "field that" in hidden["hint"] else ""
        hidden.update(mistake="literal_size", hint="hidden sizes: a size was typed as a number instead of read "
                      "from the sizes: right for the sizes shown, wrong for another configuration of the model."
                      + (f" The first field that differs: {field}" if field else ""))
    return Feedback("adapter", pd.DataFrame(rows, columns=FEEDBACK_COLUMNS))
