"""The state rule: demand-sized regions, the carry at a stable address, and its audit."""

from .alloc import AllocationRefused, allocate, allocation_plan, check_copies_fit, check_fits, free_bytes
from .audit import DifferentialAuditor, Divergence, ShadowAuditor
from .carry import Carry, move_frames
from .equal import bitwise_equal, nan_detail

__all__ = ["Carry", "move_frames", "ShadowAuditor", "DifferentialAuditor", "Divergence", "allocate", "allocation_plan",
           "AllocationRefused", "check_fits", "check_copies_fit", "free_bytes",
           "bitwise_equal", "nan_detail"]
