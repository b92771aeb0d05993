"""The ``cadencelab`` command line: catalog, bench pass-through, profile, lab/tour fallback."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cadencelab import cli
from cadencelab.contract import derive
from cadencelab.adapters.token2wav.clocks import token2wav_declaration
from cadencelab.course import studies

ROOT = Path(__file__).resolve().parents[1]


def _run(capsys, *argv):
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_catalog_token2wav_shows_three_classes(capsys):
    rc, out, _ = _run(capsys, "catalog", "--model", "token2wav")
    assert rc == 0
    assert "# token2wav: derived from the declaration" in out
    assert "K=3 steady classes" in out          # flow_chunk / estimator_step / flow_encoder
    assert "K=2 steady classes" in out          # vocoder_core
    assert "## catalog summary" in out
    assert "C1 PASS" in out and "C2 PASS" in out and "C3 PASS" in out


def test_catalog_parameters_reach_the_declaration(capsys):
    rc, out, _ = _run(capsys, "catalog", "--f-retained", "200", "--steps", "5")
    assert rc == 0
    expect = derive(token2wav_declaration(f_retained=200, n_steps=5)).report()
    assert expect in out
    assert expect != derive(token2wav_declaration()).report()


def test_catalog_backbone_is_too_wide(capsys):
    rc, out, _ = _run(capsys, "catalog", "--model", "backbone")
    assert rc == 0
    assert "K=2001" in out and "too wide" in out


def test_catalog_unbounded_backbone(capsys):
    rc, out, _ = _run(capsys, "catalog", "--model", "unbounded-backbone")
    assert rc == 0
    assert "C2 FAIL" in out and "catalog is infinite" in out and "no finite catalog" in out


def test_catalog_rejects_token2wav_flags_for_other_models(capsys):
    rc, _, err = _run(capsys, "catalog", "--model", "moshi-mimi", "--f-chunk", "40")
    assert rc == 2 and "--f-chunk" in err


@pytest.mark.parametrize("model", ["token2wav", "moshi-mimi", "backbone", "unbounded-backbone", "freeze-style"])
def test_catalog_json_round_trips(tmp_path, capsys, model):
    path = tmp_path / "sub" / f"{model}.json"
    rc, out, _ = _run(capsys, "catalog", "--model", model, "--json", str(path))
    assert rc == 0 and str(path) in out
    data = json.loads(path.read_text())
    assert set(data) >= {"model", "params", "region_table", "catalog", "checks", "verdict"}
    from cadencelab.adapters.registry import declaration

    der = derive(declaration(model))
    assert data["model"] == der.declaration.model
    assert [r["region"] for r in data["region_table"]] == list(der.regions["region"])
    assert [r["check"] for r in data["checks"]] == ["C1", "C2", "C3"]
    assert [r["passed"] for r in data["checks"]] == [bool(v) for v in der.checks["passed"]]
    assert len(data["catalog"]) == len(der.catalog)
    v = pd.DataFrame(data["verdict"])
    assert list(v["operator"]) == list(der.verdict["operator"])
    assert list(v["affordable"]) == [bool(x) for x in der.verdict["affordable"]]
    assert [str(k) for k in v["K"]] == [str(k) for k in der.verdict["K"]]
    # the written file is plain JSON: it loads and dumps back to the same text
    assert json.dumps(data, indent=1) == path.read_text()


def test_catalog_json_token2wav_values(tmp_path, capsys):
    path = tmp_path / "t2w.json"
    assert _run(capsys, "catalog", "--json", str(path))[0] == 0
    data = json.loads(path.read_text())
    est = next(r for r in data["region_table"] if r["region"] == "estimator_att_cache")
    assert est["A"] == 402 and est["K"] == 3 and est["demand_shape"] == [10, 16, 2, 8, 402, 128]
    assert data["params"]["f_call"] == 56


def test_bench_passthrough_help(capsys):
    rc, out, _ = _run(capsys, "bench", "--help")
    assert rc == 0 and "token2wav" in out
    rc, out, _ = _run(capsys, "bench", "token2wav", "--help")
    assert rc == 0 and "--inline" in out and "--arms" in out


def test_bench_passthrough_usage_error(capsys):
    rc, _, err = _run(capsys, "bench", "no-such-study")
    assert rc == 2 and "invalid choice" in err


def test_top_level_help_lists_subcommands(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("catalog", "bench", "profile", "lab", "tour"):
        assert name in out


@pytest.mark.parametrize("fail", [False, True])
def test_tour_wiring(monkeypatch, tmp_path, capsys, fail):
    from cadencelab.course import tour

    calls = []

    def run_tour(out_dir, progress=True, notebooks=None):
        calls.append((str(out_dir), progress))
        if fail:
            raise tour.TourFailed(f"1 notebook(s) failed: 03; see {out_dir}/index.html", f"{out_dir}/index.html")
        return f"{out_dir}/index.html"

    monkeypatch.setattr(tour, "run_tour", run_tour)
    rc, out, err = _run(capsys, "tour", str(tmp_path / "t"), "--quiet")
    assert calls == [(str(tmp_path / "t"), False)]
    if fail:
        assert rc == 1 and "notebook(s) failed" in err
    else:
        assert rc == 0 and f"report: {tmp_path / 't'}/index.html" in out


def test_tour_only_runs_the_named_notebooks(monkeypatch, tmp_path, capsys):
    from cadencelab.course import tour

    seen = []
    monkeypatch.setattr(tour, "run_tour", lambda out_dir, progress=True, notebooks=None: seen.append(notebooks) or "x")
    rc, out, err = _run(capsys, "tour", str(tmp_path / "t"), "--quiet", "--only", "10,0,9")
    assert rc == 0 and [p.name[:2] for p in seen[0]] == ["00", "09", "10"]
    rc, out, err = _run(capsys, "tour", str(tmp_path / "t"), "--only", "0,42")
    assert rc == 2 and "no course notebook numbered 42" in err and len(seen) == 1
    rc, out, err = _run(capsys, "tour", str(tmp_path / "t"), "--only", "zero")
    assert rc == 2 and "--only" in err and len(seen) == 1


def test_lab_wiring_says_at_once_where_it_starts(monkeypatch, capsys):
    from cadencelab.course import lab
    from cadencelab.course.sources import notebooks_dir

    calls = []

    def launch_lab(port=None, open_browser=True):
        calls.append((port, open_browser, capsys.readouterr().out))  # what was printed before the server starts
        return 0

    monkeypatch.setattr(lab, "launch_lab", launch_lab)
    assert _run(capsys, "lab", "--port", "8899", "--no-browser")[0] == 0
    assert _run(capsys, "lab")[0] == 0
    assert [c[:2] for c in calls] == [(8899, False), (None, True)]
    for (port, _, said), where in zip(calls, ("port 8899", "the first free port")):
        assert said.startswith("cadencelab lab: starting JupyterLab on") and str(notebooks_dir()) in said
        assert where in said


#: runs in a fresh interpreter: every help the command line has, then which modules it imported
_HELP_PROBE = """
import contextlib, io, json, sys
from cadencelab import cli
light = ("--help",), ("lab", "--help"), ("tour", "--help"), ("bench", "--help")
helps, after_light = {}, None
for argv in (*light, ("catalog", "--help"), ("profile", "--help")):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(list(argv))
    helps[" ".join(argv)] = [rc, out.getvalue()]
    if argv == light[-1]:
        after_light = sorted(sys.modules)
