"""Checks on a Token2wav checkpoint, made before any module is built.

``flow.yaml`` is read as a small regular UTF-8 file, with few aliases; every value is checked
for its type and range against the keyword it fills (the dataclass field's type) and the
model's divisibility rules; the bytes the modules would take are counted on the ``meta``
device and refused above a limit. Every refusal is a ``CheckpointError`` whose message names
the file and the key; no message is formatted from a value that is not a plain scalar.
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Any, Callable

#: flow.yaml is a page of keyword arguments (the released one is under 2 KB)
MAX_YAML_BYTES = 64 * 1024
#: YAML aliases (``*name``) a flow.yaml may use
MAX_ALIASES = 64
#: largest width of any layer (channels, hidden sizes, embedding widths)
MAX_WIDTH = 65_536
#: largest count of layers, blocks or heads
MAX_COUNT = 256
#: largest speech-token vocabulary
MAX_VOCAB = 2**24
#: largest up-sampling stride / factor and look-ahead
MAX_SMALL = 64
#: bytes the flow + HiFT parameters and buffers may take; a larger config is refused before it is built
MAX_CHECKPOINT_BYTES = 16 * 2**30

# key -> (kind, low, high): "int" / "float" / "str" / "bool"
_INT_RANGES: dict[str, tuple[int, int]] = {
    "input_size": (1, MAX_WIDTH), "output_size": (1, MAX_WIDTH), "spk_embed_dim": (1, MAX_WIDTH),
    "vocab_size": (1, MAX_VOCAB), "linear_units": (1, MAX_WIDTH), "in_channels": (1, MAX_WIDTH),
    "out_channels": (1, MAX_WIDTH), "hidden_size": (1, MAX_WIDTH), "head_dim": (1, MAX_WIDTH),
    "num_blocks": (1, MAX_COUNT), "num_up_blocks": (0, MAX_COUNT), "attention_heads": (1, MAX_COUNT),
    "depth": (1, MAX_COUNT), "num_heads": (1, MAX_COUNT),
    "up_stride": (1, MAX_SMALL), "up_scale_factor": (1, MAX_SMALL), "pre_lookahead_len": (0, MAX_SMALL),
}
_FLOAT_RANGES: dict[str, tuple[float, float, bool]] = {  # (low, high, low is exclusive)
    "dropout_rate": (0.0, 1.0, False), "positional_dropout_rate": (0.0, 1.0, False),
    "attention_dropout_rate": (0.0, 1.0, False), "inference_cfg_rate": (0.0, 100.0, False),
    "mlp_ratio": (0.0, 64.0, True),
}


class CheckpointError(ValueError):
    """A checkpoint folder cannot be loaded; the message names the offending file."""


def _error(path: Path, what: str) -> Exception:
    return CheckpointError(f"{path}: {what}")


def read_yaml_text(path: Path) -> str:
    """The text of ``path``: a regular file of at most :data:`MAX_YAML_BYTES`, UTF-8."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _error(path, "missing file") from None
    except OSError as exc:
        raise _error(path, f"cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise _error(path, "not a regular file")
    if st.st_size > MAX_YAML_BYTES:
        raise _error(path, f"{st.st_size} bytes, more than the {MAX_YAML_BYTES} a flow.yaml may have")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise _error(path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _error(path, f"not UTF-8 text (byte {exc.start})") from None


def limit_aliases(loader_cls: type, path: Path) -> None:
    """Make ``loader_cls`` (a PyYAML loader) refuse more than :data:`MAX_ALIASES` aliases."""
    import yaml

    compose = loader_cls.compose_node

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases = getattr(self, "_aliases", 0) + 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise _error(path, f"more than {MAX_ALIASES} YAML aliases (line {mark.line + 1})")
        return compose(self, parent, index)

    loader_cls.compose_node = compose_node


def check_values(path: Path, where: str, kwargs: dict[str, Any], types: dict[str, type]) -> None:
    """Each ``kwargs[key]`` is a plain value of ``types[key]`` within its range; the message names
    ``where.key`` and the file, and shows the value only when it is a short scalar."""
    for key, value in kwargs.items():
        want = types.get(key)
        name = f"{where}.{key}"
        if want is None:
            continue
        if want is bool:
            if not isinstance(value, bool):
                raise _error(path, f"{name} must be true or false, got {_kind(value)}")
        elif want is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise _error(path, f"{name} must be an integer, got {_kind(value)}")
            lo, hi = _INT_RANGES.get(key, (1, MAX_WIDTH))
            if not lo <= value <= hi:
                raise _error(path, f"{name} must be in {lo}..{hi}, got {_shown(value)}")
        elif want is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _error(path, f"{name} must be a number, got {_kind(value)}")
            lo, hi, open_lo = _FLOAT_RANGES.get(key, (0.0, 1e6, False))
            bad_lo = value <= lo if open_lo else value < lo
            if not math.isfinite(value) or bad_lo or value > hi:
                rng = f"({lo}, {hi}]" if open_lo else f"[{lo}, {hi}]"
                raise _error(path, f"{name} must be a finite number in {rng}, got {_shown(value)}")
        elif want is str:
            if not isinstance(value, str) or len(value) > 200:
                raise _error(path, f"{name} must be a short string, got {_kind(value)}")


def check_shapes(path: Path, top: dict, enc: dict, dit: dict) -> None:
    """The divisibility and equality rules the modules need, named by their flow.yaml keys."""
    if enc["output_size"] % enc["attention_heads"]:
        raise _error(path, f"flow.encoder.output_size ({enc['output_size']}) must be divisible by "
                           f"flow.encoder.attention_heads ({enc['attention_heads']})")
    if enc["input_size"] != top["input_size"]:
        raise _error(path, f"flow.encoder.input_size ({enc['input_size']}) must equal flow.input_size "
                           f"({top['input_size']})")


def estimate_bytes(build_meta: Callable[[], tuple], flow_itemsize: int) -> int:
    """Bytes of every parameter and buffer of the modules ``build_meta()`` returns on ``meta``
    (flow at ``flow_itemsize`` bytes an element, HiFT in float32)."""
    flow, hift = build_meta()
    n_flow = sum(t.numel() for t in [*flow.parameters(), *flow.buffers()])
    n_hift = sum(t.numel() * t.element_size() for t in [*hift.parameters(), *hift.buffers()])
    return n_flow * flow_itemsize + n_hift


def check_bytes(path: Path, nbytes: int, limit: int = MAX_CHECKPOINT_BYTES) -> None:
    if nbytes > limit:
        raise _error(path, f"these sizes need {nbytes / 2**30:.1f} GiB of parameters and buffers, more than "
                           f"the {limit / 2**30:.1f} GiB limit (max_bytes=)")


def _kind(v: Any) -> str:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return f"{type(v).__name__} {_shown(v)}"
    return f"a {type(v).__name__}"


def _shown(v: Any, n: int = 40) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**30:
        return f"<{v.bit_length()}-bit integer>"
    text = repr(v)
    return text if len(text) <= n else text[: n - 3] + "..."
