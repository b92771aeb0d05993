"""Command-line values checked at the boundary, before any model is built.

Every check names the flag the user typed (``--steps``, ``--out``, ...) and what it accepts;
:func:`run_main` turns a :class:`FlagError` (or any other error) into one line on stderr and a
non-zero exit code, with the traceback only under ``--debug`` or ``CADENCELAB_DEBUG=1``.
The bounds below are the workbench's own limits (what fits in memory and time on one device),
named once here and used by the CLI and every study.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable


#: environment variable that turns the one-line error back into a traceback
DEBUG_ENV = "CADENCELAB_DEBUG"
#: largest seed the studies take: every derived seed (``1_000_003 * (seed + 1) + ...``) stays in torch's 64-bit range
MAX_SEED = 2**32 - 1
#: stream calls a turn (or a soak) may ask for: ~28 h of audio; the token plan is held in memory
MAX_CHUNKS = 100_000
#: stream calls ``cadencelab profile`` may trace: every kernel of every call is held in memory
MAX_PROFILE_CHUNKS = 1_000
#: timed blocks (each a full pass over every arm)
MAX_BLOCKS = 10_000
#: the Token2wav model configs a command can build (cadencelab.adapters.token2wav REAL / TEACHING)
MODEL_CONFIGS = ("real", "teaching")
#: environment the command line sets for third-party libraries unless the user set it: their own log lines
#: stay out of the terminal (kineto, torch.profiler's tracer, prints a ``USDT: ... profiler_start`` /
#: ``profiler_stop`` pair on every trace at its default level; above its highest level, 5, it prints nothing)
QUIET_ENV = {"KINETO_LOG_LEVEL": "6"}

__all__ = ["DEBUG_ENV", "MAX_SEED", "MAX_CHUNKS", "MAX_PROFILE_CHUNKS", "MAX_BLOCKS", "MODEL_CONFIGS", "QUIET_ENV",
           "FlagError", "OneLineParser", "HelpFormatter", "int_range", "positive_float", "check_device",
           "check_out_dir", "check_out_file", "check_names", "check_steps", "failed_line", "run_main",
           "debug_requested", "NOT_SET", "Option", "opt", "names_in", "ints_in", "check_devices", "option_flag",
           "add_study_parser", "config_from_args", "given"]


class FlagError(ValueError):
    """A command-line value that cannot be used; the message starts with the flag as typed."""

    def __init__(self, flag: str, reason: str):
        self.flag, self.reason = flag, reason
        super().__init__(f"{flag}: {reason}")


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (``prog: error: ...``), exit code 2."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help as the command line prints it: a description keeps its line breaks, and every option's help
    ends with its default (``default: X``; a switch's is ``off``) unless the help already names it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if not action.option_strings or default in (None, argparse.SUPPRESS) or "default" in text:
            return text
        if action.nargs == 0 and isinstance(default, bool):  # store_true / store_false: the switch not given
            return f"{text} (default: off)"
        return f"{text} (default: %(default)s)"


def int_range(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for integers in ``[lo, hi]`` (``hi=None``: no upper bound)."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text[:40]!r}") from None
        if v < lo or (hi is not None and v > hi):
            want = f">= {lo}" if hi is None else f"in {lo}..{hi}"
            raise argparse.ArgumentTypeError(f"must be an integer {want}, got {v}")
        return v

    parse.__name__ = "int"
    return parse


def _finite(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text[:40]!r}")
    return v


def positive_float(text: str) -> float:
    """An argparse ``type`` for finite numbers > 0 (timeouts, budgets)."""
    v = _finite(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text[:40]!r}")
    return v


def nonnegative_float(text: str) -> float:
    """An argparse ``type`` for finite numbers >= 0 (fractions, margins)."""
    v = _finite(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text[:40]!r}")
    return v


nonnegative_float.__name__ = "float"


positive_float.__name__ = "float"


def check_steps(flag: str, steps: int) -> int:
    """Solver steps the vendor solver can hold: 1 .. its fixed cache slots (the stock envelope)."""
    from ..adapters.token2wav.envelopes import STOCK_ENVELOPE

    if not 1 <= steps <= STOCK_ENVELOPE.n_slots:
        raise FlagError(flag, f"must be in 1..{STOCK_ENVELOPE.n_slots} (the solver's cache slots), got {steps}")
    return steps


def check_device(flag: str, text: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N`` that this torch build and machine can use."""
    from ..state.alloc import device_problem

    why = device_problem(text)
    if why:
        raise FlagError(flag, why)
    return text


