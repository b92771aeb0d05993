"""Pieces every study shares: study provenance (on :mod:`cadencelab.profile.provenance`), the seeded
checkpoint, the arm processes, the token plan's constants, and JSON that numpy can't break."""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import shutil
import signal
import tempfile
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..adapters.token2wav.clocks import T2W_CLOCKS
from ..profile.outputs import atomic_path, claim_folder, guard_output, write_atomic
from ..profile.provenance import run_provenance

#: a Token2wav stream call (from the clocks): a chunk plus its lookahead, the chunk dropped after each steady call
CALL_TOKENS, STRIDE_TOKENS, LOOKAHEAD = T2W_CLOCKS.call_tokens, T2W_CLOCKS.tokens_per_chunk, T2W_CLOCKS.lookahead_tokens


def default_out(study: str) -> str:
    """Where a study writes by default: ``$OUT/<study>``, or ``out/<study>`` without ``OUT``."""
    return os.path.join(os.environ.get("OUT", "out"), study)


def study_provenance(cfg, packages: tuple = (), extra: dict | None = None) -> dict:
    """:func:`run_provenance` on ``cfg.device`` with the versions of ``packages``, the study's
    config (``config``), its device condition (``determinism``) and ``extra`` on top."""
    import dataclasses

    out = dict(**run_provenance(cfg.device, packages=packages), config=dataclasses.asdict(cfg),
               determinism=dict(condition=cfg.condition))
    out.update(extra or {})
    return out


@contextmanager
def built_checkpoint(config, seed: int, progress: Callable[[str], None] | None = None,
                     prefix: str = "cadencelab-weights-"):
    """The seeded random Token2wav weights of ``config`` (``"real"``, ``"teaching"`` or a
    ``Token2wavConfig``), built once and saved as a checkpoint in a temporary folder: yields
    the folder, deletes it afterwards."""
    from ..adapters.token2wav import REAL, TEACHING, build_token2wav, save_checkpoint

    mcfg = {"real": REAL, "teaching": TEACHING}[config] if isinstance(config, str) else config
    t0 = time.perf_counter()
    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        flow, hift = build_token2wav(mcfg, seed)
        save_checkpoint(folder, flow, hift, mcfg)
        del flow, hift
        if progress is not None:
            progress(f"weights built and saved ({mcfg.name}) in {time.perf_counter() - t0:.1f} s")
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def set_up_device(device: str, condition: str | None = None):
    """An arm process's device: the device condition applied (:func:`~cadencelab.replay.determinism.
    apply_condition`; None: the exact condition) before its first CUDA call, and a CUDA device made
    current with its index resolved (events, graphs and the allocator statistics follow the current
    device). Returns (torch.device, the applied condition for provenance)."""
    import torch

    from ..replay.determinism import apply_condition

    applied = apply_condition(condition)
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {device!r}: this torch build sees no CUDA device")
        dev = torch.device("cuda", dev.index if dev.index is not None else torch.cuda.current_device())
        torch.cuda.set_device(dev)
    return dev, applied


def serve(conn, build: Callable[..., Any], ready: Callable[[Any], dict], handlers: dict[str, Callable],
          prepare: Callable[[], Any] | None = None) -> None:
    """A study's arm process: ``build()`` the arm, answer ``("ready", ready(arm))``, then serve
    requests ``(kind, *args)`` with ``handlers[kind](arm, *args)`` -> ``("ok", result)`` until
    ``("stop",)``. Any exception is answered ``("error", traceback)``; a failed build ends the process.

    With ``prepare`` the set-up comes in two steps: ``prepare()`` (work that may overlap other
    processes' timed blocks: no device work) answers ``("staged", {"stage_s": seconds})``, then the
    process waits for ``("go",)`` and calls ``build(prepared)``; ``("stop",)`` instead ends it.

    Ctrl-C is the parent's to handle (it stops its arms): the worker ignores SIGINT, and a parent that is
    gone (killed, or stopped by SIGTERM) ends the worker quietly, without a traceback per arm process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _serve(conn, build, ready, handlers, prepare)
    except (EOFError, BrokenPipeError, ConnectionResetError):  # the parent is gone: nothing to answer
        return


def _serve(conn, build, ready, handlers, prepare) -> None:
    try:
        if prepare is None:
            arm = build()
        else:
            t0 = time.perf_counter()
            prepared = prepare()
            conn.send(("staged", dict(stage_s=time.perf_counter() - t0)))
            if conn.recv()[0] != "go":
                return
            arm = build(prepared)
        conn.send(("ready", ready(arm)))
    except (Exception, SystemExit):  # a user's code that exits is an error of the arm, answered as one
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            break
        try:
            handler = handlers.get(msg[0])
            if handler is None:
                raise ValueError(f"unknown request {msg[0]!r} (known: {sorted(handlers)})")
            conn.send(("ok", handler(arm, *msg[1:])))
        except (Exception, SystemExit):
            conn.send(("error", traceback.format_exc()))


class ArmProcess:
    """One arm in a fresh spawned process (its worker calls :func:`serve`), asked over a pipe.

    ``ask(msg, timeout)`` sends a request and waits; a timeout or a dead worker kills the process
    and every later answer is ``("error", why)``.
    """

    def __init__(self, arm: str, target: Callable, args: tuple):
        ctx = mp.get_context("spawn")
        self.arm, self.dead = arm, None
        self.conn, child = ctx.Pipe()
        self.p = ctx.Process(target=target, args=(child, *args), daemon=True)
        self.p.start()

    def ask(self, msg: tuple, timeout: float):
        if self.dead:
            return ("error", self.dead)
        self.conn.send(msg)
        return self.wait(timeout)

    def poll(self) -> tuple | None:
        """The worker's next message if one is waiting (None if not, or if the worker is gone)."""
        if self.dead:
            return None
        try:
            return self.conn.recv() if self.conn.poll(0) else None
        except EOFError:
            self.kill("the worker process died")
            return None

    def go(self) -> None:
        """Tell a staged worker (:func:`serve` with ``prepare``) to finish its set-up."""
        if not self.dead:
            self.conn.send(("go",))

    def wait(self, timeout: float):
        if self.dead:
            return ("error", self.dead)
        if not self.conn.poll(timeout):
            self.kill(f"no answer within {timeout:.0f} s")
            return ("error", self.dead)
        try:
            return self.conn.recv()
        except EOFError:
            self.kill("the worker process died")
            return ("error", self.dead)

    def kill(self, why: str) -> None:
        self.dead = why
        if self.p.is_alive():
            self.p.kill()

    def request_stop(self) -> None:
        if not self.dead and self.p.is_alive():
            try:
                self.conn.send(("stop",))
            except Exception:
                pass
        self.dead = self.dead or "stopped"

    def stop(self, join_s: float = 10.0) -> None:
        self.request_stop()
        self.p.join(timeout=join_s)
        if self.p.is_alive():
            self.p.kill()


