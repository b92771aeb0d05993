"""One road in: a model defined only under tests/ (registered_model.py) is registered once and every tool takes
it through the command line: catalog, certify, the factorial (bench kit) and a profile. The registry refuses what
it cannot load with one line naming it; the arm table holds every arm once."""

from __future__ import annotations

import json
import re

import pytest

from cadencelab import cli
from cadencelab.adapters import arms, registry

USER = "registered_model:kit_model_on"


@pytest.fixture
def registered():
    before = dict(registry.MODELS), dict(registry.DECLARATIONS)
    registry.register("registered-conv", USER)
    yield "registered-conv"
    registry.MODELS.clear(), registry.MODELS.update(before[0])
    registry.DECLARATIONS.clear(), registry.DECLARATIONS.update(before[1])


def test_a_users_model_runs_through_every_tool(registered, tmp_path, capsys):
    assert cli.main(["catalog", "--model", registered]) == 0
    out = capsys.readouterr().out
    assert "registered-conv" in out and "smooth: 15 classes: steady 3" in out, out[-800:]

    assert cli.main(["certify", "--model", registered, "--backend", "eager"]) == 0
    out = capsys.readouterr().out
    assert "bit-exact with the stock step" in out
    assert re.match(r"registered-conv: certified \((\d+) of \1 clauses", out.strip().splitlines()[-1]), out[-300:]

    kit = tmp_path / "kit"
    assert cli.main(["bench", "kit", "--model", registered, "--device", "cpu", "--inline", "--min-processes", "1",
                     "--max-processes", "1", "--blocks", "1", "--cores", "none", "--out", str(kit)]) == 0
    rec = json.loads((kit / "kit_factorial.json").read_text())
    assert [a["arm"] for a in rec["arms"]] == [*arms.FACTORIAL, arms.REPEAT]
    assert all(a["bit_exact"] for a in rec["arms"]) and rec["summary"]["certified"]
    assert rec["summary"]["model"] == "registered-conv"
    capsys.readouterr()

    prof = tmp_path / "profile"
    assert cli.main(["profile", "--model", registered, "--arm", "SRc", "--out", str(prof)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# registered-conv, arm SRc, cpu: 12 calls (2 first, 8 steady, 2 flush)"), out[:300]
    assert (prof / "registered-conv_SRc_calls.csv").is_file()
    assert (prof / "registered-conv_SRc.pt.trace.json.gz").is_file()


def test_certificate_labels_name_their_dimensions():
    """A catalog label is a tuple of numbers; the certificate's catalog says what each one is."""
    cert = registry.resolve(USER).certify("eager")
    assert set(cert.catalog["dims"]) == {"history, f (frames)"}
    assert all(len(lab) == 2 for lab in cert.catalog["label"])


def test_a_module_function_needs_no_registration(capsys):
    assert cli.main(["catalog", "--model", USER]) == 0
    assert "registered-conv" in capsys.readouterr().out
    assert registry.resolve(USER).name == "registered-conv"
    assert registry.declaration(USER).model == "registered-conv"


@pytest.mark.parametrize("model, says", [("nope", "not a registered model"), ("os:getenv", "not a KitModel"),
                                         ("no_such_module:f", "cannot load"), ("a b:c", "not package.module:function")])
def test_what_cannot_be_loaded_is_named(model, says):
    with pytest.raises(ValueError, match=says):
        registry.resolve(model)


def test_the_cli_names_a_bad_model_in_one_line(capsys):
    assert cli.main(["certify", "--model", "nope"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "--model" in err[0] and "registered model" in err[0]
    assert cli.main(["certify", "--model", "no_such_module:f"]) != 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "cannot load" in err[0]


def test_declared_only_names_say_so():
    with pytest.raises(ValueError, match="declared only"):
        registry.resolve("moshi-mimi")
    assert registry.declaration("moshi-mimi").model == "moshi-mimi"


def test_every_registered_target_names_a_function():
    for target in [*registry.MODELS.values(), *registry.DECLARATIONS.values()]:
        module, _, fn = target.partition(":")
        assert module.startswith("cadencelab.adapters.") and fn.isidentifier(), target


def test_the_arm_table_holds_every_arm_once():
    assert arms.FACTORIAL == ("B0", "S", "R", "Rc", "SR", "SRc")
    assert set(arms.CONTROLS) == {"B0_repeat", "vendor_graph", "vendor_graph_50", "compile"}
    assert arms.arm("SRc").switches() == dict(state_rule=True, replay=True, granularity="call")
    assert arms.arm("B0").switches() == dict(state_rule=False, replay=False)
    assert [arms.arm_for(s, r, g) for s, r, g in [(0, 0, "step"), (1, 0, "chunk"), (0, 1, "step"), (1, 1, "chunk")]] \
        == ["B0", "S", "R", "SRc"]
    from cadencelab.adapters.kit import ARMS as KIT
    from cadencelab.adapters.token2wav.runtime import ARMS as T2W

    assert KIT == {n: a.switches() for n, a in arms.CELLS.items()} and T2W is arms.ARMS
    with pytest.raises(ValueError, match="unknown arm 'X'"):
        arms.arm("X")
    with pytest.raises(ValueError, match="replay must be one of"):
        arms.Arm("bad", True, "chunk")
