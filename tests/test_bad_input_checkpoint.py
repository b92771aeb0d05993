"""Bad checkpoints: flow.yaml values are checked before any module is built, and every refusal is
a CheckpointError naming the file and the key (never formatted from a huge value)."""

from __future__ import annotations

import os
import re
import time

import pytest
import torch

from cadencelab.adapters.token2wav.checkpoint import CheckpointError, _yaml_dump, load_checkpoint
from cadencelab.adapters.token2wav.configs import TEACHING

BASE = _yaml_dump(TEACHING)


def _set(key, value, text=BASE):
    new, n = re.subn(rf"(\n\s+{key}: )[^\n]*", rf"\g<1>{value}", text, count=1)
    if n != 1:
        raise KeyError(key)
    return new


_BOMB = "a: &a [1,1,1,1,1,1,1,1,1]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))

CASES = [
    # (name, flow.yaml text or bytes, what the message must say)
    ("heads_zero", _set("attention_heads", 0), ["flow.encoder.attention_heads", "got 0"]),
    ("depth_negative", _set("depth", -1), ["flow.decoder.estimator.depth", "got -1"]),
    ("hidden_200000", _set("hidden_size", 200000), ["flow.decoder.estimator.hidden_size", "got 200000"]),
    ("hidden_huge_int", _set("hidden_size", "1" + "0" * 400), ["hidden_size", "-bit integer"]),
    ("heads_not_dividing", _set("attention_heads", 3), ["flow.encoder.output_size (128)", "attention_heads (3)"]),
    ("size_text", _set("input_size", "'abc'"), ["flow.input_size", "must be an integer"]),
    ("size_fraction", _set("head_dim", "64.5"), ["flow.decoder.estimator.head_dim", "must be an integer"]),
    ("size_bool", _set("depth", "true"), ["flow.decoder.estimator.depth", "got bool"]),
    ("size_list", _set("hidden_size", "[1, 2]"), ["hidden_size", "got a list"]),
    ("cfg_rate_nan", _set("inference_cfg_rate", ".nan"), ["flow.decoder.inference_cfg_rate", "finite"]),
    ("dropout_two", _set("dropout_rate", 2.0), ["flow.encoder.dropout_rate", "got 2.0"]),
    ("mlp_ratio_zero", _set("mlp_ratio", 0), ["flow.decoder.estimator.mlp_ratio"]),
    ("alias_bomb", _BOMB + _set("input_size", "*i"), ["YAML aliases"]),
    ("alias_list", "a: &a [1, 2]\n" + _set("input_size", "*a"), ["flow.input_size", "got a list"]),
    ("bad_bytes", BASE.encode() + b"# \xff\xfe\n", ["not UTF-8 text (byte"]),
    ("deep_nesting", "x: " + "[" * 20000 + "]" * 20000 + "\n" + BASE, ["nested too deeply"]),
    ("too_big", BASE + "#" + "x" * 100_000 + "\n", ["bytes, more than"]),
    ("int_key", BASE.replace("hidden_size: 128", "1: 128"), ["flow.decoder.estimator", "not a name"]),
    ("python_tag", "x: !!python/object/apply:os.system ['true']\n" + BASE, ["malformed YAML"]),
    ("unknown_class", BASE.replace("!new:cosyvoice2.flow.decoder_dit.DiT", "!new:os.system"), ["unknown class"]),
    # layer types the vendor encoder cannot build: refused naming the key and what it accepts
    ("input_layer_unknown", _set("input_layer", "conv2d"), ["flow.encoder.input_layer", "one of linear", "'conv2d'"]),
    ("input_layer_empty", _set("input_layer", "''"), ["flow.encoder.input_layer", "got ''"]),
    ("pos_enc_unknown", _set("pos_enc_layer_type", "abs_pos"), ["flow.encoder.pos_enc_layer_type", "rel_pos_espnet"]),
    ("attention_unknown", _set("selfattention_layer_type", "selfattn"),
     ["flow.encoder.selfattention_layer_type", "rel_selfattn"]),
]


@pytest.mark.parametrize("name, text, says", CASES, ids=[c[0] for c in CASES])
def test_bad_flow_yaml_names_file_and_key(tmp_path, name, text, says):
    (tmp_path / "flow.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
    t0 = time.perf_counter()
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path)
    msg = str(info.value)
    assert msg.startswith(str(tmp_path / "flow.yaml")) and len(msg) < 600, msg
    for s in says:
        assert s in msg, msg
    assert time.perf_counter() - t0 < 20  # refused before building or reading weights


def test_too_many_bytes_refused_before_allocating(tmp_path):
    """Sizes within every per-key bound whose modules would still need > max_bytes."""
    text = _set("depth", 64, _set("hidden_size", 4096))
    (tmp_path / "flow.yaml").write_text(text)
    torch.save({"conv_pre.weight": torch.zeros(64, 80, 7)}, tmp_path / "hift.pt")
    with pytest.raises(CheckpointError, match=r"flow\.yaml: these sizes need [0-9.]+ GiB") as info:
        load_checkpoint(tmp_path, max_bytes=2**30)
    assert "flow.pt" not in str(info.value)  # the weights were never read


@pytest.mark.parametrize("make, says", [
    (lambda d: None, "flow.yaml: missing file"),
    (lambda d: os.mkfifo(d / "flow.yaml"), "flow.yaml: not a regular file"),
    (lambda d: (d / "flow.yaml").mkdir(), "flow.yaml: not a regular file"),
    (lambda d: ((d / "flow.yaml").write_text(BASE), (d / "hift.pt").write_bytes(b"not a zip")), "hift.pt: cannot be read"),
    (lambda d: ((d / "flow.yaml").write_text(BASE),
                torch.save({"conv_pre.weight": torch.zeros(12, 80, 7)}, d / "hift.pt")), "hift.pt: conv_pre has 12"),
    (lambda d: ((d / "flow.yaml").write_text(BASE),
                torch.save({"conv_pre.weight": torch.zeros(64, 80, 7)}, d / "hift.pt")), "flow.pt: missing file"),
], ids=["no_yaml", "yaml_fifo", "yaml_folder", "hift_garbage", "hift_odd_channels", "no_flow_pt"])
def test_bad_files_name_the_file(tmp_path, make, says):
    make(tmp_path)
    with pytest.raises(CheckpointError, match=re.escape(says)):
        load_checkpoint(tmp_path)


def test_missing_folder(tmp_path):
    with pytest.raises(CheckpointError, match="not a checkpoint folder"):
        load_checkpoint(tmp_path / "nope")