class InlineArm:
    """:class:`ArmProcess`'s interface in this process (CPU smoke runs, tests): the same ``build``,
    ``ready`` and ``handlers`` as :func:`serve`, called directly. ``close(arm)``, if given, runs at
    :meth:`stop`."""

    def __init__(self, arm: str, build: Callable[[], Any], ready: Callable[[Any], dict],
                 handlers: dict[str, Callable], close: Callable[[Any], None] | None = None):
        self.arm, self.dead, self.handlers, self.close = arm, None, handlers, close
        self.obj = None
        try:
            self.obj = build()
            self._ready = ("ready", ready(self.obj))
        except (Exception, SystemExit):
            self._ready = ("error", traceback.format_exc())

    def wait(self, timeout: float):
        return self._ready

    def ask(self, msg: tuple, timeout: float):
        from ..adapters.kit.usercode import user_code  # the timeout an arm process has, in this process

        try:
            if self.obj is None:
                raise RuntimeError(f"arm {self.arm} failed to start")
            handler = self.handlers.get(msg[0])
            if handler is None:
                raise ValueError(f"unknown request {msg[0]!r} (known: {sorted(self.handlers)})")
            with user_code(f"arm {self.arm}, request {msg[0]!r}", timeout):
                return ("ok", handler(self.obj, *msg[1:]))
        except Exception:
            return ("error", traceback.format_exc())

    def request_stop(self) -> None:
        pass

    def stop(self) -> None:
        if self.close is not None and self.obj is not None:
            self.close(self.obj)


def strict(o):
    """``o`` with every float NaN or infinity (also numpy's) replaced by None, recursively through
    dicts, lists and tuples: what :func:`write_json` writes as ``null``."""
    if isinstance(o, (float, np.floating)):
        return None if not math.isfinite(o) else o
    if isinstance(o, dict):
        return {k: strict(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [strict(v) for v in o]
    return o


def write_json(obj, path, strict_json: bool = True) -> None:
    """``obj`` as indented JSON at ``path``, numpy scalars as their Python values, written atomically
    (:func:`~cadencelab.profile.outputs.write_atomic`: a failed run leaves the old file whole). With
    ``strict_json`` NaN and infinities become null (:func:`strict`); without, they stay the
    ``NaN`` / ``Infinity`` literals Python's json writes (the studies whose recorded files, and
    the loaders of those files, have them)."""
    text = (json.dumps(strict(obj), indent=1, default=json_default, allow_nan=False) if strict_json
            else json.dumps(obj, indent=1, default=json_default))
    write_atomic(path, text)


def write_csv(frame, path) -> None:
    """A DataFrame (or records) as CSV at ``path`` without the index, gzipped when ``path`` ends with
    ``.gz``, written atomically (:func:`~cadencelab.profile.outputs.atomic_path`)."""
    import pandas as pd

    frame = frame if isinstance(frame, pd.DataFrame) else pd.DataFrame(frame)
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, compression="gzip" if str(path).endswith(".gz") else None)


def check_out(cfg, results: tuple[str, ...]) -> Path:
    """A study's output folder ``cfg.out``, checked by :func:`~cadencelab.profile.outputs.guard_output`
    before anything runs (never in the recorded data folder; none of the files matching ``results``
    there unless ``cfg.overwrite``), then made."""
    out = guard_output(cfg.out, "--out", results=results, overwrite=getattr(cfg, "overwrite", False))
    return claim_folder(out)  # made, and this run's alone (a second run started on it together is refused)


def json_default(o):
    """``json.dumps(default=...)`` for numpy scalars; anything else becomes its string."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    return str(o)
