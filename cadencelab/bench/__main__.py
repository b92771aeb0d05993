"""``python -m cadencelab.bench STUDY ...``: one entry point for every study.

Each study prints progress, writes full results under ``--out`` (default ``$OUT/<study>``
or ``out/<study>``) and prints a short table last. Studies live in sibling modules that
define ``add_parser(subparsers)``; :data:`cadencelab.course.studies.STUDIES` lists them.

Flags are checked before any model is built; a bad value, a failed arm or a failed exactness
gate exits non-zero with one line on stderr (``--debug`` or ``CADENCELAB_DEBUG=1``: the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ..course import studies
from .flags import OneLineParser, run_main

#: the study names (``python -m cadencelab.bench NAME``), from the studies table
STUDIES = [s.name for s in studies.STUDIES]


def build_parser(prog: str = "python -m cadencelab.bench") -> argparse.ArgumentParser:
    p = OneLineParser(prog=prog, description=__doc__)
    sub = p.add_subparsers(dest="study", required=True)
    for s in studies.STUDIES:
        importlib.import_module(f"cadencelab.bench.{s.module}").add_parser(sub)
    return p


def main(argv=None, prog: str = "python -m cadencelab.bench") -> int:
    """Parse ``argv``, run the study; the exit code (0: every arm ran and passed its gate)."""
    argv = list(sys.argv[1:] if argv is None else argv)

    def run(a):
        args = build_parser(prog).parse_args(a)
        return args.fn(args)

    study = next((a for a in argv if a in STUDIES), None)
    return run_main(f"{prog} {study}" if study else prog, run, argv)


if __name__ == "__main__":
    sys.exit(main())
