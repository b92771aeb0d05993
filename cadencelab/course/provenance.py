"""Where a course run happened, for the files it records (the graph lesson, the live tour)."""

from __future__ import annotations

import datetime as _dt
import os
import platform

__all__ = ["machine"]


def machine(device: str = "cuda") -> dict:
    """gpu (None without CUDA), torch, cuda, python, host, date (UTC) and commit (``$CADENCELAB_COMMIT``:
    the device copy of the tree has no history)."""
    import torch

    gpu = torch.cuda.get_device_name(torch.device(device)) if torch.cuda.is_available() else None
    return dict(gpu=gpu, torch=torch.__version__, cuda=torch.version.cuda, python=platform.python_version(),
                host=platform.node(), date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                commit=os.environ.get("CADENCELAB_COMMIT", ""))
