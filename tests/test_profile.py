"""cadencelab.profile on hand-built traces with hand-worked numbers, plus capture and exports.

The two GPU fixtures (tests/fixtures/traces) are small enough to check on paper. Times below
are in µs as written in the files; the frames hold ns.

eager_host_wait.json (host thread 1/1, streams 7 and 8; ranges chunk [0,60) and [60,104)):
    launch (us)   kernel      device interval   gap before it         why
    11  (corr 1)  gemm   s7   [20, 30)           lead  0..20  other   nothing before it in the trace
    41  (corr 2)  relu   s7   [45, 50)           30..45 = 15 host     launch 41 >= prev end 30
    46  (corr 3)  add    s7   [52, 56)           50..52 =  2 kernel   launch 46 <  prev end 50
    63  (corr 4)  mul    s7   [70, 76)           56..70 = 14 host     launch 63 >= 56
    --  (corr 99) orphan s7   [80, 85)           76..80 =  4 other    no launch call in the trace
    79  (corr 5)  cat    s8   [83, 90)           (overlaps orphan: union [80, 90))
                                                 trail 90..104 = 14 other
    busy = 10 + 5 + 4 + 6 + 10 = 35; wall = 104; idle = 69 = host 29 + kernel 2 + other 38.

graph_replay.json (range step [0,100), cfm_loop [20,50)):
    3   cudaLaunchKernelExC (corr 1) -> gemv [10,18)                 lead 0..10 = 10 other
    22  cudaGraphLaunch (corr 2)     -> cfm_a [30,35) cfm_b [36,38) cfm_c [38.5,44)
        18..30 = 12 host (graph launch 22 >= 18); 35..36 = 1 and 38..38.5 = 0.5 kernel (same graph)
    40  cudaGraphLaunch (corr 3)     -> cfm_a [46,51) cfm_b [52,54) cfm_c [54.5,60)
        44..46 = 2 kernel (launch 40 < 44); 51..52 = 1 and 54..54.5 = 0.5 kernel (same graph)
    63  cudaMemcpyAsync (corr 5)     -> memcpy [70,72)              60..70 = 10 host
                                                                    trail 72..100 = 28 other
    busy = 8 + 12.5 + 12.5 + 2 = 35; wall = 100; idle 65 = host 22 + kernel 5 + other 38.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cadencelab.profile import (
    CALL_RANGE,
    CPU_ONLY_REASON,
    Trace,
    TraceError,
    allocator_peak,
    busy_ns,
    device_intervals,
    export_chrome_trace,
    export_hta_folder,
    export_tensorboard_logdir,
    gaps,
    idle_split,
    launch_counts,
    launch_kind,
    load_trace,
    memory_timeline,
    parse_trace,
    profile_call,
    profile_stream,
    profiled,
    rho_table,
    stages,
    summary,
)

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
EAGER = FIXTURES / "eager_host_wait.json"
GRAPH = FIXTURES / "graph_replay.json"
CPU_ONLY = FIXTURES / "cpu_only.json"
FRAMES = ("kernels", "cpu_ops", "launches", "ranges")


@pytest.fixture(scope="module")
def eager() -> Trace:
    return load_trace(EAGER)


@pytest.fixture(scope="module")
def graph() -> Trace:
    return load_trace(GRAPH)


def assert_same_frames(a: Trace, b: Trace) -> None:
    for name in FRAMES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), obj=name)


# ----------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------


def test_frames_of_the_eager_fixture(eager):
    k = eager.kernels
    assert list(k["name"]) == ["gemm", "relu", "add", "mul", "orphan", "cat"]
    assert list(k["start_ns"]) == [20_000, 45_000, 52_000, 70_000, 80_000, 83_000]
    assert list(k["dur_ns"]) == [10_000, 5_000, 4_000, 6_000, 5_000, 7_000]
    assert list(k["stream"]) == [7, 7, 7, 7, 7, 8]
    assert list(k["launcher"]) == ["aten::mm", "aten::relu", "aten::add", "aten::mul", None, "aten::cat"]
    assert k["launch_ns"].isna().tolist() == [False, False, False, False, True, False]
    assert k.loc[k["name"] == "relu", "launch_ns"].item() == 41_000
    assert not k["graph"].any()
    c = eager.cpu_ops
    assert c.loc[c["name"] == "aten::add", ["start_ns", "end_ns"]].values.tolist() == [[45_500, 47_500]]
    assert eager.launches["kind"].value_counts().to_dict() == {"kernel_launch": 5, "sync": 1}
    assert eager.launches.loc[eager.launches["kind"] == "sync", "dur_ns"].item() == 8_500
    assert list(eager.ranges["name"]) == ["chunk", "chunk"] and set(eager.ranges["side"]) == {"cpu"}
    assert [e["name"] for e in eager.extra_events] == ["process_name", "process_name"]
    assert eager.span_ns() == (0, 104_000)


def test_graph_kernels_share_the_graph_launch(graph):
    k = graph.kernels
    g = k[k["correlation"] == 2]
    assert list(g["name"]) == ["cfm_a", "cfm_b", "cfm_c"]
    assert g["graph"].all() and set(g["launch_name"]) == {"cudaGraphLaunch"} and set(g["launch_ns"]) == {22_000}
    assert set(g["launcher"]) == {"cfm_loop"}      # innermost host range around the graph launch
    assert k.loc[k["cat"] == "memcpy", "launcher"].item() == "aten::copy_"
    assert graph.launches["kind"].tolist() == ["kernel_launch", "graph_launch", "graph_launch", "sync", "memcpy"]


def test_cpu_op_depth():
    t = load_trace(CPU_ONLY)
    assert dict(zip(t.cpu_ops["name"], t.cpu_ops["depth"])) == {"aten::linear": 0, "aten::addmm": 1, "aten::relu": 0}
    assert t.cpu_ops["dur_ns"].tolist() == [20_000, 15_250, 5_000]


def test_gzip_loads_like_plain(tmp_path, graph):
    gz = tmp_path / "graph_replay.json.gz"
    gz.write_bytes(gzip.compress(GRAPH.read_bytes()))
    assert_same_frames(load_trace(gz), graph)


def test_nanoseconds_exact_for_long_uptimes(tmp_path):
    # 1.2e13 us (~140 days of uptime): a double holds this only to ~2 ns, the text to 1 ns
    p = tmp_path / "big.json"
    p.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, '
                 '"ts": 12345678901234.567, "dur": 0.001}]}')
    t = load_trace(p)
    assert int(12345678901234.567 * 1000) != 12_345_678_901_234_567      # the naive conversion is off
    assert t.cpu_ops["start_ns"].item() == 12_345_678_901_234_567
    assert t.cpu_ops["end_ns"].item() == 12_345_678_901_234_568
    out = export_chrome_trace(t, tmp_path / "again.json")
    assert load_trace(out).cpu_ops["start_ns"].item() == 12_345_678_901_234_567


def test_parse_trace_in_memory_and_array_format():
    events = json.loads(GRAPH.read_text())["traceEvents"]
    assert_same_frames(parse_trace(events, source="mem"), load_trace(GRAPH))     # Chrome "array format"
    with pytest.raises(TraceError, match="^mem: missing 'traceEvents'"):
        parse_trace({"schemaVersion": 1}, source="mem")


def test_launch_kind_names():
    assert launch_kind("cudaLaunchKernel") == "kernel_launch"
    assert launch_kind("cudaLaunchKernel_v7000") == "kernel_launch"
    assert launch_kind("cuLaunchKernelEx") == "kernel_launch"
    assert launch_kind("cudaGraphLaunch_v10000") == "graph_launch"
    assert launch_kind("cudaMemcpyAsync_ptsz") == "memcpy"
    assert launch_kind("cudaMemsetAsync") == "memset"
    assert launch_kind("cudaStreamSynchronize") == "sync"
    assert launch_kind("cudaEventRecord") == "other"


# ----------------------------------------------------------------------------------------------
# Malformed input
# ----------------------------------------------------------------------------------------------


def _truncated_plain(tmp: Path) -> Path:
    p = tmp / "truncated.json"
    text = GRAPH.read_text()
    p.write_text(text[: len(text) // 2])
    return p


def _truncated_gz(tmp: Path) -> Path:
    p = tmp / "truncated.json.gz"
    data = gzip.compress(GRAPH.read_bytes())
    p.write_bytes(data[: len(data) // 2])
    return p


def _gz_name_plain_content(tmp: Path) -> Path:
    p = tmp / "fake.json.gz"
    p.write_bytes(GRAPH.read_bytes())
    return p


def _empty(tmp: Path) -> Path:
    p = tmp / "empty.json"
    p.write_text("")
    return p


def _events_not_list(tmp: Path) -> Path:
    p = tmp / "events_dict.json"
    p.write_text('{"traceEvents": {"ph": "X"}}')
    return p


def _ts_string(tmp: Path) -> Path:
    p = tmp / "ts_string.json"
    p.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 1}]}')
    return p


@pytest.mark.parametrize("make, expect", [
    (lambda tmp: FIXTURES / "not_json.json", "not valid JSON"),
    (lambda tmp: FIXTURES / "no_trace_events.json", "missing 'traceEvents'"),
    (lambda tmp: FIXTURES / "missing_dur.json", "1 event(s) without 'dur'"),
    (_truncated_plain, "truncated JSON"),
    (_truncated_gz, "truncated or corrupt gzip"),
    (_gz_name_plain_content, "not gzip"),
    (_empty, "empty"),
    (_events_not_list, "must be a list"),
    (_ts_string, "non-numeric 'ts'"),
    (lambda tmp: tmp / "absent.json", "cannot read"),
], ids=["not_json", "no_trace_events", "missing_dur", "truncated_plain", "truncated_gz", "gz_name_plain",
        "empty", "events_not_list", "ts_string", "absent"])
def test_malformed_raises_trace_error_naming_the_file(tmp_path, make, expect):
    path = make(tmp_path)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    msg = str(info.value)
    assert str(path) in msg and expect in msg, msg
    assert isinstance(info.value, ValueError)
    # raised with the facts, not chained onto a json/gzip/pandas traceback
    assert info.value.__cause__ is None
    assert info.value.__context__ is None or info.value.__suppress_context__


def test_missing_dur_message_points_at_the_event():
    with pytest.raises(TraceError, match=r"traceEvents\[1\] \(name='gemm', cat='kernel'\)"):
        load_trace(FIXTURES / "missing_dur.json")


# ----------------------------------------------------------------------------------------------
# Metrics: hand-worked numbers
# ----------------------------------------------------------------------------------------------


def test_gaps_eager_host_wait(eager):
    g = gaps(eager)
    assert g[["start_ns", "end_ns", "gap_ns"]].values.tolist() == [
        [30_000, 45_000, 15_000], [50_000, 52_000, 2_000], [56_000, 70_000, 14_000], [76_000, 80_000, 4_000]]
    assert g["category"].tolist() == ["host_wait", "kernel_wait", "host_wait", "other"]
    assert g["prev_kernel"].tolist() == ["gemm", "relu", "add", "mul"]
    assert g["next_kernel"].tolist() == ["relu", "add", "mul", "orphan"]
    iv = device_intervals(eager)
    assert iv[["start_ns", "end_ns"]].values.tolist() == [
        [20_000, 30_000], [45_000, 50_000], [52_000, 56_000], [70_000, 76_000], [80_000, 90_000]]
    assert iv["last_kernel"].tolist()[-1] == "cat" and iv["n_events"].tolist()[-1] == 2


def test_summary_eager_whole_trace(eager):
    s = summary(eager).iloc[0]
    assert (s.start_ns, s.end_ns) == (0, 104_000)
    assert s.wall_us == 104.0 and s.busy_us == 35.0
    assert s.slack_frac == (104 - 35) / 104
    assert (s.host_wait_us, s.kernel_wait_us, s.other_idle_us) == (29.0, 2.0, 38.0)
    assert s.host_wait_us + s.kernel_wait_us + s.other_idle_us == s.wall_us - s.busy_us
    assert (s.kernel_launches, s.graph_launches, s.kernels) == (5, 0, 6)
    assert s.na_reason == ""


def test_summary_per_chunk_window(eager):
    # chunk 0 [0,60): busy 20..30, 45..50, 52..56 = 19; idle 41 = other 20 (lead)
    #   + host 15 (30..45) + host 4 (56..60, the start of the 56..70 host gap) + kernel 2 (50..52)
    # chunk 1 [60,104): busy 70..76 + 80..90 = 16; idle 28 = host 10 (60..70) + other 4 (76..80) + 14 (trail)
    s = summary(eager, "chunk")
    assert s["occurrence"].tolist() == [0, 1]
    assert s[["wall_us", "busy_us", "host_wait_us", "kernel_wait_us", "other_idle_us"]].values.tolist() == [
        [60.0, 19.0, 19.0, 2.0, 20.0], [44.0, 16.0, 10.0, 0.0, 18.0]]
    assert s["slack_frac"].tolist() == [41 / 60, 28 / 44]
    assert s["kernel_launches"].tolist() == [3, 2] and s["kernels"].tolist() == [3, 3]
    # the same windows given as a frame or a pair
    pair = summary(eager, (60_000, 104_000)).iloc[0]
    assert (pair.busy_us, pair.host_wait_us) == (16.0, 10.0)
    frame = summary(eager, pd.DataFrame({"start_ns": [0], "end_ns": [60_000]}))
    assert frame["busy_us"].item() == 19.0


def test_graph_replay_idle_split(graph):
    g = gaps(graph)
    assert g["gap_ns"].tolist() == [12_000, 1_000, 500, 2_000, 1_000, 500, 10_000]
    assert g["category"].tolist() == ["host_wait"] + ["kernel_wait"] * 5 + ["host_wait"]
    assert g["next_launch_ns"].tolist() == [22_000, 22_000, 22_000, 40_000, 40_000, 40_000, 63_000]
    s = summary(graph).iloc[0]
    assert (s.wall_us, s.busy_us, s.slack_frac) == (100.0, 35.0, 0.65)
    assert (s.host_wait_us, s.kernel_wait_us, s.other_idle_us) == (22.0, 5.0, 38.0)
    assert (s.kernel_launches, s.graph_launches, s.kernels) == (1, 2, 7)


def test_graph_unaware_reader_loses_the_split(graph):
    # A reader that ignores cudaGraphLaunch finds no launch for the six graph kernels: the 12 us
    # host wait and all 5 us of device-side waits fall into "other". Busy is unchanged.
    s = summary(graph, graph_aware=False).iloc[0]
    assert (s.busy_us, s.host_wait_us, s.kernel_wait_us, s.other_idle_us) == (35.0, 10.0, 0.0, 55.0)


def test_memory_ops_can_be_left_out_of_busy(graph):
    # without the memcpy the last device interval ends at 60: host 12, kernel 5, other 10 + 40
    s = summary(graph, include_memory=False).iloc[0]
    assert (s.busy_us, s.host_wait_us, s.kernel_wait_us, s.other_idle_us) == (33.0, 12.0, 5.0, 50.0)
    assert busy_ns(graph, 0, 100_000, include_memory=False) == 33_000


def test_idle_split_and_launch_counts(graph):
    i = idle_split(graph).iloc[0]
    assert (i.host_wait_ns, i.kernel_wait_ns, i.other_ns, i.idle_ns) == (22_000, 5_000, 38_000, 65_000)
    c = launch_counts(graph).iloc[0]
    assert (c.kernel_launches, c.graph_launches, c.memcpy_calls, c.syncs, c.kernels, c.memcpys) == (1, 2, 1, 1, 6 + 1, 1)


def test_stages_attribute_graph_kernels_to_their_range(graph):
    # cfm_loop [20,50): both graph launches start inside -> 6 kernels, busy 25 us; the last kernel
    # ends at 60, so wall = 60 - 20 = 40 and slack = 15/40.
    s = stages(graph, ["cfm_loop", "step"]).set_index("range")
    cfm = s.loc["cfm_loop"]
    assert (cfm.cpu_us, cfm.wall_us, cfm.busy_us, cfm.slack_frac) == (30.0, 40.0, 25.0, 15 / 40)
    assert (cfm.kernel_launches, cfm.graph_launches, cfm.kernels) == (0, 2, 6)
    step = s.loc["step"]
    assert (step.wall_us, step.busy_us, step.kernels, step.kernel_launches) == (100.0, 35.0, 7, 1)
    agg = stages(load_trace(EAGER), "chunk", by_name=True).iloc[0]
    # chunk 0 launches gemm, relu, add (19 us; wall 60); chunk 1 launches mul and cat (13 us; wall 44)
    assert (agg["count"], agg.busy_us, agg.wall_us, agg.kernels) == (2, 32.0, 104.0, 5)
    assert agg.slack_frac == (104 - 32) / 104
    with pytest.raises(ValueError, match="no range named \\['vocoder_core'\\]"):
        stages(graph, ["vocoder_core"])


def test_cpu_only_trace_reports_not_applicable():
    t = load_trace(CPU_ONLY)
    s = summary(t)
    row = s.iloc[0]
    assert row.wall_us == 40.0
    assert np.isnan([row.busy_us, row.slack_frac, row.host_wait_us, row.kernel_wait_us, row.other_idle_us]).all()
    assert row.na_reason == CPU_ONLY_REASON and s.attrs["na_reason"] == CPU_ONLY_REASON
    assert (row.kernel_launches, row.kernels) == (0, 0)      # counts are real zeros
    st_ = stages(t)
    assert np.isnan(st_["busy_us"].item()) and st_["na_reason"].item() == CPU_ONLY_REASON


def test_summary_from_bare_frames_matches_trace(graph):
    bare = graph.kernels.drop(columns=["launch_ns", "graph", "launch_name", "launcher"])
    s = summary(bare, (0, 100_000), launches=graph.launches).iloc[0]
    assert (s.busy_us, s.host_wait_us, s.kernel_wait_us, s.other_idle_us) == (35.0, 22.0, 5.0, 38.0)
    assert (s.kernel_launches, s.graph_launches) == (1, 2)
    with pytest.raises(ValueError, match="no range named 'chunk'"):
        summary(graph, "chunk")
    with pytest.raises(ValueError, match="pass a Trace"):
        summary(bare, "chunk")


@st.composite
def _kernel_sets(draw):
    n = draw(st.integers(1, 8))
    rows = []
    for i in range(n):
        start = draw(st.integers(0, 150))
        dur = draw(st.integers(0, 30))
        launch = draw(st.one_of(st.none(), st.integers(0, start)))
        corr = draw(st.integers(1, 3))
        rows.append(dict(name=f"k{i}", cat="kernel", start_ns=start, end_ns=start + dur,
                         launch_ns=launch, graph=draw(st.booleans()), correlation=corr))
    ws = draw(st.integers(0, 200))
    we = draw(st.integers(ws, 220))
    return pd.DataFrame(rows).astype({"launch_ns": "Int64", "correlation": "Int64"}), ws, we


@settings(max_examples=150, deadline=None)
@given(_kernel_sets())
def test_idle_split_adds_up_and_busy_matches_brute_force(case):
    k, ws, we = case
    s = summary(k, (ws, we)).iloc[0]
    covered = np.zeros(230, dtype=bool)
    for a, b in zip(k["start_ns"], k["end_ns"]):
        covered[a:b] = True
    assert s.busy_us * 1e3 == pytest.approx(covered[ws:we].sum(), abs=1e-9)
    idle = s.host_wait_us + s.kernel_wait_us + s.other_idle_us
    assert idle == pytest.approx(s.wall_us - s.busy_us, abs=1e-9)
    assert min(s.host_wait_us, s.kernel_wait_us, s.other_idle_us) >= 0


# ----------------------------------------------------------------------------------------------
# Capture (CPU here; CUDA where a device exists)
# ----------------------------------------------------------------------------------------------


def _tiny_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def test_profile_call_on_cpu():
    m, x = _tiny_model(), torch.randn(2, 16)
    p = profile_call(m, x, device="cpu", warmup=1)
    assert torch.equal(p.result, m(x))
    assert len(p.cpu_ops) > 0 and p.cpu_ops["name"].str.startswith("aten::").any()
    assert CALL_RANGE in set(p.ranges["name"]) and p.window == CALL_RANGE
    s = p.summary()
    assert len(s) == 1 and s["wall_us"].item() > 0
    assert np.isnan(s["slack_frac"].item()) and s["na_reason"].item() == CPU_ONLY_REASON
    assert p.path is None and len(p.kernels) == 0


def test_profiled_stream_windows_on_cpu(tmp_path):
    m = _tiny_model()
    trace_file = tmp_path / "stream.pt.trace.json"
    with profiled("cpu", trace_path=str(trace_file)) as p:
        with pytest.raises(RuntimeError, match="not finished"):
            p.summary()
        for i in range(3):
            with torch.profiler.record_function("chunk"):
                m(torch.randn(1, 16))
    w = p.windows("chunk")
    assert w["occurrence"].tolist() == [0, 1, 2] and (w["wall_us"] > 0).all()
    assert w["busy_us"].isna().all() and (w["kernel_launches"] == 0).all()
    assert p.path == str(trace_file) and trace_file.exists()
    assert_same_frames(load_trace(trace_file), p.trace)


def test_profile_stream_on_cpu():
    m = _tiny_model()
    xs = [torch.randn(1, 16) for _ in range(4)]
    p = profile_stream([lambda x=x: m(x) for x in xs], device="cpu")
    assert len(p.result) == 4 and torch.equal(p.result[2], m(xs[2]))
    assert len(p.summary()) == 4 and p.window == "chunk"


@pytest.mark.cuda
def test_profile_call_on_cuda():
    m, x = _tiny_model().cuda(), torch.randn(8, 16, device="cuda")
    p = profile_call(m, x, device="cuda", warmup=2)
    s = p.summary().iloc[0]
    assert len(p.kernels) > 0 and s.kernels > 0 and s.kernel_launches > 0
    assert 0.0 <= s.slack_frac <= 1.0 and s.busy_us > 0
    assert s.host_wait_us + s.kernel_wait_us + s.other_idle_us == pytest.approx(s.wall_us - s.busy_us)
    assert p.kernels["launch_ns"].notna().all()


@pytest.mark.cuda
def test_graph_replay_on_cuda_counts_graph_launches():
    m, x = _tiny_model().cuda(), torch.randn(8, 16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            m(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        m(x)
    p = profile_call(g.replay, device="cuda", warmup=1)
    row = p.summary().iloc[0]
    # replay may also launch small RNG-prologue fills eagerly; the model's kernels come from the graph
    graph_kernels = p.kernels[p.kernels["graph"]]
    assert row.graph_launches == 1 and len(graph_kernels) >= 2
    assert graph_kernels["correlation"].nunique() == 1 and graph_kernels["launch_name"].str.contains("GraphLaunch").all()


# ----------------------------------------------------------------------------------------------
# Memory
# ----------------------------------------------------------------------------------------------


def test_rho_table():
    df = pd.DataFrame({
        "region": ["carry", "prompt", "scratch"],
        "reserved_bytes": [16 * 1000 * 512, 302 * 512, 4096],
        "live_bytes": [10 * 458 * 512, 302 * 512, 0],
    })
    r = rho_table(df)
    assert r["region"].tolist() == ["carry", "scratch", "prompt"]          # by waste, largest first
    carry = r.iloc[0]
    assert carry.rho == 16000 / 4580 and carry.waste_bytes == (16000 - 4580) * 512
    assert carry.reserved_MiB == 16 * 1000 * 512 / 2**20
    assert np.isinf(r.loc[r["region"] == "scratch", "rho"].item())
    assert r.loc[r["region"] == "prompt", "rho"].item() == 1.0
    with pytest.raises(ValueError, match=r"missing columns \['live_bytes'\]"):
        rho_table(df.drop(columns="live_bytes"))
    with pytest.raises(ValueError, match="non-negative"):
        rho_table(df.assign(live_bytes=[-1, 1, 1]))


def test_memory_timeline_on_a_hand_built_snapshot():
    snap = {"segments": [], "device_traces": [[
        {"action": "segment_alloc", "addr": 0x1000, "size": 2 << 20, "stream": 0, "time_us": 10},
        {"action": "alloc", "addr": 0x1000, "size": 512, "stream": 0, "time_us": 11},
        {"action": "alloc", "addr": 0x1200, "size": 1024, "stream": 0, "time_us": 12},
        {"action": "free_requested", "addr": 0x1000, "size": 512, "stream": 0, "time_us": 13},
        {"action": "free_completed", "addr": 0x1000, "size": 512, "stream": 0, "time_us": 14},
        {"action": "segment_free", "addr": 0x1000, "size": 2 << 20, "stream": 0, "time_us": 15},
    ], []]}
    df = memory_timeline(snap)
    assert df["action"].tolist()[:2] == ["segment_alloc", "alloc"] and len(df) == 6
    assert df["cumulative_allocated_bytes"].tolist() == [0, 512, 1536, 1024, 1024, 1024]
    assert df["cumulative_reserved_bytes"].tolist() == [2 << 20] * 5 + [0]
    assert df["time_us"].tolist() == [10.0, 11.0, 12.0, 13.0, 14.0, 15.0] and set(df["device"]) == {0}
    late = memory_timeline(snap, free_on="completed", initial_allocated_bytes=100)
    assert late["cumulative_allocated_bytes"].tolist() == [100, 612, 1636, 1636, 1124, 1124]
    with pytest.raises(ValueError, match="device_traces"):
        memory_timeline({"segments": []})


def test_allocator_peak_without_cuda_says_so():
    if torch.cuda.is_available():
        pytest.skip("CUDA present: covered by the cuda test")
    with pytest.raises(RuntimeError, match="torch.cuda is not available"):
        allocator_peak()


@pytest.mark.cuda
def test_allocator_peak_on_cuda():
    from cadencelab.profile import reset_allocator_peak

    reset_allocator_peak()
    x = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
    s = allocator_peak()
    assert s["peak_allocated_bytes"] >= x.numel() and s["peak_reserved_bytes"] >= s["peak_allocated_bytes"]


# ----------------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", [EAGER, GRAPH, CPU_ONLY], ids=lambda p: p.stem)
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_chrome_export_round_trips(tmp_path, fixture, suffix):
    t = load_trace(fixture)
    out = export_chrome_trace(t, tmp_path / f"out{suffix}")
    raw = gzip.decompress(Path(out).read_bytes()) if suffix.endswith(".gz") else Path(out).read_bytes()
    obj = json.loads(raw)
    assert isinstance(obj, dict) and isinstance(obj["traceEvents"], list) and obj["displayTimeUnit"] in ("ms", "ns")
    back = load_trace(out)
    assert_same_frames(back, t)
    assert back.meta == t.meta and back.extra_events == t.extra_events


def test_chrome_export_of_a_profile_round_trips(tmp_path):
    m = _tiny_model()
    p = profile_call(m, torch.randn(1, 16))
    out = export_chrome_trace(p, tmp_path / "p.json")
    assert_same_frames(load_trace(out), p.trace)


def test_hta_folder_rank(tmp_path):
    path = export_hta_folder(GRAPH, tmp_path / "hta")
    assert Path(path).name == "rank-0.json.gz"
    obj = json.loads(gzip.decompress(Path(path).read_bytes()))
    assert obj["distributedInfo"] == {"rank": 0}
    assert_same_frames(load_trace(path), load_trace(GRAPH))
    again = export_hta_folder(path, tmp_path / "hta2")                      # keeps the declared rank
    assert Path(again).name == "rank-0.json.gz"
    three = export_hta_folder(load_trace(EAGER), tmp_path / "hta3", rank=3)  # explicit rank written
    assert json.loads(gzip.decompress(Path(three).read_bytes()))["distributedInfo"]["rank"] == 3
    assert Path(three).name == "rank-3.json.gz"


def test_hta_loads_our_folder(tmp_path):
    ta = pytest.importorskip("hta.trace_analysis", exc_type=ImportError)
    folder = tmp_path / "hta"
    export_hta_folder(GRAPH, folder)
    analysis = ta.TraceAnalysis(trace_dir=str(folder))
    br = analysis.get_temporal_breakdown(visualize=False)
    assert list(br["rank"]) == [0]
    # HTA's "kernel_time" is the device span, first kernel start (10 us) to last end (72 us)
    assert br["kernel_time(us)"].item() == pytest.approx(62.0, abs=1.0)
    assert br["compute_time(us)"].item() > 0


def test_tensorboard_logdir_layout(tmp_path):
    path = export_tensorboard_logdir(GRAPH, tmp_path / "tb", run="demo", worker="worker0", span=1700000000000)
    assert Path(path).relative_to(tmp_path) == Path("tb/demo/worker0.1700000000000.pt.trace.json.gz")
    assert_same_frames(load_trace(path), load_trace(GRAPH))
    with pytest.raises(ValueError, match="worker name"):
        export_tensorboard_logdir(GRAPH, tmp_path / "tb", worker="w.12")


def test_tensorboard_plugin_reads_our_run(tmp_path):
    pytest.importorskip("torch_tb_profiler", exc_type=ImportError)
    from torch_tb_profiler import consts, io, utils
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.run_generator import RunGenerator

    logdir = tmp_path / "tb"
    export_tensorboard_logdir(GRAPH, logdir, run="cadencelab", span=1)
    export_tensorboard_logdir(CPU_ONLY, logdir, run="cpu", span=1)
    # the plugin's run discovery: a directory holding *.pt.trace.json[.gz] is a run
    runs = sorted(Path(root).name for root, _, files in io.walk(str(logdir))
                  if any(utils.is_chrome_trace_file(f) for f in files))
    assert runs == ["cadencelab", "cpu"]
    for run in runs:
        (name,) = [f for f in (logdir / run).iterdir()]
        m = consts.WORKER_PATTERN.match(name.name)
        assert m and m.group(1) == "worker0"
        data = RunProfileData.parse(m.group(1), m.group(2)[1:], str(name), str(tmp_path / "cache"))
        profile = RunGenerator(m.group(1), m.group(2)[1:], data).generate_run_profile()
        assert "overall" in [v.name for v in profile.views]
