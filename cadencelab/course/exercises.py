"""Graded exercises with diagnostic feedback, one or more per notebook.

Each :class:`Exercise` computes its expected answer from the library (a derivation, a recorded
file, a run of the teaching model), never from a typed figure, and carries the slips students
make as :class:`Mistake` objects: each computes the answer that slip would produce from the same
inputs, so a wrong answer that equals it gets that slip's hint ("K = 2, expected 3: K counts the
extents, the first included"). A check returns a :class:`Feedback` whose table has one row per
part of the answer.

    notebook 1  check_launch_cost        idle per launch from the recorded duplex second
    notebook 2  check_extents            cached extents a region passes through
                check_K                  steady shape classes per operator
                check_rho                stock bytes over declared bytes per region
    notebook 3  check_audit_catch        which audit catches the wrong layout at which call
    notebook 4  check_graph_breaks       which change keeps a captured graph from replaying, and why
    notebook 5  check_paired_interval    read a paired bootstrap interval of the factorial
    notebook 6  check_slack              orchestration slack from a chunk summary frame
    notebook 7  check_declaration        a declaration certified on the shown sizes and on hidden ones

:mod:`cadencelab.course.solutions` holds a correct answer and the planted mistakes for each.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import pandas as pd

from ..contract import (
    Declaration,
    DeclarationError,
    SlidingWindow,
    cached_at,
    catalog_counts,
    catalog_width,
    envelope,
    nbytes,
    region_shape,
    region_table,
    settle_calls,
    token2wav_declaration,
)
from .predict import NO_CLEAR_DIFFERENCE, interval_verdict

__all__ = ["Mistake", "Exercise", "Feedback", "EXERCISES", "exercises_table", "OUTCOMES", "is_blank", "FILL_IN",
           "check_launch_cost", "check_extents", "check_K", "check_rho", "check_audit_catch", "check_graph_breaks",
           "check_paired_interval", "check_slack", "check_declaration", "DECLARATION_MISTAKES"]

FEEDBACK_COLUMNS = ["part", "answer", "expected", "correct", "mistake", "hint"]
#: the hint of a part the student has not answered yet (``...`` or None in the notebook's answer cell)
FILL_IN = "{part}: fill this in (replace the ... in the answer cell with your answer, then run the cell again)."


def is_blank(value) -> bool:
    """True for an answer the student has not filled in yet: ``...`` or None."""
    return value is None or value is Ellipsis


# =======================================================================================
# the machinery
# =======================================================================================


@dataclass(frozen=True)
class Mistake:
    """A slip a student makes, and what to tell them.

    wrong: context -> {part: the answer this slip produces}; parts where it equals the right
           answer are not diagnosable by it (the slip changes nothing there).
    hint:  the feedback, formatted with {part}, {answer} and {expected}.
    plant: exercise inputs under which the slip changes the answer (the solutions test plants it there).
    """

    name: str
    hint: str
    wrong: Callable[[Any], Mapping]
    plant: Mapping = field(default_factory=dict)


@dataclass
class Feedback:
    """The verdict on one answer: a row per part (answer, expected, correct, the mistake it matches, hint)."""

    exercise: str
    table: pd.DataFrame

    @property
    def ok(self) -> bool:
        return bool(len(self.table)) and bool(self.table["correct"].all())

    @property
    def mistakes(self) -> list[str]:
        """Names of the mistakes the answer matched, in part order."""
        return [m for m in self.table["mistake"] if isinstance(m, str) and m]

    @property
    def hints(self) -> list[str]:
        return [h for h in self.table["hint"] if h]

    @property
    def message(self) -> str:
        if self.ok:
            return f"{self.exercise}: correct."
        return f"{self.exercise}: " + " ".join(self.hints)

    def __repr__(self) -> str:
        return f"Feedback({'correct' if self.ok else 'not yet'})\n{self.message}"

    def _repr_html_(self) -> str:
        head = "<b style='color:#2ca02c'>Correct.</b>" if self.ok else "<b style='color:#d62728'>Not yet.</b>"
        return head + self.table.to_html(index=False, border=0)


def _same(kind: str, a, b, rel_tol: float, abs_tol: float) -> bool:
    if kind == "number":
        return abs(a - b) <= max(abs_tol, rel_tol * abs(b))
    return a == b


def _normalize(kind: str, value, choices=()):
    """The answer in the form it is compared in; raises ValueError naming what was typed."""
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return float(value)
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise ValueError(f"{value!r} is not a whole number")
        return int(value)
    if kind == "extents":
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise ValueError(f"{value!r} is not a list of extents")
        out = []
        for v in value:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
                raise ValueError(f"{v!r} in {value!r} is not a whole number of frames")
            out.append(int(v))
        return tuple(sorted(set(out)))
    if kind == "choice":
        if not isinstance(value, str) or value.strip().lower() not in choices:
            raise ValueError(f"{value!r} is not one of {list(choices)}")
        return value.strip().lower()
    raise ValueError(f"unknown answer kind {kind!r}")


@dataclass(frozen=True)
class Exercise:
    """One graded exercise.

    prepare:  inputs (keyword arguments of the check) -> a context the answers are computed from.
    expected: context -> {part: right answer}.
    parts:    context -> the parts an answer must give (default: every expected part).
    kind:     "number" (within rel_tol / abs_tol), "integer", "extents" (a set of whole numbers), "choice".
    """

    name: str
    notebook: int
    question: str
    prepare: Callable[..., Any]
    expected: Callable[[Any], dict]
    mistakes: tuple = ()
    kind: str = "number"
    rel_tol: float = 0.0
    abs_tol: float = 0.0
    choices: tuple = ()
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def context(self, **inputs):
        """The prepared context (cached per hashable inputs); unknown inputs are named."""
        params = inspect.signature(self.prepare).parameters
        unknown = sorted(set(inputs) - set(params))
        if unknown:
            raise TypeError(f"{self.name}: unknown input(s) {unknown}; this exercise takes {sorted(params)}")
        try:
            key = tuple(sorted(inputs.items()))
            hash(key)
        except TypeError:
            return self.prepare(**inputs)
        if key not in self._cache:
            self._cache[key] = self.prepare(**inputs)
        return self._cache[key]

    def answer_key(self, **inputs) -> dict:
        """{part: right answer} for these inputs."""
        return self.expected(self.context(**inputs))

    def check(self, answer, **inputs) -> Feedback:
        """Grade ``answer`` (a mapping part -> value, or a bare value for a one-part exercise)."""
        ctx = self.context(**inputs)
        want = self.expected(ctx)
        if is_blank(answer):  # nothing filled in yet: every part asks for an answer
            answer = dict.fromkeys(want, ...)
        if not isinstance(answer, Mapping):
            if len(want) != 1:
                raise ValueError(f"{self.name}: give a mapping of the parts {list(want)}, got {answer!r}")
            answer = {next(iter(want)): answer}
        unknown = [p for p in answer if p not in want]
        if unknown:
            raise ValueError(f"{self.name}: unknown part(s) {unknown}; the parts are {list(want)}")
        slips = [(m, m.wrong(ctx)) for m in self.mistakes]
        rows = []
        for part, exp in want.items():
            if part not in answer:
                rows.append(dict(part=part, answer=None, expected=exp, correct=False, mistake="",
                                 hint=f"{part}: no answer given."))
                continue
            if is_blank(answer[part]):
                rows.append(dict(part=part, answer=None, expected="(hidden until answered)", correct=False,
                                 mistake="", hint=FILL_IN.format(part=part)))
                continue
            try:
                got = _normalize(self.kind, answer[part], self.choices)
            except ValueError as e:
                rows.append(dict(part=part, answer=answer[part], expected=exp, correct=False, mistake="",
                                 hint=f"{part}: {e}."))
                continue
            if _same(self.kind, got, exp, self.rel_tol, self.abs_tol):
                rows.append(dict(part=part, answer=got, expected=exp, correct=True, mistake="", hint=""))
                continue
            name, hint = "", f"{part} = {_show(got)}, expected {_show(exp)}: recompute it step by step."
            for m, wrong in slips:
                if part not in wrong:
                    continue
                w = _normalize(self.kind, wrong[part], self.choices)
                if not _same(self.kind, w, exp, self.rel_tol, self.abs_tol) and \
                        _same(self.kind, got, w, self.rel_tol, self.abs_tol):
                    name = m.name
                    hint = f"{part} = {_show(got)}, expected {_show(exp)}: " + m.hint.format(
                        part=part, answer=_show(got), expected=_show(exp), **_fields(ctx))
                    break
            rows.append(dict(part=part, answer=got, expected=exp, correct=False, mistake=name, hint=hint))
        return Feedback(self.name, pd.DataFrame(rows, columns=FEEDBACK_COLUMNS))

    def planted(self, mistake: str, **inputs) -> dict:
        """The answer ``mistake`` produces under its plant inputs (and ``inputs``), for the solutions test."""
        m = next((m for m in self.mistakes if m.name == mistake), None)
        if m is None:
            raise KeyError(f"{self.name}: no mistake {mistake!r}; known: {[x.name for x in self.mistakes]}")
        ctx = self.context(**{**m.plant, **inputs})
        right, wrong = self.expected(ctx), m.wrong(ctx)
        return {p: wrong.get(p, v) for p, v in right.items()}


def _show(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, tuple):
        return "{" + ", ".join(map(str, v)) + "}"
    return str(v)


def _fields(ctx) -> dict:
    """Values a hint may quote ({f_chunk}, {bound}, ...): a context's ``hint_fields``."""
    return dict(getattr(ctx, "hint_fields", {}) or {})


