"""Effect watching: which random generators a call advances.

Host randomness (torch's CPU generator, Python's ``random``, NumPy's global state) drawn
inside a captured region would be frozen into the graph as constants: such classes are
rejected for good. Device randomness (CUDA Philox) is graph-safe: a replay advances the
generator by the whole graph's increment, so replay n draws what eager call n would.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch


@dataclass
class RngSnapshot:
    host: torch.Tensor
    py: object
    np: object
    device: dict

    @classmethod
    def take(cls, devices=()) -> "RngSnapshot":
        try:
            import numpy as np

            np_state = np.random.get_state()
        except Exception:  # numpy absent
            np_state = None
        dev = {}
        for d in devices:
            dev[d] = torch.cuda.get_rng_state(d)
        return cls(torch.get_rng_state(), random.getstate(), np_state, dev)

    def restore(self) -> None:
        torch.set_rng_state(self.host)
        random.setstate(self.py)
        if self.np is not None:
            import numpy as np

            np.random.set_state(self.np)
        for d, s in self.device.items():
            torch.cuda.set_rng_state(s, d)

    def host_changed(self, other: "RngSnapshot") -> bool:
        if not torch.equal(self.host, other.host) or self.py != other.py:
            return True
        if self.np is not None and other.np is not None:
            a, b = self.np, other.np
            return not (a[0] == b[0] and (a[1] == b[1]).all() and a[2:] == b[2:])
        return False

    def device_changed(self, other: "RngSnapshot") -> bool:
        return any(not torch.equal(self.device[d], other.device[d]) for d in self.device)


def cuda_devices(leaves) -> tuple:
    """CUDA device indices touched by tensor arguments (the current device when none)."""
    out = {v.device.index for v in leaves if isinstance(v, torch.Tensor) and v.is_cuda}
    if not out and torch.cuda.is_available():
        out = {torch.cuda.current_device()}
    return tuple(sorted(i for i in out if i is not None))
