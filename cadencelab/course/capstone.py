"""The capstone: adapt a streaming model the course has not shown, certified by the kit on hidden traffic.

The student picks one of the models of :mod:`cadencelab.course.capstone_models` (``MODELS``: a sliding-window
decoder, a causal codec decoder with a ring cache), each as its author wrote it, and writes its adapter:
``declare(sizes) -> Declaration`` and ``make_step(model) -> step`` (the kit's views form:
``step(x, caches, last) -> (out, new frames per region)``). :func:`check_adapter` certifies it with
:func:`cadencelab.adapters.kit.certify` on the sizes shown and on hidden ones, each on traffic the student
never sees (other turn lengths, other values): catalog, both audits, bit-exactness against the stock step,
stable addresses, replay. A failure names the clause and, for the declaration, the first field that differs
(never its right value).

The names of the sliding-window decoder (``SHOWN``, ``HIDDEN``, ``WindowDecoder``, ``decode``, ``stock_step``) are
kept here for the notebooks and tests that read them. The grader's reference declarations are not on the model a
notebook hands the student (``capstone_models._REFERENCES``).
"""

from __future__ import annotations

import secrets
from typing import Callable

import pandas as pd
import torch

from ..adapters.kit import Traffic
from ..adapters.kit.usercode import UserCodeTimeout, UserExit, user_code
from ..contract import Admission, Clock, Declaration, DeclarationError, Fixed, Operator, Region, Ring, SlidingWindow
from ..state.alloc import device_problem
from .capstone_models import (
    FRAMES,
    MODELS,
    CapstoneModel,
    DecoderSizes,
    WindowDecoder,
    capstone_model,
    decode,
    stock_step,
)
from .exercises.declaration import declaration_diff
from .exercises.machinery import FEEDBACK_COLUMNS, Feedback, is_blank

__all__ = ["DecoderSizes", "SHOWN", "HIDDEN", "WindowDecoder", "decode", "stock_step", "check_adapter",
           "certificate", "CAPSTONE_TARGET", "shown_traffic", "ADAPTER_HINTS", "FRAMES", "MODELS", "capstone_model",
           "DEFAULT_MODEL", "TIME_LIMIT_S"]

#: the model the notebook opens on (the tour and CI run it; a student may pick another)
DEFAULT_MODEL = "window"
#: seconds the grader gives a student's adapter per part (declare, make_step and certification of its step)
TIME_LIMIT_S = 120.0
#: the sliding-window decoder's sizes the notebook shows, and the ones the checker also certifies on
SHOWN, HIDDEN = MODELS["window"].shown, MODELS["window"].hidden


# ---------------------------------------------------------------------------------------
# the grader's references (they cut the hidden traffic into calls and name the first field of a student's
# declaration that differs); here, in the grader, never on the model a notebook hands the student
# ---------------------------------------------------------------------------------------


