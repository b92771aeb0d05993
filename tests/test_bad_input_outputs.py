"""Bad output paths: recorded data is read-only to the tools, nothing is overwritten without
``--overwrite``, and every result file is written atomically.

* every writing command (each bench study, the soak's ``--analyse-only``, ``cadencelab catalog --json``,
  ``cadencelab profile``, the graph lesson, the tour) run against a clone-like copy of the repository
  (the package beside its ``data/``) is refused with one line, and that ``data/`` is byte-for-byte
  unchanged, with no file added (plain paths, ``..`` paths and a symlink into it alike);
* a second run into the same output folder is refused unless ``--overwrite``; the first file stays;
* a write that fails half-way leaves the old file whole and no temporary file behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cadencelab import cli
from cadencelab.profile.outputs import OutputRefused, atomic_path, data_folders, guard_output, inside_data, write_atomic

ROOT = Path(__file__).resolve().parents[1]

#: the writing commands, each aimed at DATA (a folder inside the clone's data/ folder); every one must be refused
TINY = {
    "token2wav": ["--config", "teaching", "--device", "cpu", "--blocks", "1", "--chunks", "2", "--arms", "B0,SRc",
                  "--inline", "--no-profile"],
    "soak": ["--config", "teaching", "--device", "cpu", "--chunks", "4", "--turn-every", "2"],
    "sessions": ["--device", "cpu"],
    "duplex": ["--device", "cpu", "--preset", "tiny"],
    "conditions": ["--device", "cpu", "--blocks", "1", "--chunks", "2"],
    "crossarch": ["--device", "cpu", "--models", "freeze"],
}


def _writing_commands(data: str, link: str) -> list[list[str]]:
    """Every writing command aimed into the recorded data (``data``: its h200 folder; ``link``: a symlink to it)."""
    cmds = []
    for study, flags in TINY.items():
        for out in (data, f"{data}/sub", f"{data}/../h200", link):
            cmds.append(["bench", study, *flags, "--out", out])
        cmds.append(["bench", study, *flags, "--out", data, "--overwrite"])  # --overwrite never opens data/
    soak = ["bench", "soak", *TINY["soak"], "--analyse-only"]
    cmds += [[*soak, "--out", data], [*soak, "--out", data, "--overwrite"], [*soak, "--out", link]]
    cmds += [["catalog", "--json", f"{data}/token2wav_factorial.json"], ["catalog", "--json", f"{data}/new.json"],
             ["catalog", "--json", f"{data}/token2wav_factorial.json", "--overwrite"],
             ["catalog", "--json", f"{link}/soak.json"], ["catalog", "--json", ""], ["catalog", "--json", " "]]
    cmds += [["profile", "--out", data], ["profile", "--out", link, "--overwrite"]]
    cmds += [["tour", f"{data}/tour"], ["tour", f"{data}/new_tour"]]
    return cmds


_DRIVER = """
import contextlib, io, json, sys
from cadencelab import cli
from cadencelab.course import graph_lesson
cmds, data = json.loads(sys.argv[1]), sys.argv[2]
res = []
for argv in cmds:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(argv)
    res.append([argv, rc, err.getvalue()])
