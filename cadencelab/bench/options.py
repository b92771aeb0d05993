"""Config fields several studies share, each a :func:`~cadencelab.bench.flags.opt` field: its default,
help, parser and check written once here (the model config, device, seed, device condition, solver
steps, output folder and the process-per-arm switch)."""

from __future__ import annotations

from typing import Any

from ..contract import T2W_CLOCKS
from ..replay.determinism import CONDITIONS, EXACT
from .common import default_out
from .flags import MAX_SEED, MODEL_CONFIGS, check_device, check_out_dir, check_steps, int_range, opt

__all__ = ["MODEL_CONFIGS", "model_config", "device", "seed", "condition", "steps", "out", "processes"]

def model_config() -> Any:
    return opt(MODEL_CONFIGS[0], help="Token2wav model sizes: real (the released model) or teaching (small, CPU)",
               flag="--config", choices=MODEL_CONFIGS)


def device() -> Any:
    return opt("cuda", help="torch device: cpu, cuda or cuda:N", check=check_device)


def seed() -> Any:
    return opt(0, help="seed of the weights, prompts and token streams", type=int_range(0, MAX_SEED))


def condition(what: str = "every arm") -> Any:
    return opt(EXACT, help=f"device condition of {what}; {EXACT} is the exact one (cadencelab.replay.determinism)",
               choices=tuple(CONDITIONS))


def steps() -> Any:
    return opt(T2W_CLOCKS.n_steps, flag="--steps", help="solver steps (1 .. the solver's cache slots)", type=int,
               check=check_steps)


def out(study: str) -> Any:
    return opt(default_factory=lambda: default_out(study), help="output folder", check=check_out_dir)


def processes(help: str = "one fresh process per arm", **option: Any) -> Any:
    return opt(True, help=help, off="--inline", **option)