def _writable_dir(flag: str, path: Path) -> None:
    """``path`` is a folder, or can become one: its nearest existing ancestor is a writable folder."""
    if path.exists() and not path.is_dir():
        raise FlagError(flag, f"{str(path)!r} exists and is not a folder")
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise FlagError(flag, f"{str(path)!r} cannot be made: {str(probe)!r} is a file")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise FlagError(flag, f"{str(path)!r} cannot be written: no write permission on {str(probe)!r}")


def _guarded(flag: str, text: str, **kw: Any) -> None:
    """:func:`~cadencelab.profile.outputs.guard_output` as a :class:`FlagError` (never the recorded data folder)."""
    from ..profile.outputs import OutputRefused, guard_output  # when a value is checked: help stays light

    try:
        guard_output(text, flag, **kw)
    except OutputRefused as e:
        raise FlagError(flag, e.reason) from None


def check_out_dir(flag: str, text: str) -> str:
    """An output folder that exists or can be made, and can be written, outside the recorded data folder."""
    _guarded(flag, text)
    _writable_dir(flag, Path(text))
    return text


def check_out_file(flag: str, text: str, overwrite: bool = False) -> str:
    """An output file path outside the recorded data folder, not a folder, whose folder exists or can
    be made, and which does not exist yet unless ``overwrite``."""
    p = Path(text or "")
    if text and p.is_dir():
        raise FlagError(flag, f"{text!r} is a folder (expected a file name)")
    _guarded(flag, text, file=True, overwrite=overwrite)
    _writable_dir(flag, p.parent if str(p.parent) else Path("."))
    if p.exists() and not os.access(p, os.W_OK):
        raise FlagError(flag, f"{text!r} cannot be written: no write permission")
    return text


def check_names(flag: str, text: str, known: Iterable[str], allow_empty: bool = False) -> tuple[str, ...]:
    """Comma-separated names, each one of ``known``, none twice."""
    known = list(known)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names and not allow_empty:
        raise FlagError(flag, f"no names given (choose from {', '.join(known)})")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise FlagError(flag, f"unknown {', '.join(repr(n[:40]) for n in unknown[:5])} (choose from {', '.join(known)})")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise FlagError(flag, f"{', '.join(dup)} given twice")
    return tuple(names)


def failed_line(prog: str, failures: Iterable[str] = (), non_exact: Iterable[str] = ()) -> str | None:
    """The one line that says why a study's exit code is non-zero (None: nothing failed)."""
    failures, non_exact = sorted(failures), sorted(non_exact)
    parts = []
    if failures:
        parts.append(f"arm(s) failed: {', '.join(failures)}")
    if non_exact:
        parts.append(f"exactness gate failed for: {', '.join(non_exact)}")
    return f"{prog}: " + "; ".join(parts) if parts else None


def exit_code(prog: str, failures: Iterable[str] = (), non_exact: Iterable[str] = ()) -> int:
    """The one tail of every study's command: 0 when nothing failed, else the :func:`failed_line` on stderr
    and 1 (a bad value exits 2 before the study runs, through :func:`run_main`)."""
    line = failed_line(prog, failures, non_exact)
    if line is None:
        return 0
    print(line, file=sys.stderr, flush=True)
    return 1


def debug_requested(argv: list[str]) -> tuple[bool, list[str]]:
    """``--debug`` anywhere in ``argv`` (removed) or ``CADENCELAB_DEBUG`` set to a true value."""
    flag = "--debug" in argv
    env = os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")
    return flag or env, [a for a in argv if a != "--debug"]


def run_main(prog: str, fn: Callable[[list[str]], int], argv: list[str]) -> int:
    """Call ``fn(argv)``; a :class:`FlagError` or any other error becomes one line on stderr and
    exit code 2 (bad value) or 1 (failure); Ctrl-C exits 130. ``--debug`` / ``CADENCELAB_DEBUG=1``
    re-raises instead, with the traceback."""
    debug, argv = debug_requested(argv)
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    with sigterm_as_interrupt():
        return _run(prog, fn, argv, debug)


