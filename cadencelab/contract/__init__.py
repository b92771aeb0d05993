"""The native-clock contract: what a model declares and what the runtime derives from it."""

from .clocks import Clock, clocks_table
from .declaration import Admission, Declaration, DeviceConstant, Operator, Region
from .derive import (
    K_MAX,
    admitted_labels,
    Derivation,
    catalog,
    catalog_width,
    catalogs,
    checks,
    demand_shape,
    derive,
    envelope,
    region_table,
    rho_table,
    stock_shape,
    trajectory,
    verdict,
)
from .errors import DeclarationError
from .examples import (
    EXAMPLES,
    backbone_declaration,
    freeze_style_declaration,
    moshi_mimi_declaration,
    token2wav_declaration,
    unbounded_backbone_declaration,
)
from .policies import Fixed, PromptRetained, Ring, SlidingWindow, Unbounded, canonical

__all__ = [n for n in dir() if not n.startswith("_")]
