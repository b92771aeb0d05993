"""The device-conditions study: what each kernel-selection pin costs the stock runtime and what it
buys in exactness, measured in one run.

Every candidate condition of :data:`cadencelab.replay.determinism.CONDITIONS` runs the same arms
(``B0``, ``B0_repeat``, ``SRc`` and ``vendor_graph_50`` by default), each arm in its own fresh
process, all of them interleaved block by block in one Token2wav factorial run (same checkpoint,
prompt, token streams and seeds). Within a condition every arm's mel, float32 PCM and int16 PCM
hashes are compared with that condition's B0, so ``B0_repeat`` measures the stock runtime's own
cross-process determinism. A condition is exact when every arm matches its B0 in every timed block.
The exact condition is the least pinning that is exact (fewest pins, then the faster B0); ``chosen`` in the summary
must equal :data:`~cadencelab.replay.determinism.EXACT` (a test checks the recorded file).

Writes ``device_conditions.json`` (summary, per-condition rows, the factorial's per-arm results and
provenance) and ``device_conditions_chunks.csv``; prints a table whose last line is ``summary: {...}``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import pandas as pd

from ..replay.determinism import CONDITIONS, EXACT, split_arm
from . import options
from .common import check_out, write_csv, write_json
from .flags import (MAX_BLOCKS, MAX_CHUNKS, FlagError, add_study_parser, check_names, config_from_args, exit_code,
                    int_range, opt, positive_float)
from .token2wav import StudyConfig, run_study


@dataclass
class ConditionsConfig:
    config: str = options.model_config()
    device: str = options.device()
    conditions: tuple = opt(tuple(CONDITIONS), parse=lambda flag, text: parse_conditions(flag, text),
                            help=f"comma-separated device conditions (must include the exact one, {EXACT})")
    arms: tuple = opt(("B0", "B0_repeat", "SRc", "vendor_graph_50"), parse=lambda flag, text: parse_arms(flag, text),
                      help="comma-separated arms run under every condition (must include B0)")
    blocks: int = opt(2, help="timed blocks (plus one warm-up block)", type=int_range(1, MAX_BLOCKS))
    chunks_per_turn: int = opt(3, flag="--chunks", help="stream calls per turn (two turns per block)",
                               type=int_range(1, MAX_CHUNKS))
    n_timesteps: int = options.steps()
    seed: int = options.seed()
    processes: bool = options.processes("fresh processes per arm (off: the arms run in this process, a CPU smoke)")
    min_processes: int = options.min_processes()  # every arm, every condition: rounds of fresh processes
    cores: str = options.cores()
    block_timeout_s: float = opt(240.0, flag="--block-timeout", type=positive_float,
                                 help="seconds an arm may take for one block")
    out: str = options.out("conditions")
    overwrite: bool = options.overwrite()

    def arm_names(self) -> tuple:
        """Every (arm, condition) pair as a factorial arm: the exact condition's arms keep their plain
        names (the factorial needs its ``B0``), the others are ``ARM@CONDITION``."""
        return tuple(a if c == EXACT else f"{a}@{c}" for c in self.conditions for a in self.arms)


def run_conditions(cfg: ConditionsConfig, progress=print) -> dict:
    """Run the study; write ``device_conditions.json`` and the chunks CSV under ``cfg.out``."""
    if EXACT not in cfg.conditions or "B0" not in cfg.arms:
        raise ValueError(f"the study needs the exact condition ({EXACT}) and the B0 arm: ratios are paired with it")
    unknown = [c for c in cfg.conditions if c not in CONDITIONS]
    if unknown:
        raise ValueError(f"unknown conditions {unknown}; known: {', '.join(CONDITIONS)}")
    out = check_out(cfg, ("device_conditions*",))
    raw = out / "factorial"
    study = StudyConfig(config=cfg.config, device=cfg.device, arms=cfg.arm_names(), condition=EXACT,
                        blocks=cfg.blocks, chunks_per_turn=cfg.chunks_per_turn, n_timesteps=cfg.n_timesteps,
                        seed=cfg.seed, profile=False, processes=cfg.processes, block_timeout_s=cfg.block_timeout_s,
                        min_processes=cfg.min_processes, max_processes=cfg.min_processes, cores=cfg.cores,
                        extend_arms=(), out=str(raw), overwrite=cfg.overwrite)
    res = run_study(study, progress)
    rows = condition_rows(res, cfg)
    summary = summarise(rows)
    result = dict(summary=summary, conditions=rows.to_dict("records"), arms=res["arms"],
                  provenance=dict(res["provenance"], study=dataclasses.asdict(cfg)))
    write_json(result, out / "device_conditions.json", strict_json=True)
    write_csv(res["chunks"], out / "device_conditions_chunks.csv")
    return result


def condition_rows(res: dict, cfg: ConditionsConfig) -> pd.DataFrame:
    """One row per condition: its knobs, B0's steady median and its cost against the fastest B0 of
    the run, and the exact blocks of each arm against the condition's B0."""
    arms = res["arms"]
    rows = []
    for c in cfg.conditions:
        cond = CONDITIONS[c]
        names = {split_arm(a, EXACT)[0]: a for a in cfg.arm_names() if split_arm(a, EXACT)[1] == c}
        b0 = arms.get(names["B0"], {})
        row = dict(condition=c, pins=cond.pins, tf32=cond.tf32, cudnn_deterministic=cond.cudnn_deterministic,
                   cublas_workspace=cond.cublas_workspace, description=cond.description,
                   B0_ms=b0.get("steady_latency_ms_median"), failed=sorted(a for a in names.values() if "failed" in arms.get(a, {})))
        exact = not row["failed"]
        for base, name in names.items():
            if base == "B0":
                continue
            r = arms.get(name, {})
            row[f"{base}_ms"] = r.get("steady_latency_ms_median")
            row[f"{base}_exact_blocks"] = r.get("exact_blocks")
            row[f"{base}_blocks"] = r.get("blocks")
            exact = exact and bool(r.get("exact"))
        row["exact"] = exact
        rows.append(row)
    df = pd.DataFrame(rows)
    fastest = df["B0_ms"].min()
    df["B0_cost_vs_fastest"] = df["B0_ms"] / fastest - 1
    return df


