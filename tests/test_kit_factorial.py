"""The paper's factorial on a declared model: one call, one row per arm (latency with an interval, state held,
peak memory, bit-exactness against the stock step), the catalog and the certificate beside it; on the teaching
model and on a streaming model the package does not ship. CPU, eager backend."""

from __future__ import annotations

import pytest
import torch

from cadencelab.adapters import teaching, teaching_kit
from cadencelab.adapters.kit import ARMS, KitModel, factorial
from kit_models import StreamingConformer
from test_kit import conformer_declaration, conformer_steps, conformer_traffic


def conformer_model():
    model = StreamingConformer()
    step, stock = conformer_steps(model)
    return KitModel(conformer_declaration(), step, stock, conformer_traffic(), modules=(model,))


@pytest.mark.parametrize("make", [conformer_model, lambda: teaching_kit.kit_model()], ids=["conformer", "teaching"])
def test_the_factorial_runs_every_arm_bit_exact(make):
    m = make()
    df = factorial(m, blocks=2, warmup=1, backend="eager")
    assert df["arm"].tolist() == list(ARMS) == ["B0", "S", "R", "Rc", "SR", "SRc"]
    assert df["bit_exact"].all() and (df["exact_calls"] == m.traffic.calls).all()
    assert (df["calls"] == m.traffic.calls).all() and (df["blocks"] == 2).all()
    assert (df["latency_ms"] > 0).all() and (df["latency_ms_lo"] <= df["latency_ms_hi"]).all()
    rep = df.set_index("arm")
    assert rep.loc["B0", "vs_B0"] == 0 and rep.loc["B0", "replayed"] == 0 and rep.loc["SRc", "replayed"] > 0
    assert rep.loc["S", "state_bytes"] == rep.loc["SRc", "state_bytes"] > 0  # the carries: one size in every arm
    assert df["peak_mem_bytes"].isna().all()  # a CPU: no device peak
    assert df.attrs["certified"] and df.attrs["certificate"]["passed"].all()
    assert set(df.attrs["catalog"]["kind"]) == {"steady", "flush"}


def test_the_course_runtimes_are_the_kits():
    """TeachingRuntime and CarryStream are kit runtimes behind the course's interface: the SRc arm of the kit
    model, call for call."""
    from cadencelab.adapters import freeze_style
    from cadencelab.adapters.kit import StreamingRuntime

    m = teaching_kit.kit_model()
    cfg = teaching.TeachingConfig()
    course = teaching.TeachingRuntime(teaching.TinyStreamer(cfg), replay=True, backend="eager")
    assert isinstance(course.kit, StreamingRuntime) and course.engine is course.kit.engine
    hand = course.run(teaching.make_stream(cfg))
    kit = m.runtime("SRc", backend="eager").run(m.traffic)
    assert len(hand.outputs) == len(kit.outputs) and all(torch.equal(a, b) for a, b in zip(hand.outputs, kit.outputs))
    carry = freeze_style.CarryStream(freeze_style.FreezeStyleDecoder(), replay=True, backend="eager")
    assert isinstance(carry.kit, StreamingRuntime) and carry.kit.decl.model == freeze_style.kit_declaration().model


def test_bad_factorial_arguments_are_refused():
    m = conformer_model()
    with pytest.raises(ValueError, match=r"arms must be distinct names among \['B0'"):
        factorial(m, arms=["B0", "X"])
    with pytest.raises(ValueError, match="blocks must be an int >= 1"):
        factorial(m, blocks=0)
    with pytest.raises(ValueError, match="unknown arm 'X'"):
        m.runtime("X")
    with pytest.raises(ValueError, match="traffic must be a Traffic"):
        KitModel(m.decl, m.step, m.stock, [[torch.zeros(1)]])


def conformer_model_on(device="cpu"):
    """A user's model for ``python -m cadencelab.bench kit --model test_kit_factorial:conformer_model_on``."""
    m = conformer_model()
    assert str(device) == "cpu"
    return m


