"""The host survey: which CPU cores run host-bound work fast and steadily, to choose ``--cores``.

``python -m cadencelab.bench host --device cuda --out DIR [--rounds 5]``

The stock runtime is host-bound, so its latency moves with the core its Python thread runs on. This
study pins itself to one available core at a time and measures there, in ``--rounds`` sweeps spaced
``--pause`` seconds apart, a pure-Python loop and the tiny-op rate on ``--device``
(:func:`cadencelab.bench.measure.core_survey`). It writes ``host_survey.json`` (provenance, the cores
``--cores auto`` would pick, SMT siblings, the per-core table) and ``host_survey.csv`` (one row per
round and core) under ``--out``, and prints the per-core table last, slowest core first.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass

from . import options
from .common import check_out, write_csv, write_json
from .flags import add_study_parser, config_from_args, int_range, opt, positive_float


@dataclass
class HostConfig:
    device: str = options.device()
    rounds: int = opt(5, type=int_range(1, 100), help="sweeps over the cores")
    pause_s: float = opt(1.0, flag="--pause", type=positive_float, help="seconds between sweeps")
    cores: str = opt("all", check=lambda flag, text: None if text.strip().lower() == "all"
                     else options.check_cores(flag, text),
                     help="cores to survey: all (every core this process may run on) or a list such as 0-7")
    out: str = options.out("host")
    overwrite: bool = options.overwrite()


def run_study(cfg: HostConfig, progress=print) -> dict:
    """Survey the cores; write ``host_survey.json`` and ``host_survey.csv``; return the result."""
    from .measure import core_siblings, core_survey, cpu_model, measurement_cores, parse_cores, survey_table
    from ..profile.provenance import run_provenance

    every = cfg.cores.strip().lower() == "all"
    cores = sorted(os.sched_getaffinity(0)) if every else list(parse_cores(cfg.cores))
    if not cores:
        raise ValueError("--cores: no core to survey")
    out = check_out(cfg, ("host_survey*",))
    t0 = time.perf_counter()
    survey = core_survey(cores, rounds=cfg.rounds, device=cfg.device, pause_s=cfg.pause_s, progress=progress)
    per_core = survey_table(survey)
    prov = dict(run_provenance(cfg.device), study=dataclasses.asdict(cfg), wall_s=time.perf_counter() - t0)
    result = dict(provenance=prov,
                  summary=dict(cpu_model=cpu_model(), cores_surveyed=cores, auto_cores=list(measurement_cores()),
                               siblings={str(c): list(s) for c, s in core_siblings(cores).items()},
                               python_loop_ns_range=[float(per_core.python_loop_ns.min()),
                                                     float(per_core.python_loop_ns.max())]),
                  per_core=per_core.to_dict("records"), rows_csv="host_survey.csv")
    write_json(result, out / "host_survey.json")
    write_csv(survey, out / "host_survey.csv")
    return result


def table(result: dict) -> str:
    """The per-core table, slowest median Python loop first, then the cores ``--cores auto`` picks."""
    lines = [f"{'core':>5} {'siblings':>10} {'loop ns':>8} {'spread':>7} {'tiny op us':>11} {'spread':>7}"]
    for r in result["per_core"]:
        lines.append(f"{r['core']:>5} {r['siblings']:>10} {r['python_loop_ns']:8.1f} {r['python_loop_ns_spread']:7.1%} "
                     f"{r['tiny_op_us']:11.2f} {r['tiny_op_us_spread']:7.1%}")
    s = result["summary"]
    lines.append(f"cpu: {s['cpu_model']}; --cores auto picks {s['auto_cores']}")
    return "\n".join(lines)


def _cli(args) -> int:
    cfg = config_from_args(HostConfig, args)
    print(table(run_study(cfg, progress=lambda m: print(m, flush=True))), flush=True)
    return 0


def add_parser(sub) -> None:
    add_study_parser(sub, "host", HostConfig,
                     "which CPU cores run host-bound work fast and steadily (to choose --cores)", _cli)