# =======================================================================================
# notebook 1: launches x per-launch cost vs measured idle
# =======================================================================================


@dataclass
class _Second:
    b0: pd.Series
    src: pd.Series
    hint_fields: dict


def _data():
    from . import data

    return data


def _prepare_second(condition: str = "exact") -> _Second:
    s = _data().duplex_summary(condition)
    return _Second(s.loc["B0"], s.loc["SRc"], dict(b0_launches=int(s.loc["B0", "synthesis_launches"]),
                                                   src_launches=int(s.loc["SRc", "synthesis_launches"])))


def _launch_parts(idle_ms: float, b0: pd.Series, src_launches: float) -> dict:
    per_us = 1e3 * idle_ms / float(b0["synthesis_launches"])
    return dict(b0_idle_ms=idle_ms, per_launch_us=per_us, src_predicted_idle_ms=src_launches * per_us / 1e3)


def _launch_expected(c: _Second) -> dict:
    idle = float(c.b0["synthesis_ms_median"]) * float(c.b0["synthesis_slack_frac"])
    return _launch_parts(idle, c.b0, float(c.src["synthesis_launches"]))


LAUNCH_COST = Exercise(
    "launch_cost", 1,
    "From data.duplex_summary: B0's synthesis idle per second (ms = synthesis_ms_median x synthesis_slack_frac), "
    "the host cost per kernel launch that idle implies (us), and the idle SRc's launches alone would predict (ms).",
    _prepare_second, _launch_expected,
    mistakes=(
        Mistake("busy_not_idle", "slack_frac is the idle share; {answer} is the busy part (x (1 - slack)).",
                lambda c: _launch_parts(float(c.b0["synthesis_ms_median"]) * (1 - float(c.b0["synthesis_slack_frac"])),
                                        c.b0, float(c.src["synthesis_launches"]))),
        Mistake("ms_per_launch", "that is milliseconds per launch; the part asks for microseconds (x 1000).",
                lambda c: {"per_launch_us": _launch_expected(c)["per_launch_us"] / 1e3}),
        Mistake("b0_launches_for_src", "that is B0's own idle: predict SRc with SRc's {src_launches} launches "
                "(a graph launch counts once).",
                lambda c: {"src_predicted_idle_ms": _launch_expected(c)["b0_idle_ms"]}),
        Mistake("measured_not_predicted", "that is SRc's measured idle; the part asks what its launches alone predict "
                "(the difference is idle that no launch causes: gaps inside the graphs).",
                lambda c: {"src_predicted_idle_ms": float(c.src["synthesis_ms_median"]) * float(c.src["synthesis_slack_frac"])}),
    ),
    rel_tol=0.02,
)


