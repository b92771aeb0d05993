"""Bad recorded data: every course loader (``cadencelab.course.data``) refuses a malformed file with one
line naming the file (and the key), reads only inside the data folder (a recorded JSON names its CSV by
file name only), and never returns a silently wrong frame.

Each case writes a small data folder under ``$CADENCELAB_DATA`` holding one bad file.
"""

from __future__ import annotations

import gzip
import json

import pytest

from cadencelab.course import data

SOAK = {"summary": {"chunks": 1}, "turns": [{"turn": 0}], "chunks_csv": "soak_chunks.csv", "provenance": {}}
CHUNKS = "chunk,turn,kind,warmup,exact_i16,latency_ms,peak_bytes\n0,0,steady,False,True,1.0,5\n"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """An empty data folder in use (``h200/`` and ``paper/`` inside), with a file outside it to escape to."""
    root = tmp_path / "data"
    (root / "h200").mkdir(parents=True)
    (root / "paper").mkdir()
    (tmp_path / "x.csv").write_text("secret,1\n")
    (tmp_path / "x.csv.gz").write_bytes(gzip.compress(b"secret,1\n"))
    monkeypatch.setenv("CADENCELAB_DATA", str(root))
    return root


def _soak(root, **over):
    (root / "h200" / "soak.json").write_text(json.dumps({**SOAK, **over}))
    (root / "h200" / "soak_chunks.csv.gz").write_bytes(gzip.compress(CHUNKS.encode()))


def test_a_good_soak_loads(folder):
    _soak(folder)
    assert data.soak_chunks()["latency_ms"].tolist() == [1.0]
    assert data.soak_summary() == {"chunks": 1}


@pytest.mark.parametrize("name", ["../../x.csv", "../x.csv", "/etc/passwd", "h200/soak_chunks.csv", "..", ".", "",
                                  5, None, ["soak_chunks.csv"]])
def test_a_named_csv_is_a_file_name_beside_its_json(folder, name):
    _soak(folder, chunks_csv=name)
    with pytest.raises((ValueError, KeyError)) as e:
        data.soak_chunks()
    msg = str(e.value)
    assert "soak.json" in msg and "chunks_csv" in msg and "\n" not in msg, msg


def test_a_symlink_out_of_the_data_folder_is_refused(folder, tmp_path):
    _soak(folder)
    (folder / "h200" / "soak_chunks.csv.gz").unlink()
    (folder / "h200" / "soak_chunks.csv.gz").symlink_to(tmp_path / "x.csv.gz")
    with pytest.raises(ValueError, match="outside the data folder"):
        data.soak_chunks()


@pytest.mark.parametrize("rel", ["../x.csv", "../../etc/passwd", "/etc/passwd", "h200/../../x.csv"])
def test_a_path_out_of_the_data_folder_is_refused(folder, rel):
    with pytest.raises(ValueError, match="outside the data folder"):
        data.provenance(rel)
    with pytest.raises(ValueError, match="outside the data folder"):
        data.data_path(rel)