def summarise(rows: pd.DataFrame) -> dict:
    """``chosen``: the least pinning that is exact -- among the exact conditions, the one with the fewest
    pins, ties broken by the faster B0 (None when no condition is exact)."""
    timed = rows[rows["B0_ms"].notna()]
    exact = timed[timed["exact"]]
    chosen = None if exact.empty else str(exact.sort_values(["pins", "B0_ms"]).iloc[0]["condition"])
    fastest = timed.sort_values(["B0_ms", "pins"]).iloc[0] if len(timed) else None
    b0 = timed.set_index("condition")["B0_ms"]
    return dict(chosen=chosen, library_exact=EXACT, chosen_is_library_exact=chosen == EXACT,
                exact_conditions=exact["condition"].tolist(),
                fastest_condition=None if fastest is None else str(fastest["condition"]),
                fastest_condition_is_exact=None if fastest is None else bool(fastest["exact"]),
                B0_ms={c: float(v) for c, v in b0.items()},
                chosen_B0_slower_than_fastest_by=None if chosen is None else float(b0[chosen] / fastest["B0_ms"] - 1))


def table(result: dict) -> str:
    """The short table printed last."""
    lines = []
    for r in result["conditions"]:
        ex = " ".join(f"{k[:-len('_exact_blocks')]} {r[k]}/{r[k[:-len('_exact_blocks')] + '_blocks']}"
                      for k in r if k.endswith("_exact_blocks"))
        b0, cost = (float("nan") if r[k] is None else r[k] for k in ("B0_ms", "B0_cost_vs_fastest"))
        lines.append(f"{r['condition']:>22}  B0 {b0:7.1f} ms ({100 * cost:+5.1f}%)  "
                     f"{'EXACT' if r['exact'] else 'not exact'}  {ex}" + (f"  failed {r['failed']}" if r["failed"] else ""))
    lines.append("summary: " + json.dumps(result["summary"]))
    return "\n".join(lines)


def parse_conditions(flag: str, text: str) -> tuple:
    """``--conditions``: names of ``CONDITIONS``, none twice, the exact one among them."""
    conditions = check_names(flag, text, CONDITIONS)
    if EXACT not in conditions:
        raise FlagError(flag, f"must include the exact condition {EXACT}: ratios are paired with its B0")
    return conditions


def parse_arms(flag: str, text: str) -> tuple:
    """``--arms``: names of ``ARMS``, none twice, B0 among them."""
    from ..adapters.token2wav.runtime import ARMS

    arms = check_names(flag, text, ARMS)
    if "B0" not in arms:
        raise FlagError(flag, "must include B0: each condition's arms are gated on its B0")
    return arms


def _cli(args) -> int:
    cfg = config_from_args(ConditionsConfig, args)
    res = run_conditions(cfg, progress=lambda m: print(m, flush=True))
    print(table(res), flush=True)
    failed = sorted(a for a, r in res["arms"].items() if "failed" in r)
    return exit_code("bench conditions", failed, [] if res["summary"]["chosen"] else ["every condition"])


def add_parser(sub) -> None:
    add_study_parser(sub, "conditions", ConditionsConfig,
                     "device conditions: what each kernel-selection pin costs B0 and buys in exactness", _cli)
