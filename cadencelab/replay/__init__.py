"""The compute rule: exact-shape replay with admission checks that fail closed to eager."""

from .bind import At, Classifier, bind, lookahead
from .determinism import pin_determinism
from .effects import RngSnapshot
from .engine import (CAPTURED, FAILED, NEW, REJECTED, ExactShapeReplay, ReplayError, eager_label, no_collection,
                     replay_disabled, shared_pool)
from .graphsafe import GraphSafeISTFT
from .preflight import Preflight, preflight
from .signature import Unkeyable, describe, signature

__all__ = ["At", "Classifier", "bind", "lookahead", "eager_label", "ExactShapeReplay", "GraphSafeISTFT", "Preflight",
           "ReplayError", "RngSnapshot", "Unkeyable", "describe", "preflight", "signature", "shared_pool",
           "replay_disabled", "no_collection", "pin_determinism", "NEW", "CAPTURED", "REJECTED", "FAILED"]
