"""Bad input to the trace loader: every refusal is a TraceError naming the file and, for an event,
its index and field; nothing loads with a wrong number, nothing blocks."""

from __future__ import annotations

import gzip
import json
import os
import threading

import pytest

from cadencelab.profile import TraceError, load_trace


def _ev(**kw):
    e = dict(ph="X", cat="kernel", name="k", ts=1.0, dur=2.0, pid=0, tid=7, args={"correlation": 1})
    e.update(kw)
    return e


def _doc(*events):
    return json.dumps({"traceEvents": [_ev(), *events]})


def _raw(field, token):
    """A document whose second event's ``field`` is the JSON token ``token`` (NaN, Infinity, ...)."""
    return _doc(_ev(**{field: 12345.5})).replace("12345.5", token)


CASES = [
    # (name, text, what the message must say)
    ("ts_infinity", _raw("ts", "Infinity"), ["traceEvents[1]", "non-finite 'ts'"]),
    ("ts_nan", _raw("ts", "NaN"), ["traceEvents[1]", "non-finite 'ts'"]),
    ("dur_neg_infinity", _raw("dur", "-Infinity"), ["traceEvents[1]", "non-finite 'dur'"]),
    ("ts_1e300", _doc(_ev(ts=1e300)), ["traceEvents[1]", "'ts' out of range"]),
    ("ts_1e400", _raw("ts", "1e400"), ["traceEvents[1]", "non-finite 'ts'"]),
    ("ts_10_400", _doc(_ev(ts=10**400)), ["traceEvents[1]", "'ts' out of range"]),
    ("dur_sum_overflow", _doc(_ev(ts=4e15, dur=4e15)), ["traceEvents[1]", "'ts' + 'dur' out of range"]),
    ("dur_negative", _doc(_ev(dur=-1)), ["traceEvents[1]", "negative 'dur'"]),
    ("ts_5000_digits", _raw("ts", "1" + "0" * 5000), ["not a usable JSON number"]),
    ("deep_nesting", '{"traceEvents": [' + "[" * 200_000 + "]" * 200_000 + "]}", ["nested too deeply"]),
    ("cat_number", _doc(_ev(cat=5)), ["traceEvents[1]", "'cat' that is not a string"]),
    ("correlation_text", _doc(_ev(args={"correlation": "abc"})), ["traceEvents[1]", "'args.correlation'"]),
    ("correlation_fraction", _doc(_ev(args={"correlation": 1.5})), ["traceEvents[1]", "'args.correlation'"]),
    ("correlation_huge", _doc(_ev(args={"correlation": 10**30})), ["traceEvents[1]", "'args.correlation'"]),
    ("external_id_text", _doc(_ev(args={"External id": "x"})), ["traceEvents[1]", "'args.External id'"]),
    ("pid_huge", _doc(_ev(pid=10**30)), ["traceEvents[1]", "'pid'"]),
    ("name_huge_no_dur", json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "n" * 100_000, "ts": 1}]}),
     ["traceEvents[0]", "without 'dur'"]),
    # wrong types are refused with the event's index, never dropped from the frames
    ("ph_number", _doc(_ev(ph=5)), ["traceEvents[1]", "'ph' that is not a string", "got 5"]),
    ("ph_list", _doc(_ev(ph=["X"])), ["traceEvents[1]", "'ph' that is not a string"]),
    ("ph_bool", _doc(_ev(ph=True)), ["traceEvents[1]", "'ph' that is not a string"]),
    ("args_string", _doc(_ev(args="correlation=1")), ["traceEvents[1]", "'args' that is not a JSON object", "str"]),
    ("args_list", _doc(_ev(args=[1, 2])), ["traceEvents[1]", "'args' that is not a JSON object", "list"]),
    ("args_number_on_metadata", _doc(dict(ph="M", name="process_name", pid=0, args=3)),
     ["traceEvents[1]", "'args' that is not a JSON object"]),
    ("name_number", _doc(_ev(name=12)), ["traceEvents[1]", "'name' that is not a string"]),
    ("name_object", _doc(_ev(name={"k": 1})), ["traceEvents[1]", "'name' that is not a string"]),
]


