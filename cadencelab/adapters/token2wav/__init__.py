"""Adapter for the MiniCPM-o 4.5 / Lychee-FD streaming Token2wav (flow + HiFT vocoder).

``vendor``: load the vendor classes, declared configs (REAL, TEACHING), seeded construction,
cache-buffer sizing, checkpoints and synthetic prompts. ``stock``: the stock streaming loop (B0)
and a handle on the vendor's own ``Token2wav`` for parity checks. ``runtime``: the arms.
"""

from . import stock, vendor
from .stock import *  # noqa: F401,F403 - the names listed in stock.__all__
from .vendor import *  # noqa: F401,F403 - the names listed in vendor.__all__

__all__ = sorted(stock.__all__ + vendor.__all__)
