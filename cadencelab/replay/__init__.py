"""The compute rule: exact-shape replay with admission checks that fail closed to eager."""

from .determinism import pin_determinism
from .effects import RngSnapshot
from .engine import (CAPTURED, FAILED, NEW, REJECTED, ExactShapeReplay, ReplayError, no_collection, replay_disabled,
                     shared_pool)
from .graphsafe import GraphSafeISTFT
from .signature import Unkeyable, describe, signature

__all__ = ["ExactShapeReplay", "GraphSafeISTFT", "ReplayError", "RngSnapshot", "Unkeyable", "describe", "signature",
           "shared_pool", "replay_disabled", "no_collection", "pin_determinism", "NEW", "CAPTURED", "REJECTED", "FAILED"]
