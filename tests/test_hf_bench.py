"""``bench kit``'s compile control (``B0_compiled``): the model's own stock step under
torch.compile(mode="reduce-overhead"), labelled a control, its exactness reported and never gated."""

from __future__ import annotations

import pandas as pd
import pytest

from cadencelab.bench.kit import CONTROLS, KitConfig, analyse
from cadencelab.bench.measure import Method


def _blocks(exact_control: bool) -> pd.DataFrame:
    rows = []
    for arm, ms in (("B0", 2.0), ("SRc", 1.0), ("B0_compiled", 1.5)):
        for p in range(2):
            for b in range(3):
                equal = 4 if arm != "B0_compiled" or exact_control else 3
                rows.append({"arm": arm, "process": p, "block": b, "warmup": b == 0, "equal": equal, "calls": 4,
                             "sha256": "h", "state_bytes": 8, "peak_mem_bytes": float("nan"),
                             "replayed": 4 if arm == "SRc" else 0,
                             "ms_median": ms + 0.01 * (p + b)})
    return pd.DataFrame(rows)


def test_the_compile_control_is_labelled_and_not_gated():
    assert "B0_compiled" in CONTROLS
    assert KitConfig.__dataclass_fields__["arms"].default == ("B0", "S", "R", "Rc", "SR", "SRc", "B0_repeat")
    res = analyse(_blocks(exact_control=False), Method(min_processes=1, max_processes=2, n_boot=200))
    arms = {a["arm"]: a for a in res["arms"]}
    assert arms["B0_compiled"]["control"] and not arms["B0_compiled"]["bit_exact"]
    assert not arms["SRc"]["control"] and arms["SRc"]["bit_exact"]
    assert res["summary"]["exact"] is True  # the arms' gate: a control's inexactness is reported, not gated
    assert arms["B0_compiled"]["vs_B0"] < 0  # measured against B0 like every arm


def test_the_compiled_step_hands_out_copies_each_call():
    """The control's step marks each call and copies its outputs out of the compiled graphs' pool (on the H100 the
    Qwen2 step read a cache the next call had overwritten): the state it returns outlives the next call."""
    import torch

    from cadencelab.bench.kit import _compiled_step

    step = _compiled_step(lambda x, s: (x * 2, {"s": s + x}))
    x, s = torch.ones(3), torch.zeros(3)
    first = step(x, s)
    second = step(x, first[1]["s"])
    assert torch.equal(first[1]["s"], torch.ones(3)) and torch.equal(second[1]["s"], torch.full((3,), 2.0))


@pytest.mark.cuda
def test_the_compile_control_streams_the_transformers_step_on_cuda():
    """The B0_compiled arm's state on transformers' Qwen2 decode step: two blocks of its traffic run (a control:
    its exactness is reported, never required)."""
    pytest.importorskip("transformers")
    from cadencelab.bench.kit import _ArmState

    st = _ArmState("cadencelab.adapters.hf.qwen2_decode:kit_model_on", "B0_compiled", "cuda", "cuda", 0, ())
    for _ in range(2):
        r = st.block()
        assert r["ms_median"] > 0 and r["calls"] > 0, r
