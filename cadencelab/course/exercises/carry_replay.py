"""Exercises run on the teaching model: notebook 3's audits and notebook 4's graph breaks.

    notebook 3  check_audit_catch    which audit catches the wrong layout at which call
    notebook 4  check_graph_breaks   which change keeps a captured graph from replaying, and why
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field

from ...contract import catalog_counts
from .machinery import Exercise, Mistake

__all__ = ["AUDIT_CATCH", "GRAPH_BREAKS", "OUTCOMES", "check_audit_catch", "check_graph_breaks"]


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

    from ...adapters import teaching
    from ...state import ShadowAuditor

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
        Mistake("bitwise_not_tolerance", "bitwise, every output already differs (by rounding: another summation "
                "order); a tolerance check passes the first of those and rejects a later call.",
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


@contextlib.contextmanager
def _quiet(name: str = "cadencelab.replay"):
    """The engine's log silenced: its warnings name each scenario's outcome, which is the answer."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _prepare_breaks(seed: int = 1) -> _Breaks:
    """Each scenario on the teaching model (CPU, the engine's eager backend), the outcome of its last call."""
    with _quiet():
        return _run_breaks(seed)


def _run_breaks(seed: int) -> _Breaks:
    import torch

    from ...adapters import teaching

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


check_audit_catch = AUDIT_CATCH.check
check_graph_breaks = GRAPH_BREAKS.check
