"""Notebook 8's exercise: a declaration for the sample encoder, certified on the shown sizes and on
hidden ones (``check_declaration``), with :func:`declaration_diff` naming the fields that differ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pandas as pd

from ...contract import Admission, Clock, Declaration, DeclarationError, Fixed, Operator, PromptRetained, Region
from .machinery import FEEDBACK_COLUMNS, FILL_IN, Feedback, is_blank

__all__ = ["DECLARATION_MISTAKES", "check_declaration", "declaration_diff"]


# =======================================================================================
# notebook 8: a declaration, certified on the shown sizes and on hidden ones
# =======================================================================================

#: field-level slips in the sample encoder's declaration: (field, wrong-value predicate, name, hint)
DECLARATION_MISTAKES = {
    "forgot_sink": "regions.kv.policy: a plain sliding window forgets the attention sink: the turn's first "
                   "`sink` frames stay forever (PromptRetained(sink, window)).",
    "kv_layout": "regions.kv.policy.layout: this model appends new frames at the end (chronological), not in front.",
    "no_lookahead": "clocks.frames.offset: each call reads `lookahead` frames beyond those it commits: the frames "
                    "clock's offset.",
    "context_size": "regions.ctx.policy: the frontend needs kernel - hop samples of left context.",
    "hop_ratio": "clocks.samples.ratio: one frame is `hop` samples.",
    "literal_size": "a size was typed as a number instead of read from the sizes: it is right for the sizes shown "
                    "and wrong for another configuration of the same model.",
}


def _policy_desc(p) -> str:
    return f"{type(p).__name__}({', '.join(f'{k}={v!r}' for k, v in dataclasses.asdict(p).items())})"


def declaration_diff(got: Declaration, want: Declaration) -> pd.DataFrame:
    """Fields where ``got`` differs from ``want``: field, got, expected (clocks, regions, operators, admission)."""
    rows = []

    def cmp(name, a, b):
        if a != b:
            rows.append(dict(field=name, got=a, expected=b))

    cmp("call_clock", got.call_clock, want.call_clock)
    gc, wc = got.clock_map, want.clock_map
    for n, c in wc.items():
        if n not in gc:
            rows.append(dict(field=f"clocks.{n}", got=None, expected=n))
            continue
        for f in ("parent", "ratio", "offset"):
            cmp(f"clocks.{n}.{f}", getattr(gc[n], f), getattr(c, f))
    greg = {r.name: r for r in got.regions}
    for r in want.regions:
        if r.name not in greg:
            rows.append(dict(field=f"regions.{r.name}", got=None, expected=r.name))
            continue
        g = greg[r.name]
        cmp(f"regions.{r.name}.clock", g.clock, r.clock)
        cmp(f"regions.{r.name}.shape", g.shape, r.shape)
        if type(g.policy) is not type(r.policy) or dataclasses.astuple(g.policy)[:-1] != dataclasses.astuple(r.policy)[:-1]:
            rows.append(dict(field=f"regions.{r.name}.policy", got=_policy_desc(g.policy), expected=_policy_desc(r.policy)))
        elif g.policy.layout != r.policy.layout:
            rows.append(dict(field=f"regions.{r.name}.policy.layout", got=g.policy.layout, expected=r.policy.layout))
        cmp(f"regions.{r.name}.initial", g.initial, r.initial)
    gop = {o.name: o for o in got.operators}
    for o in want.operators:
        if o.name not in gop:
            rows.append(dict(field=f"operators.{o.name}", got=None, expected=o.name))
            continue
        for f in ("reads", "clock", "call", "flush"):
            cmp(f"operators.{o.name}.{f}", getattr(gop[o.name], f), getattr(o, f))
    ga, wa = got.admission, want.admission
    cmp("admission", None if ga is None else (ga.clock, ga.max_call), None if wa is None else (wa.clock, wa.max_call))
    return pd.DataFrame(rows, columns=["field", "got", "expected"])


def _diagnose(diff: pd.DataFrame) -> tuple[str, str]:
    """(mistake name, hint) for the first differing field of a declaration."""
    if diff.empty:
        return "", ""
    f, got = diff["field"].iloc[0], diff["got"].iloc[0]
    if f == "regions.kv.policy" and isinstance(got, str) and got.startswith("SlidingWindow"):
        return "forgot_sink", DECLARATION_MISTAKES["forgot_sink"]
    if f == "regions.kv.policy.layout":
        return "kv_layout", DECLARATION_MISTAKES["kv_layout"]
    if f == "clocks.frames.offset":
        return "no_lookahead", DECLARATION_MISTAKES["no_lookahead"]
    if f == "regions.ctx.policy":
        return "context_size", DECLARATION_MISTAKES["context_size"]
    if f == "clocks.samples.ratio":
        return "hop_ratio", DECLARATION_MISTAKES["hop_ratio"]
    return "", f"field {f} = {got!r} is not what the model needs: read it again from the sizes and the model."


def _reference(s) -> Declaration:
    """The grader's own declaration: it cuts the hidden traffic into calls and names the first field that differs
    (kept here, off the module the notebook hands the student)."""
    clocks = (Clock("calls", "encoder call"),
              Clock("frames", "encoder frame", parent="calls", ratio=s.chunk, offset=s.lookahead),
              Clock("samples", "audio sample", parent="frames", ratio=s.hop))
    kv = Region("kv", clock="frames", shape=(2, s.heads, "frames", s.dim // s.heads),
                policy=PromptRetained(s.sink, s.window), lifetime="turn", address_stable=True)
    ctx = Region("ctx", clock="samples", shape=(1, "samples"), policy=Fixed(s.context), lifetime="turn",
                 address_stable=True)
    op = Operator("encode", reads=("kv",), clock="frames", flush="lookahead")
    return Declaration("sample-encoder", clocks, (kv, ctx), (op,), admission=Admission("frames"), call_clock="calls")


def _certify_on(declare: Callable, sizes, which: str) -> dict:
    from ...adapters.kit import KitModel, certify
    from .. import sample_encoder as se

    want = _reference(sizes)
    try:
        decl = declare(sizes)
    except DeclarationError as e:  # a flush derived from a lookahead no clock carries: the offset is missing
        name = "no_lookahead" if e.field.endswith(".flush") and "offset" in e.reason else ""
        return dict(config=which, certified=False, field=e.field, detail=str(e), mistake=name,
                    hint=f"the declaration does not build: field '{e.field}': {e.reason}"
                    + (f" {DECLARATION_MISTAKES[name]}" if name else ""))
    except Exception as e:  # the student's function failed: say what it raised, keep nothing half-done
        return dict(config=which, certified=False, field="", detail=f"{type(e).__name__}: {e}", mistake="",
                    hint=f"your declaration function raised {type(e).__name__}: {e}")
    if is_blank(decl):  # a function whose body still returns the blank
        return dict(config=which, certified=False, field="", detail="no declaration yet", mistake="",
                    hint=FILL_IN.format(part="declaration") if which == "shown sizes" else "")
    if not isinstance(decl, Declaration):
        return dict(config=which, certified=False, field="", detail=f"got {type(decl).__name__}", mistake="",
                    hint=f"the function must return a Declaration, it returned {type(decl).__name__}")
    diff = declaration_diff(decl, want)
    model = se.SampleEncoder(sizes)
    step, stock, frames = se.steps(model)
    try:
        cert = certify(KitModel(decl, step, stock, se.traffic(sizes, want), frames=frames, modules=[model]),
                       backend="eager")
        ok, failed = cert.ok, "; ".join(cert.table.loc[~cert.table["passed"], "clause"])
    except Exception as e:  # a declaration the runtime cannot stream under fails closed, with the reason
        ok, failed = False, f"the runtime refused it: {type(e).__name__}: {e}"
    name, hint = _diagnose(diff)
    return dict(config=which, certified=ok, field="" if diff.empty else diff["field"].iloc[0],
                detail="certified" if ok else f"not certified: {failed}", mistake="" if ok else name,
                hint="" if ok else (hint or f"not certified ({failed})"), diff=diff)


def check_declaration(declare: Callable) -> Feedback:
    """Certify ``declare(sizes) -> Declaration`` for the sample encoder on the shown sizes and on hidden ones.

    Each configuration is certified with the adapter kit (the stock step against the runtime: catalog,
    both audits, bit-exactness, addresses, replay). A failure names the first field that differs from
    the right declaration and the slip it looks like; a declaration certified on the shown sizes but not
    on the hidden ones has a size typed as a literal (``literal_size``).
    """
    from .. import sample_encoder as se

    if is_blank(declare):  # the exercise cell still holds its blank: say what to write, run nothing
        table = pd.DataFrame([dict(part=w, answer=None, expected="certified", correct=False, mistake="",
                                   hint=FILL_IN.format(part="declaration") if w == "shown sizes" else "")
                              for w in ("shown sizes", "hidden sizes")], columns=FEEDBACK_COLUMNS)
        fb = Feedback("declaration", table)
        fb.diffs = {}
        return fb
    if isinstance(declare, Declaration):
        raise TypeError("check_declaration: pass the function that builds the declaration from the sizes "
                        "(declaration, not declaration(s)): it is certified on a second configuration too")
    if not callable(declare):
        raise TypeError(f"check_declaration: expected a function sizes -> Declaration, got {type(declare).__name__}")
    rows = [_certify_on(declare, se.VISIBLE, "shown sizes"), _certify_on(declare, se.HIDDEN, "hidden sizes")]
    shown, hidden = rows
    if shown["certified"] and not hidden["certified"]:
        f = hidden["field"]
        hidden["mistake"] = "literal_size"
        hidden["hint"] = DECLARATION_MISTAKES["literal_size"] + (f" The field that differs: {f}." if f else "")
    table = pd.DataFrame([dict(part=r["config"], answer=r["detail"], expected="certified", correct=r["certified"],
                               mistake=r["mistake"], hint=r["hint"]) for r in rows], columns=FEEDBACK_COLUMNS)
    fb = Feedback("declaration", table)
    # the fields that differ and what was given; the right values stay hidden
    fb.diffs = {r["config"]: None if r.get("diff") is None else r["diff"].drop(columns="expected") for r in rows}
    return fb