for argv in (["--out", data], ["--out", data, "--overwrite"]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = graph_lesson.main(argv)
    res.append([["graph_lesson", *argv], rc, err.getvalue()])
print(json.dumps(res))
"""


def _digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (links not followed) -> its SHA-256."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A clone-like copy of the repository: the package and beside it a copy of the recorded data/."""
    root = tmp_path_factory.mktemp("clone")
    shutil.copytree(ROOT / "cadencelab", root / "cadencelab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "data", root / "data")
    for name in ("notebooks", "docs"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "link").symlink_to(root / "data" / "h200")
    return root


def test_every_writing_command_leaves_the_recorded_data_byte_for_byte_unchanged(clone):
    data = clone / "data"
    before = _digest(data)
    cmds = _writing_commands("data/h200", "link")
    env = {k: v for k, v in os.environ.items() if k not in ("CADENCELAB_DATA", "OUT")}
    env["PYTHONPATH"] = str(clone)
    proc = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(cmds), "data/h200"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == len(cmds) + 2
    for argv, rc, err in results:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert rc == 2, (argv, rc, err)
        assert len(lines) == 1 and "Traceback" not in err, (argv, err)
        if argv[-1].strip() and "--json" not in argv[-2:]:
            assert "recorded data folder" in lines[0] or "course sources" in lines[0], (argv, err)
    empty = [err for argv, _, err in results if argv[-2:] in (["--json", ""], ["--json", " "])]
    assert len(empty) == 2 and all("--json" in e and "empty" in e for e in empty)
    assert _digest(data) == before  # not one byte changed, not one file added or removed
    assert not list(clone.glob("**/.tmp-*"))


def test_the_guard_knows_the_data_folders(tmp_path, monkeypatch):
    assert ROOT / "data" in data_folders()
    assert inside_data(ROOT / "data" / "h200" / "soak.json") == ROOT / "data"
    assert inside_data(ROOT / "data" / "h200" / ".." / ".." / "out") is None
    assert inside_data(tmp_path) is None
    monkeypatch.setenv("CADENCELAB_DATA", str(tmp_path / "mydata"))
    assert inside_data(tmp_path / "mydata" / "x") == (tmp_path / "mydata").resolve()
    (tmp_path / "alias").symlink_to(tmp_path / "mydata", target_is_directory=True)
    assert inside_data(tmp_path / "alias" / "x") is not None  # a link into it is followed


@pytest.mark.parametrize("path", ["", "  ", None])
def test_empty_output_paths_are_refused(path):
    with pytest.raises(OutputRefused, match="--json: is empty"):
        guard_output(path, "--json", file=True)


# ---------------------------------------------------------------------------------------
# nothing overwritten without --overwrite
# ---------------------------------------------------------------------------------------


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_catalog_json_is_not_overwritten_without_the_flag(capsys, tmp_path):
    path = tmp_path / "cat.json"
    assert cli.main(["catalog", "--json", str(path)]) == 0
    first = path.read_bytes()
    assert json.loads(first)["model"] == "token2wav"
    capsys.readouterr()
    assert cli.main(["catalog", "--json", str(path), "--steps", "5"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--json" in line and "already exists" in line and "--overwrite" in line
    assert path.read_bytes() == first
    assert cli.main(["catalog", "--json", str(path), "--steps", "5", "--overwrite"]) == 0
    assert path.read_bytes() != first and json.loads(path.read_bytes())["params"]["n_steps"] == 5


def test_soak_analyse_only_is_not_overwritten_without_the_flag(capsys, tmp_path):
    argv = ["bench", "soak", "--config", "teaching", "--device", "cpu", "--chunks", "4", "--turn-every", "2",
            "--analyse-only", "--out", str(tmp_path)]
    row = dict(chunk=0, turn=0, call=0, kind="first", tokens=3, frames=6, sha_i16="a", sha_f32="b", latency_ms=1.0,
               wall_ms=1.0, allocated_bytes=None, peak_bytes=None, reserved_bytes=None, replays=0, misses={}, events={})
    for arm in ("SRc", "B0"):  # rows already under --out are the analysis' input
        (tmp_path / f"rows_{arm}_0.jsonl").write_text(json.dumps(dict(row, arm=arm)) + "\n")
    rc = cli.main(argv)  # analysed (one chunk of the four planned): the summary is written
    first = (tmp_path / "soak.json").read_bytes()
    capsys.readouterr()
    assert cli.main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--out" in line and "soak.json" in line and "--overwrite" in line
    assert (tmp_path / "soak.json").read_bytes() == first and (tmp_path / "rows_SRc_0.jsonl").exists()
    assert cli.main([*argv, "--overwrite"]) == rc
    assert json.loads((tmp_path / "soak.json").read_text())["summary"]["chunks"] == 1


#: per study: its config and run function, and a result file an earlier run left
STUDY_FILES = [
    ("token2wav", "StudyConfig", "run_study", "token2wav_factorial.json"),
    ("token2wav", "StudyConfig", "run_study", "trace_B0.json.gz"),
    ("soak", "SoakConfig", "run_soak", "soak.json"),
    ("soak", "SoakConfig", "run_soak", "rows_SRc_0.jsonl"),
    ("sessions", "SessionsConfig", "run_study", "sessions_chunks.csv"),
    ("sessions", "SessionsConfig", "run_study", "runs_B0.jsonl"),
    ("duplex", "DuplexStudyConfig", "run_study", "duplex_second_rows.csv"),
    ("conditions", "ConditionsConfig", "run_conditions", "device_conditions.json"),
    ("conditions", "ConditionsConfig", "run_conditions", "factorial/token2wav_factorial_chunks.csv"),
    ("crossarch", "CrossArchConfig", "run_study", "freeze_style.json"),
]


@pytest.mark.parametrize("module, config, run, name", STUDY_FILES, ids=[f"{m}:{n}" for m, _, _, n in STUDY_FILES])
def test_every_study_refuses_to_overwrite_before_any_work(tmp_path, monkeypatch, module, config, run, name):
    import importlib

    from cadencelab.bench import common

    mod = importlib.import_module(f"cadencelab.bench.{module}")

    def no_build(*a, **k):
        raise AssertionError("the study started work in a folder it may not write")

    for m in (common, mod, importlib.import_module("cadencelab.bench.token2wav")):
        monkeypatch.setattr(m, "built_checkpoint", no_build, raising=False)
    old = tmp_path / name
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_bytes(b"recorded earlier")
    kw = dict(device="cpu", out=str(tmp_path))
    if module == "soak":
        kw.update(arms=("SRc", "B0"), config="teaching")
    if module == "crossarch":
        kw.update(models=("freeze",))
    cfg = getattr(mod, config)(**kw)
    with pytest.raises(OutputRefused, match=rf"--out: .*{Path(name).name}.*--overwrite"):
        getattr(mod, run)(cfg, progress=lambda m: None)
    assert old.read_bytes() == b"recorded earlier"


# ---------------------------------------------------------------------------------------
# atomic writes
# ---------------------------------------------------------------------------------------


class Boom(RuntimeError):
    pass


def test_a_failed_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    from cadencelab.bench.common import write_csv, write_json

    path = tmp_path / "r.json"
    write_json({"a": 1}, path)
    with pytest.raises(Boom):
        with atomic_path(path) as tmp:
            tmp.write_text('{"a": 2, "half')  # interrupted half-way
            raise Boom()
    assert json.loads(path.read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]

    csv = tmp_path / "c.csv.gz"
    write_csv(pd.DataFrame({"x": [1, 2]}), csv)
    before = csv.read_bytes()

    def half(self, path, **kw):
        Path(path).write_bytes(b"x\n1\n")
        raise Boom()

    monkeypatch.setattr(pd.DataFrame, "to_csv", half)
    with pytest.raises(Boom):
        write_csv(pd.DataFrame({"x": [9]}), csv)
    assert csv.read_bytes() == before and pd.read_csv(csv)["x"].tolist() == [1, 2]  # still gzip, still whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv.gz", "r.json"]

    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "{}")
    assert json.loads(path.read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv.gz", "r.json"]


def test_atomic_files_are_ordinary_files(tmp_path):
    p = write_atomic(tmp_path / "sub" / "t.txt", "hello")
    assert p.read_text() == "hello"
    mask = os.umask(0)
    os.umask(mask)
    assert (p.stat().st_mode & 0o777) == (0o666 & ~mask)


@pytest.mark.parametrize("target", ["data/h200/soak.json", "data/new.json", "data/h200/../h200/x.csv.gz"])
def test_the_writers_themselves_refuse_the_data_folder(target):
    """Even a programmatic caller that skips the flag checks cannot write into data/."""
    from cadencelab.bench.common import write_csv, write_json

    path = ROOT / target
    before = path.read_bytes() if path.exists() else None
    for write in (lambda: write_json({}, path), lambda: write_csv(pd.DataFrame({"x": [1]}), path),
                  lambda: write_atomic(path, b"")):
        with pytest.raises(OutputRefused, match="recorded data folder"):
            write()
    assert (path.read_bytes() if path.exists() else None) == before


def test_a_split_soak_needs_no_overwrite(tmp_path, monkeypatch):
    """The reference alone writes only its rows (no summary), so the arm's run into the same folder compares
    without --overwrite; a second arm run would replace the summary, and is refused without it."""
    import contextlib

    from cadencelab.bench import soak

    def fake_arms(cfg, turns, ckpt, out, meta, failures, progress):
        for arm in cfg.arms:
            (out / f"rows_{arm}_0.jsonl").write_text("")

    monkeypatch.setattr(soak, "built_checkpoint", lambda *a, **k: contextlib.nullcontext("ckpt"))
    monkeypatch.setattr(soak, "_run_arms", fake_arms)
    cfg = dict(config="teaching", device="cpu", chunks=4, turn_every=2, out=str(tmp_path))
    soak.run_soak(soak.SoakConfig(arms=("B0",), **cfg), progress=lambda m: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows_B0_0.jsonl"]
    soak.run_soak(soak.SoakConfig(arms=("SRc",), **cfg), progress=lambda m: None)
    assert (tmp_path / "soak.json").exists() and (tmp_path / "rows_B0_0.jsonl").exists()
    with pytest.raises(OutputRefused, match="rows_SRc_0.jsonl, soak.json, soak_chunks.csv"):
        soak.run_soak(soak.SoakConfig(arms=("SRc",), **cfg), progress=lambda m: None)
    soak.run_soak(soak.SoakConfig(arms=("SRc",), overwrite=True, **cfg), progress=lambda m: None)
