"""Bad input on the command line: every value is refused before a model is built, with one line
naming the flag typed and a non-zero exit code; failed arms and a failed exactness gate exit 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cadencelab import cli

ROOT = Path(__file__).resolve().parents[1]
T2W = ["bench", "token2wav", "--config", "teaching", "--device", "cpu", "--inline", "--no-profile",
       "--chunks", "2", "--blocks", "1"]


def _run(capsys, argv):
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


CASES = [
    # (argv, what the one line must name, rc)
    (T2W + ["--arms", "B0,XYZ"], ["--arms", "'XYZ'"], 2),
    (T2W + ["--arms", "SRc"], ["--arms", "B0"], 2),
    (T2W + ["--arms", "B0,B0"], ["--arms", "twice"], 2),
    (T2W + ["--steps", "0"], ["--steps", "1..16"], 2),
    (T2W + ["--steps", "17"], ["--steps", "got 17"], 2),
    (T2W + ["--seed", "-1"], ["--seed", "got -1"], 2),
    (T2W + ["--chunks", "-1"], ["--chunks", "got -1"], 2),
    (T2W + ["--chunks", "1000000000"], ["--chunks", "100000"], 2),
    (T2W + ["--blocks", "0"], ["--blocks", "got 0"], 2),
    (T2W + ["--blocks", "two"], ["--blocks", "'two'"], 2),
    (T2W + ["--block-timeout", "nan"], ["--block-timeout", "'nan'"], 2),
    (T2W + ["--compile-timeout", "-5"], ["--compile-timeout", "'-5'"], 2),
    (T2W + ["--device", "tpu"], ["--device", "'tpu'"], 2),
    (T2W + ["--device", "cuda:99"], ["--device", "cuda:99"], 2),
    (T2W + ["--out", "/etc/passwd"], ["--out", "/etc/passwd", "not a folder"], 2),
    (T2W + ["--out", "/etc/passwd/sub"], ["--out", "is a file"], 2),
    (["bench", "duplex", "--device", "cpu", "--arms", "B0,QQ"], ["--arms", "'QQ'"], 2),
    (["bench", "duplex", "--device", "cpu", "--seconds", "1"], ["--seconds", "got 1"], 2),
    (["bench", "duplex", "--device", "cpu", "--backend", "nope"], ["--backend", "'nope'"], 2),
    (["bench", "soak", "--device", "cpu", "--arm", "XX"], ["--arm", "'XX'"], 2),
    (["bench", "soak", "--device", "cpu", "--arms", "B0,foo"], ["--arms", "'foo'"], 2),
    (["bench", "soak", "--device", "cpu", "--chunks", "0"], ["--chunks", "got 0"], 2),
    (["bench", "soak", "--device", "cpu", "--timeout", "inf"], ["--timeout", "'inf'"], 2),
    (["bench", "crossarch", "--device", "cpu", "--models", "mimi,foo"], ["--models", "'foo'"], 2),
    (["bench", "crossarch", "--device", "cpu", "--arms", "eager,x"], ["--arms", "'x'"], 2),
    (["bench", "crossarch", "--device", "cpu", "--frames", "0"], ["--frames", "got 0"], 2),
    (["bench", "sessions", "--device", "cpu", "--arms", "SRc,QQ"], ["--arms", "'QQ'"], 2),
    (["bench", "sessions", "--device", "cpu", "--sessions", "1,x"], ["--sessions", "'1,x'"], 2),
    (["bench", "sessions", "--device", "cpu", "--sessions", "0"], ["--sessions", "'0'"], 2),
    (["bench", "sessions", "--device", "cpu", "--workloads", "foo"], ["--workloads", "'foo'"], 2),
    (["bench", "sessions", "--device", "cpu", "--cadence", "0"], ["--cadence", "'0'"], 2),
    (["bench", "no-such-study"], ["invalid choice", "no-such-study"], 2),
    (["profile", "--steps", "0"], ["--steps", "got 0"], 2),
    (["profile", "--steps", "17"], ["--steps", "got 17"], 2),
    (["profile", "--seed", "-1"], ["--seed", "got -1"], 2),
    (["profile", "--chunks", "0"], ["--chunks", "got 0"], 2),
    (["profile", "--chunks", "1000000000"], ["--chunks", "1000"], 2),
    (["profile", "--out", "/etc/passwd"], ["--out", "/etc/passwd"], 2),
    (["profile", "--arm", "XYZ"], ["--arm", "'XYZ'"], 2),
    (["catalog", "--f-chunk", "0"], ["--f-chunk", "got 0"], 2),
    (["catalog", "--f-chunk", "41"], ["--f-chunk 41", "whole number of tokens"], 2),
    (["catalog", "--f-prompt", "-1"], ["--f-prompt", "got -1"], 2),
    (["catalog", "--f-retained", "0"], ["--f-retained", "got 0"], 2),
    (["catalog", "--steps", "0"], ["--steps", "got 0"], 2),
    (["catalog", "--k-max", "0"], ["--k-max", "got 0"], 2),
    (["catalog", "--model", "nope"], ["--model", "'nope'"], 2),
    (["catalog", "--model", "backbone", "--f-chunk", "50"], ["--f-chunk", "token2wav only"], 2),
    (["catalog", "--json", "/tmp"], ["--json", "folder"], 2),
    (["catalog", "--json", "/etc/passwd/x.json"], ["--json", "/etc/passwd"], 2),
    (["lab", "--port", "70000"], ["--port", "1..65535", "70000"], 2),
    (["lab", "--port", "-1"], ["--port", "got -1"], 2),
    (["lab", "--port", "http"], ["--port", "'http'"], 2),
    (["tour", "/etc/passwd"], ["OUT_DIR", "/etc/passwd", "not a folder"], 2),
    (["no-such-command"], ["invalid choice", "no-such-command"], 2),
]


@pytest.mark.parametrize("argv, names, rc", CASES, ids=[" ".join(c[0][1:] if c[0][0] == "bench" else c[0])[-60:]
                                                         for c in CASES])
def test_bad_flag_is_one_line_naming_it(capsys, argv, names, rc):
    got, out, err = _run(capsys, argv)
    line = _one_line(err)
    assert got == rc, (got, err)
    for n in names:
        assert n in line, line


def test_validation_comes_before_any_work(capsys, tmp_path, monkeypatch):
    """An unknown arm is refused before the weights are built (no checkpoint, no output folder)."""
    from cadencelab.bench import token2wav

    def no_build(*a, **k):
        raise AssertionError("run_study reached with a bad --arms")

    monkeypatch.setattr(token2wav, "run_study", no_build)
    out = tmp_path / "smoke"
    rc, _, err = _run(capsys, T2W + ["--arms", "B0,XYZ", "--out", str(out)])
    assert rc == 2 and "--arms" in err and not out.exists()


def _result(failures=None, non_exact=False):
    """What run_study returns for a run of B0 and SRc (built by the study's own analysis)."""
    from cadencelab.bench.token2wav import StudyConfig, analyse

    cfg = StudyConfig(config="teaching", device="cpu", arms=("B0", "SRc", "S"), blocks=1)

    def block(arm, b, sha):
        rows = [dict(arm=arm, block=b, turn=0, chunk=0, kind="steady", tokens=28, frames=50, latency_ms=1.0,
                     wall_ms=1.0, sha_mel=sha, sha_i16=sha)]
        return dict(arm=arm, block=b, rows=rows, peak_bytes=None, sha_mel=sha, sha_f32=sha, sha_i16=sha,
                    summaries={}, primings=2, vendor_graph_fires={}, counters=[], warmup=b == 0, process=0)

    blocks = [block(a, b, "x" if (a == "SRc" and non_exact and b == 1) else "h") for b in (0, 1) for a in ("B0", "SRc")]
    return analyse(cfg, blocks, {}, dict(failures or {}), [])


@pytest.mark.parametrize("failures, non_exact, rc, names", [
    ({}, False, 0, []),
    ({"S": "Traceback ...\nRuntimeError: boom"}, False, 1, ["arm(s) failed: S"]),
    ({}, True, 1, ["exactness gate failed for: SRc"]),
], ids=["all_pass", "arm_failed", "not_exact"])
def test_bench_exit_code_reflects_failed_arms_and_gate(capsys, monkeypatch, tmp_path, failures, non_exact, rc, names):
    from cadencelab.bench import token2wav

    monkeypatch.setattr(token2wav, "run_study", lambda cfg, progress=print: _result(failures, non_exact))
    got, out, err = _run(capsys, T2W + ["--arms", "B0,SRc,S", "--out", str(tmp_path / "o")])
    assert got == rc, err
    assert "summary:" in out  # the table is printed either way
    for n in names:
        assert n in _one_line(err)


def test_every_study_ends_with_one_tail(capsys):
    """exit_code: 0, or the one failed line on stderr and 1, whichever study (bad values exit 2 earlier)."""
    from cadencelab.bench.flags import exit_code

    assert exit_code("bench x") == 0 and capsys.readouterr().err == ""
    assert exit_code("bench x", ["S"], ["SRc"]) == 1
    assert _one_line(capsys.readouterr().err) == "bench x: arm(s) failed: S; exactness gate failed for: SRc"


@pytest.mark.parametrize("failures, passed, rc", [([], True, 0), (["SRc turns 0..3 on cpu: boom"], False, 1),
                                                  ([], False, 1)], ids=["pass", "arm_failed", "gate_failed"])
def test_soak_exits_like_every_study(capsys, monkeypatch, tmp_path, failures, passed, rc):
    from cadencelab.bench import soak

    res = dict(failures=failures, summary=dict(passed=passed))
    monkeypatch.setattr(soak, "run_soak", lambda cfg, progress=print: res)
    monkeypatch.setattr(soak, "table", lambda res: "summary: ...")
    got, out, err = _run(capsys, ["bench", "soak", "--device", "cpu", "--config", "teaching", "--out", str(tmp_path)])
    assert got == rc, err
    if rc:
        assert _one_line(err) == ("bench soak: arm(s) failed: SRc" if failures else
                                  "bench soak: exactness gate failed for: SRc")


def _cli_subprocess(*argv, env_extra=None, timeout=60):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("CADENCELAB_DEBUG", None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "cadencelab.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(ROOT))


def test_subprocess_unknown_arm_exits_before_work():
    p = _cli_subprocess(*T2W, "--arms", "B0,XYZ")
    assert p.returncode == 2
    assert _one_line(p.stderr).startswith("cadencelab bench token2wav: error: --arms: unknown 'XYZ'")
    assert "weights built" not in p.stdout


def test_traceback_only_with_debug():
    quiet = _cli_subprocess("catalog", "--f-chunk", "41")
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr
    loud = _cli_subprocess("catalog", "--f-chunk", "41", "--debug")
    assert loud.returncode != 0 and "Traceback" in loud.stderr and "FlagError" in loud.stderr
    env = _cli_subprocess("catalog", "--f-chunk", "41", env_extra={"CADENCELAB_DEBUG": "1"})
    assert env.returncode != 0 and "Traceback" in env.stderr


@pytest.mark.parametrize("flags, names", [
    (["--arms", "B0,XYZ"], "--arms: unknown 'XYZ'"),
    (["--arms", "SRc"], "--arms: must include B0"),
    (["--conditions", "defaults"], "--conditions: must include the exact condition"),
    (["--conditions", "nope"], "--conditions"),
    (["--blocks", "0"], "--blocks"),
    (["--device", "cuda:7"], "--device"),
])
def test_conditions_study_flags_are_checked_before_any_work(capsys, flags, names):
    argv = ["bench", "conditions", "--config", "teaching", "--device", "cpu", "--out", "/tmp/cadencelab-unused", *flags]
    rc, _, err = _run(capsys, argv)
    assert rc != 0 and names in _one_line(err)