@pytest.mark.parametrize("name, text, says", CASES, ids=[c[0] for c in CASES])
def test_bad_event_is_refused_naming_index_and_field(tmp_path, name, text, says):
    path = tmp_path / f"{name}.json"
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    msg = str(info.value)
    assert msg.startswith(str(path)) and len(msg) < 600, msg
    for s in says:
        assert s in msg, msg


def test_good_trace_still_loads(tmp_path):
    path = tmp_path / "ok.json"
    path.write_text(_doc(_ev(ts=5091366725922.068, pid="Traces")))
    t = load_trace(path)
    assert sorted(t.kernels["start_ns"]) == [1000, 5091366725922068]


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    box = {}

    def load():
        try:
            load_trace(fifo)
        except TraceError as e:
            box["err"] = str(e)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "load_trace blocked on a FIFO"
    assert box["err"] == f"{fifo}: not a regular file"


def test_folder_is_refused(tmp_path):
    with pytest.raises(TraceError, match="not a regular file"):
        load_trace(tmp_path)


@pytest.mark.parametrize("data, says", [
    (b"\x1f\x8b\x08\x00garbage", "truncated or corrupt gzip"),
    (gzip.compress(b'{"traceEvents": [', mtime=0)[:-6], "truncated or corrupt gzip"),
    (gzip.compress(b"\xff\xfe not text", mtime=0), "not UTF-8"),
    (gzip.compress(b"[1, 2", mtime=0), "truncated JSON"),
], ids=["not_gzip", "cut_gzip", "gzip_of_bytes", "gzip_of_bad_json"])
def test_bad_gzip_or_json_names_the_file(tmp_path, data, says):
    path = tmp_path / "t.json.gz"
    path.write_bytes(data)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert str(path) in str(info.value) and says in str(info.value)


def test_gzip_bomb_is_refused(tmp_path, monkeypatch):
    from cadencelab.profile import trace

    monkeypatch.setattr(trace, "MAX_TRACE_BYTES", 10_000)
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(b" " * 1_000_000))
    with pytest.raises(TraceError, match="inflates past"):
        load_trace(path)


def test_summary_check_is_not_an_assert():
    """The idle-split consistency check in summary() must survive python -O."""
    import inspect

    from cadencelab.profile import metrics

    src = inspect.getsource(metrics.summary)
    assert "assert " not in src and "does not add up" in src


def test_a_refused_event_is_never_silently_dropped(tmp_path):
    """Two launches of 20 and 30 us: with one of them mistyped the load is refused, never summarised as one."""
    good = [_ev(ts=0.0, dur=20.0), _ev(ts=100.0, dur=30.0, args={"correlation": 2})]
    path = tmp_path / "ok.json"
    path.write_text(json.dumps({"traceEvents": good}))
    t = load_trace(path)
    assert len(t.kernels) == 2 and int(t.kernels["dur_ns"].sum()) == 50_000
    for i, bad in enumerate([dict(ph=5), dict(args="x"), dict(args=["x"])]):
        path = tmp_path / f"bad{i}.json"
        path.write_text(json.dumps({"traceEvents": [good[0], {**good[1], **bad}]}))
        with pytest.raises(TraceError, match=r"traceEvents\[1\]"):
            load_trace(path)


@pytest.mark.parametrize("field, value", [("occurrence", -1), ("occurrence", -3), ("occurrence", 1.0),
                                          ("occurrence", True), ("occurrence", "0"), ("max_cpu_depth", -1)])
def test_trim_trace_refuses_a_negative_or_non_integer_count_naming_the_field(tmp_path, field, value):
    """Never read from the end (a negative occurrence would silently trim the last one): one line naming the field."""
    import numpy as np

    from cadencelab.profile.trim import trim_trace

    win = dict(ph="X", cat="user_annotation", name="win", dur=10.0, pid=0, tid=1, args={})
    path = tmp_path / "two_windows.json"
    path.write_text(_doc(dict(win, ts=0.0), dict(win, ts=20.0)))
    t = load_trace(path)
    kw = {"occurrence": 0, "max_cpu_depth": None, field: value}
    with pytest.raises(ValueError, match=f"trim_trace: {field} must be an integer >= 0") as info:
        trim_trace(t, "win", **kw)
    assert "\n" not in str(info.value) and repr(value) in str(info.value)
    assert trim_trace(t, "win", occurrence=np.int64(1)).source.endswith("[win #1]")  # numpy integers are counts
