"""The paper's factorial on any declared model (``python -m cadencelab.bench kit --model teaching``).

``--model`` names a :class:`~cadencelab.adapters.kit.KitModel`: a built-in (``teaching``, ``freeze-style``,
``token2wav`` and ``token2wav-teaching``: :mod:`cadencelab.adapters.token2wav.kit`) or ``package.module:function``,
a function of the device returning a KitModel (a user's declaration, step, stock step and traffic); one that also
takes ``arm`` is given the one arm its process runs. The model is certified once (catalog and certificate written
beside the figures); then every arm of :data:`~cadencelab.adapters.kit.ARMS`, and ``B0_repeat`` (the A/A control),
is measured the way every study measures (:mod:`cadencelab.bench.measure`): rounds of fresh pinned processes,
the arms' blocks in a rotating order, hierarchical bootstrap intervals, stopping once SRc against B0 is within
the target or at the process or time limits. A block is one pass of the model's traffic; its figure is the
median ms per call.

Gates: every arm's every block bit-exact with the model's reference (``KitModel.reference``: its own loop, else its
stock step from its own start); the model certified (else exit 1, its figures recorded with ``certified: false``);
the A/A interval containing 0 (else no direction is claimed). Writes ``kit_factorial.json`` and
``kit_factorial_blocks.csv``; prints a table whose last line is ``summary: {...}``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..adapters import registry
from ..adapters.arms import BASELINE, FACTORIAL, REPEAT
from . import options
from .common import ArmProcess, InlineArm, check_out, serve, study_provenance, write_csv, write_json
from .flags import (MAX_BLOCKS, FlagError, add_study_parser, config_from_args, exit_code, int_range, names_in, opt,
                    positive_float)
from .measure import (Method, a_a_check, arm_processes, direction, hierarchical_bootstrap, interval_halfwidth,
                      parse_cores, pin_to_cores, point, ratio_interval)
from .rounds import Rounds, run_rounds

__all__ = ["MODELS", "KIT_ARMS", "CONTROLS", "KitConfig", "load_model", "run_study", "analyse", "add_parser"]

#: built-in models (name -> "module:function" of the device returning a KitModel): the registry's
MODELS = registry.MODELS
#: the factorial's arms and the A/A control
KIT_ARMS = (*FACTORIAL, REPEAT)
#: controls beside the arms, run only when ``--arms`` names them: ``B0_compiled`` is the model's own stock step
#: under ``torch.compile(mode="reduce-overhead")`` on plain tensors (B0's loop, compiled); its exactness is
#: measured and reported, never gated, and it is labelled a control in the results
CONTROLS = ("B0_compiled",)
HEADLINE = ("SRc", BASELINE)
#: the model's build and certification may take this many --block-timeout (it streams the traffic ~3 times)
CERTIFY_BLOCKS = 4


def _check_model(flag: str, text: str) -> None:
    if text not in registry.MODELS and (":" not in text or not all(text.split(":", 1))):
        raise FlagError(flag, f"{text!r}: a built-in model ({', '.join(MODELS)}) or package.module:function")


@dataclass
class KitConfig:
    model: str = opt("teaching", check=_check_model,
                     help="the KitModel: teaching, freeze-style, token2wav, token2wav-teaching, or package.module:function "
                          "(a function of the device)")
    arms: tuple = opt(KIT_ARMS, parse=names_in(KIT_ARMS + CONTROLS),
                      help="comma-separated arms (B0_repeat: the A/A control; B0_compiled: the compile control)")
    device: str = options.device()
    blocks: int = opt(5, type=int_range(1, MAX_BLOCKS), help="timed blocks per process (plus one warm-up block)")
    seed: int = options.seed()
    condition: str = options.condition()
    processes: bool = options.processes()
    min_processes: int = options.min_processes()
    max_processes: int = options.max_processes()
    time_budget_s: float = options.time_budget(300.0)
    target_halfwidth: float = options.target_halfwidth()
    cores: str = options.cores()
    block_timeout_s: float = opt(300.0, flag="--block-timeout", type=positive_float,
                                 help="seconds one block (or one process's set-up) may take; the model's build and "
                                      "certification in the main process may take 4 times this")
    compile_timeout_s: float = opt(300.0, flag="--compile-timeout", type=positive_float,
                                   help="more seconds the compile control (B0_compiled) may take for its set-up and "
                                        "first block, where torch.compile does its work")
    out: str = options.out("kit")
    overwrite: bool = options.overwrite()

    def method(self) -> Method:
        return Method(self.min_processes, self.max_processes, self.time_budget_s, self.target_halfwidth,
                      parse_cores(self.cores), seed=self.seed)


def load_model(spec: str, device: str, arm: str | None = None):
    """The KitModel ``spec`` names (a registered name or ``package.module:function``), built on ``device`` (and
    for ``arm`` when the function takes an ``arm``: the one arm a process runs)."""
    try:
        return registry.resolve(spec, device, arm)
    except ValueError as e:
        raise ValueError(f"--model {spec!r}: {e}") from None


class _ArmState:
    """One arm in its process: the model, the runtime of the arm, the stock outputs to compare with."""

    def __init__(self, spec: str, arm: str, device: str, backend: str, seed: int, cores: tuple):
        import torch

        torch.manual_seed(seed)
        self.model = load_model(spec, device, "B0" if arm in ("B0_repeat",) + CONTROLS else arm)
        self.reference, _ = self.model.reference_outputs()
        run = dataclasses.replace(self.model, stock=_compiled(self.model.stock)) if arm in CONTROLS else self.model
        self.rt = run.runtime("B0" if arm in ("B0_repeat",) + CONTROLS else arm, backend)
        self.cores, self.pinned = cores, False

    def block(self) -> dict:
        from ..adapters.kit import run_block

        if not self.pinned:
            pin_to_cores(self.cores)
            self.pinned = True
        r = run_block(self.rt, self.model.traffic, self.reference)
        ms = sorted(r.pop("ms"))
        return dict(r, ms_median=ms[len(ms) // 2] if len(ms) % 2 else (ms[len(ms) // 2 - 1] + ms[len(ms) // 2]) / 2)


def _compiled(stock):
    """The model's own stock step (or each operator's) under torch.compile(mode="reduce-overhead")."""
    if isinstance(stock, dict):
        return {k: _compiled_step(v) for k, v in stock.items()}
    return _compiled_step(stock)


def _compiled_step(fn):
    """``fn`` compiled with reduce-overhead, each call one step of its CUDA graph trees: the step's outputs live in
    the trees' pool and the next call overwrites them, while a streaming step hands its state to the next call
    (on the H100 the Qwen2 step read an overwritten cache), so they are copied out; the copies are the control's
    cost, as they would be a user's."""
    import torch
    from torch.utils._pytree import tree_map

    compiled = torch.compile(fn, mode="reduce-overhead")

    def step(*args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()
        return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, compiled(*args, **kwargs))

    return step


