"""The duplex-second harness (tiny preset on a CPU) and the ``duplex`` bench study."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import plotly.graph_objects as go
import pytest
import torch

pytest.importorskip("transformers")

from cadencelab import viz  # noqa: E402
from cadencelab.adapters.duplex import (  # noqa: E402
    H200,
    SECOND_RANGE,
    STAGES,
    SUBSTAGES,
    TINY,
    DuplexConfig,
    DuplexSecond,
    build_models,
    preset,
    second_totals,
)
from cadencelab.course import data  # noqa: E402
from cadencelab.profile import load_trace  # noqa: E402
from cadencelab.profile.trim import profile_window, trim_trace  # noqa: E402


@pytest.fixture(scope="module")
def one_thread():
    """Tiny shapes gain nothing from intra-op threads and slow down a lot when cores are shared."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def harness(one_thread):
    h = DuplexSecond("tiny", arm="B0", device="cpu", seed=0)
    h.warmup(1)
    return h


# ----------------------------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------------------------


def test_presets_declare_the_clocks():
    assert preset("tiny") is TINY and preset(H200) is H200
    for cfg in (TINY, H200):
        assert cfg.speech_tokens == 25 and cfg.lookahead == 3 and cfg.speech.vocab == 6561
    assert H200.backbone.hidden == 4096 and H200.backbone.layers == 36 and H200.backbone.kv_heads == 8
    assert 8.0e9 < H200.backbone.parameters() < 8.4e9  # an 8B-class backbone
    assert TINY.backbone.hidden == 64 and TINY.backbone.layers == 2 and TINY.token2wav == "teaching"


def test_config_refuses_what_the_clocks_forbid():
    with pytest.raises(ValueError, match="speech_tokens must be 25"):
        TINY.replace(speech_tokens=50)
    with pytest.raises(ValueError, match="token2wav"):
        TINY.replace(token2wav="big")
    with pytest.raises(ValueError, match="unknown duplex preset"):
        preset("a100")
    assert isinstance(TINY.replace(text_tokens=4), DuplexConfig)
    for bad in ("int64", "float8", "bool", "nonsense"):  # the models are built in a floating-point dtype
        with pytest.raises(ValueError, match=f"dtype must be one of float32, .*got '{bad}'"):
            TINY.replace(dtype=bad)
    assert TINY.replace(dtype="float16").torch_dtype is torch.float16 and H200.torch_dtype is torch.bfloat16


def test_tiny_models_match_their_declaration(one_thread):
    m = build_models("tiny", "cpu", seed=0)
    assert sum(p.numel() for p in m.backbone.parameters()) == TINY.backbone.parameters()
    assert sum(p.numel() for p in m.speech.parameters()) == TINY.speech.parameters()
    assert next(m.backbone.parameters()).dtype == torch.float32
    with pytest.raises(ValueError, match="shared models were built"):
        DuplexSecond(TINY.replace(text_tokens=3), "B0", "cpu", models=m)


# ----------------------------------------------------------------------------------------------
# one second
# ----------------------------------------------------------------------------------------------


def test_run_second_gives_the_three_stages(harness):
    df = harness.run_second()
    assert list(df.columns[:5]) == ["stage", "start_ms", "dur_ms", "source", "arm"]
    top = df[df["parent"] == ""].set_index("stage")
    assert list(top.index) == list(STAGES)
    assert (df["dur_ms"] > 0).all() and (df["source"] == "measured").all() and (df["arm"] == "B0").all()
    # sequential stages: each starts after the previous one ended
    ends = top["start_ms"] + top["dur_ms"]
    assert top.loc["speech_decoder", "start_ms"] >= ends["backbone"]
    assert top.loc["synthesis", "start_ms"] >= ends["speech_decoder"]
    # flow and vocoder are timed inside synthesis
    sub = df[df["parent"] == "synthesis"].set_index("stage")
    assert list(sub.index) == list(SUBSTAGES)
    assert (sub["start_ms"] >= top.loc["synthesis", "start_ms"]).all()
    assert (sub["start_ms"] + sub["dur_ms"] <= ends["synthesis"] + 1e-6).all()
    fact = harness.history[-1]
    assert len(fact["speech_tokens"]) == 25 and all(0 <= t < 6561 for t in fact["speech_tokens"])
    assert len(fact["text_tokens"]) == TINY.text_tokens and fact["pcm_bytes"] == 2 * 24000  # 1.0 s of int16