def _window_reference(s) -> Declaration:
    """The sliding-window decoder's declaration (the grader's reference; never shown)."""
    clocks = (Clock("calls", "decoder call"),
              Clock("frames", "latent frame", parent="calls", ratio=s.chunk, offset=s.lookahead),
              Clock("samples", "audio sample", parent="frames", ratio=s.hop))
    kv = Region("kv", clock="frames", shape=(2, s.heads, "frames", s.dim // s.heads), policy=SlidingWindow(s.window),
                lifetime="turn", address_stable=True)
    tail = Region("tail", clock="samples", shape=(1, "samples"), policy=Fixed(s.taps - 1), lifetime="turn",
                  address_stable=True)
    op = Operator("decode", reads=("kv",), clock="frames", flush="lookahead")
    return Declaration("window-decoder", clocks, (kv, tail), (op,), admission=Admission("frames"), call_clock="calls")


def _codec_reference(s) -> Declaration:
    """The codec decoder's declaration (the grader's reference; never shown)."""
    clocks = (Clock("calls", "decoder call"), Clock("frames", "codec frame", parent="calls", ratio=s.chunk))
    kv = Region("kv", clock="frames", shape=(1, "frames", s.dim), policy=Ring(s.capacity), lifetime="turn",
                address_stable=True)
    ctx = Region("ctx", clock="frames", shape=(1, "frames", s.dim), policy=Fixed(s.kernel - 1), lifetime="turn",
                 address_stable=True)
    op = Operator("decode", reads=("kv", "ctx"), clock="frames", flush=(1, s.chunk - 1, 1))
    return Declaration("codec-decoder", clocks, (kv, ctx), (op,), admission=Admission("frames"), call_clock="calls")


_REFERENCES = {"window": _window_reference, "codec": _codec_reference}


def _traffic(spec: CapstoneModel, s, lengths, seed: int, device: str = "cpu") -> Traffic:
    """Turns of ``lengths`` frames cut into calls by the reference declaration. Each call is its own tensor
    (a clone, not a view into its turn): the stock run and a replay then read inputs at the same alignment,
    since on a GPU the kernel a GEMM picks may depend on its inputs' pointer alignment."""
    g = torch.Generator().manual_seed(seed)
    signals = [torch.randn(1, n, s.dim, generator=g) for n in lengths]
    cut = Traffic.stream(_REFERENCES[spec.name](s), signals, clock="frames")
    return Traffic([[x.clone().to(device) for x in turn] for turn in cut.turns])


def shown_traffic(model: str = DEFAULT_MODEL, s=None) -> Traffic:
    """The turns the notebook shows (the checker streams other ones)."""
    spec = capstone_model(model)
    return _traffic(spec, spec.shown if s is None else s, spec.shown_turns, seed=1)


#: what a failed clause of the kit's certificate points to in an adapter (the first clause that has one)
ADAPTER_HINTS = {
    "preflight": "the step does something a captured graph cannot replay (a host sync such as .item(), a host "
                 "constant, state kept outside the declared regions): the certificate's preflight table names the "
                 "line.",
    "steady classes": "the catalog derived from your declaration is not what the model sees: check the frames "
                      "clock (frames per call, and the lookahead as its offset where the model reads ahead) and "
                      "each region's policy.",
    "flush": "a turn's last call took a size your declaration does not admit: declare the sizes it can take (the "
             "operator's flush).",
    "audit": "the carry kept other frames than the model's own cut: check each region's retention policy "
             "(what the stock step keeps) and its clock.",
    "bit-exact": "an output differs from the stock step: check your step returns the frames each region adds, "
                 "on the region's clock, and keeps no state of its own.",
    "carries": "a carry moved between calls: return the frames each call adds and let the runtime write them; "
               "never replace a cache tensor.",
    "replayed": "no admitted call replayed (each ran eagerly): the certificate's counters table says why.",
}


def _hint(failed: list) -> str:
    return next((h for k, h in ADAPTER_HINTS.items() if any(k in c for c in failed)),
                f"the certificate failed: {'; '.join(failed) or 'no clause named'}.")


def certificate(answer, backend: str = "eager", device: str = "cpu", s=None, model: str = DEFAULT_MODEL):
    """The kit's certificate of an adapter ``(declare, make_step)`` of ``model`` on the shown traffic (what a
    notebook displays: catalog, audits, exactness, addresses, replay, and the preflight in ``.preflight``)."""
    from ..adapters.kit import KitModel, certify

    spec = capstone_model(model)
    s = spec.shown if s is None else s
    declare, make_step = answer
    m = spec.build(s, device)
    return certify(KitModel(declare(s), make_step(m), spec.stock(m), _traffic(spec, s, spec.shown_turns, 1, device),
                            frames=FRAMES, modules=[m], device=device), backend=backend)


def _certify(spec: CapstoneModel, declare: Callable, make_step: Callable, s, which: str, backend: str,
             device: str, time_limit_s: float | None = None) -> dict:
    from ..adapters.kit import KitModel, certify

    lengths, _ = spec.hidden_turns[which]
    seed = secrets.randbelow(2**31)  # the values drawn when the grader runs: never the same traffic twice
    row = dict(part=which, answer=None, expected="certified", correct=False, mistake="", hint="")
    m = spec.build(s, device)
    try:
        with user_code("your declare/make_step", time_limit_s):
            decl, step = declare(s), make_step(m)
    except DeclarationError as e:  # a declaration that does not build: its field and why (a flush derived from a
        # lookahead no clock carries: the frames clock's offset is missing)
        slip = "no_lookahead" if e.field.endswith(".flush") and "offset" in e.reason else ""
        return {**row, "answer": "DeclarationError", "mistake": slip,
                "hint": f"{which}: the declaration does not build: field '{e.field}': {e.reason}"
                        + (" A call reads `lookahead` frames beyond those it commits: the frames clock's offset."
                           if slip else "")}
    except Exception as e:  # the student's functions failed: say what they raised
        return {**row, "answer": f"{type(e).__name__}", "hint": f"{which}: your code raised {type(e).__name__}: {e}"}
    if is_blank(decl) or is_blank(step):
        return {**row, "hint": f"{which}: fill this in (declare and make_step), then run the cell again."}
    if not isinstance(decl, Declaration):
        return {**row, "answer": type(decl).__name__, "hint": f"{which}: declare must return a Declaration"}
    diff = declaration_diff(decl, _REFERENCES[spec.name](s))
    field = diff["field"].iloc[0] if len(diff) else ""
    try:
        with user_code("your step (certified on the hidden traffic)", time_limit_s):
            cert = certify(KitModel(decl, step, spec.stock(m), _traffic(spec, s, lengths, seed, device), frames=FRAMES,
                                    modules=[m], device=device), backend=backend)
    except (DeclarationError, Exception) as e:  # a runtime that refuses the declaration fails closed
        own = next((c for c in (e, e.__cause__) if isinstance(c, (UserExit, UserCodeTimeout))), None)
        said = f" ({type(own).__name__}: {own})" if own is not None else \
            f" ({type(e).__name__}: {str(e)[:300]})" if which == "shown sizes" else ""  # hidden sizes stay hidden
        return {**row, "answer": f"refused: {type(e).__name__}", "mistake": "refused", "field": field,
                "hint": f"{which}: the runtime refused it{said}"
                        + (f"; the first field that differs from what the model needs: {field}" if field else "")}
    if cert.ok:
        return {**row, "answer": "certified", "correct": True}
    failed = cert.table.loc[~cert.table["passed"], "clause"].tolist()
    return {**row, "answer": "not certified: " + "; ".join(failed), "mistake": failed[0] if failed else "",
            "field": field,
            "hint": f"{which}: {_hint(failed)}" + (f" The first field that differs: {field}." if field else "")}


def check_adapter(answer, backend: str = "eager", device: str = "cpu", model: str = DEFAULT_MODEL,
                  time_limit_s: float | None = TIME_LIMIT_S) -> Feedback:
    """Certify an adapter ``(declare, make_step)`` of ``model`` with the kit on hidden traffic, at the shown sizes
    and at hidden ones; a row per configuration. The student's code runs at most ``time_limit_s`` per part (a
    step that hangs, or calls ``sys.exit``, gives a feedback row saying so). The feedback keeps ``inputs`` (the
    model), so the course's
    stand-in adapter is the one for the same model."""
    spec = capstone_model(model)
    parts = list(spec.hidden_turns)
    if is_blank(answer) or (isinstance(answer, tuple) and any(is_blank(a) for a in answer)):
        rows = [dict(part=w, answer=None, expected="certified", correct=False, mistake="",
                     hint=f"{w}: fill this in (declare and make_step), then run the cell again.") for w in parts]
        fb = Feedback("adapter", pd.DataFrame(rows, columns=FEEDBACK_COLUMNS), inputs=dict(model=model))
        fb.graded = "nothing yet"
        return fb
    if not (isinstance(answer, tuple) and len(answer) == 2 and all(callable(a) for a in answer)):
        raise TypeError("check_adapter: pass (declare, make_step), two functions: declare(sizes) -> Declaration, "
                        "make_step(model) -> step")
    declare, make_step = answer
    shown, hidden = [_certify(spec, declare, make_step, s, which, backend, device, time_limit_s)
                     for s, which in ((spec.shown, "shown sizes"), (spec.hidden, "hidden sizes"))]
    if shown["correct"] and not hidden["correct"]:  # right at the sizes shown only: a size typed as a number
        field = hidden.get("field", "")
        hidden.update(mistake="literal_size", hint="hidden sizes: a size was typed as a number instead of read "
                      "from the sizes: right for the sizes shown, wrong for another configuration of the model."
                      + (f" The first field that differs: {field}." if field else ""))
    rows = [shown, hidden]
    if backend == "cuda":  # on a GPU graded for speed too, once exact: SRc against the stock loop, hidden sizes
        rows.append(_speed_row(spec, declare, make_step, device) if shown["correct"] and hidden["correct"] else
                    dict(part="speed", answer=None, expected=f"above {CAPSTONE_TARGET}x", correct=False, mistake="",
                         hint="speed: graded once the adapter is certified at both configurations."))
    fb = Feedback("adapter", pd.DataFrame(rows, columns=FEEDBACK_COLUMNS), inputs=dict(model=model))
    fb.graded = "exactness and speed" if backend == "cuda" else f"exactness only ({backend} backend: no speed grade)"
    return fb


#: on CUDA, the speedup of the adapter's SRc arm over the stock loop (B0) whose conservative lower end (B0's
#: interval's low end over SRc's high end) must exceed this
CAPSTONE_TARGET = 1.2
#: timed blocks per arm of the capstone's speed grade
SPEED_BLOCKS = 8


def _speed_row(spec: CapstoneModel, declare: Callable, make_step: Callable, device: str,
               backend: str = "cuda") -> dict:
    """SRc against B0 at the hidden sizes on fresh traffic, the course's in-process factorial (blocks, the arm
    order rotated, a percentile bootstrap over blocks); exact in every block and faster by the target."""
    from ..adapters.kit import KitModel, factorial

    s = spec.hidden
    lengths, _ = spec.hidden_turns["hidden sizes"]
    m = spec.build(s, device)
    kit = KitModel(declare(s), make_step(m), spec.stock(m), _traffic(spec, s, lengths, secrets.randbelow(2**31),
                                                                     device), frames=FRAMES, modules=(m,),
                   device=device)
    df = factorial(kit, arms=("B0", "SRc"), blocks=SPEED_BLOCKS, backend=backend).set_index("arm")
    b0, src = df.loc["B0"], df.loc["SRc"]
    point, lo = b0["latency_ms"] / src["latency_ms"], b0["latency_ms_lo"] / src["latency_ms_hi"]
    ok = bool(src["bit_exact"]) and bool(lo > CAPSTONE_TARGET)
    said = f"{point:.2f}x (at least {lo:.2f}x) over the stock loop, target above {CAPSTONE_TARGET}x"
    return dict(part="speed", answer=said, expected=f"above {CAPSTONE_TARGET}x", correct=ok,
                mistake="" if ok else "slow",
                hint="" if ok else f"speed: {said}: replay is not paying off; look for a host sync, an allocation or "
                                   f"a copy in the step (the certificate's preflight and counters say where).")


def diagnose(answer: tuple, model: str = DEFAULT_MODEL, backend: str = "cuda", device: str = "cuda") -> dict:
    """An adapter ``answer`` of ``model`` through the grader and through one certificate at the shown sizes,
    with everything a failure is read from: ``feedback`` (the grader's rows), ``clauses``, ``preflight`` (every
    row, info included), ``counters`` (per class: status, reason, replays), ``events`` (captures, failed
    captures with their error, invalidations) and ``mismatches`` (calls not bit-exact). For a device run:
    ``python -m cadencelab.course.capstone --device cuda`` (the course's own adapters, read from
    ``--answers``, a file of a checkout: they are not part of the package)."""
    fb = check_adapter(answer, backend=backend, device=device, model=model)
    cert = certificate(answer, backend=backend, device=device, model=model)
    engines = list(cert.runtime.engines.values()) if cert.runtime is not None else []
    events = pd.DataFrame([e for eng in engines for e in eng.events], columns=["engine", "call", "kind", "label", "detail"])
    return dict(model=model, ok=bool(fb.ok and cert.ok), feedback=fb.table, clauses=cert.table,
                preflight=pd.DataFrame(cert.preflight), counters=pd.concat([e.counters() for e in engines]) if engines
                else pd.DataFrame(), events=events, mismatches=cert.exact[~cert.exact["equal"]])


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m cadencelab.course.capstone",
                                 description="certify the course's own adapter of every capstone model and print "
                                             "what a failure is read from")
    ap.add_argument("--device", default="cuda", help="where the models run (default: cuda; cpu runs the eager backend)")
    ap.add_argument("--model", action="append", choices=list(MODELS), help="a model (default: every one)")
    ap.add_argument("--answers", default="course-solutions/solutions.py",
                    help="the course's answers, a file of a checkout (not part of the package; default: %(default)s)")
    a = ap.parse_args(argv)
    why = device_problem(a.device)
    if why:
        print(f"{ap.prog}: error: --device: {why}", file=__import__("sys").stderr)
        return 2
    backend = "eager" if torch.device(a.device).type == "cpu" else "cuda"
    import runpy
    from pathlib import Path

    if not Path(a.answers).is_file():
        print(f"{ap.prog}: error: --answers {a.answers}: no such file (run from a checkout's root)",
              file=__import__("sys").stderr)
        return 2
    adapters = runpy.run_path(a.answers)["ADAPTER_SOLUTIONS"]
    ok = True
    with pd.option_context("display.width", 200, "display.max_colwidth", 120, "display.max_columns", 20):
        for name in a.model or list(MODELS):
            d = diagnose(adapters[name], name, backend=backend, device=a.device)
            ok &= d["ok"]
            print(f"== {name} ({capstone_model(name).title}) on {a.device}, {backend} backend: "
                  f"{'CERTIFIED' if d['ok'] else 'NOT CERTIFIED'}")
            for part in ("feedback", "clauses", "preflight", "counters", "events", "mismatches"):
                if len(d[part]):
                    print(f"-- {part}\n{d[part].to_string(index=False)}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
