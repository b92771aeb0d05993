"""A streaming model the package does not ship, in one file, as a user writes it: a depthwise causal conv
(kernel 7: 6 frames of left context kept between calls) over 4-frame calls, its own stock step keeping its
own cut. ``kit_model_on(device)`` is what the registry and every tool take (tests/test_registry.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cadencelab.adapters.kit import KitModel, Traffic
from cadencelab.contract import Admission, Clock, Declaration, Operator, Region, SlidingWindow

CHANNELS, KERNEL, CALL = 4, 7, 4
CONTEXT = KERNEL - 1


def declaration() -> Declaration:
    clocks = (Clock("calls", "one call", rate_hz=10.0), Clock("frames", "input frame", parent="calls", ratio=CALL))
    history = Region("history", clock="frames", shape=(1, CHANNELS, "frames"), policy=SlidingWindow(CONTEXT),
                     lifetime="turn", address_stable=True)
    smooth = Operator("smooth", reads=("history",), clock="frames", flush=(1, CALL, 1))
    return Declaration("registered-conv", clocks, (history,), (smooth,), admission=Admission("frames", CALL),
                       call_clock="calls")


class CausalConv(torch.nn.Module):
    def __init__(self, seed: int = 0):
        super().__init__()
        self.conv = torch.nn.Conv1d(CHANNELS, CHANNELS, KERNEL, groups=CHANNELS)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)

    def forward(self, x: torch.Tensor, history: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(out, every frame seen: history then x); the turn's first call starts from no history."""
        full = x if history is None else torch.cat([history, x], dim=-1)
        padded = F.pad(full, (max(0, CONTEXT - (full.shape[-1] - x.shape[-1])), 0))
        return self.conv(padded[..., -(x.shape[-1] + CONTEXT):]), full


def kit_model_on(device="cpu") -> KitModel:
    model = CausalConv().to(device)
    decl = declaration()

    def step(x, caches, last):  # the kit's stock form: the whole input, uncut (the carry keeps the declared cut)
        out, full = model(x, caches["history"])
        return out, {"history": full}

    def stock(x, caches, last):  # the model's own loop: its own cut
        out, full = model(x, caches.get("history"))
        return out, {"history": full[..., -CONTEXT:]}

    g = torch.Generator().manual_seed(1)
    signals = [torch.randn(1, CHANNELS, n, generator=g).to(device) for n in (30, 13)]
    traffic = Traffic.stream(decl, signals, clock="frames", dim=2)
    return KitModel(decl, step, stock, traffic, frames=2, form="stock", modules=(model,), device=str(device))
