"""Running a user's (or a student's) code: a time limit, and its exits caught.

A user's factory, step or adapter runs inside this package's processes: a step that never returns would hang a
certification or a grader cell, and a ``sys.exit`` inside it would end the caller's process (or its cell)
with no word of why. :func:`user_code` bounds the time (SIGALRM, in the main thread on Unix: the limit is
checked when the code returns to Python, so a hang inside one native call waits for that call) and turns a
``SystemExit`` into :class:`UserExit` naming the code.
"""

from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["UserCodeTimeout", "UserExit", "user_code"]


class UserCodeTimeout(TimeoutError):
    """The user's code ran past its time limit."""


class UserExit(RuntimeError):
    """The user's code called ``sys.exit`` (or raised ``SystemExit``)."""


@contextlib.contextmanager
def user_code(what: str, seconds: float | None = None):
    """Inside: ``what`` (e.g. "--model pkg.mod:fn", "your step") runs with at most ``seconds`` (None: no limit;
    outside the main thread or without SIGALRM: no limit either), raising :class:`UserCodeTimeout` where it is
    once they pass; a ``SystemExit`` from it becomes :class:`UserExit`. An outer limit is restored after."""
    armed = bool(seconds) and threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if armed:
        def expire(signum, frame):
            raise UserCodeTimeout(f"{what} ran past its time limit of {seconds:g} s")

        old = signal.signal(signal.SIGALRM, expire)
        outer = signal.setitimer(signal.ITIMER_REAL, float(seconds))[0]
    try:
        yield
    except SystemExit as e:
        raise UserExit(f"{what} called sys.exit({e.code!r}) instead of returning") from None
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            if outer:
                signal.setitimer(signal.ITIMER_REAL, max(outer - float(seconds), 1e-3))  # roughly what it had left
