"""No cyclic garbage collection inside a CUDA-graph capture (the engine's and any hand capture's guard)."""

from __future__ import annotations

import contextlib
import gc

__all__ = ["no_collection"]


@contextlib.contextmanager
def no_collection():
    """No cyclic garbage collection inside a capture.

    A collection that runs while a stream is capturing may free an unreachable object that
    owns a CUDA graph (an engine in a reference cycle, say); the graph's destructor resets it,
    which CUDA forbids during capture, and the capture in progress is invalidated
    ("operation not permitted when stream is capturing"). Seen on the H200 when a test's
    engines were collected during a later test's capture. torch's own ``graph`` context no
    longer collects before capture by default, so the engine holds collection off itself.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
