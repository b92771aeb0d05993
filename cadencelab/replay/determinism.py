"""Deterministic kernel selection: the precondition of every bitwise gate."""

from __future__ import annotations

import os

import torch


def pin_determinism() -> dict:
    """Deterministic kernel selection for every arm, the stock one included.

    cuDNN's transposed convolutions may pick atomics-based algorithms whose float32 output varies
    run to run; cuBLAS needs a fixed workspace configuration; TF32 is off. Set before the first
    CUDA call of the process. Returns the settings, for provenance.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return dict(CUBLAS_WORKSPACE_CONFIG=os.environ["CUBLAS_WORKSPACE_CONFIG"], cudnn_deterministic=True,
                cudnn_benchmark=False, tf32=False)
