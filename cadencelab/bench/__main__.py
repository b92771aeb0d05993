"""python -m cadencelab.bench STUDY ...: one entry point for every study.

Each study prints progress while it runs, writes its full results under --out (default $OUT/STUDY
or out/STUDY) and prints a short table last; STUDY --help lists its options and their defaults.
Flags are checked before any model is built; a bad value, a failed arm or a failed exactness gate
exits non-zero with one line on stderr (--debug or CADENCELAB_DEBUG=1: the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap

from ..course import studies
from .flags import HelpFormatter, OneLineParser, run_main

#: the study names (``python -m cadencelab.bench NAME``), from the studies table
STUDIES = [s.name for s in studies.STUDIES]


def _writes(s: studies.Study) -> str:
    return f"writes {', '.join(s.results)} under --out"


def build_parser(prog: str = "python -m cadencelab.bench", options_for=None) -> argparse.ArgumentParser:
    """The bench's parser, with the options of the studies named in ``options_for`` (None: every study),
    from their modules (``cadencelab.bench.<module>.add_parser``). The others are listed by name and the
    files they write, their modules not imported: :func:`main` passes only the study on the command line,
    so the bench's own help and a usage error come back before torch is imported."""
    p = OneLineParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    sub = p.add_subparsers(dest="study", required=True, metavar="STUDY")
    for s in studies.STUDIES:
        if options_for is not None and s.name not in options_for:
            sub.add_parser(s.name, add_help=False, help=_writes(s))
            continue
        importlib.import_module(f"cadencelab.bench.{s.module}").add_parser(sub)
        sub.choices[s.name].epilog = textwrap.fill(f"It prints progress while it runs and a short table last, and "
                                                   f"{_writes(s)}.", 100)
    return p


def main(argv=None, prog: str = "python -m cadencelab.bench") -> int:
    """Parse ``argv``, run the study; the exit code (0: every arm ran and passed its gate)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    study = next((a for a in argv if a in STUDIES), None)

    def run(a):
        args = build_parser(prog, [study] if study else []).parse_args(a)
        return args.fn(args)

    return run_main(f"{prog} {study}" if study else prog, run, argv)


if __name__ == "__main__":
    sys.exit(main())
