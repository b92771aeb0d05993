"""The models cadencelab ships, by name: one line each, ``name -> "module:function"``, imported only when the
model is asked for (this module imports nothing of the package), so listing them costs no torch.

A name, or a user's ``package.module:function``, is what every tool takes (``cadencelab catalog|certify|profile
--model``, ``python -m cadencelab.bench kit --model``, the lab): :func:`resolve` gives the model's spec (a
:class:`~cadencelab.adapters.kit.KitModel`), :func:`declaration` its declaration alone (no model built for a
shipped name). A new model is one module with a ``kit_model_on(device)`` and one line here (or a
:func:`register` call for a model that lives elsewhere, e.g. in a test).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from importlib import import_module

__all__ = ["DECLARATIONS", "MODELS", "declaration", "load", "names", "register", "resolve"]

#: model name -> "module:function" of the device (and, where the function takes it, the arm) -> KitModel
MODELS: dict[str, str] = {
    "teaching": "cadencelab.adapters.teaching_kit:kit_model_on",
    "freeze-style": "cadencelab.adapters.freeze_style:kit_model_on",
    "token2wav": "cadencelab.adapters.token2wav.kit:kit_model_on",
    "token2wav-teaching": "cadencelab.adapters.token2wav.kit:kit_model_teaching",
}
#: declaration name -> "module:function" returning the Declaration (no model built: what `catalog` derives).
#: Mimi and the duplex backbone are declared here only: Mimi runs on the kit through its own stream
#: (:class:`cadencelab.adapters.mimi.MimiStream`, two chained operators), not yet as one KitModel.
DECLARATIONS: dict[str, str] = {
    "token2wav": "cadencelab.adapters.token2wav.clocks:token2wav_declaration",
    "moshi-mimi": "cadencelab.adapters.mimi:moshi_mimi_declaration",
    "backbone": "cadencelab.adapters.duplex.models:backbone_declaration",
    "unbounded-backbone": "cadencelab.adapters.duplex.models:unbounded_backbone_declaration",
    "freeze-style": "cadencelab.adapters.freeze_style:freeze_style_declaration",
    "teaching": "cadencelab.adapters.teaching:declaration",
}


def _check_target(target: str) -> None:
    module, _, fn = target.partition(":")
    if not isinstance(target, str) or not module or not fn or not all(p.isidentifier() for p in module.split(".")) \
            or not fn.isidentifier():
        raise ValueError(f"{target!r} is not package.module:function")


def register(name: str, target: str, *, declaration: str | None = None) -> None:
    """Add (or replace) the model ``name``: ``target`` is ``module:function`` of the device returning a KitModel;
    ``declaration`` (optional) ``module:function`` returning its Declaration without building the model."""
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"a model name is a non-empty string without ':', got {name!r}")
    for t in (target, declaration):
        if t is not None:
            _check_target(t)
    MODELS[name] = target
    if declaration is not None:
        DECLARATIONS[name] = declaration


def names() -> list[str]:
    """Every registered name, models and declarations."""
    return sorted(set(MODELS) | set(DECLARATIONS))


def load(target: str) -> Callable:
    """The function ``module:function`` names (ValueError naming it when it cannot be imported)."""
    _check_target(target)
    module, _, fn = target.partition(":")
    try:
        return getattr(import_module(module), fn)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot load {target} ({type(e).__name__}: {e})") from None


def _unknown(what: str) -> ValueError:
    return ValueError(f"{what!r}: not a registered model ({', '.join(names())}) nor package.module:function")


def resolve(model, device="cpu", arm: str | None = None):
    """The spec (a :class:`~cadencelab.adapters.kit.KitModel`) of ``model``: a KitModel (returned as is), a
    registered name, or ``package.module:function`` of the device; a function that also takes ``arm`` is given
    ``arm`` (Token2wav's stock arms then hold the vendor's own solver buffers)."""
    from .kit import KitModel

    if isinstance(model, KitModel):
        return model
    if not isinstance(model, str):
        raise ValueError(f"a model is a KitModel, a registered name or package.module:function, got "
                         f"{type(model).__name__}")
    if model not in MODELS and ":" not in model:
        if model in DECLARATIONS:
            raise ValueError(f"{model!r} is declared only (catalog); the models that run: {', '.join(sorted(MODELS))}")
        raise _unknown(model)
    target = MODELS.get(model, model)
    factory = load(target)
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        sig = None
    kw = {"arm": arm} if sig is not None and "arm" in sig.parameters and arm is not None else {}
    try:
        if sig is not None:
            sig.bind(device, **kw)
    except TypeError as e:  # the signature, not the body: a TypeError raised inside the factory is its own
        raise ValueError(f"{target} must be a function of the device ({e})") from None
    try:
        m = factory(device, **kw)
    except SystemExit as e:  # the user's code exited: say so, never as the caller's exit status
        raise RuntimeError(f"{target}(device) called sys.exit({e.code!r}) instead of returning a KitModel") from None
    if not isinstance(m, KitModel):
        raise ValueError(f"{target}(device) returned a {type(m).__name__}, not a KitModel")
    return m


def declaration(model, **params):
    """The Declaration of ``model``: a registered name (its declaration function, given ``params``; no model
    built), ``package.module:function`` returning a Declaration or a KitModel (built on the CPU), a KitModel, or
    a Declaration (returned as is)."""
    from ..contract import Declaration
    from .kit import KitModel

    if isinstance(model, Declaration):
        return model
    if isinstance(model, KitModel):
        return model.decl
    if isinstance(model, str) and model in DECLARATIONS:
        return load(DECLARATIONS[model])(**params)
    if not isinstance(model, str) or (":" not in model and model not in MODELS):
        raise _unknown(model)
    if params:
        raise ValueError(f"{model!r}: declaration parameters {sorted(params)} apply to a registered declaration only")
    if model in MODELS:
        return resolve(model).decl
    made = load(model)
    try:
        takes_device = "device" in inspect.signature(made).parameters
    except (TypeError, ValueError):
        takes_device = False
    out = made("cpu") if takes_device else made()
    if isinstance(out, KitModel):
        return out.decl
    if not isinstance(out, Declaration):
        raise ValueError(f"{model} returned a {type(out).__name__}, not a Declaration or a KitModel")
    return out
