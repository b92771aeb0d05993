"""No verdict without data, gates that gate (issue 39): analysis of zero rows refuses with one line and writes
nothing; an empty selection refuses; a model that fails certification is not measured and the run exits
non-zero; a user's factory that exits, or raises a TypeError of its own, is reported as such; a traffic naming
an operator that does not exist is refused. CPU."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from kit_models import StreamingConformer
from test_kit import conformer_declaration, conformer_steps, conformer_traffic

from cadencelab import cli
from cadencelab.adapters.kit import KitModel, StreamingRuntime, Traffic
from cadencelab.bench import kit as bench_kit
from cadencelab.contract import SlidingWindow
from cadencelab.course import live_cells

ME = "test_bad_input_verdicts"


# ---- user factories, as bench kit --model module:function loads them ------------------------
def conformer_model(device, wrong=False):
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    decl = conformer_declaration(kv_policy=SlidingWindow(20)) if wrong else conformer_declaration()
    t = conformer_traffic()
    return KitModel(decl, step, stock, Traffic(t.turns[:1]), modules=(model,), device=device)


def uncertified(device):
    return conformer_model(device, wrong=True)


def exits(device):
    sys.exit(0)


def raises_type_error_inside(device):
    return torch.zeros(2) + "a string"  # the user's own TypeError, on this line


def takes_nothing():
    return None


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_a_model_that_fails_certification_exits_non_zero(capsys, tmp_path):
    rc = cli.main(["bench", "kit", "--model", f"{ME}:uncertified", "--device", "cpu", "--inline", "--blocks", "1",
                   "--min-processes", "1", "--max-processes", "1", "--arms", "B0,SRc", "--cores", "none",
                   "--out", str(tmp_path / "k")])
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("bench kit: certification failed (") and "audit" in err[-1]
    summary = json.loads((tmp_path / "k" / "kit_factorial.json").read_text())["summary"]
    assert summary["certified"] is False and summary["failed_clauses"]


def test_a_factory_calling_sys_exit_is_reported_not_obeyed(capsys, tmp_path):
    with pytest.raises(RuntimeError, match=r"called sys.exit\(0\) instead of returning a KitModel"):
        bench_kit.load_model(f"{ME}:exits", "cpu")
    argv = ["bench", "kit", "--model", f"{ME}:exits", "--device", "cpu", "--inline", "--out", str(tmp_path)]
    assert cli.main(argv) == 1
    assert "sys.exit(0)" in _one_line(capsys.readouterr().err)


def test_a_type_error_inside_the_factory_is_its_own_not_a_signature_complaint(capsys, tmp_path):
    with pytest.raises(TypeError, match="unsupported operand"):
        bench_kit.load_model(f"{ME}:raises_type_error_inside", "cpu")
    with pytest.raises(ValueError, match="must be a function of the device"):
        bench_kit.load_model(f"{ME}:takes_nothing", "cpu")
    assert cli.main(["bench", "kit", "--model", f"{ME}:raises_type_error_inside", "--device", "cpu", "--inline",
                     "--out", str(tmp_path / "k")]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "TypeError" in line and "function of the device" not in line and f"{ME}.py:" in line


def test_a_traffic_naming_an_operator_that_does_not_exist_is_refused():
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    rt = StreamingRuntime(KitModel(conformer_declaration(), step, stock), backend="eager")
    turn = conformer_traffic().turns[0]
    with pytest.raises(ValueError, match=r"operator 'decode' is not one this runtime runs \(\['encode'\]\)"):
        rt.run(Traffic([[("decode", x) for x in turn]]))
    assert rt.calls == 0
    assert len(rt.run(Traffic([[("encode", x) for x in turn]])).outputs) == len(turn)  # its own name is fine


def test_soak_analysis_of_no_rows_refuses_and_writes_nothing(capsys, tmp_path):
    base = ["bench", "soak", "--config", "teaching", "--device", "cpu", "--chunks", "4", "--turn-every", "2",
            "--analyse-only"]
    empty = tmp_path / "empty"
    assert cli.main([*base, "--out", str(empty)]) == 2
    assert "nothing to analyse" in capsys.readouterr().out and not empty.exists()
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "rows_SRc_0.jsonl").write_text('{"not": "a row"}\n[1, 2]\n{"chunk": 0, "cut sh')
    (junk / "rows_B0_0.jsonl").write_text("")
    assert cli.main([*base, "--out", str(junk)]) == 2
    assert "rows_SRc_*.jsonl or rows_B0_*.jsonl" in capsys.readouterr().out
    assert sorted(p.name for p in junk.iterdir()) == ["rows_B0_0.jsonl", "rows_SRc_0.jsonl"]


def test_live_cells_with_no_preset_measures_nothing(capsys, tmp_path):
    assert live_cells.main(["--memory", "--out", str(tmp_path / "m"), "--device", "cpu", "--presets", ""]) == 2
    assert "--presets" in _one_line(capsys.readouterr().err) and not (tmp_path / "m").exists()


def test_soak_rows_of_another_kind_are_not_chunks(tmp_path):
    from cadencelab.bench.soak import read_rows

    p = tmp_path / "rows_SRc_0.jsonl"
    p.write_text(json.dumps({"chunk": 1, "x": 1}) + "\n" + json.dumps({"x": 2}) + "\n\"text\"\n")
    assert read_rows([p])["chunk"].tolist() == [1]