# =======================================================================================
# notebook 2: extents, K, rho on the Token2wav declaration with chosen clocks
# =======================================================================================


@dataclass
class _T2W:
    decl: Declaration
    regions: tuple
    hint_fields: dict


def _prepare_t2w(f_prompt: int | None = None, f_retained: int | None = None, f_chunk: int | None = None,
                 n_steps: int | None = None, regions: tuple | None = None) -> _T2W:
    decl = token2wav_declaration(f_prompt=f_prompt, f_retained=f_retained, f_chunk=f_chunk, n_steps=n_steps)
    p = decl.params
    if regions is not None:
        names = {r.name for r in decl.regions}
        bad = [r for r in regions if r not in names]
        if bad:
            raise ValueError(f"unknown region(s) {bad}; the Token2wav declaration has {sorted(names)}")
    return _T2W(decl, tuple(regions) if regions is not None else (),
                dict(f_prompt=p["f_prompt"], f_retained=p["f_retained"], f_chunk=p["f_chunk"], f_call=p["f_call"],
                     n_steps=p["n_steps"], bound=p["f_prompt"] + p["f_retained"],
                     tokens_per_chunk=p["tokens_per_chunk"]))


def _walk(r) -> tuple:
    """The distinct cached shape extents a bounded region passes through (entering each call)."""
    n = int(settle_calls(r)) + 1
    return tuple(sorted({int(r.policy.shape_extent(int(cached_at(r, t)))) for t in range(n)}))


