"""Cross-architecture study: Moshi's Mimi (three arms) and a Freeze-Omni-*style* decoder (three paths).

``python -m cadencelab.bench crossarch --device cuda --out DIR [--models mimi,freeze] [--frames 100 --blocks 3]``

One module per model: :mod:`cadencelab.bench.moshi_mimi` (arms ``eager``, ``vendor_graph`` and
``replay``, gated on bitwise equality with ``eager``) and :mod:`cadencelab.bench.freeze_style` (paths
``overlap_recompute``, ``carry``, ``carry_replay`` and the eager ``full_history`` reference). This
module holds their shared config, runs the models asked for and is the command line.

Writes ``moshi_mimi.json`` and ``freeze_style.json`` (summary, per-arm/path statistics, blocks,
provenance) and per-frame / per-chunk CSVs under ``--out``; prints a short table last.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


from . import options
from .common import check_out, json_default, write_csv, write_json
from .flags import (MAX_BLOCKS, MAX_CHUNKS, add_study_parser, config_from_args, exit_code, int_range, names_in, opt,
                    positive_float)
from .freeze_style import FREEZE_GATED, run_freeze
from .moshi_mimi import MIMI_ARMS, run_mimi

#: the models of the study, each a module of its own
MODELS = ("mimi", "freeze")
#: per model: its runner, its rows' key and the stem of its files
_MODELS = (("mimi", run_mimi, "frames", "moshi_mimi"), ("freeze", run_freeze, "chunks", "freeze_style"))


@dataclass
class CrossArchConfig:
    device: str = options.device()
    models: tuple = opt(MODELS, parse=names_in(MODELS), help="comma-separated models: mimi, freeze")
    frames: int = opt(100, type=int_range(1, MAX_CHUNKS), help="Mimi frames (80 ms each) per block")
    blocks: int = opt(3, type=int_range(1, MAX_BLOCKS), help="timed blocks (plus one warm-up block)")
    arms: tuple = opt(MIMI_ARMS, parse=names_in(MIMI_ARMS), help="comma-separated Mimi arms")
    freeze_tokens: int = opt(407, type=int_range(1, MAX_CHUNKS),
                             help="tokens per Freeze-style turn (20-token chunks: 20 full chunks + a 7-token flush)")
    seed: int = options.seed()
    processes: bool = options.processes("one fresh process per Mimi arm (off: the arms run in this process)",
                                        on_cpu=False)
    block_timeout_s: float = opt(120.0, flag="--block-timeout", type=positive_float,
                                 help="seconds a Mimi arm may take for one block")
    setup_timeout_s: float = 180.0
    condition: str = options.condition()
    out: str = options.out("crossarch")
    overwrite: bool = options.overwrite()


# ---------------------------------------------------------------------------------------
# the study
# ---------------------------------------------------------------------------------------


def run_study(cfg: CrossArchConfig, progress=print) -> dict:
    """Run the selected models; write their JSON and CSV files; return {model: result}."""
    models = [m for m in _MODELS if m[0] in cfg.models]
    out = check_out(cfg, tuple(f"{stem}*" for *_, stem in models))
    results = {}
    for model, run, rows, stem in models:
        r = run(cfg, progress)
        csv = f"{stem}_{rows}.csv"  # the JSON names its rows' CSV beside it
        write_json({k: v for k, v in r.items() if k != rows} | {f"{rows}_csv": csv}, out / f"{stem}.json",
                   strict_json=False)
        write_csv(r[rows], out / csv)
        results[model] = r
    return results


def table(results: dict) -> str:
    """The short table printed last."""
    nan = float("nan")
    lines = []
    if "mimi" in results:
        lines.append("Mimi (moshi 0.2.13, seeded random weights): per-frame encode+decode")
        for a, r in results["mimi"]["arms"].items():
            if "failed" in r and not r.get("blocks"):
                lines.append(f"  {a:>14}  FAILED: {str(r['failed']).strip().splitlines()[-1][:90]}")
                continue
            lines.append(f"  {a:>14}  lat {r['latency_ms_median']:8.3f} ms  speedup {r.get('speedup_vs_eager') or nan:5.2f}x  "
                         f"peak {r.get('peak_MiB_median') or nan:8.1f} MiB  exact {r['exact_blocks']}/{r['blocks']}  "
                         f"vendor graphs {r['vendor_graphs_captured']}")
    if "freeze" in results:
        lines.append("Freeze-Omni-style decoder (not Freeze-Omni): per 20-token chunk")
        for p, r in results["freeze"]["paths"].items():
            lines.append(f"  {p:>17}  steady {r['steady_latency_ms_median']:8.3f} ms  peak {r.get('peak_MiB_median') or nan:8.1f} MiB  "
                         f"state {r['state_bytes']} B  exact {r['exact_blocks']}/{r['blocks']}  max|d| {r['max_abs_diff']:.3g}")
    summary = {m: r["summary"] for m, r in results.items()}
    lines.append("summary: " + json.dumps(summary, default=json_default, separators=(",", ":")))
    return "\n".join(lines)


def _cli(args) -> int:
    cfg = config_from_args(CrossArchConfig, args)
    res = run_study(cfg, progress=lambda m: print(m, flush=True))
    print(table(res), flush=True)
    mimi = res.get("mimi", {}).get("summary", {})
    freeze = [f"freeze:{p}" for p, r in res.get("freeze", {}).get("paths", {}).items()
              if p in FREEZE_GATED and not r.get("exact")]
    return exit_code("bench crossarch", mimi.get("failed_arms", ()), [*mimi.get("non_exact_arms", ()), *freeze])


def add_parser(sub) -> None:
    add_study_parser(sub, "crossarch", CrossArchConfig,
                     "Moshi's Mimi (eager / vendor graphs / generic replay) and a Freeze-Omni-style decoder", _cli)