after_all = sorted(sys.modules)
from cadencelab.bench import __main__ as bench
for study in bench.STUDIES:  # each study's help and a usage error, as `python -m cadencelab.bench STUDY ...` runs them
    for argv in ((study, "--help"), (study, "--no-such-flag")):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = bench.main(list(argv))
            except SystemExit as e:
                rc = e.code
        helps["bench " + " ".join(argv)] = [rc, out.getvalue() + err.getvalue()]
print(json.dumps(dict(helps=helps, after_light=after_light, after_all=after_all, after_studies=sorted(sys.modules))))
"""


#: Token2wav's clocks and declaration (no torch): the catalog's and the profile's help read their defaults there
_LIGHT = ("cadencelab.adapters.token2wav", "cadencelab.adapters.token2wav.clocks")


def _heavy(modules, *names):
    return [m for m in modules if m.split(".")[0] in names or m.startswith(("cadencelab.profile", "cadencelab.replay",
                                                                            "cadencelab.adapters.token2wav"))
            and m not in _LIGHT
            or (m.startswith("cadencelab.bench.") and m not in ("cadencelab.bench.flags", "cadencelab.bench.__main__"))]


def test_help_of_every_command_imports_no_torch():
    """`cadencelab --help` and every command's --help print before torch, a study or the profile package is
    imported; the top-level, lab, tour and bench helps also before pandas (catalog and profile read their
    defaults from the declaration, which needs pandas but not torch). Every study's --help (`python -m
    cadencelab.bench STUDY --help`) and usage error come back before torch too: a study's options are
    parsed from its config, whose defaults name arms, conditions and presets without building anything."""
    done = subprocess.run([sys.executable, "-c", _HELP_PROBE], capture_output=True, text=True, timeout=120,
                          cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    studies_said = {k: v for k, v in got["helps"].items() if k.startswith("bench ") and k != "bench --help"}
    got["helps"] = {k: v for k, v in got["helps"].items() if k not in studies_said}
    assert all(rc == 0 and text for rc, text in got["helps"].values()), got["helps"]
    for key, (rc, text) in studies_said.items():
        study = key.split()[1]
        if key.endswith("--help"):
            assert rc == 0 and f"python -m cadencelab.bench {study}" in text and "--out" in text, (key, text[-500:])
        else:
            assert rc == 2 and "unrecognized arguments: --no-such-flag" in text, (key, text[-500:])
    assert len(studies_said) == 2 * len(studies.STUDIES) and "torch" not in got["after_studies"], \
        [m for m in got["after_studies"] if m.split(".")[0] == "torch"][:5]
    assert _heavy(got["after_light"], "torch", "pandas", "numpy") == []
    assert _heavy(got["after_all"], "torch") == []
    top = got["helps"]["--help"][1]
    assert "lab [--port N] [--no-browser]" in top and "(lab --no-browser: do not open" in top
    for name in cli._COMMANDS:
        assert f"\n    {name} " in top, name
    assert all(s.name in got["helps"]["bench --help"][1] for s in studies.STUDIES)


def _options(parser, name):
    sub = parser._subparsers._group_actions[0].choices[name]
    fmt = sub._get_formatter()
    return [(a.option_strings, fmt._get_help_string(a) if a.help else "") for a in sub._actions
            if a.option_strings and a.dest != "help"]


def test_every_option_has_help_and_shows_its_default():
    from cadencelab.bench import __main__ as bench

    seen = []
    for name, (_, prints, options, _) in cli._COMMANDS.items():
        if options is not None:
            assert prints.startswith(("Prints", "Profiles", "Opens", "Runs")) and "print" in prints.lower(), name
            seen += [(name, *o) for o in _options(cli.build_parser(name), name)]
    for study in bench.STUDIES:
        seen += [(study, *o) for o in _options(bench.build_parser(options_for=[study]), study)]
    missing = [(c, f) for c, f, h in seen if "default" not in h and not h.startswith("the same as --no-")]
    assert not missing and len(seen) > 60, missing


def test_profile_chunks_is_first_then_steady_then_the_flush():
    """--chunks N: N chunk calls (the first behind the priming silence, N-1 steady), then the flush, as help says."""
    helps = {flags[0]: h for flags, h in _options(cli.build_parser("profile"), "profile")}
    assert "N+1 rows (first, steady..., flush)" in helps["--chunks"]
    for n in (1, 2, 5):
        plan = cli._stream_plan(n, 100, 0)
        assert [last for _, last in plan] == [False] * n + [True]


def test_profile_cpu_teaching_prints_its_rows_and_nothing_else(tmp_path):
    """The command as a user runs it: one row per stream call (first, steady, flush for --chunks 2), "n/a" where a
    device column does not apply on a CPU (never nan), the trace and the CSV written, and no third-party line
    (torch's USDT profiler_start / profiler_stop) on the terminal."""
    pytest.importorskip("einops")
    pytest.importorskip("scipy")
    if importlib.util.find_spec("stepaudio2") is None:
        pytest.skip("minicpmo (vendor stepaudio2) is not installed")
    out_dir = tmp_path / "prof"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("KINETO_LOG_LEVEL", None)
    done = subprocess.run([sys.executable, "-m", "cadencelab.cli", "profile", "--config", "teaching", "--device", "cpu",
                           "--arm", "B0", "--chunks", "2", "--steps", "1", "--out", str(out_dir)],
                          capture_output=True, text=True, timeout=600, cwd=str(tmp_path), env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "USDT" not in done.stdout + done.stderr and done.stderr.strip() == "", done.stderr[-2000:]
    trace = out_dir / "token2wav_teaching_B0.pt.trace.json.gz"
    csv = out_dir / "token2wav_teaching_B0_chunks.csv"
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert sum(e.get("name") == "chunk" for e in events) == 3
    df = pd.read_csv(csv)
    assert list(df["kind"]) == ["first", "steady", "flush"]
    assert (df["wall_us"] > 0).all() and (df["flow_us"] > 0).all() and (df["cpu_ops"] > 0).all()
    out = done.stdout
    assert "Token2wav teaching, arm B0, cpu: 3 stream calls (1 first, 1 steady, 1 flush)" in out and str(trace) in out
    assert "nan" not in out.lower() and f"{cli.NOT_APPLICABLE}: no device activity" in out


def _results_table_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "docs" / "results_table.py"
    spec = importlib.util.spec_from_file_location("cadencelab_docs_results_table", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_results_match_the_recorded_data():
    rt = _results_table_module()
    missing = [str(p) for p in rt.DEFAULT if not p.exists()]
    assert not missing, f"recorded data missing: {missing}"
    readme = (rt.ROOT / "README.md").read_text()
    assert rt.readme_block(readme) == rt.render().strip(), (
        "README.md's results block is out of date: run `python docs/results_table.py --write-readme`")


def test_commands_tables_match_the_studies_table():
    """README's and docs/device.md's commands tables are generated from cadencelab.course.studies."""
    rt = _results_table_module()
    readme = (rt.ROOT / "README.md").read_text()
    assert rt.readme_studies_block(readme) == rt.readme_commands().strip(), (
        "README.md's studies block is out of date: run `python docs/results_table.py --write-readme`")
    assert rt.device_doc_block(rt.DEVICE_DOC.read_text()) == rt.device_commands().strip(), (
        "docs/device.md's commands table is out of date: run `python docs/results_table.py --write-device-doc`")
    from cadencelab.course import studies

    for r in studies.RECORDINGS:
        if r.minutes is not None:
            assert r.command(f"$OUT/{r.out}") in rt.device_commands() and r.command() in rt.readme_commands()


def _readme_command(n: int) -> str:
    """The README's command (n): the first bash block after the line that opens with **(n) (as .ci/run reads it)."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith(f"**({n})"))
    start = next(i for i in range(head, len(lines)) if lines[i].strip() == "```bash")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == "```")
    return "\n".join(lines[start + 1:end])


def test_readme_commands_share_one_setup():
    """(1) and (2) install the same things in the same order (torch, the package with one extra, the --no-deps
    vendors last), so either may run after the other without pip reporting an unmet requirement; CI runs
    them as the README writes them, and the conda file installs the same extra."""
    (setup1, job1), (setup2, job2) = (_readme_command(n).rsplit(" && ", 1) for n in (1, 2))
    assert setup1 == setup2 and job1 == "cadencelab tour out/tour" and job2 == "python3 -m pytest -q -n 2 --dist loadfile tests"
    steps = setup1.split(" && ")
    assert steps[0].startswith("python3 -m pip install torch==") and steps[-1].startswith(
        "python3 -m pip install --no-deps ") and len(steps) == 3
    extra = steps[1].split('"')[1]
    assert extra == ".[all]" and f"-e {extra}" in (ROOT / "environment.yml").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "readme_command 1" in ci and "readme_command 2" in ci and 'grep -n "ERROR"' in ci