@contextlib.contextmanager
def sigterm_as_interrupt():
    """SIGTERM inside raises KeyboardInterrupt (in the main thread): a run stopped from outside ends as Ctrl-C
    ends it, its ``finally`` blocks run (arm processes stopped, files whole) and it exits 130 in one line."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt("SIGTERM")

    try:
        old = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _run(prog: str, fn: Callable[[list[str]], int], argv: list[str], debug: bool) -> int:
    try:
        return int(fn(argv) or 0)
    except SystemExit as e:  # argparse usage errors and --help; a message string is printed once
        if isinstance(e.code, str):
            print(e.code if e.code.startswith(prog) else f"{prog}: error: {e.code}", file=sys.stderr)
            return 2
        return 0 if e.code is None else int(e.code)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a refused value is one line and exit 2, like a FlagError
        if not (isinstance(e, FlagError) or _refused_output(e)):
            return _failed(prog, e, debug)
        if debug:
            raise
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2


def _refused_output(e: BaseException) -> bool:
    """Whether ``e`` is the output guard's refusal (its module is loaded whenever it raised one)."""
    outputs = sys.modules.get("cadencelab.profile.outputs")
    return outputs is not None and isinstance(e, outputs.OutputRefused)


def _raised_at(tb):
    """The innermost frame of ``tb`` outside torch and Python's own library (where the user's, or this
    package's, code raised or called into them); None without a traceback."""
    frames = traceback.extract_tb(tb) if tb is not None else []
    lib = [str(Path(os.__file__).parent)] + [str(Path(m.__file__).parent) for m in (sys.modules.get("torch"),)
                                             if m is not None and getattr(m, "__file__", None)]
    mine = [f for f in frames if not f.filename.startswith(tuple(lib))]
    return (mine or frames or [None])[-1]


def _failed(prog: str, e: Exception, debug: bool) -> int:
    """Any other error at the boundary: one line, exit 1; the traceback on request (re-raised)."""
    if debug:
        raise e
    text = " ".join(" ".join(str(t).split()) for t in (e, *getattr(e, "__notes__", ())) if str(t).strip())  # in full
    where = _raised_at(e.__traceback__)
    at = f" [{Path(where.filename).name}:{where.lineno}]" if where else ""
    print(f"{prog}: error: {type(e).__name__}: {text}{at} (--debug or {DEBUG_ENV}=1 for the traceback)",
          file=sys.stderr)
    return 1


# ---------------------------------------------------------------------------------------
# study options: a config dataclass is the one place a study's defaults live
# ---------------------------------------------------------------------------------------

#: ``Option.on_cpu`` when a field keeps its default on every device
NOT_SET = object()


@dataclasses.dataclass(frozen=True)
class Option:
    """How one field of a study's config dataclass appears on the command line.

    ``flag``: the flag (default ``--`` + the field name with dashes); ``type``: the argparse
    ``type`` of a scalar (``int_range(...)``, ``positive_float``); ``choices``: the accepted words;
    ``parse``: ``(flag, text) -> tuple`` for a tuple field given as a comma list (default: the
    names, stripped); ``check``: ``(flag, value)``, raising :class:`FlagError`, run on the final
    value, given or default, before anything is built; ``off``: a second switch that turns a bool
    field off (``--inline`` for ``processes``); ``on_cpu``: the value a field takes when
    ``--device`` is a CPU and the flag is not given.
    """

    help: str
    flag: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple | None = None
    parse: Callable[[str, str], tuple] | None = None
    check: Callable[[str, Any], Any] | None = None
    off: str | None = None
    on_cpu: Any = NOT_SET


def opt(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, help: str,
        **option: Any) -> Any:
    """A config field that is also a command-line option: ``blocks: int = opt(8, help=..., type=...)``."""
    if "choices" in option:
        option["choices"] = tuple(option["choices"])
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={"cli": Option(help=help, **option)})


def names_in(known: Iterable[str] | Callable[[], Iterable[str]], allow_empty: bool = False):
    """An ``Option.parse`` for comma-separated names, each one of ``known`` (a callable is asked
    when a value is parsed, so a heavy import waits until the flag is used)."""

    def parse(flag: str, text: str) -> tuple[str, ...]:
        return check_names(flag, text, known() if callable(known) else known, allow_empty)

    return parse