def test_the_bench_entry_measures_a_users_model(tmp_path, capsys):
    import json

    from cadencelab.bench.__main__ import main

    rc = main(["kit", "--model", "test_kit_factorial:conformer_model_on", "--device", "cpu", "--inline",
               "--min-processes", "1", "--max-processes", "1", "--blocks", "2", "--cores", "none",
               "--arms", "B0,SRc,B0_repeat", "--out", str(tmp_path)])
    assert rc == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("summary: {'exact': True")
    rec = json.loads((tmp_path / "kit_factorial.json").read_text())
    assert [a["arm"] for a in rec["arms"]] == ["B0", "SRc", "B0_repeat"]
    assert all(a["bit_exact"] for a in rec["arms"]) and rec["summary"]["certified"]
    assert rec["summary"]["model"] == "streaming-conformer" and rec["a_a"]["arm"] == "B0_repeat"
    assert {c["clause"] for c in rec["certificate"]} >= {"bit-exact with the stock step from the model's own start"}
    assert rec["summary"]["reference"] == "the stock step from the model's own start"
    blocks = (tmp_path / "kit_factorial_blocks.csv").read_text().splitlines()
    assert len(blocks) == 1 + 3 * 3  # header + 3 arms x (1 warm-up + 2 timed blocks)
    assert rec["summary"]["complete"] is True and rec["summary"]["rounds"] == 1
    # a second run into the same folder is refused before it runs, the earlier files untouched; --overwrite replaces
    before = (tmp_path / "kit_factorial.json").read_bytes()
    again = ["kit", "--model", "test_kit_factorial:conformer_model_on", "--device", "cpu", "--inline",
             "--min-processes", "1", "--max-processes", "1", "--blocks", "1", "--cores", "none", "--arms", "B0,SRc",
             "--out", str(tmp_path)]
    assert main(again) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "--overwrite" in err[0] and (tmp_path / "kit_factorial.json").read_bytes() == before
    assert main([*again, "--overwrite"]) == 0
    assert json.loads((tmp_path / "kit_factorial.json").read_text())["summary"]["arms"] == ["B0", "SRc"]


def test_a_study_stopped_after_a_round_keeps_that_round(tmp_path):
    """The files are written after every round: a study stopped from outside (here: its progress line for round
    1 raises) leaves round 1's blocks and summary, marked incomplete."""
    import json

    from cadencelab.bench.kit import KitConfig, run_study

    class Stop(BaseException):
        pass

    def progress(line):
        if "round 1 done" in line:
            raise Stop

    cfg = KitConfig(model="test_kit_factorial:conformer_model_on", device="cpu", processes=False, min_processes=3,
                    max_processes=3, blocks=1, cores="none", arms=("B0", "SRc"), out=str(tmp_path))
    with pytest.raises(Stop):
        run_study(cfg, progress=progress)
    rec = json.loads((tmp_path / "kit_factorial.json").read_text())
    assert rec["summary"]["complete"] is False and rec["summary"]["rounds"] == 1 and rec["summary"]["stop"] is None
    assert len((tmp_path / "kit_factorial_blocks.csv").read_text().splitlines()) == 1 + 2 * 2


@pytest.mark.parametrize("spec, match", [("nope", "built-in model"), ("os:getenv", "not a KitModel"),
                                         ("os:getcwd", "a function of the device"),
                                         ("no_such_module:f", "cannot load")])
def test_the_bench_entry_names_a_bad_model(spec, match, tmp_path, capsys):
    from cadencelab.bench.__main__ import main

    rc = main(["kit", "--model", spec, "--device", "cpu", "--inline", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc != 0 and "--model" in err and match in err


@pytest.mark.cuda
def test_the_factorial_on_cuda_reports_peak_memory():
    m = teaching_kit.kit_model_on("cuda")
    df = factorial(m, blocks=2, warmup=1, backend="cuda")
    assert df["bit_exact"].all() and df.attrs["certified"], df
    assert (df["peak_mem_bytes"] >= 0).all() and df.set_index("arm").loc["SRc", "replayed"] > 0


def test_a_failing_compile_control_is_reported_and_the_factorial_goes_on(tmp_path, monkeypatch):
    """B0_compiled is a control: when it fails (on the H100 the Mimi encoder's compile outlasted its first block's
    timeout) the study says so in ``failed_controls`` and measures the other arms; its first block gets
    ``--compile-timeout`` more seconds, where torch.compile works."""
    import json

    from cadencelab.bench import kit, rounds

    def broken(fn):
        def step(*a, **k):
            raise RuntimeError("compile failed here")
        return step

    plans = []
    run = rounds.run_rounds
    monkeypatch.setattr(kit, "_compiled_step", broken)
    monkeypatch.setattr(kit, "run_rounds", lambda plan, t0: plans.append(plan) or run(plan, t0))
    cfg = kit.KitConfig(model="test_kit_factorial:conformer_model_on", device="cpu", processes=False, min_processes=1,
                        max_processes=1, blocks=1, cores="none", arms=("B0", "SRc", "B0_compiled"),
                        compile_timeout_s=77.0, out=str(tmp_path))
    lines = []
    kit.run_study(cfg, progress=lines.append)
    rec = json.loads((tmp_path / "kit_factorial.json").read_text())
    assert "compile failed here" in rec["summary"]["failed_controls"]["B0_compiled"]
    assert [a["arm"] for a in rec["arms"]] == ["B0", "SRc"] and rec["summary"]["exact"]
    assert any(ln.startswith("kit: control arm B0_compiled") for ln in lines)
    assert plans[0].first_extra_s == {"B0_compiled": 77.0}