#: regions whose extents the extents exercise asks for by default: a growing prompt cache and a window
EXTENT_REGIONS = ("estimator_att_cache", "vocoder_mel_cache")


def _extent_regions(c: _T2W) -> list:
    return [c.decl.region(n) for n in (c.regions or EXTENT_REGIONS)]


def _extents_with(c: _T2W, change: Callable) -> dict:
    return {r.name: _walk(change(r)) for r in _extent_regions(c)}


def _stop_short(r) -> tuple:
    """The walk without its truncated last step: only whole strides below the bound."""
    walk = _walk(r)
    return tuple(e for e in walk if (e - r.initial) % r.growth == 0) if r.growth else walk


EXTENTS = Exercise(
    "t2w_extents", 2,
    "The cached extents (frames) each region passes through, entering each call, for the chosen clocks.",
    _prepare_t2w, lambda c: _extents_with(c, lambda r: r),
    mistakes=(
        Mistake("lookahead_in_stride", "a steady call commits f_chunk = {f_chunk} frames; its lookahead is read, "
                "not committed (f_call = {f_call} is only a final flush).",
                lambda c: _extents_with(c, lambda r: dataclasses.replace(r, growth=r.call_max)),
                plant=dict(f_retained=110)),
        Mistake("prompt_forgotten", "the cache starts each turn holding the prompt (initial = f_prompt = {f_prompt}), "
                "and the prompt is never evicted.",
                lambda c: _extents_with(c, lambda r: dataclasses.replace(
                    r, initial=0, policy=SlidingWindow(r.policy.retained)) if r.policy.kind == "prompt_retained" else r)),
        Mistake("no_retention_cap", "the retention cut stops the extent at its bound: nothing grows past it.",
                lambda c: {r.name: _walk(r) + (_walk(r)[-1] + r.growth,) for r in _extent_regions(c)}),
        Mistake("truncation_forgotten", "when the stride does not divide the window, the last step is cut short: "
                "the extent still reaches the bound exactly.",
                lambda c: {r.name: _stop_short(r) for r in _extent_regions(c)}, plant=dict(f_chunk=40)),
        Mistake("attended_not_cached", "a signature sees the extent *entering* the call, before this call's frames "
                "are appended.",
                lambda c: {r.name: tuple(e + r.growth for e in _walk(r)) for r in _extent_regions(c)}),
    ),
    kind="extents",
)


def _widest(c: _T2W, op) -> tuple:
    """(W, s) of the region ``op`` reads with the most steady classes."""
    best = max(dict.fromkeys(op.reads), key=lambda n: catalog_width(c.decl, n)["K"])
    w = catalog_width(c.decl, best)
    return w["W"], w["s"]