def test_seconds_are_reproducible_across_sessions(one_thread):
    """Same seed, same second index: same tokens and the same PCM bytes."""
    a = DuplexSecond("tiny", "B0", "cpu", seed=3)
    b = DuplexSecond("tiny", "B0", "cpu", seed=3, models=a.models)
    for h in (a, b):
        h.run(2, warmup=1)
    fa, fb = a.seconds_frame(), b.seconds_frame()
    assert fa["pcm_sha16"].tolist() == fb["pcm_sha16"].tolist()
    assert fa["speech_tokens"].tolist() == fb["speech_tokens"].tolist()


def test_second_totals(harness):
    df = harness.run(2, warmup=0)
    tot = second_totals(df)
    assert len(tot) == 2 and (tot["second_ms"] > 0).all()
    top = df[df["parent"] == ""]
    last = top[top["second"] == tot["second"].iloc[0]]
    assert tot["second_ms"].iloc[0] == pytest.approx((last["start_ms"] + last["dur_ms"]).max())


def test_profile_window_gives_cpu_ops_and_a_trimmed_trace(harness, tmp_path):
    path = tmp_path / "trace_duplex_B0.json.gz"
    p = profile_window(harness.run_second, harness.device, SECOND_RANGE, trace_path=str(path), open_range=False)
    df = p.result
    assert set(STAGES) <= set(df["stage"])
    assert len(p.cpu_ops) > 0 and p.window == SECOND_RANGE
    st = p.stages(list(STAGES) + list(SUBSTAGES))
    assert list(st["range"]) == list(STAGES) + list(SUBSTAGES) and (st["cpu_us"] > 0).all()
    assert st["busy_us"].isna().all()  # CPU-only: busy/slack do not apply, never zero
    # the file holds exactly that second, and loads back
    t = load_trace(path)
    assert p.path == str(path) and len(t.cpu_ops) == len(p.cpu_ops)
    r = t.ranges[t.ranges["side"] == "cpu"]
    w = r[r["name"] == SECOND_RANGE].iloc[0]
    assert (t.cpu_ops["start_ns"] >= w["start_ns"]).all() and (t.cpu_ops["start_ns"] <= w["end_ns"]).all()
    assert "priming" not in set(r["name"])
    with pytest.raises(ValueError, match="no occurrence 1"):
        trim_trace(t, SECOND_RANGE, occurrence=1)
    thin = trim_trace(t, SECOND_RANGE, max_cpu_depth=0)
    assert 0 < len(thin.cpu_ops) < len(t.cpu_ops) and (thin.cpu_ops["depth"] == 0).all()


def test_trim_trace_needs_the_window_named():
    import inspect

    for fn in (trim_trace, profile_window):
        assert inspect.signature(fn).parameters["window"].default is inspect.Parameter.empty


def test_waterfall_paper_beside_measured(harness):
    measured = harness.run_second()
    paper = data.paper_duplex_second(["anatomy", "live_speak"])
    both = pd.concat([paper[["stage", "start_ms", "dur_ms", "source"]],
                      measured[["stage", "start_ms", "dur_ms", "source"]]], ignore_index=True)
    fig = viz.waterfall(both, cadence_ms=1000)
    assert isinstance(fig, go.Figure) and [t.name for t in fig.data] == ["paper", "measured"]
    assert "synthesis" in list(fig.data[0].y) and "synthesis" in list(fig.data[1].y)
    facets = viz.waterfall(both, options=viz.WaterfallOptions(layout="facets"))
    assert len(facets.data) == 2


# ----------------------------------------------------------------------------------------------
# the bench study
# ----------------------------------------------------------------------------------------------


