"""Device conditions: the kernel-selection settings a run is measured under, one definition for all.

A bitwise gate compares arms that run in different processes, so the kernels each arm picks must
not vary from process to process. Three knobs decide that on CUDA: TF32 (cuBLAS and cuDNN may use
it for float32 work), cuDNN's deterministic flag (some transposed-convolution algorithms accumulate
with atomics) and cuBLAS's workspace configuration (``CUBLAS_WORKSPACE_CONFIG``). Each pin can cost
the stock runtime speed, so the *exact condition* is the least pinning under which every arm is
bit-exact across processes (fewest pins, then the faster stock runtime), established by measurement
(``python -m cadencelab.bench conditions``, recorded in ``data/h200/device_conditions.json``) and
named by :data:`EXACT`. Every study, arm process, live notebook cell and test applies it through
:func:`apply_condition`.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

__all__ = ["DeviceCondition", "CONDITIONS", "EXACT", "REFERENCE", "apply_condition", "condition_of",
           "split_arm", "pin_determinism"]

_WORKSPACE_VAR = "CUBLAS_WORKSPACE_CONFIG"


@dataclass(frozen=True)
class DeviceCondition:
    """One setting of the three knobs. ``tf32=None`` leaves torch's defaults (matmul TF32 off,
    cuDNN TF32 on); ``cublas_workspace=None`` removes ``CUBLAS_WORKSPACE_CONFIG`` from the
    process environment."""

    name: str
    tf32: bool | None
    cudnn_deterministic: bool
    cublas_workspace: str | None
    description: str

    @property
    def pins(self) -> int:
        """How many knobs this condition moves away from torch's defaults."""
        return int(self.tf32 is False) + int(self.cudnn_deterministic) + int(self.cublas_workspace is not None)


CONDITIONS: dict[str, DeviceCondition] = {c.name: c for c in (
    DeviceCondition("defaults", None, False, None, "torch's defaults: nothing pinned"),
    DeviceCondition("cudnn_det", None, True, None, "cuDNN deterministic algorithms, TF32 as torch defaults it"),
    DeviceCondition("no_tf32", False, False, None, "TF32 off in cuBLAS and cuDNN"),
    DeviceCondition("no_tf32_cudnn_det", False, True, None, "TF32 off and cuDNN deterministic"),
    DeviceCondition("no_tf32_cudnn_det_ws", False, True, ":4096:8",
                    "TF32 off, cuDNN deterministic and a fixed cuBLAS workspace (the earlier 'pinned' set-up)"),
)}

#: the exact condition: the least pinning under which every arm was bit-exact across processes
#: (data/h200/device_conditions.json, ``summary.chosen``)
EXACT = "cudnn_det"
#: the unpinned reference of the fairness gate: the stock runtime as torch runs it by default
REFERENCE = "defaults"


def condition_of(name: str | None) -> DeviceCondition:
    """The condition called ``name`` (None: :data:`EXACT`); a clear error naming the known ones."""
    name = EXACT if name is None else name
    try:
        return CONDITIONS[name]
    except KeyError:
        raise ValueError(f"unknown device condition {name!r}; known: {', '.join(CONDITIONS)}") from None


def split_arm(arm: str, default: str | None = None) -> tuple[str, str]:
    """``"B0@defaults"`` -> ``("B0", "defaults")``; an arm without ``@`` runs under ``default``
    (None: :data:`EXACT`). The condition is checked."""
    base, _, cond = arm.partition("@")
    return base, condition_of(cond or default).name


def apply_condition(name: str | None = None) -> dict:
    """Apply condition ``name`` (None: :data:`EXACT`) to this process; returns it for provenance.

    Call before the first CUDA call of the process: cuBLAS reads its workspace variable when it
    creates its handle, so ``workspace_effective`` is False when CUDA was already initialised and
    the variable's value had to change.
    """
    import torch  # here, not at the top: the conditions themselves (a study's --help) need no torch

    c = condition_of(name)
    before = os.environ.get(_WORKSPACE_VAR)
    if c.cublas_workspace is None:
        os.environ.pop(_WORKSPACE_VAR, None)
    else:
        os.environ[_WORKSPACE_VAR] = c.cublas_workspace
    late = torch.cuda.is_initialized() and before != c.cublas_workspace
    defaults = c.tf32 is None
    torch.backends.cuda.matmul.allow_tf32 = False if defaults else bool(c.tf32)
    torch.backends.cudnn.allow_tf32 = True if defaults else bool(c.tf32)
    torch.backends.cudnn.deterministic = c.cudnn_deterministic
    torch.backends.cudnn.benchmark = False
    return dict(condition=c.name, **{k: v for k, v in asdict(c).items() if k != "name"},
                matmul_allow_tf32=torch.backends.cuda.matmul.allow_tf32,
                cudnn_allow_tf32=torch.backends.cudnn.allow_tf32, workspace_effective=not late)


def pin_determinism() -> dict:
    """Apply the exact condition (:data:`EXACT`): what every bitwise gate runs under."""
    return apply_condition(EXACT)
