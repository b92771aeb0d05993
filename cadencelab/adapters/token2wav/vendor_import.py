"""Loading the vendor Token2wav stack (``minicpmo==0.1.2``, package ``stepaudio2``) as a dependency.

The vendor's flow (token encoder + flow-matching DiT) and HiFT vocoder classes are imported without
executing ``stepaudio2/__init__.py`` (which pulls in torchaudio, s3tokenizer, onnxruntime,
hyperpyyaml and transformers): the sub-packages are registered bare, and the few top-level imports
the streaming path never uses are met by stand-in modules for the length of one import.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any, Mapping

__all__ = ["load_vendor", "load_vendor_token2wav_module"]


INSTALL_HINT = (
    "install the vendor runtime without its heavy dependencies: "
    "`pip install --no-deps minicpmo==0.1.2` and `pip install einops scipy`"
)

# Top-level vendor package and the sub-packages we register bare (no __init__ executed).
_VENDOR_ROOT = "stepaudio2"
_BARE_PACKAGES = (
    "stepaudio2",
    "stepaudio2.cosyvoice2",
    "stepaudio2.cosyvoice2.flow",
    "stepaudio2.cosyvoice2.transformer",
    "stepaudio2.cosyvoice2.utils",
    "stepaudio2.flashcosyvoice",
    "stepaudio2.flashcosyvoice.modules",
    "stepaudio2.flashcosyvoice.modules.hifigan_components",
    "stepaudio2.flashcosyvoice.utils",
)


def _vendor_folder() -> Path:
    """Folder of the installed ``stepaudio2`` package, found without importing it."""
    if _VENDOR_ROOT in sys.modules:
        paths = list(getattr(sys.modules[_VENDOR_ROOT], "__path__", []))
    else:
        spec = importlib.util.find_spec(_VENDOR_ROOT)
        paths = list(spec.submodule_search_locations or []) if spec is not None else []
    if not paths:
        raise ImportError(f"the vendor package `stepaudio2` (from minicpmo) is not installed; {INSTALL_HINT}")
    return Path(paths[0])


def _register_bare_package(name: str, folder: Path) -> types.ModuleType:
    """Put a package module for ``name`` whose ``__path__`` is ``folder`` into sys.modules.

    The package's ``__init__.py`` is not executed; submodules import normally through it.
    An already-imported package (e.g. a fully installed ``stepaudio2``) is left untouched.
    """
    if name in sys.modules:
        return sys.modules[name]
    module = types.ModuleType(name)
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    module.__spec__ = spec
    module.__path__ = [str(folder)]
    module.__package__ = name
    module.__file__ = None
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, module)
    return module


def _register_vendor_packages() -> Path:
    root = _vendor_folder()
    for name in _BARE_PACKAGES:
        rel = name.split(".")[1:]
        _register_bare_package(name, root.joinpath(*rel))
    return root


class _TemporaryStubs:
    """Insert empty stand-in modules into sys.modules for one import, then restore.

    ``names`` maps a module name to the attributes of its stand-in. Every stand-in is
    marked ``__cadencelab_stub__ = True``; whatever sys.modules held before is restored on exit.
    """

    def __init__(self, names: Mapping[str, Mapping[str, Any]]):
        self._names = dict(names)
        self._saved: dict[str, types.ModuleType | None] = {}

    def __enter__(self) -> "_TemporaryStubs":
        for name, attrs in self._names.items():
            self._saved[name] = sys.modules.get(name)
            stub = types.ModuleType(name)
            stub.__dict__.update(attrs)
            stub.__cadencelab_stub__ = True
            stub.__path__ = []  # a package, so `import a.b` resolves through sys.modules
            sys.modules[name] = stub
        for name in self._names:
            parent, _, child = name.rpartition(".")
            if parent in self._names:
                setattr(sys.modules[parent], child, sys.modules[name])
        return self

    def __exit__(self, *exc: object) -> None:
        for name, prior in self._saved.items():
            if prior is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = prior


def _importable(name: str) -> bool:
    """True when ``name`` imports cleanly (a broken install counts as missing)."""
    if name in sys.modules and not getattr(sys.modules[name], "__cadencelab_stub__", False):
        return True
    try:
        if importlib.util.find_spec(name) is None:
            return False
        importlib.import_module(name)
        return True
    except Exception:  # noqa: BLE001 - any failure means we need a stand-in
        return False


def _check_light_dependencies() -> None:
    missing = [name for name in ("einops", "scipy", "numpy") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"the vendor Token2wav code needs {', '.join(missing)}; {INSTALL_HINT}")


@functools.lru_cache(maxsize=1)
def load_vendor() -> types.SimpleNamespace:
    """Import the vendor flow/DiT/encoder/HiFT classes; cached.

    Returns a namespace with the classes ``CausalMaskedDiffWithXvec``, ``CausalConditionalCFM``,
    ``DiT``, ``UpsampleConformerEncoderV2``, ``HiFTGenerator``, the module objects under
    ``modules`` (``flow``, ``flow_matching``, ``decoder_dit``, ``upsample_encoder_v2``,
    ``hifigan``), the package folder ``root``, the installed ``version`` and
    ``dynamo_config_changes`` (the vendor encoder module sets ``torch._dynamo.config``
    ``suppress_errors=True`` and ``cache_size_limit=128`` at import time; we leave that as the
    stock runtime has it and record the (before, after) values here).

    Raises ImportError with install instructions when minicpmo, einops or scipy is missing.
    """
    root = _register_vendor_packages()
    _check_light_dependencies()
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("minicpmo")
        except PackageNotFoundError:
            installed = None
    except Exception:  # noqa: BLE001
        installed = None

    import torch._dynamo

    dyn = torch._dynamo.config
    before = {"suppress_errors": dyn.suppress_errors, "cache_size_limit": dyn.cache_size_limit}

    # flow_matching.py does `import onnxruntime` at top level and never uses it. When
    # onnxruntime is not importable we insert an empty stub for that single import and
    # remove it again right after (the flow_matching module keeps a reference to the stub).
    stubs = {} if _importable("onnxruntime") else {"onnxruntime": {}}
    try:
        with _TemporaryStubs(stubs):
            flow_matching = importlib.import_module("stepaudio2.cosyvoice2.flow.flow_matching")
        decoder_dit = importlib.import_module("stepaudio2.cosyvoice2.flow.decoder_dit")
        encoder = importlib.import_module("stepaudio2.cosyvoice2.transformer.upsample_encoder_v2")
        flow = importlib.import_module("stepaudio2.cosyvoice2.flow.flow")
        hifigan = importlib.import_module("stepaudio2.flashcosyvoice.modules.hifigan")
    except ImportError as exc:
        raise ImportError(f"could not import the vendor Token2wav modules from {root} ({exc}); {INSTALL_HINT}") from exc

    after = {"suppress_errors": dyn.suppress_errors, "cache_size_limit": dyn.cache_size_limit}
    return types.SimpleNamespace(
        CausalMaskedDiffWithXvec=flow.CausalMaskedDiffWithXvec,
        CausalConditionalCFM=flow_matching.CausalConditionalCFM,
        DiT=decoder_dit.DiT,
        UpsampleConformerEncoderV2=encoder.UpsampleConformerEncoderV2,
        HiFTGenerator=hifigan.HiFTGenerator,
        modules=types.SimpleNamespace(
            flow=flow,
            flow_matching=flow_matching,
            decoder_dit=decoder_dit,
            upsample_encoder_v2=encoder,
            hifigan=hifigan,
        ),
        root=root,
        version=installed,
        dynamo_config_changes={k: (before[k], after[k]) for k in before if before[k] != after[k]},
    )


@functools.lru_cache(maxsize=1)
def load_vendor_token2wav_module() -> types.ModuleType:
    """Import the vendor's ``stepaudio2/token2wav.py`` (its ``Token2wav`` class and ``fade_in_out``).

    That file imports torchaudio, s3tokenizer, onnxruntime, hyperpyyaml and (through
    ``flashcosyvoice.utils.audio``) librosa at top level, none of which its streaming path
    uses once a prompt is supplied. For this one import we insert empty stand-in modules for
    s3tokenizer and hyperpyyaml always, and for torchaudio / onnxruntime / librosa only when
    they are not importable; sys.modules is restored right after. The returned module keeps
    references to the stand-ins, so only ``Token2wav.set_stream_cache`` / ``Token2wav.stream``
    / ``fade_in_out`` are usable from it.
    """
    load_vendor()

    def _unavailable(*_: object, **__: object) -> None:
        raise RuntimeError("stand-in module: the audio front end is not available in cadencelab")

    stubs: dict[str, dict[str, Any]] = {
        "s3tokenizer": {"load_model": _unavailable},
        "hyperpyyaml": {"load_hyperpyyaml": _unavailable},
    }
    if not _importable("torchaudio"):
        kaldi: dict[str, Any] = {"fbank": _unavailable}
        stubs["torchaudio"] = {"load": _unavailable}
        stubs["torchaudio.compliance"] = {}
        stubs["torchaudio.compliance.kaldi"] = kaldi
    if not _importable("onnxruntime"):
        stubs["onnxruntime"] = {}
    if not _importable("librosa"):
        stubs["librosa"] = {}
        stubs["librosa.filters"] = {"mel": _unavailable}
    with _TemporaryStubs(stubs):
        module = importlib.import_module("stepaudio2.token2wav")
    return module