#: (file under h200/, its bytes, the loader, what the one line says)
MALFORMED = [
    ("soak.json", b"[1, 2]", data.soak_summary, "expected a JSON object at the top, got an array"),
    ("soak.json", b'"text"', data.soak_summary, "got a string"),
    ("soak.json", b"null", data.soak_summary, "got null"),
    ("soak.json", b"\xff\xfe{}", data.soak_summary, "not UTF-8 text (byte 0)"),
    ("soak.json", b"", data.soak_summary, "not valid JSON"),
    ("soak.json", b'{"summary": ', data.soak_summary, "not valid JSON"),
    ("soak.json", b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", data.soak_summary, "nested too deeply"),
    ("soak.json", json.dumps({"summary": [1]}).encode(), data.soak_summary, "'summary' must be a JSON object"),
    ("soak.json", json.dumps({"turns": {"a": 1}}).encode(), data.soak_turns, "'turns' must be a JSON array"),
    ("soak.json", json.dumps({"turns": [1, 2]}).encode(), data.soak_turns, "'turns'[0] must be a record"),
    ("soak.json", json.dumps({"turns": [{"turn": 0}, "x"]}).encode(), data.soak_turns, "'turns'[1] must be a record"),
    ("token2wav_factorial.json", json.dumps({"arms": [1]}).encode(), data.factorial, "'arms' must be a JSON object"),
    ("token2wav_factorial.json", json.dumps({"arms": {"B0": "fast"}}).encode(), data.factorial,
     "'arms'['B0'] must be a record"),
    ("token2wav_factorial.json", json.dumps({"chunks": "c.csv"}).encode(), data.factorial_chunks,
     "'chunks' must be a JSON array"),
    ("token2wav_factorial.json", json.dumps({"blocks": [[1, 2]]}).encode(), data.factorial_blocks,
     "'blocks'[0] must be a record"),
    ("moshi_mimi.json", json.dumps({"arms": {"eager": 3}}).encode(), data.mimi_arms, "'arms'['eager']"),
    ("sessions.json", json.dumps({"capacity": {"x": 1}}).encode(), data.sessions_capacity, "'capacity'"),
    ("device_conditions.json", json.dumps({"conditions": None, "summary": {}}).encode(), data.device_conditions,
     "'conditions' must be a JSON array, got null"),
    ("tour/summary.json", json.dumps({"notebook": "x"}).encode(), data.tour_live, "not a tour summary"),
    ("tour/summary.json", b"[1, 2]", data.tour_live, "not a tour summary"),
]


@pytest.mark.parametrize("rel, raw, load, says", MALFORMED, ids=[f"{r}:{s[:30]}" for r, _, _, s in MALFORMED])
def test_a_malformed_file_is_named_with_what_is_wrong(folder, rel, raw, load, says):
    path = folder / "h200" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    with pytest.raises((ValueError, KeyError)) as e:
        load()
    msg = str(e.value).strip("'\"")
    assert str(path) in msg and says in msg and "\n" not in msg, msg


@pytest.mark.parametrize("raw, says", [
    (CHUNKS.encode(), "not a readable CSV (gzip)"),  # a .gz that is not gzip
    (b"\x1f\x8b\x08\x00garbage", "not a readable CSV (gzip)"),  # a truncated gzip
    (gzip.compress(b"\xff\xfe\x00bad", mtime=0), "not a readable CSV (gzip)"),  # gzip of bytes that are not UTF-8
    (gzip.compress(b"", mtime=0), "not a readable CSV (gzip)"),  # no columns at all
])
def test_a_csv_that_cannot_be_read_is_named(folder, raw, says):
    _soak(folder)
    path = folder / "h200" / "soak_chunks.csv.gz"
    path.write_bytes(raw)
    with pytest.raises(ValueError) as e:
        data.soak_chunks()
    assert str(path) in str(e.value) and says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("rel, load", [("soak.json", data.soak_summary), ("soak_chunks.csv.gz", data.soak_chunks),
                                       ("sessions.csv.gz", data.sessions_per_session)])
def test_a_folder_where_a_file_belongs_is_named(folder, rel, load):
    _soak(folder)
    (folder / "h200" / "sessions.json").write_text("{}")
    target = folder / "h200" / rel
    if target.exists():
        target.unlink()
    target.mkdir()
    with pytest.raises(ValueError, match="a folder, not a recorded file") as e:
        load()
    assert str(target) in str(e.value)


def test_paper_csvs_that_are_not_csv_are_named(folder):
    (folder / "paper" / "duplex_second.csv").write_bytes(b"\xff\xfe\xfa")
    with pytest.raises(ValueError, match="duplex_second.csv: not a readable CSV"):
        data.paper_duplex_second()
    (folder / "paper" / "figures.csv").write_bytes(b'key,value\n"unclosed,1\n')
    with pytest.raises(ValueError, match="figures.csv"):
        data.paper_figures()
