"""The ``cadencelab`` command line: catalog, bench pass-through, profile, lab/tour fallback."""

from __future__ import annotations

import gzip
import importlib.util
import json

import pandas as pd
import pytest

from cadencelab import cli
from cadencelab.contract import derive, token2wav_declaration


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
    from cadencelab.contract import EXAMPLES

    der = derive(EXAMPLES[model]())
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


class _FakeTour:
    """Stands in for cadencelab.course.tour: records calls, can fail like the real one."""

    class TourFailed(RuntimeError):
        def __init__(self, message, report):
            super().__init__(message)
            self.report = report

    class TourRefused(ValueError):
        pass

    def __init__(self, fail=False):
        self.fail, self.calls = fail, []

    def check_tour_dir(self, out_dir):
        return out_dir

    def run_tour(self, out_dir, progress=True):
        self.calls.append(("tour", str(out_dir), progress))
        if self.fail:
            raise self.TourFailed(f"1 notebook(s) failed: 03; see {out_dir}/index.html", f"{out_dir}/index.html")
        return f"{out_dir}/index.html"

    def launch_lab(self, port=None, open_browser=True):
        self.calls.append(("lab", port, open_browser))
        return 0


@pytest.mark.parametrize("fail", [False, True])
def test_tour_wiring(monkeypatch, tmp_path, capsys, fail):
    fake = _FakeTour(fail)
    monkeypatch.setattr(cli, "tour", fake)
    rc, out, err = _run(capsys, "tour", str(tmp_path / "t"), "--quiet")
    assert fake.calls == [("tour", str(tmp_path / "t"), False)]
    if fail:
        assert rc == 1 and "notebook(s) failed" in err
    else:
        assert rc == 0 and f"report: {tmp_path / 't'}/index.html" in out


def test_lab_wiring(monkeypatch, capsys):
    fake = _FakeTour()
    monkeypatch.setattr(cli, "tour", fake)
    assert _run(capsys, "lab", "--port", "8899", "--no-browser")[0] == 0
    assert _run(capsys, "lab")[0] == 0
    assert fake.calls == [("lab", 8899, False), ("lab", None, True)]


def test_profile_cpu_teaching_writes_a_trace(tmp_path, capsys):
    pytest.importorskip("einops")
    pytest.importorskip("scipy")
    if importlib.util.find_spec("stepaudio2") is None:
        pytest.skip("minicpmo (vendor stepaudio2) is not installed")
    out_dir = tmp_path / "prof"
    rc, out, _ = _run(capsys, "profile", "--config", "teaching", "--device", "cpu", "--arm", "B0", "--chunks", "1",
                      "--out", str(out_dir))
    assert rc == 0
    trace = out_dir / "token2wav_teaching_B0.pt.trace.json.gz"
    csv = out_dir / "token2wav_teaching_B0_chunks.csv"
    assert trace.exists() and csv.exists()
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert sum(e.get("name") == "chunk" for e in events) == 2  # one steady chunk + the flush
    df = pd.read_csv(csv)
    assert list(df["kind"]) == ["first", "flush"]
    assert (df["wall_us"] > 0).all() and (df["flow_us"] > 0).all() and (df["cpu_ops"] > 0).all()
    assert "Token2wav teaching, arm B0, cpu: 2 chunks" in out and str(trace) in out


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