def _handlers() -> dict:
    return {"block": lambda st, block: st.block()}


def _worker(conn, spec, arm, device, backend, seed, cores) -> None:
    serve(conn, lambda: _ArmState(spec, arm, device, backend, seed, cores), lambda st: dict(arm=arm), _handlers())


def _start(cfg: KitConfig, arm: str, backend: str, cores: tuple):
    args = (cfg.model, arm, cfg.device, backend, cfg.seed, cores)
    if cfg.processes:
        return ArmProcess(arm, _worker, args)
    return InlineArm(arm, lambda: _ArmState(*args), lambda st: dict(arm=arm), _handlers())


def _last_line(tb) -> str:
    """The last line of a worker's traceback (the error itself)."""
    lines = [ln for ln in str(tb).splitlines() if ln.strip()]
    return lines[-1].strip() if lines else str(tb)



def _packages() -> tuple:
    """The model sources loaded in this process, whose versions the provenance records beside torch's (a
    transformers model's version decides its caches and kernels)."""
    import sys

    return tuple(p for p in ("transformers", "minicpmo", "moshi") if p in sys.modules)


def run_study(cfg: KitConfig, progress=print) -> dict:
    """Certify, measure every arm in rounds of fresh processes, analyse; write the files; the summary."""
    from ..adapters.kit import ARMS as SWITCHES
    from ..adapters.kit.usercode import user_code

    out = check_out(cfg, ("kit_factorial*",))  # refused before anything runs (the data folder, earlier results)
    backend = "eager" if str(cfg.device).startswith("cpu") else "cuda"
    method, t0 = cfg.method(), time.perf_counter()
    limit = CERTIFY_BLOCKS * cfg.block_timeout_s  # the stock loop, the runtime, the preflight: a few blocks' work
    with user_code(f"--model {cfg.model} (built and certified, {CERTIFY_BLOCKS} x --block-timeout)", limit):
        model = load_model(cfg.model, cfg.device)
        cert = model.certify(backend)
    progress(f"kit: {model.name} certified: {cert.ok} ({int(cert.table['passed'].sum())} of {len(cert.table)} clauses)")
    failed_clauses = list(cert.table.loc[~cert.table["passed"], "clause"])
    if failed_clauses:  # measured and recorded as uncertified; the run's exit status says so (see _cli)
        progress(cert.table[~cert.table["passed"]].to_string(index=False))
    rows: list[dict] = []
    done: dict = {}

    def keep(tally, a, b, res, overlap):
        rows.append(dict(arm=a, process=tally.round, block=b, warmup=b == 0, **res))

    control_failures: dict = {}

    def failed(tally, a, b, error):  # an arm that fails stops the study (the exit status says so); a control is
        where = f"arm {a} failed to start: " if b is None else f"arm {a}, block {b}: "  # reported, the rest goes on
        if a in CONTROLS:
            control_failures[a] = where + _last_line(error)
            progress(f"kit: control {control_failures[a]}")
            return
        raise RuntimeError(where + _last_line(error))

    def headline(tally):
        blocks = pd.DataFrame(rows)
        samples = arm_processes(blocks[~blocks["warmup"]], "ms_median")
        pt, lo, hi = ratio_interval(samples.get(HEADLINE[0], []), samples.get(HEADLINE[1], []), method.n_boot,
                                    method.seed)
        return interval_halfwidth(pt, lo, hi) if HEADLINE[0] in samples else 0.0

    def finish(tally):
        # the files after every round, whole: a study stopped from outside keeps its finished rounds
        why, blocks = tally.stopped, pd.DataFrame(rows)
        result = analyse(blocks, method)
        summary = dict(result["summary"], model=model.name, certified=cert.ok, reference=cert.reference,
                       failed_clauses=failed_clauses, stop=why, complete=why is not None,
                       rounds=tally.round + 1, arms=list(cfg.arms), catalog_classes=int(len(cert.catalog)),
                       failed_controls=dict(control_failures))
        write_csv(blocks, out / "kit_factorial_blocks.csv")
        write_json(dict(summary=summary, arms=result["arms"], a_a=result["a_a"], method=method.record(),
                        arm_switches={a: dict(SWITCHES["B0"], compile="reduce-overhead") if a in CONTROLS else
                                      SWITCHES["B0" if a == "B0_repeat" else a] for a in cfg.arms},
                        catalog=cert.catalog.assign(label=cert.catalog["label"].map(str)).to_dict("records"),
                        certificate=cert.table.to_dict("records"), blocks_csv="kit_factorial_blocks.csv",
                        provenance=study_provenance(cfg, packages=_packages())), out / "kit_factorial.json")
        done.update(summary=summary, arms=result["arms"], blocks=blocks)
        progress(f"kit: round {tally.round + 1} done ({time.perf_counter() - t0:.0f} s)" + (f"; stop: {why}" if why else ""))

    run_rounds(Rounds(arms=cfg.arms, method=method, blocks=cfg.blocks + 1, timeout_s=cfg.block_timeout_s,
                      first_extra_s={a: cfg.compile_timeout_s for a in CONTROLS},
                      spawn=lambda arms, staging: {a: _start(cfg, a, backend, method.cores) for a in arms},
                      keep=keep, headline=headline, finish=finish, failed=failed), t0)
    return done


