"""What the served-decoder tests share: the tiny duplex study through the bench's own command line, and the ops
a call dispatches (a host read of a device value is what a CUDA graph capture forbids)."""

from __future__ import annotations

import collections
import json

import torch


def bench_duplex_tiny(tmp_path, decode: str, seconds: int = 2) -> tuple[int, dict]:
    """``bench duplex`` on the CPU, tiny preset, arm B0 with ``--decode decode``: (exit code, the written JSON)."""
    from cadencelab.bench.__main__ import main

    out = tmp_path / "duplex"
    old = torch.get_num_threads()  # the bench pins its threads; the next test gets them back
    try:
        rc = main(["duplex", "--device", "cpu", "--preset", "tiny", "--arms", "B0", "--decode", decode,
                   "--seconds", str(seconds), "--no-profile", "--out", str(out)])
    finally:
        torch.set_num_threads(old)
    return rc, (json.loads((out / "duplex_second.json").read_text()) if rc == 0 else {})



def dispatched(fn) -> collections.Counter:
    """How many times ``fn`` dispatched each aten op (run under inference mode)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen[str(func)] += 1
            return func(*args, **(kwargs or {}))

    with torch.inference_mode(), Ops() as ops:
        fn()
    return ops.seen


def host_reads(seen) -> list[str]:
    """The ops of ``seen`` (:func:`dispatched`) that read a device value on the host."""
    return [op for op in seen if "_local_scalar_dense" in op or op.startswith("aten.item")]


def served_row(res: dict, printed: str, mode: str) -> dict:
    """The tiny study's row of the B0 run served in ``mode``, after what every served row holds: printed and
    summarised beside B0, labelled a control (not exact against eager), its tokens equal to eager's in both
    seconds at the tiny size, and its PCM its own reference."""
    label = f"B0+{mode}LM"
    assert label in printed and list(res["summary"]) == ["B0", label]
    row = res["summary"][label]
    assert row["decode"] == mode and row["lm_exact"] is False and row["token2wav_arm"] == "B0"
    assert row["pcm_equal_to"] == label and row["lm_tokens_equal_seconds"] == "2/2"
    return row