def test_bench_duplex_cpu_tiny(tmp_path, monkeypatch, capsys):
    from cadencelab.bench.__main__ import main

    out = tmp_path / "duplex"
    old = torch.get_num_threads()
    try:
        rc = main(["duplex", "--device", "cpu", "--preset", "tiny", "--seconds", "2", "--out", str(out)])
    finally:
        torch.set_num_threads(old)
    assert rc == 0
    printed = capsys.readouterr().out
    assert "B0" in printed and "SRc" in printed and "synth" in printed
    res = json.loads((out / "duplex_second.json").read_text())
    assert set(res["summary"]) == {"B0", "SRc"} and not res["failures"]
    for arm in ("B0", "SRc"):
        s = res["summary"][arm]
        assert s["seconds_timed"] == 1 and s["second_ms_median"] > 0 and s["synthesis_ms_median"] > 0
        assert s["pcm_equal_seconds"] == "2/2"  # the arms produce the same bytes from the same tokens
        assert (out / f"trace_duplex_{arm}.json.gz").exists()
        assert res["profiles"][arm]["trace"] == f"trace_duplex_{arm}.json.gz"
    rows = pd.DataFrame(res["rows"])
    assert set(rows["stage"]) == set(STAGES) | set(SUBSTAGES) and rows["warmup"].any() and (~rows["warmup"]).any()
    prov = res["provenance"]
    for key in ("git_commit", "gpu", "torch", "cuda", "date", "config", "transformers"):
        assert key in prov
    assert prov["config"]["name"] == "tiny" and prov["study"]["seconds"] == 2 and prov["threads"] == 1
    # the data layer reads the study's file where the recorded H200 file will live
    (tmp_path / "data" / "h200").mkdir(parents=True)
    shutil.copy(out / "duplex_second.json", tmp_path / "data" / "h200" / "duplex_second.json")
    monkeypatch.setenv(data.DATA_ENV, str(tmp_path / "data"))
    med = data.duplex_second()
    assert {"stage", "start_ms", "dur_ms", "source", "arm"} <= set(med.columns)
    assert set(med["arm"]) == {"B0", "SRc"} and (med["source"] == "measured").all()
    assert len(data.duplex_seconds()) == len(rows)
    assert len(viz.waterfall(data.duplex_second(arm="SRc")).data) == 1


def test_bench_duplex_warms_up_as_many_seconds_as_asked(tmp_path, capsys):
    """--warmup-seconds 2: the language models' first continuation runs before the clock; a refused count
    (no timed second left) is one line naming both flags."""
    from cadencelab.bench.__main__ import main

    out = tmp_path / "duplex"
    old = torch.get_num_threads()
    try:
        rc = main(["duplex", "--device", "cpu", "--preset", "tiny", "--arms", "SRc", "--seconds", "3",
                   "--warmup-seconds", "2", "--no-profile", "--out", str(out)])
        assert rc == 0
        res = json.loads((out / "duplex_second.json").read_text())
        secs = pd.DataFrame(res["seconds"])
        assert secs.sort_values("second")["warmup"].tolist() == [True, True, False]
        assert res["summary"]["SRc"]["seconds_timed"] == 1 and res["provenance"]["study"]["warmup_seconds"] == 2
        capsys.readouterr()
        assert main(["duplex", "--device", "cpu", "--preset", "tiny", "--seconds", "2", "--warmup-seconds", "2",
                     "--no-profile", "--out", str(tmp_path / "refused")]) != 0
    finally:
        torch.set_num_threads(old)
    err = capsys.readouterr().err
    assert "--warmup-seconds" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "refused" / "duplex_second.json").exists()


@pytest.mark.cuda
def test_bench_duplex_warms_up_the_served_decoders_on_cuda(tmp_path):
    """--warmup-seconds 2 with the graph and fused decodes on the GPU: the continuation second runs before the
    clock in every mode, and the timed second's tokens agree between the two decodes."""
    from cadencelab.bench.__main__ import main

    out = tmp_path / "duplex"
    assert main(["duplex", "--device", "cuda", "--preset", "tiny", "--arms", "SRc", "--decode", "graph,fused",
                 "--seconds", "3", "--warmup-seconds", "2", "--no-profile", "--out", str(out)]) == 0
    res = json.loads((out / "duplex_second.json").read_text())
    secs = pd.DataFrame(res["seconds"])
    assert set(secs["arm"]) == {"SRc+graphLM", "SRc+fusedLM"}
    for _, s in secs.groupby("arm"):
        assert s.sort_values("second")["warmup"].tolist() == [True, True, False]
    assert all(v["seconds_timed"] == 1 for v in res["summary"].values())