def _k_if(c: _T2W, stride: Callable, plus: int = 1, ops: Callable = lambda op: True) -> dict:
    out = {}
    for op in c.decl.operators:
        if not ops(op):
            continue
        W, s = _widest(c, op)
        s2 = stride(op, s)
        out[op.name] = (0 if W == 0 else -(-W // s2)) + plus if s2 > 0 else math.inf
    return out


K_CLASSES = Exercise(
    "t2w_K", 2,
    "Steady shape classes K per operator (K = ceil(W / s) + 1 over the widest region it reads).",
    _prepare_t2w, lambda c: {op.name: int(catalog_counts(c.decl, op.name)["steady"]) for op in c.decl.operators},
    mistakes=(
        Mistake("plus_one_forgotten", "K counts the extents, the first one (A-) included: ceil(W / s) + 1.",
                lambda c: _k_if(c, lambda op, s: s, plus=0)),
        Mistake("per_step_growth", "is growth per call or per solver step? {part} runs n_steps = {n_steps} times per "
                "chunk at the same extent; the cache grows once per chunk, by f_chunk = {f_chunk} frames.",
                lambda c: _k_if(c, lambda op, s: s / op.per_chunk, ops=lambda op: op.per_chunk > 1)),
        Mistake("tokens_not_frames", "growth is counted on the region's clock, mel frames: {tokens_per_chunk} tokens "
                "x frames_per_token = {f_chunk} frames per chunk.",
                lambda c: _k_if(c, lambda op, s: c.hint_fields["tokens_per_chunk"] if s == c.hint_fields["f_chunk"] else s)),
        Mistake("lookahead_in_stride", "the stride is the committed f_chunk = {f_chunk}, not f_call = {f_call} "
                "(the lookahead is read, not committed).",
                lambda c: _k_if(c, lambda op, s: c.hint_fields["f_call"] if s == c.hint_fields["f_chunk"] else s),
                plant=dict(f_chunk=10)),
        Mistake("bindings_not_classes", "that is K x per_chunk, the bindings (graphs captured at step granularity); "
                "K counts shape classes.",
                lambda c: {op.name: int(catalog_counts(c.decl, op.name)["steady"]) * op.per_chunk
                           for op in c.decl.operators if op.per_chunk > 1}),
        Mistake("catalog_size_not_K", "that is the catalog size (steady + admitted flush classes); K counts the "
                "steady classes only.",
                lambda c: {op.name: int(catalog_counts(c.decl, op.name)["admitted_classes"]) for op in c.decl.operators}),
    ),
    kind="integer",
)


#: regions whose rho the rho exercise asks for by default: an attended workspace and a retained cache
RHO_REGIONS = ("solver_workspace", "estimator_att_cache")


def _rho_regions(c: _T2W) -> list:
    return [c.decl.region(n) for n in (c.regions or RHO_REGIONS)]


def _rho_at(c: _T2W, r, extent: float) -> float:
    """Stock bytes over the bytes of ``r`` at clock extent ``extent``."""
    stock = nbytes(region_shape(c.decl, r, _extent(c, r), stock=True), r.dtype)
    return stock / nbytes(region_shape(c.decl, r, extent, stock=False), r.dtype)


def _extent(c: _T2W, r) -> float:
    _, a, a_att = envelope(c.decl, r.name)
    return a_att if r.envelope == "attended" else a


def _rho_expected(c: _T2W) -> dict:
    t = region_table(c.decl).set_index("region")
    return {r.name: float(t.loc[r.name, "rho"]) for r in _rho_regions(c)}


RHO = Exercise(
    "t2w_rho", 2,
    "Over-reservation rho_r = stock bytes / declared bytes per region (two decimals).",
    _prepare_t2w, _rho_expected,
    mistakes=(
        Mistake("retained_for_attended", "{part} is a workspace sized to the attended extent: the retention bound "
                "{bound} plus one largest call f_call = {f_call}.",
                lambda c: {r.name: _rho_at(c, r, envelope(c.decl, r.name)[1]) for r in _rho_regions(c)
                           if r.envelope == "attended"}),
        Mistake("chunk_not_call", "the attended extent adds the largest call, f_call = {f_call} (a final flush keeps "
                "its lookahead), not f_chunk = {f_chunk}.",
                lambda c: {r.name: _rho_at(c, r, envelope(c.decl, r.name)[1] + r.growth) for r in _rho_regions(c)
                           if r.envelope == "attended"}),
        Mistake("inverted", "rho is stock over declared (reserved / live), so it is >= 1 where the stock code "
                "over-reserves.",
                lambda c: {n: 1 / v for n, v in _rho_expected(c).items()}),
        Mistake("one_dim_only", "rho compares bytes: every dim whose stock constant differs counts, the stock "
                "solver slots against n_steps = {n_steps} too.",
                lambda c: {r.name: float(r.stock.get(r.clock, _extent(c, r))) / _extent(c, r) for r in _rho_regions(c)}),
    ),
    abs_tol=0.01,
)


# =======================================================================================
# notebook 3: which audit catches the wrong layout, at which call
# =======================================================================================


@dataclass
class _Audits:
    elementwise: int
    frames: int
    output: int
    bitwise: int
    hint_fields: dict = field(default_factory=dict)


def _prepare_audits(seed: int = 1) -> _Audits:
    import torch

    from ..adapters import teaching
    from ..state import ShadowAuditor

    cfg = teaching.TeachingConfig()
    model = teaching.TinyStreamer(cfg)
    stream = teaching.make_stream(cfg, seed=seed)
    stock = teaching.TeachingRuntime(model, state_rule=False).run(stream)
    strict, lenient = ShadowAuditor(), ShadowAuditor(compare="frames")
    wrong = teaching.TeachingRuntime(model, layout="chronological", auditor=lenient).run(stream)
    teaching.TeachingRuntime(model, layout="chronological", auditor=strict).run(stream)
    pairs = list(zip(stock.outputs, wrong.outputs))
    output = next(i for i, (a, b) in enumerate(pairs) if not torch.allclose(a, b))
    bitwise = next(i for i, (a, b) in enumerate(pairs) if not torch.equal(a, b))
    return _Audits(strict.first_divergence.call, lenient.first_divergence.call, output, bitwise)


def _audits_expected(c: _Audits) -> dict:
    return dict(elementwise=c.elementwise, frames=c.frames, output=c.output)


AUDIT_CATCH = Exercise(
    "audit_catch", 3,
    "The teaching model's carry with the wrong layout (chronological instead of newest first): the first call "
    "(counted from 0) the elementwise audit flags, the frame-set audit flags, and a tolerance check "
    "(torch.allclose) rejects an output.",
    _prepare_audits, _audits_expected,
    mistakes=(
        Mistake("counted_from_one", "calls are counted from 0: the first chunk is call 0.",
                lambda c: {k: v + 1 for k, v in _audits_expected(c).items()}),
        Mistake("audits_swapped", "the elementwise audit compares positions, so the wrong order shows at the first "
                "retention; the frame-set audit ignores order and waits for the eviction that reaches the prompt.",
                lambda c: dict(elementwise=c.frames, frames=c.elementwise)),
        Mistake("bitwise_not_tolerance", "bitwise, every output already differs (by about 1e-6: another summation "
                "order); a tolerance check passes those and first rejects a later call.",
                lambda c: dict(output=c.bitwise)),
    ),
    kind="integer",
)


# =======================================================================================
# notebook 4: which change keeps a captured graph from replaying
# =======================================================================================

#: what can happen to a call under ExactShapeReplay (the graph-breaks exercise's choices)
OUTCOMES = ("replay", "outside_catalog", "host_rng", "invalidated")


@dataclass
class _Breaks:
    outcomes: dict
    hint_fields: dict


def _outcome(path: str) -> str:
    return "replay" if path.startswith("replay") else path.split(": ", 1)[-1]


def _prepare_breaks(seed: int = 1) -> _Breaks:
    """Each scenario on the teaching model (CPU, the engine's eager backend), the outcome of its last call."""
    import torch

    from ..adapters import teaching

    cfg = teaching.TeachingConfig()

    def last_path(model, turns, before_last=None) -> str:
        rt = teaching.TeachingRuntime(model, replay=True, backend="eager")
        stream = teaching.make_stream(cfg, turns=turns, seed=seed)
        path = ""
        for t, chunks in enumerate(stream.turns):
            rt.set_prompt(stream.prompt)
            for i, x in enumerate(chunks):
                if before_last is not None and t == len(stream.turns) - 1 and i == len(chunks) - 1:
                    before_last(model)
                mark = rt.engine.tally()
                rt.stream(x)
                path = rt.engine.path_since(mark)
        return _outcome(path)

    def reload_weights(m):
        with torch.no_grad():
            m.out.weight.data = m.out.weight.data.clone()  # same values, a new tensor

    settle = int(catalog_counts(teaching.declaration(cfg), teaching.OPERATOR)["steady"])  # one probe per class
    big_flush = cfg.f_call  # a final flush with its lookahead: above f_chunk
    steady = settle + 2
    out = dict(
        new_turn=last_path(teaching.TinyStreamer(cfg), ((steady, 0), (steady, 0))),
        flush_above_f_chunk=last_path(teaching.TinyStreamer(cfg), ((steady, big_flush),)),
        host_noise=last_path(teaching.TinyStreamer(cfg.replace(noise_std=0.05)), ((steady, 0),)),
        weights_reloaded=last_path(teaching.TinyStreamer(cfg), ((steady, 0),), before_last=reload_weights),
    )
    return _Breaks(out, dict(f_chunk=cfg.f_chunk, f_call=cfg.f_call))


GRAPH_BREAKS = Exercise(
    "graph_breaks", 4,
    "The teaching model under replay (CPU, eager backend), the last call of each scenario: does it replay, or run "
    "eagerly and why? new_turn: a second turn, same prompt length; flush_above_f_chunk: a final flush of f_call "
    "frames; host_noise: noise drawn on the host every call; weights_reloaded: the weights copied into new tensors "
    f"just before the call. Answer one of {list(OUTCOMES)} per scenario.",
    _prepare_breaks, lambda c: dict(c.outcomes),
    mistakes=(
        Mistake("new_turn_breaks", "a turn start resets the carry in place: same address, same shapes, so the "
                "steady classes replay their graphs (only the priming is eager).",
                lambda c: dict(new_turn="invalidated")),
        Mistake("flush_admitted", "a flush of f_call = {f_call} frames is above f_chunk = {f_chunk}: outside the "
                "admission predicate, never captured.",
                lambda c: dict(flush_above_f_chunk="replay")),
        Mistake("host_noise_replays", "a graph would freeze one host draw into a constant: the probe sees the host "
                "generator move and rejects the class for good (device noise, Philox, would replay).",
                lambda c: dict(host_noise="replay")),
        Mistake("weights_unseen", "a graph reads the parameters at their captured addresses; new tensors move them. "
                "The engine checks those pointers every call, drops the graph and runs eagerly.",
                lambda c: dict(weights_reloaded="replay")),
    ),
    kind="choice", choices=OUTCOMES,
)


# =======================================================================================
# notebook 5: read a paired interval
# =======================================================================================

#: what a latency interval says (the paired-interval exercise's verdict choices)
VERDICTS = ("faster", "slower", NO_CLEAR_DIFFERENCE)


@dataclass
class _Interval:
    row: pd.Series
    hint_fields: dict


def _prepare_interval(arm: str = "S", condition: str = "exact") -> _Interval:
    f = _data().factorial(condition).set_index("arm")
    if arm not in f.index:
        raise ValueError(f"unknown arm {arm!r}; the {condition} factorial has {list(f.index)}")
    return _Interval(f.loc[arm], dict(arm=arm, median=float(f.loc[arm, "latency_delta"])))


def _interval_expected(c: _Interval) -> dict:
    lo, hi = float(c.row["latency_delta_lo"]), float(c.row["latency_delta_hi"])
    return dict(lo=lo, hi=hi, verdict=interval_verdict(lo, hi, "faster", "slower"))


PAIRED_INTERVAL = Exercise(
    "paired_interval", 5,
    "From data.factorial: the arm's 95% paired interval of its latency change against B0 (latency_delta_lo, "
    "latency_delta_hi, as fractions) and what it says: faster, slower or no clear difference.",
    _prepare_interval, lambda c: {k: v for k, v in _interval_expected(c).items() if k != "verdict"},
    mistakes=(
        Mistake("percent_not_fraction", "the deltas are fractions of B0's latency (0.10 means +10%).",
                lambda c: {k: 100 * v for k, v in _interval_expected(c).items() if k != "verdict"}),
        Mistake("peak_interval", "that is the peak-memory interval (peak_delta_*); the question is about latency.",
                lambda c: dict(lo=float(c.row["peak_delta_lo"]), hi=float(c.row["peak_delta_hi"]))),
        Mistake("ends_swapped", "lo is the lower end of the interval.",
                lambda c: dict(lo=_interval_expected(c)["hi"], hi=_interval_expected(c)["lo"])),
    ),
    abs_tol=0.005,
)

INTERVAL_VERDICT = Exercise(
    "paired_interval_verdict", 5,
    "What the arm's paired latency interval against B0 says: faster, slower or no clear difference.",
    _prepare_interval, lambda c: dict(verdict=_interval_expected(c)["verdict"]),
    mistakes=(
        Mistake("median_decides", "the median change is {median:+.1%}, but the interval includes 0: the data "
                "cannot tell the arms apart.",
                lambda c: dict(verdict="faster" if float(c.row["latency_delta"]) < 0 else "slower")),
        Mistake("sign_flipped", "a negative delta is a lower latency, i.e. faster.",
                lambda c: dict(verdict={"faster": "slower", "slower": "faster"}.get(_interval_expected(c)["verdict"],
                                                                                   _interval_expected(c)["verdict"])),
                plant=dict(arm="SRc")),
    ),
    kind="choice", choices=VERDICTS,
)


# =======================================================================================
# notebook 6: orchestration slack from a trace frame
# =======================================================================================


@dataclass
class _Slack:
    summary: pd.DataFrame
    hint_fields: dict = field(default_factory=dict)


_RECORDED = {}


def _recorded_summary() -> pd.DataFrame:
    """One steady chunk's summary per variant (eager = B0, replay = SRc) from the recorded H200 traces."""
    if "summary" not in _RECORDED:
        from ..profile import summary

        rows = []
        for variant, arm in (("eager", "B0"), ("replay", "SRc")):
            s = summary(_data().recorded_trace(arm), "chunk").iloc[[-1]].copy()
            s.insert(0, "variant", variant)
            rows.append(s)
        _RECORDED["summary"] = pd.concat(rows, ignore_index=True)
    return _RECORDED["summary"]


def _prepare_slack(summary: pd.DataFrame | None = None) -> _Slack:
    s = _recorded_summary() if summary is None else summary
    need = ["variant", "wall_us", "busy_us", "host_wait_us"]
    missing = [c for c in need if not isinstance(s, pd.DataFrame) or c not in s.columns]
    if missing:
        raise ValueError(f"summary: missing columns {missing} (pass the chunk summary frame, e.g. tl.summary)")
    return _Slack(s.set_index("variant"))


def _slack_parts(c: _Slack, f: Callable) -> dict:
    return {v: float(f(r)) for v, r in c.summary.iterrows()}


SLACK = Exercise(
    "slack", 6,
    "Orchestration slack per variant (eager, replay) of the chunk summary: the idle share of the chunk's wall time.",
    _prepare_slack, lambda c: _slack_parts(c, lambda r: (r["wall_us"] - r["busy_us"]) / r["wall_us"]),
    mistakes=(
        Mistake("busy_share", "that is the busy share (busy / wall); slack is the idle share, 1 - busy / wall.",
                lambda c: _slack_parts(c, lambda r: r["busy_us"] / r["wall_us"])),
        Mistake("host_wait_only", "slack counts all idle time (host_wait + kernel_wait + other), not host_wait alone.",
                lambda c: _slack_parts(c, lambda r: r["host_wait_us"] / r["wall_us"])),
        Mistake("percent_not_fraction", "give slack as a fraction of the wall time (0.88, not 88).",
                lambda c: _slack_parts(c, lambda r: 100 * (r["wall_us"] - r["busy_us"]) / r["wall_us"])),
    ),
    abs_tol=0.01,
)


# =======================================================================================
# notebook 7: a declaration, certified on the shown sizes and on hidden ones
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
    return "", f"field {f}: got {got!r}, expected {diff['expected'].iloc[0]!r}."


def _certify_on(declare: Callable, sizes, which: str) -> dict:
    from ..adapters.kit import certify
    from . import sample_encoder as se

    want = se.reference_declaration(sizes)
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
        cert = certify(decl, step, stock, se.traffic(sizes), frames=frames, modules=[model], backend="eager")
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
    from . import sample_encoder as se

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
    fb.diffs = {r["config"]: r.get("diff") for r in rows}
    return fb


# =======================================================================================
# the course's exercises
# =======================================================================================

EXERCISES: dict[str, Exercise] = {e.name: e for e in (
    LAUNCH_COST, EXTENTS, K_CLASSES, RHO, AUDIT_CATCH, GRAPH_BREAKS, PAIRED_INTERVAL, INTERVAL_VERDICT, SLACK)}

check_launch_cost = LAUNCH_COST.check
check_extents = EXTENTS.check
check_K = K_CLASSES.check
check_rho = RHO.check
check_audit_catch = AUDIT_CATCH.check
check_graph_breaks = GRAPH_BREAKS.check
check_slack = SLACK.check


def check_paired_interval(answer: Mapping, **inputs) -> Feedback:
    """Grade the interval (lo, hi) and the verdict of an arm's paired latency change against B0."""
    if is_blank(answer):
        answer = dict(lo=..., hi=..., verdict=...)
    if not isinstance(answer, Mapping):
        raise ValueError(f"paired_interval: give a mapping with lo, hi and verdict, got {answer!r}")
    nums = {k: v for k, v in answer.items() if k != "verdict"}
    a = PAIRED_INTERVAL.check(nums, **inputs)
    b = INTERVAL_VERDICT.check({"verdict": answer["verdict"]} if "verdict" in answer else {}, **inputs)
    return Feedback("paired_interval", pd.concat([a.table, b.table], ignore_index=True))


def exercises_table() -> pd.DataFrame:
    """One row per exercise: name, notebook, question, the mistakes it diagnoses."""
    rows = [dict(name=e.name, notebook=e.notebook, question=e.question, mistakes=[m.name for m in e.mistakes])
            for e in EXERCISES.values()]
    rows.append(dict(name="declaration", notebook=7, question=check_declaration.__doc__.splitlines()[0],
                     mistakes=list(DECLARATION_MISTAKES)))
    return pd.DataFrame(rows).sort_values("notebook", kind="stable").reset_index(drop=True)
