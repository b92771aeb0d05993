"""Study options generated from the config dataclasses, and the studies table (cadencelab.course.studies)."""

from __future__ import annotations

import dataclasses
import importlib
import shlex

import pytest

from cadencelab.course import studies
from cadencelab.bench.__main__ import STUDIES, build_parser
from cadencelab.bench.flags import NOT_SET, FlagError, config_from_args, option_flag


def _parse(*argv):
    return build_parser().parse_args(list(argv))


def _config_classes():
    return {name: _parse(name, "--device", "cpu").study_config for name in STUDIES}


def test_the_bench_lists_every_study_of_the_table():
    assert STUDIES == [s.name for s in studies.STUDIES]
    for s in studies.STUDIES:
        assert hasattr(importlib.import_module(f"cadencelab.bench.{s.module}"), "add_parser"), s.module
    with pytest.raises(KeyError, match="token2wav"):
        studies.study("nope")


@pytest.mark.parametrize("name", STUDIES)
def test_no_flag_means_the_dataclass_default(name, tmp_path, capsys):
    """Parsed with only --device cpu and --out, a study's config is its dataclass's, with the fields
    that declare a CPU value taking it: the defaults live in the dataclass alone."""
    args = _parse(name, "--device", "cpu", "--out", str(tmp_path))
    cls = args.study_config
    cfg = config_from_args(cls, args)
    on_cpu = {f.name: f.metadata["cli"].on_cpu for f in dataclasses.fields(cls)
              if "cli" in f.metadata and f.metadata["cli"].on_cpu is not NOT_SET}
    assert cfg == cls(device="cpu", out=str(tmp_path), **on_cpu)
    flagged = [f for f in dataclasses.fields(cls) if "cli" in f.metadata]
    assert {"device", "out"} <= {f.name for f in flagged}
    with pytest.raises(SystemExit):
        _parse(name, "--help")
    help_text = capsys.readouterr().out
    for f in flagged:
        assert option_flag(f) in help_text, (name, f.name)


def test_bool_fields_take_x_and_no_x_and_inline_turns_processes_off(tmp_path):
    base = ["token2wav", "--device", "cpu", "--out", str(tmp_path)]
    cls = _parse(*base).study_config
    assert config_from_args(cls, _parse(*base, "--no-profile")).profile is False
    assert config_from_args(cls, _parse(*base, "--profile")).profile is True
    assert config_from_args(cls, _parse(*base, "--inline")).processes is False
    assert config_from_args(cls, _parse(*base, "--no-processes")).processes is False
    soak = ["soak", "--device", "cpu", "--out", str(tmp_path)]
    assert config_from_args(cls := _parse(*soak).study_config, _parse(*soak)).processes is False  # on a CPU
    assert config_from_args(cls, _parse(*soak, "--processes")).processes is True
    assert config_from_args(cls, _parse(*soak, "--concurrent")).concurrent is True


def test_soak_reference_workers_have_one_default_per_device(tmp_path):
    """--b0-workers: the dataclass default (4, for CUDA), 1 on a CPU, the typed value otherwise."""
    from cadencelab.bench.soak import SoakConfig

    cpu = ["soak", "--device", "cpu", "--out", str(tmp_path)]
    assert config_from_args(SoakConfig, _parse(*cpu)).b0_workers == 1
    assert config_from_args(SoakConfig, _parse(*cpu, "--b0-workers", "3")).b0_workers == 3
    cuda = config_from_args(SoakConfig, _parse("soak", "--device", "cuda", "--out", str(tmp_path)), checks=False)
    assert cuda.b0_workers == SoakConfig().b0_workers > 1


def test_tuple_fields_parse_comma_lists_and_name_the_flag(tmp_path):
    from cadencelab.bench.sessions import SessionsConfig

    base = ["sessions", "--device", "cpu", "--out", str(tmp_path)]
    cfg = config_from_args(SessionsConfig, _parse(*base, "--sessions", "4,1,2", "--workloads", "mixed"))
    assert cfg.sessions == (1, 2, 4) and cfg.workloads == ("mixed",)
    with pytest.raises(FlagError, match="--batch-sizes") as e:
        config_from_args(SessionsConfig, _parse(*base, "--batch-sizes", "1,zero"))
    assert "'1,zero'" in str(e.value)
    with pytest.raises(FlagError, match="--b0-devices: .*'tpu'"):
        config_from_args(_parse("soak").study_config, _parse("soak", "--device", "cpu", "--b0-devices", "tpu"))


def test_checks_run_on_defaults_too(tmp_path):
    """The default --device (cuda) is refused on a machine without one, naming the flag."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    with pytest.raises(FlagError, match="--device"):
        config_from_args(_parse("duplex").study_config, _parse("duplex", "--out", str(tmp_path)))


@pytest.mark.parametrize("rec", studies.RECORDINGS, ids=lambda r: r.dataset)
def test_recording_commands_parse_with_their_study(rec):
    """Every recorded command is a valid command line of its study (its flags exist and their values parse)."""
    words = shlex.split(rec.command())
    assert words[:3] == studies.BENCH.split() and words[3] == rec.study
    args = _parse(*words[3:])
    cfg = config_from_args(args.study_config, args, checks=False)
    assert cfg.out == "DIR"
    assert rec.how().startswith(rec.command() + "  (")