def analyse(blocks: pd.DataFrame, method: Method) -> dict:
    """Per arm: the point and 95% interval of ms per call, the change against B0 with its interval, state
    bytes, peak memory, exactness (every call equal to the stock step, every block's hash B0's)."""
    timed = blocks[~blocks["warmup"]]
    samples = arm_processes(timed, "ms_median")
    b0_hashes = set(timed.loc[timed["arm"] == "B0", "sha256"]) if "B0" in set(timed["arm"]) else set()
    arms = []
    order = list(dict.fromkeys(a for a in KIT_ARMS + CONTROLS if a in set(timed["arm"])))
    for a in order:
        g = timed[timed["arm"] == a]
        reps = hierarchical_bootstrap(samples[a], method.n_boot)
        vs = ratio_interval(samples[a], samples["B0"], method.n_boot, method.seed) if "B0" in samples else (float("nan"),) * 3
        exact = bool((g["equal"] == g["calls"]).all() and (not b0_hashes or set(g["sha256"]) <= b0_hashes))
        arms.append(dict(arm=a, processes=int(g["process"].nunique()), blocks=len(g), calls=int(g["calls"].iloc[0]),
                         ms_per_call=point(samples[a]), ms_ci=[float(pd.Series(reps).quantile(0.025)),
                                                               float(pd.Series(reps).quantile(0.975))],
                         vs_B0=vs[0], vs_B0_ci=[vs[1], vs[2]], direction=direction(vs[1], vs[2]),
                         state_bytes=int(g["state_bytes"].max()), peak_mem_bytes=float(g["peak_mem_bytes"].max()),
                         replayed=int(g["replayed"].iloc[-1]), bit_exact=exact, control=a in CONTROLS))
    aa = a_a_check(samples, n=method.n_boot, seed=method.seed)
    by = {r["arm"]: r for r in arms}
    head = by.get(HEADLINE[0], {})
    summary = dict(exact=all(r["bit_exact"] for r in arms if not r["control"]),
                   a_a_holds=None if aa is None else aa["holds"],
                   headline=f"{HEADLINE[0]} vs {HEADLINE[1]}", headline_change=head.get("vs_B0"),
                   headline_ci=head.get("vs_B0_ci"),
                   headline_direction=head.get("direction") if aa is None or aa["holds"] else "no claim (A/A failed)")
    return dict(summary=summary, arms=arms, a_a=aa)


def _cli(args) -> int:
    cfg = config_from_args(KitConfig, args)
    res = run_study(cfg)
    cols = ["arm", "processes", "blocks", "ms_per_call", "vs_B0", "state_bytes", "peak_mem_bytes", "replayed",
            "bit_exact", "control"]
    print(pd.DataFrame(res["arms"])[cols].to_string(index=False))
    print(f"summary: {res['summary']}")
    rc = exit_code("bench kit", non_exact=[r["arm"] for r in res["arms"] if not r["bit_exact"] and not r["control"]])
    if not res["summary"]["certified"]:  # a gate: figures of a model not certified equal to its stock step
        print(f"bench kit: certification failed ({'; '.join(res['summary']['failed_clauses'])}): the figures are "
              f"recorded with certified: false", file=sys.stderr, flush=True)
        return 1
    return rc


def add_parser(sub) -> Any:
    return add_study_parser(sub, "kit", KitConfig, "the paper's factorial (B0, S, R, Rc, SR, SRc) on a declared model",
                            _cli)
