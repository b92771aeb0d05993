"""``python -m cadencelab.bench STUDY ...``: one entry point for every study.

Each study prints progress, writes full results under ``--out`` (default ``$OUT/<study>``
or ``out/<study>``) and prints a short table last. Studies live in sibling modules that
define ``add_parser(subparsers)``; :data:`STUDIES` lists them.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: study modules (``cadencelab.bench.<name>``), each with ``add_parser(subparsers)``
STUDIES = ["token2wav", "conditions", "duplex", "soak", "crossarch", "sessions"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cadencelab.bench", description=__doc__)
    sub = p.add_subparsers(dest="study", required=True)
    for name in STUDIES:
        importlib.import_module(f"cadencelab.bench.{name}").add_parser(sub)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
