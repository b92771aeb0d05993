"""The native-clock contract: what a model declares and what the runtime derives from it."""

from .clocks import Clock, PerCall, clocks_table, per_call
from .declaration import Admission, Declaration, DeviceConstant, Operator, Region
from .derivation import (
    CLASS_BUDGET,
    K_MAX,
    PRIMING,
    class_label,
    class_labels,
    ROW_LIMIT,
    Derivation,
    admitted_labels,
    cached_at,
    catalog,
    catalog_counts,
    catalog_width,
    catalogs,
    checks,
    demand_shape,
    derive,
    envelope,
    nbytes,
    operator_tuples,
    region_shape,
    region_table,
    rho_table,
    settle_calls,
    stock_shape,
    trajectory,
    verdict,
)
from .errors import DeclarationError, DerivationLimitError
from .policies import Counter, Fixed, PromptRetained, RetentionPolicy, Ring, SlidingWindow, Unbounded, canonical

from types import ModuleType as _Module

#: the contract's names (its submodules are not part of it)
__all__ = [n for n, v in dict(globals()).items() if not n.startswith("_") and not isinstance(v, _Module)]
