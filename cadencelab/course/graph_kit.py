"""What the capture task hands a student's wrapper: a side stream to warm up on, and graphs to capture and replay.

    with graphs.side_stream():     # warm-up, at the shape about to be captured (lazy init, autotuning, allocator)
        model(static_x)
    g = graphs.graph()
    with g.capture():              # the model's call here is recorded into g, not run as it stands
        static_y = model(static_x)
    g.replay()                     # recomputes static_y from whatever static_x holds now, into static_y itself

On CUDA these are the real things (a ``torch.cuda.Stream`` waited on both ways, ``torch.cuda.CUDAGraph`` under
``torch.cuda.graph``); on a CPU a stand-in with a CUDA graph's semantics: replay re-runs the recorded call on the
static input's *current* values into the *same* static output. Either way the kit watches the model (a pre-hook on
each of its modules): a capture at a shape never warmed up is counted (``unwarmed``), and so is every computation
of the model at an already captured shape outside a replay (``side_calls``): a wrapper that replays and then calls
the model anyway is caught, whether it calls ``model(x)``, ``model.forward(x)`` or one of its layers.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

__all__ = ["GraphKit", "TaskGraph"]


class GraphKit:
    """The side stream and the graphs a wrapper gets; counts captures, replays, unwarmed captures, side calls."""

    def __init__(self, model: torch.nn.Module, device):
        self.model, self.device = model, torch.device(device)
        self.mode: str | None = None  # None (eager), "warm", "capture" or "replay"
        self.warmed: set = set()
        self.captured: set = set()
        self.graphs: list = []
        self.side_calls = self.unwarmed = 0
        self._recording: list | None = None
        self._handles = [m.register_forward_pre_hook(self._pre) for m in model.modules()]
        self._handles.append(model.register_forward_hook(self._post))

    # -- what the student calls ------------------------------------------------------------

    @contextmanager
    def side_stream(self):
        """Warm the model up here: on CUDA a side stream (waits for the current one, and it for the side)."""
        prev, self.mode = self.mode, "warm"
        try:
            if self.device.type == "cuda":
                side = torch.cuda.Stream(self.device)
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side):
                    yield side
                torch.cuda.current_stream(self.device).wait_stream(side)
            else:
                yield None
        finally:
            self.mode = prev

    def graph(self) -> TaskGraph:
        """A new graph to capture once and replay."""
        g = TaskGraph(self)
        self.graphs.append(g)
        return g

    # -- what the grader reads -------------------------------------------------------------

    @property
    def captures(self) -> int:
        return sum(1 for g in self.graphs if g.captured)

    @property
    def replays(self) -> int:
        return sum(g.replays for g in self.graphs)

    def close(self) -> None:
        """Stop watching the model (before it is timed)."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def _pre(self, module, args):
        x = args[0] if args and isinstance(args[0], torch.Tensor) else None
        key = None if x is None else tuple(x.shape[:-1])
        if self.mode == "capture" and module is self.model:
            self.unwarmed += key not in self.warmed
            self.captured.add(key)
        elif self.mode == "warm" and module is self.model:
            self.side_calls += key in self.captured  # a "warm-up" at a shape already captured: a side call
            self.warmed.add(key)
        elif self.mode is None and key in self.captured:
            self.side_calls += 1

    def _post(self, module, args, out):
        if self.mode == "capture" and self._recording is not None:
            self._recording.append((args[0], out))


class TaskGraph:
    """One graph: ``capture()`` (a context manager around the model's call), then ``replay()``."""

    def __init__(self, kit: GraphKit):
        self.kit, self.replays, self.captured, self._calls = kit, 0, False, []
        self._cuda = torch.cuda.CUDAGraph() if kit.device.type == "cuda" else None

    @contextmanager
    def capture(self):
        if self.captured:
            raise RuntimeError("this graph is captured already: make a new one with graphs.graph()")
        kit = self.kit
        prev, kit.mode, kit._recording = kit.mode, "capture", self._calls
        try:
            if self._cuda is not None:
                with torch.cuda.graph(self._cuda):
                    yield self
            else:
                with torch.no_grad():
                    yield self
        finally:
            kit.mode, kit._recording = prev, None
        self.captured = True

    def replay(self) -> None:
        if not self.captured:
            raise RuntimeError("replay before capture: capture the model's call first")
        kit = self.kit
        prev, kit.mode = kit.mode, "replay"
        try:
            if self._cuda is not None:
                self._cuda.replay()
            else:
                with torch.no_grad():
                    for static_x, static_y in self._calls:  # the recorded call, on the static input's values now
                        static_y.copy_(kit.model(static_x))
        finally:
            kit.mode = prev
        self.replays += 1
