"""``bench kit``'s compile control (``B0_compiled``): the model's own stock step under
torch.compile(mode="reduce-overhead"), labelled a control, its exactness reported and never gated."""

from __future__ import annotations

import pandas as pd

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
