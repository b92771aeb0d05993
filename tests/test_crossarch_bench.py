"""CPU smoke of the crossarch study (tiny: 3 Mimi frames, one timed block, a 47-token Freeze-style turn)."""

import io
import json
from contextlib import redirect_stdout

import pytest

from cadencelab.bench.__main__ import main


def _bench(tmp_path, models):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["crossarch", "--device", "cpu", "--models", models, "--frames", "3", "--blocks", "1",
                   "--freeze-tokens", "47", "--out", str(tmp_path)])
    assert rc == 0
    last = [ln for ln in buf.getvalue().splitlines() if ln.strip()][-1]
    assert last.startswith("summary: ")
    return json.loads(last[len("summary: "):])


def test_freeze_style_paths(tmp_path):
    s = _bench(tmp_path, "freeze")["freeze"]
    assert (s["exact_blocks"], s["total_blocks"], s["exact_blocks_carry"]) == (1, 1, 1)
    assert s["overlap_exact_blocks"] == 0 and s["overlap_max_abs_diff"] > 0  # the non-exact control
    r = json.loads((tmp_path / "freeze_style.json").read_text())
    assert r["provenance"]["torch"] and "not Freeze-Omni" in r["provenance"]["model"]
    assert set(r["paths"]) == {"overlap_recompute", "carry", "carry_replay", "full_history"}
    assert r["chunks_csv"] == "freeze_style_chunks.csv" and (tmp_path / "freeze_style_chunks.csv").exists()


def test_mimi_arms(tmp_path):
    pytest.importorskip("moshi")
    s = _bench(tmp_path, "mimi")["mimi"]
    assert s["exact_blocks_all_arms"] == {"eager": 1, "vendor_graph": 1, "replay": 1}
    assert s["non_exact_arms"] == [] and s["failed_arms"] == []
    assert s["vendor_speedup_recovered"] is not None
    r = json.loads((tmp_path / "moshi_mimi.json").read_text())
    assert r["arms"]["replay"]["rebinding"] == ["downsample.conv.first"]
    assert r["arms"]["replay"]["invalidations"] == 0 and r["arms"]["replay"]["replays_per_block"] == 2 * 3
    assert r["provenance"]["git_commit"] is not None and "date" in r["provenance"]
    assert r["frames_csv"] == "moshi_mimi_frames.csv" and (tmp_path / "moshi_mimi_frames.csv").exists()
