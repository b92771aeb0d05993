"""Checkpoints: ``flow.yaml`` (the released tags, parsed inert), ``flow.pt`` and ``hift.pt``; save and load."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from . import checkpoint_checks as checks
from .checkpoint_checks import CheckpointError
from .build import assert_materialised, construct_modules, materialise_decoder, subseed
from .configs import DiTConfig, EncoderConfig, HiFTConfig, Token2wavConfig
from .envelopes import STOCK_ENVELOPE, CacheEnvelope
from .vendor_import import load_vendor

__all__ = ["CheckpointError", "config_from_flow_yaml", "load_checkpoint", "save_checkpoint"]


# Accepted `!new:` classes (also with a `stepaudio2.` prefix) -> the part of the config they fill.
_TAGS = {
    "cosyvoice2.flow.flow.CausalMaskedDiffWithXvec": "flow",
    "cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2": "encoder",
    "cosyvoice2.flow.flow_matching.CausalConditionalCFM": "decoder",
    "cosyvoice2.flow.decoder_dit.DiT": "estimator",
}
# Scalar keyword arguments each part may carry, and its nested `!new:` part.
_SCALAR_KEYS = {
    "flow": ("input_size", "output_size", "spk_embed_dim", "output_type", "vocab_size"),
    "encoder": tuple(f.name for f in dataclasses.fields(EncoderConfig)),
    "decoder": ("inference_cfg_rate",),
    "estimator": tuple(f.name for f in dataclasses.fields(DiTConfig)),
}
_NESTED_KEYS = {"flow": ("encoder", "decoder"), "decoder": ("estimator",), "encoder": (), "estimator": ()}


@dataclass(frozen=True)
class _Spec:
    """An inert ``!new:`` node: which part it is and its keyword arguments."""

    kind: str
    kwargs: dict[str, Any]


def _yaml_scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, str):
        return f"'{v}'"
    return repr(v)


def _yaml_dump(cfg: Token2wavConfig) -> str:
    def block(pairs: Mapping[str, Any], indent: int) -> list[str]:
        return [f"{' ' * indent}{k}: {_yaml_scalar(v)}" for k, v in pairs.items()]

    top = {k: getattr(cfg, k) for k in _SCALAR_KEYS["flow"]}
    return "\n".join(
        [
            f"# cadencelab Token2wav flow config '{cfg.name}'; the same tags as the released flow.yaml.",
            f"# HiFT is not described here: its base_channels ({cfg.hift.base_channels}) is read from hift.pt.",
            "flow: !new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec",
            *block(top, 4),
            "    encoder: !new:cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2",
            *block(dataclasses.asdict(cfg.encoder), 8),
            "    decoder: !new:cosyvoice2.flow.flow_matching.CausalConditionalCFM",
            *block({"inference_cfg_rate": cfg.inference_cfg_rate}, 8),
            "        estimator: !new:cosyvoice2.flow.decoder_dit.DiT",
            *block(dataclasses.asdict(cfg.estimator), 12),
        ]
    ) + "\n"


def _parse_flow_yaml(path: Path) -> _Spec:
    """Parse ``flow.yaml`` without executing anything: ``!new:`` nodes become inert :class:`_Spec`."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    def line(node: Any) -> int:
        return node.start_mark.line + 1

    def new(loader: yaml.SafeLoader, suffix: str, node: Any) -> _Spec:
        kind = _TAGS.get(suffix.removeprefix("stepaudio2."))
        if kind is None:
            raise CheckpointError(f"{path}: unknown class in tag '!new:{suffix}' (line {line(node)})")
        if not isinstance(node, yaml.MappingNode):
            raise CheckpointError(f"{path}: tag '!new:{suffix}' must carry keyword arguments (line {line(node)})")
        return _Spec(kind, loader.construct_mapping(node, deep=True))

    def reject(loader: yaml.SafeLoader, suffix: str, node: Any) -> None:
        raise CheckpointError(f"{path}: unsupported tag {node.tag!r} (line {line(node)})")

    _Loader.add_multi_constructor("!new:", new)  # checked before the catch-all below
    _Loader.add_multi_constructor("!", reject)
    checks.limit_aliases(_Loader, path)
    text = checks.read_yaml_text(path)  # a small regular UTF-8 file
    try:
        doc = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except CheckpointError:
        raise
    except yaml.YAMLError as exc:
        raise CheckpointError(f"{path}: malformed YAML ({' '.join(str(exc).split())[:300]})") from None
    except RecursionError:
        raise CheckpointError(f"{path}: YAML nested too deeply") from None
    except (TypeError, ValueError) as exc:  # e.g. an unhashable mapping key
        raise CheckpointError(f"{path}: unusable YAML ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("flow"), _Spec) or doc["flow"].kind != "flow":
        raise CheckpointError(f"{path}: expected a top-level `flow: !new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec`")
    return doc["flow"]


def _spec_kwargs(spec: Any, kind: str, where: str, path: Path) -> dict[str, Any]:
    """Scalar kwargs of ``spec`` with the vendor class defaults filled in for absent keys."""
    if not isinstance(spec, _Spec) or spec.kind != kind:
        raise CheckpointError(f"{path}: {where} must be a `!new:` {kind} node")
    scalars, nested = _SCALAR_KEYS[kind], _NESTED_KEYS[kind]
    odd = [k for k in spec.kwargs if not isinstance(k, str)]
    if odd:
        raise CheckpointError(f"{path}: {where} has a key that is not a name ({type(odd[0]).__name__})")
    extra = sorted(set(spec.kwargs) - set(scalars) - set(nested))
    if extra:
        raise CheckpointError(f"{path}: {where} has unsupported keys {extra}")
    v = load_vendor()
    cls = {"flow": v.CausalMaskedDiffWithXvec, "encoder": v.UpsampleConformerEncoderV2,
           "decoder": v.CausalConditionalCFM, "estimator": v.DiT}[kind]
    defaults = {
        name: p.default for name, p in inspect.signature(cls.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    out = {}
    for key in scalars:
        if key in spec.kwargs:
            out[key] = spec.kwargs[key]
        elif key in defaults:
            out[key] = defaults[key]
        else:
            raise CheckpointError(f"{path}: {where}.{key} is required")
    checks.check_values(path, where, {k: v for k, v in out.items() if k in spec.kwargs}, _FIELD_TYPES[kind])
    return out


def _field_types(cls) -> dict[str, type]:
    """name -> int / float / str / bool of a config dataclass's fields."""
    named = {"int": int, "float": float, "str": str, "bool": bool}
    return {f.name: named.get(f.type if isinstance(f.type, str) else f.type.__name__, object)
            for f in dataclasses.fields(cls)}


# The Python type each flow.yaml keyword must have (from the config dataclasses).
_FIELD_TYPES = {"flow": _field_types(Token2wavConfig), "encoder": _field_types(EncoderConfig),
                "decoder": _field_types(Token2wavConfig), "estimator": _field_types(DiTConfig)}


def _encoder_choices() -> dict[str, tuple[str, ...]]:
    """The values the vendor encoder accepts for its layer-type keys, from its own class tables (none
    checked when the vendor is not installed: building the modules then fails with the install hint)."""
    try:
        m = load_vendor().modules.upsample_encoder_v2
    except ImportError:
        return {}
    return {"input_layer": tuple(m.COSYVOICE_SUBSAMPLE_CLASSES), "pos_enc_layer_type": tuple(m.COSYVOICE_EMB_CLASSES),
            "selfattention_layer_type": tuple(m.COSYVOICE_ATTENTION_CLASSES)}


def config_from_flow_yaml(
    path: str | Path, hift: HiFTConfig = HiFTConfig(), name: str | None = None
) -> Token2wavConfig:
    """Read a ``flow.yaml`` (the released one or ours) into a :class:`Token2wavConfig`.

    Absent keys take the vendor class defaults, as hyperpyyaml would.
    """
    path = Path(path)
    flow = _parse_flow_yaml(path)
    decoder = flow.kwargs.get("decoder")
    top = _spec_kwargs(flow, "flow", "flow", path)
    enc = _spec_kwargs(flow.kwargs.get("encoder"), "encoder", "flow.encoder", path)
    dec = _spec_kwargs(decoder, "decoder", "flow.decoder", path)
    dit = _spec_kwargs(decoder.kwargs.get("estimator"), "estimator", "flow.decoder.estimator", path)
    checks.check_shapes(path, top, enc, dit)
    for key, allowed in _encoder_choices().items():
        if key in enc and enc[key] not in allowed:
            raise CheckpointError(f"{path}: flow.encoder.{key} must be one of {', '.join(allowed)} (what the vendor "
                                  f"encoder builds), got {enc[key]!r:.60}")
    try:
        return Token2wavConfig(
            name=name or path.parent.name,
            encoder=EncoderConfig(**enc),
            estimator=DiTConfig(**dit),
            hift=hift,
            **top,
            **dec,
        )
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: {str(exc)[:300]}") from None


def save_checkpoint(folder: str | Path, flow: torch.nn.Module, hift: torch.nn.Module, cfg: Token2wavConfig) -> Path:
    """Write ``flow.yaml``, ``flow.pt`` and ``hift.pt`` (CPU state dicts) into ``folder``.

    ``flow.yaml`` uses the same ``!new:`` tags as the released file. ``rand_noise`` and the
    solver caches are non-persistent buffers and are not saved. Returns the folder.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "flow.yaml").write_text(_yaml_dump(cfg))
    torch.save({k: v.detach().cpu() for k, v in flow.state_dict().items()}, folder / "flow.pt")
    torch.save({k: v.detach().cpu() for k, v in hift.state_dict().items()}, folder / "hift.pt")
    return folder


def _torch_load(path: Path) -> dict[str, torch.Tensor]:
    if not path.exists():
        raise CheckpointError(f"{path}: missing file")
    if not path.is_file():  # a folder, FIFO or device: torch.load would fail or block
        raise CheckpointError(f"{path}: not a regular file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for corrupt files
        raise CheckpointError(f"{path}: cannot be read as a torch state dict ({type(exc).__name__}: {exc})") from exc
    if not isinstance(state, Mapping) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise CheckpointError(f"{path}: expected a mapping of parameter names to tensors")
    return dict(state)


def _hift_base_channels(state: Mapping[str, torch.Tensor], path: Path) -> int:
    for key in ("conv_pre.parametrizations.weight.original1", "conv_pre.weight_v", "conv_pre.weight"):
        if key in state:
            return int(state[key].shape[0])
    raise CheckpointError(f"{path}: no conv_pre weight found; not a HiFT state dict")


def _load_strict(module: torch.nn.Module, state: Mapping[str, torch.Tensor], path: Path) -> None:
    try:
        module.load_state_dict(state, strict=True)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise CheckpointError(f"{path}: does not match the declared modules ({str(exc)[:500]})") from None


def load_checkpoint(
    folder: str | Path,
    device: str | torch.device = "cpu",
    seed_for_noise: int = 0,
    dtype: torch.dtype = torch.float32,
    envelope: CacheEnvelope = STOCK_ENVELOPE,
    max_bytes: int = checks.MAX_CHECKPOINT_BYTES,
) -> tuple[torch.nn.Module, torch.nn.Module, Token2wavConfig]:
    """Load ``folder/{flow.yaml, flow.pt, hift.pt}`` into vendor modules: ``(flow, hift, cfg)``.

    ``flow.yaml`` is parsed with inert constructors (no code runs); only the four vendor flow
    classes are accepted (``cosyvoice2.`` or ``stepaudio2.cosyvoice2.`` paths). HiFT's
    ``base_channels`` is read from ``hift.pt``, whose keys may carry a ``generator.`` prefix.
    Both state dicts load strictly. ``rand_noise`` is not part of a checkpoint: it is drawn
    from ``seed_for_noise`` (the vendor draws it from the global RNG at construction, so a
    real checkpoint run through the vendor class uses other start noise unless copied over).
    ``flow.yaml``'s values are checked (types, ranges, divisibility; see
    :mod:`.checkpoint_checks`) and the bytes of the modules counted on ``meta`` before anything
    is allocated: a config needing more than ``max_bytes`` is refused.
    Raises :class:`CheckpointError` naming the file on any problem.
    """
    folder = Path(folder)
    flow_path, hift_path, yaml_path = folder / "flow.pt", folder / "hift.pt", folder / "flow.yaml"
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a checkpoint folder")
    config_from_flow_yaml(yaml_path)  # the values, checked before any weights are read
    hift_state = {k.removeprefix("generator."): t for k, t in _torch_load(hift_path).items()}
    base = _hift_base_channels(hift_state, hift_path)
    if not 8 <= base <= checks.MAX_WIDTH or base % 8:
        raise CheckpointError(f"{hift_path}: conv_pre has {base} output channels (a positive multiple of 8 "
                              f"up to {checks.MAX_WIDTH} expected)")
    cfg = config_from_flow_yaml(yaml_path, hift=HiFTConfig(base))
    try:
        need = checks.estimate_bytes(lambda: construct_modules(cfg, meta=True, envelope=envelope),
                                     torch.empty((), dtype=dtype).element_size())
    except (RuntimeError, ValueError, TypeError, IndexError, ZeroDivisionError) as exc:
        raise CheckpointError(f"{yaml_path}: the vendor modules cannot be built from these values "
                              f"({type(exc).__name__}: {str(exc)[:200]})") from None
    checks.check_bytes(yaml_path, need, max_bytes)
    flow_state = _torch_load(flow_path)
    flow, hift = construct_modules(cfg, meta=False, envelope=envelope)
    materialise_decoder(flow, subseed(seed_for_noise, "rand_noise"))
    flow = flow.to(dtype=dtype)
    _load_strict(flow, flow_state, flow_path)
    _load_strict(hift, hift_state, hift_path)
    assert_materialised(flow, "flow")
    return flow.eval().to(device), hift.eval().to(device), cfg
