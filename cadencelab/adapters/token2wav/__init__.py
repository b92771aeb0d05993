"""Adapter for the MiniCPM-o 4.5 / Lychee-FD streaming Token2wav (flow + HiFT vocoder).

The vendor stack as a dependency, one module per job: ``vendor_import`` loads the vendor classes,
``configs`` declares the model sizes (REAL, TEACHING), ``envelopes`` sizes the solver cache buffers,
``build`` constructs the modules with seeded weights, ``checkpoint`` saves and loads them, and
``prompts`` makes synthetic speaker prompts. ``stock``: the stock streaming loop (B0) and a handle
on the vendor's own ``Token2wav`` for parity checks. ``runtime``: the arms.
"""

from . import build, checkpoint, configs, envelopes, prompts, stock, vendor_import
from .build import *  # noqa: F401,F403 - the names listed in build.__all__
from .checkpoint import *  # noqa: F401,F403
from .configs import *  # noqa: F401,F403
from .envelopes import *  # noqa: F401,F403
from .prompts import *  # noqa: F401,F403
from .stock import *  # noqa: F401,F403
from .vendor_import import *  # noqa: F401,F403

__all__ = sorted(stock.__all__ + vendor_import.__all__ + configs.__all__ + envelopes.__all__ + build.__all__
                 + checkpoint.__all__ + prompts.__all__)
