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
from .examples import (
    EXAMPLES,
    T2W_CLOCKS,
    Token2wavClocks,
    backbone_declaration,
    freeze_style_declaration,
    moshi_mimi_declaration,
    token2wav_declaration,
    unbounded_backbone_declaration,
)
from .policies import Counter, Fixed, PromptRetained, Ring, SlidingWindow, Unbounded, canonical

__all__ = [n for n in dir() if not n.startswith("_")]