def ints_in(lo: int, hi: int) -> Callable[[str, str], tuple[int, ...]]:
    """An ``Option.parse`` for comma-separated integers, each in ``[lo, hi]``."""

    def parse(flag: str, text: str) -> tuple[int, ...]:
        try:
            vals = tuple(int(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise FlagError(flag, f"expected comma-separated integers, got {text[:60]!r}") from None
        if not vals or not all(lo <= v <= hi for v in vals):
            raise FlagError(flag, f"expected integers in {lo}..{hi}, got {text[:60]!r}")
        return vals

    return parse


def check_devices(flag: str, devices: Iterable[str]) -> None:
    """An ``Option.check`` for a tuple of devices, each checked by :func:`check_device`."""
    for d in devices:
        check_device(flag, d)


def _option(f: dataclasses.Field) -> Option | None:
    return f.metadata.get("cli")


def option_flag(f: dataclasses.Field) -> str:
    """The flag of config field ``f``."""
    o = _option(f)
    return (o.flag if o and o.flag else None) or "--" + f.name.replace("_", "-")


def _kind(f: dataclasses.Field) -> str:
    """``bool``, ``tuple`` or ``scalar``, from the field's annotation (a string under postponed annotations)."""
    name = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return "bool" if name == "bool" else "tuple" if name.startswith("tuple") else "scalar"


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "none"
    return str(value)


def _help(f: dataclasses.Field) -> str:
    o, d = _option(f), _default(f)
    note = [] if d is None else [f"default: {_shown(d)}"]
    if o.on_cpu is not NOT_SET:
        note.append(f"on a CPU: {_shown(o.on_cpu)}")
    return f"{o.help} ({'; '.join(note)})" if note else o.help


def add_study_parser(sub, name: str, config: type, help: str, fn: Callable) -> argparse.ArgumentParser:
    """The subparser of study ``name``, generated from its config dataclass: one option per field
    made with :func:`opt` (bool fields become ``--x`` / ``--no-x``; tuple fields take comma lists;
    the help shows the dataclass default). Options left out keep the default: every flag's value
    is None in the namespace unless given (see :func:`config_from_args`)."""
    t = sub.add_parser(name, help=help, description=help, formatter_class=HelpFormatter)
    for f in dataclasses.fields(config):
        o = _option(f)
        if o is None:
            continue
        flag, kind = option_flag(f), _kind(f)
        if kind == "bool":
            t.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=_help(f))
            if o.off:
                t.add_argument(o.off, dest=f.name, action="store_false", default=None,
                               help=f"the same as --no-{flag.removeprefix('--')}")
        elif kind == "tuple":
            t.add_argument(flag, dest=f.name, default=None, metavar="A,B,...", help=_help(f))
        else:
            t.add_argument(flag, dest=f.name, default=None, type=o.type, choices=o.choices, help=_help(f),
                           metavar=None if o.choices else flag.removeprefix("--").replace("-", "_").upper())
    t.set_defaults(fn=fn, study_config=config)
    return t


def given(args: argparse.Namespace, name: str) -> bool:
    """Whether the option of config field ``name`` was typed on the command line."""
    return getattr(args, name, None) is not None


def config_from_args(config: type, args: argparse.Namespace, checks: bool = True, **fixed: Any):
    """The study config the command line asks for: the dataclass defaults, the ``on_cpu`` values
    on a CPU, the options given (tuple fields parsed from their comma lists) and ``fixed``; every
    ``check`` then runs on its field's final value (``checks=False``: none, e.g. to read a command
    meant for another machine). A bad value raises :class:`FlagError` naming the flag, before
    anything is built."""
    fields = [f for f in dataclasses.fields(config) if _option(f) is not None]
    values: dict[str, Any] = {}
    for f in fields:
        v = getattr(args, f.name, None)
        if v is None:
            continue
        o = _option(f)
        if _kind(f) == "tuple" and isinstance(v, str):
            v = o.parse(option_flag(f), v) if o.parse else tuple(n.strip() for n in v.split(",") if n.strip())
        values[f.name] = v
    values.update(fixed)
    device = values.get("device", next((_default(f) for f in fields if f.name == "device"), ""))
    if str(device).startswith("cpu"):
        for f in fields:
            if f.name not in values and _option(f).on_cpu is not NOT_SET:
                values[f.name] = _option(f).on_cpu
    for f in fields if checks else ():
        if _option(f).check is not None:
            _option(f).check(option_flag(f), values.get(f.name, _default(f)))
    return config(**values)
