"""Config fields several studies share, each a :func:`~cadencelab.bench.flags.opt` field: its default,
help, parser and check written once here (the model config, device, seed, device condition, solver
steps, output folder, the overwrite switch and the process-per-arm switch)."""

from __future__ import annotations

from typing import Any

from ..adapters.token2wav.clocks import T2W_CLOCKS
from ..replay.determinism import CONDITIONS, EXACT
from .common import default_out
from .flags import MAX_SEED, MODEL_CONFIGS, check_device, check_out_dir, check_steps, int_range, opt, positive_float

__all__ = ["MODEL_CONFIGS", "model_config", "device", "seed", "condition", "steps", "out", "overwrite", "processes",
           "min_processes", "max_processes", "time_budget", "target_halfwidth", "cores"]

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


def overwrite() -> Any:
    return opt(False, help="replace result files an earlier run left in the output folder (never in the recorded "
                           "data folder)")


def processes(help: str = "one fresh process per arm", **option: Any) -> Any:
    return opt(True, help=help, off="--inline", **option)


# ---------------------------------------------------------------------------------------
# the measurement method (cadencelab.bench.measure): processes per arm, budget, pinned cores
# ---------------------------------------------------------------------------------------


def check_cores(flag: str, text: str) -> None:
    from .flags import FlagError
    from .measure import parse_cores

    try:
        parse_cores(text)
    except ValueError as e:
        raise FlagError(flag, str(e)) from None


def min_processes() -> Any:
    return opt(3, help="fresh processes per arm, at least (each one sample; intervals resample them)",
               type=int_range(1, 1000))


def max_processes() -> Any:
    return opt(12, help="fresh processes per arm, at most (rounds stop earlier once the headline's interval "
                        "is within --target-halfwidth, or the time budget ends)", type=int_range(1, 1000))


def time_budget(default: float) -> Any:
    return opt(default, flag="--time-budget", type=positive_float,
               help="seconds from the study's start after which no new round of processes starts")


def target_halfwidth() -> Any:
    return opt(0.05, type=positive_float,
               help="stop adding processes once the headline ratio's 95%% interval is within this fraction of its point")


def cores() -> Any:
    return opt("auto", check=check_cores,
               help="CPU cores every arm process pins to before timing: auto (a fixed set of up to 4), none, or "
                    "a list such as 1-4")
