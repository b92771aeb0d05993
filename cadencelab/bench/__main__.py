"""``python -m cadencelab.bench STUDY ...``: one entry point for every study.

Each study prints progress, writes full results under ``--out`` and prints a short table last.
"""

from __future__ import annotations

import argparse
import os
import sys


def _token2wav(args) -> int:
    from .token2wav import StudyConfig, run_study, table

    cfg = StudyConfig(config=args.config, device=args.device, blocks=args.blocks, chunks_per_turn=args.chunks,
                      n_timesteps=args.steps, seed=args.seed, profile=not args.no_profile,
                      processes=not args.inline, out=args.out, compile_timeout_s=args.compile_timeout)
    if args.arms:
        cfg.arms = tuple(args.arms.split(","))
    elif args.device == "cpu":
        cfg.arms = ("B0", "S", "R", "Rc", "SR", "SRc")
    res = run_study(cfg, progress=lambda m: print(m, flush=True))
    print(table(res), flush=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cadencelab.bench", description=__doc__)
    sub = p.add_subparsers(dest="study", required=True)
    t = sub.add_parser("token2wav", help="the Token2wav factorial (B0, S, R, Rc, SR, SRc + controls)")
    t.add_argument("--config", choices=["real", "teaching"], default="real")
    t.add_argument("--device", default="cuda")
    t.add_argument("--arms", default="", help="comma-separated arms (default: all; CPU: the six factorial arms)")
    t.add_argument("--blocks", type=int, default=8, help="timed blocks (plus one warm-up block)")
    t.add_argument("--chunks", type=int, default=4, help="steady chunks per turn (two turns per block)")
    t.add_argument("--steps", type=int, default=10, help="solver steps (10 or 5)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--no-profile", action="store_true")
    t.add_argument("--inline", action="store_true", help="run arms in this process (CPU smoke)")
    t.add_argument("--compile-timeout", type=float, default=420.0)
    t.add_argument("--out", default=os.path.join(os.environ.get("OUT", "out"), "token2wav"))
    t.set_defaults(fn=_token2wav)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
