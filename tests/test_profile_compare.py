"""cadencelab.profile.compare on the recorded H200 traces (one steady chunk B0 vs SRc, one duplex
second B0 vs SRc), plus the graph-kernel guard of the slack on a hand-built trace."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from cadencelab.adapters.duplex.models import H200
from cadencelab.course import data
from cadencelab.profile import (
    GraphKernelsMissing,
    TickMarker,
    align_kernels,
    cadence_diff,
    duplex_ticks,
    duration_histogram,
    idle_split,
    kernel_stream,
    launch_cost_estimate,
    load_trace,
    normalise_kernel_name,
    op_kind,
    parse_trace,
    short_kernel_name,
    stages,
    summary,
)

ROOT = Path(__file__).resolve().parents[1]
H200_DIR = ROOT / "data" / "h200"
GRAPH = Path(__file__).parent / "fixtures" / "traces" / "graph_replay.json"
GEMM = re.compile(r"gemm", re.I)


@pytest.fixture(scope="module")
def aligned(streams):
    return align_kernels(streams["B0"], streams["SRc"], ("B0", "SRc"))


@pytest.fixture(scope="module")
def duplex():
    return {arm: data.recorded_trace(arm, "duplex") for arm in ("B0", "SRc")}


# ---------------------------------------------------------------------------------------------
# names and kinds
# ---------------------------------------------------------------------------------------------


def test_op_kind_names_copies_for_what_they_are():
    assert op_kind("Memcpy HtoD (Pageable -> Device)", "memcpy") == "memcpy HtoD"
    assert op_kind("Memcpy DtoH (Device -> Pinned)", "memcpy") == "memcpy DtoH"
    assert op_kind("Memset (Device)", "memset") == "memset"
    assert op_kind("memcpy32_post") == "copy kernel"
    assert op_kind("void at::native::(anonymous namespace)::CatArrayBatchedCopy<int>(int)") == "copy kernel"
    assert op_kind("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nn_align1>(Params)") == "kernel"
    # a memcpy and the graph's copy kernel doing the same device-to-device copy align
    assert normalise_kernel_name("Memcpy DtoD (Device -> Device)", "memcpy") == normalise_kernel_name("memcpy32_post")
    assert normalise_kernel_name("Memset (Device)", "memset") == normalise_kernel_name("memset32")
    assert normalise_kernel_name("Memcpy HtoD (Pinned -> Device)", "memcpy") != normalise_kernel_name("memcpy32_post")
    assert short_kernel_name("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>(int)") \
        == "native::vectorized_layer_norm_kernel"


def test_kernel_stream_labels_every_op(streams):
    b0, src = streams["B0"], streams["SRc"]
    assert set(b0["launch_via"]) <= {"kernel launch", "memcpy call", "memset call", "other call", "unknown"}
    assert (b0["launch_via"] != "graph launch").all()
    # the replayed chunk: nearly everything comes from the 2 graph launches
    assert (src["launch_via"] == "graph launch").sum() == int(src["graph"].sum()) > 12_000
    # copies become kernels: fewer memcpy records, more copy kernels than eager
    n = {arm: s["op_kind"].value_counts() for arm, s in streams.items()}
    assert n["SRc"]["copy kernel"] > n["B0"]["copy kernel"]
    assert n["SRc"]["memcpy DtoD"] < n["B0"]["memcpy DtoD"]
    assert n["SRc"]["memcpy HtoD"] < n["B0"]["memcpy HtoD"]
    assert (b0["start_us"] >= 0).all() and b0["start_us"].is_monotonic_increasing


# ---------------------------------------------------------------------------------------------
# alignment
# ---------------------------------------------------------------------------------------------


def test_aligned_gemm_pairs_with_a_gemm_never_a_layer_norm(aligned):
    eq = aligned[aligned["op"] == "equal"]
    assert len(eq) > 12_000
    both_kernels = eq[(eq["op_kind_B0"] == "kernel") & (eq["op_kind_SRc"] == "kernel")]
    # equal rows pair the same kernel: identical short names, and a gemm is opposite a gemm
    assert (both_kernels["kernel_B0"] == both_kernels["kernel_SRc"]).all()
    gemm_b0 = both_kernels["kernel_B0"].str.contains(GEMM)
    assert gemm_b0.sum() > 100
    assert both_kernels.loc[gemm_b0, "kernel_SRc"].str.contains(GEMM).all()
    assert not both_kernels.loc[gemm_b0, "kernel_SRc"].str.contains("layer_norm").any()


def test_index_pairing_would_drift_where_alignment_does_not(streams, aligned):
    # by index, the two streams disagree on many ops (the drift the player showed) ...
    a, b = streams["B0"]["norm"].to_numpy(), streams["SRc"]["norm"].to_numpy()
    n = min(len(a), len(b))
    by_index_mismatch = int((a[:n] != b[:n]).sum())
    assert by_index_mismatch > 1000
    # ... while aligned pairs never do
    eq = aligned[aligned["op"] == "equal"]
    ia, ib = eq["i_B0"].to_numpy(int), eq["i_SRc"].to_numpy(int)
    assert (a[ia] == b[ib]).all()
    assert (np.diff(ia) > 0).all() and (np.diff(ib) > 0).all()  # order kept on both sides


def test_alignment_accounts_for_every_op_and_names_what_vanished(streams, aligned):
    c = aligned.attrs["counts"]
    assert c["ops_B0"] == len(streams["B0"]) and c["ops_SRc"] == len(streams["SRc"])
    assert aligned["i_B0"].notna().sum() == len(streams["B0"])
    assert aligned["i_SRc"].notna().sum() == len(streams["SRc"])
    assert c["kernels_B0"] == 11506 and c["kernels_SRc"] == 11682  # the recorded chunk's kernel records
    # the host-to-device copies eager makes and the replay does not
    gone = aligned[aligned["op"] == "delete"]
    assert (gone["op_kind_B0"] == "memcpy HtoD").sum() >= 10
    # replace rows are never paired: one side only per row
    rep = aligned[aligned["op"] == "replace"]
    assert len(rep) and (rep["i_B0"].isna() ^ rep["i_SRc"].isna()).all()


def test_align_refuses_equal_labels_and_bad_input(streams):
    with pytest.raises(ValueError, match="labels must differ"):
        align_kernels(streams["B0"], streams["SRc"], ("x", "x"))
    with pytest.raises(ValueError, match=r"missing columns \['start_ns', 'end_ns'\]"):
        align_kernels(streams["B0"][["name"]], streams["SRc"])


def test_align_on_small_streams_by_hand():
    import pandas as pd

    def s(names):
        return pd.DataFrame({"name": names, "start_ns": np.arange(len(names)) * 10,
                             "end_ns": np.arange(len(names)) * 10 + 5})

    al = align_kernels(s(["g", "Memcpy HtoD", "r", "n", "g"]), s(["g", "r", "x", "y", "n", "g"]), ("e", "r"))
    assert al["op"].tolist().count("equal") == 4
    assert set(al.loc[al["op"] == "insert", "kernel_r"]) == {"x", "y"}


# ---------------------------------------------------------------------------------------------
# durations and launch cost
# ---------------------------------------------------------------------------------------------


def test_duration_histogram_counts_every_op_on_shared_edges(streams):
    h = duration_histogram(streams)
    for arm, s in streams.items():
        d = h[h["variant"] == arm]
        assert d["ops"].sum() == int((s["dur_us"] > 0).sum())
        assert d["busy_us"].sum() == pytest.approx(s.loc[s["dur_us"] > 0, "dur_us"].sum())
    e0 = h[h["variant"] == "B0"][["bin_lo_us", "bin_hi_us"]].to_numpy()
    e1 = h[h["variant"] == "SRc"][["bin_lo_us", "bin_hi_us"]].to_numpy()
    assert np.array_equal(e0, e1)
    ratio = e0[:, 1] / e0[:, 0]
    assert np.allclose(ratio, 10 ** 0.25)
    with pytest.raises(ValueError, match="bins_per_decade"):
        duration_histogram(streams, bins_per_decade=0)


def test_launch_cost_estimate_against_measured_idle(chunk):
    est = launch_cost_estimate(chunk, "chunk").set_index("variant")
    b0, src = est.loc["B0"], est.loc["SRc"]
    assert b0.kernel_launches == 11506 and b0.graph_launches == 0
    assert src.kernel_launches == 6 and src.graph_launches == 2
    assert b0.idle_ms == pytest.approx(b0.wall_ms - b0.busy_ms)
    assert b0.est_launch_ms == pytest.approx(b0.host_calls * b0.per_launch_us / 1e3)
    # launching explains only part of the eager idle time: the rest is host work between launches
    assert 0.05 < b0.est_over_idle < 1.0
    assert b0.wall_per_call_us > 4 * b0.per_launch_us
    given = launch_cost_estimate(chunk, "chunk", per_launch_us=2.0, unprofiled_wall_us={"B0": 235_400.0})
    g = given.set_index("variant").loc["B0"]
    assert g.per_launch_source == "given" and g.est_launch_ms == pytest.approx(g.host_calls * 2.0 / 1e3)
    assert g.profiler_overhead == pytest.approx(g.wall_ms * 1e3 / 235_400.0)
    # the profiled slack overstates the eager chunk's idle share: unprofiled, the same busy time
    # leaves less idle (0.88 profiled vs 1 - 57.2 / 235.4 = 0.76)
    assert g.profiled_slack == pytest.approx(0.8804, abs=1e-3)
    assert g.unprofiled_slack == pytest.approx(1 - g.busy_ms / 235.4)
    assert g.unprofiled_slack < g.profiled_slack
    with pytest.raises(ValueError, match="per_launch_us"):
        launch_cost_estimate(chunk, "chunk", per_launch_us=float("nan"))


# ---------------------------------------------------------------------------------------------
# two duplex seconds on the cadence
# ---------------------------------------------------------------------------------------------


def test_cadence_diff_per_stage_and_tick(duplex):
    d = cadence_diff(duplex["B0"], duplex["SRc"], cfg=H200)
    counts = d.groupby("stage", sort=False).size()
    assert counts.to_dict() == {"backbone": H200.text_tokens, "speech_decoder": H200.speech_tokens,
                                "flow": H200.n_timesteps, "vocoder": 1}
    assert list(counts.index) == ["backbone", "speech_decoder", "flow", "vocoder"]
    for arm in ("B0", "SRc"):
        assert (d[f"end_ms_{arm}"] >= d[f"start_ms_{arm}"]).all()
        assert d[f"start_ms_{arm}"].is_monotonic_increasing  # ticks in time order on the cadence
        assert (d[f"busy_ms_{arm}"] <= d[f"dur_ms_{arm}"] + 1e-9).all()
    flow = d[d["stage"] == "flow"]
    # the replayed flow: every solver step's kernels come from a graph; eager B0 launches each one
    assert (flow["graph_kernels_SRc"] > 0.99 * flow["ops_SRc"]).all() and (flow["graph_kernels_B0"] == 0).all()
    assert flow["host_calls_SRc"].sum() <= 2 * H200.n_timesteps and (flow["host_calls_B0"] > 900).all()
    # the same device work per step, far shorter steps on the cadence
    assert (flow["busy_ms_SRc"] / flow["busy_ms_B0"]).between(0.85, 1.15).all()
    assert (flow["dur_ms_SRc"] < flow["dur_ms_B0"]).all()
    assert d.attrs["second_end_ms"]["SRc"] < d.attrs["second_end_ms"]["B0"]


def test_cadence_diff_refuses_a_tick_count_the_declaration_does_not_have(duplex):
    wrong = [TickMarker("backbone", "ArgMaxOps", "ends", H200.text_tokens + 1, "text token")]
    with pytest.raises(ValueError, match=r"stage 'backbone' shows 10 kernel\(s\) matching 'ArgMaxOps' where its "
                                         r"declaration has 11 text token tick\(s\)"):
        cadence_diff(duplex["B0"], duplex["SRc"], markers=wrong)
    from cadencelab.adapters.duplex.models import preset

    assert [m.ticks for m in duplex_ticks(preset("tiny"))][:2] == [10, 25]
    with pytest.raises(ValueError, match=r"lacks \['text_tokens', 'speech_tokens', 'n_timesteps'\]"):
        duplex_ticks("tiny")
    with pytest.raises(ValueError, match="pass cfg="):
        cadence_diff(duplex["B0"], duplex["SRc"])


# ---------------------------------------------------------------------------------------------
# the slack refuses graph launches without kernel records
# ---------------------------------------------------------------------------------------------


def _without_graph_kernels() -> dict:
    obj = json.loads(GRAPH.read_text())
    obj["traceEvents"] = [e for e in obj["traceEvents"]
                          if not (e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in (2, 3))]
    return obj


def test_slack_refuses_graph_launches_without_kernel_records():
    t = parse_trace(_without_graph_kernels(), source="no_graph_kernels.json")
    for call, what in ((lambda: summary(t, "step"), "slack"), (lambda: idle_split(t), "idle split"),
                       (lambda: stages(t, ["cfm_loop"]), "stage slack"), (lambda: kernel_stream(t, "step"), "kernel")):
        with pytest.raises(GraphKernelsMissing, match=r"no_graph_kernels.json: window '.*' .*holds 2 cudaGraphLaunch "
                                                      r"call\(s\), 2 of them with no kernel records") as e:
            call()
        assert "the profiler recorded the graph launch but not the kernels" in str(e.value) and what in str(e.value)
    # a window without graph launches is still measured
    s = summary(t, (0, 19_000)).iloc[0]
    assert s.busy_us == 8.0


def test_slack_still_computed_when_graph_kernels_are_recorded():
    t = load_trace(GRAPH)
    assert summary(t, "step").iloc[0].busy_us == 35.0
