"""Graph memory pools: one per device shared by the engines, and what a failed capture leaves behind undone."""

from __future__ import annotations

import logging

import torch

from .nogc import no_collection

__all__ = ["shared_pool", "end_failed_capture", "FAILED_GRAPHS"]

log = logging.getLogger("cadencelab.replay")
_POOLS: dict = {}


def shared_pool(device=None):
    """One graph memory pool per device, shared by every engine that does not bring its own."""
    idx = torch.device(device).index if device is not None else torch.cuda.current_device()
    if idx is None:
        idx = torch.cuda.current_device()
    if idx not in _POOLS:
        _POOLS[idx] = torch.cuda.graph_pool_handle()
    return _POOLS[idx]


FAILED_GRAPHS: list = []  # failed captures stay referenced: the allocator may still hold their filters


def end_failed_capture(device, pool, stream) -> None:
    """Undo what a failed capture leaves behind.

    A capture that fails inside ``cudaStreamEndCapture`` leaves (1) the caching allocator
    still routing the stream's allocations to the graph pool ("already recording to
    mempool_id" at the next capture) and (2) the CUDA generators in capture mode ("Offset
    increment outside graph capture" at the next draw). End the pool recording, then run a
    trivial capture that succeeds: it runs the generators' prologue and epilogue on the same
    generator state (graphs captured earlier keep pointing at it, so their replays stay exact).
    """
    index = torch.device(device).index if torch.device(device).index is not None else torch.cuda.current_device()
    try:
        torch._C._cuda_endAllocateToPool(index, pool)
    except Exception as e:  # not recording any more: nothing to end
        log.debug("endAllocateToPool after a failed capture: %s", e)
    if _POOLS.get(index) == pool:  # never begin recording to that pool id again
        del _POOLS[index]
    scratch = torch.zeros(1, device=device)
    graph = torch.cuda.CUDAGraph()
    try:
        with no_collection(), torch.cuda.graph(graph, stream=stream):
            scratch.add_(1)
    except Exception as e:  # pragma: no cover - would leave the process without device RNG
        log.error("could not end generator capture mode after a failed capture: %s", e)
    del graph
