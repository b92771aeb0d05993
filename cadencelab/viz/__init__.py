"""cadencelab.viz: DataFrames in, plotly figures out (never shown from here).

    waterfall       stage waterfall of a duplex second against the cadence
    kernel_timeline kernels per stream on a µs axis, idle gaps by category, eager vs replay
    rho_bars        reserved vs live MiB per region, rho annotated
    catalog_grid    clock values -> shape classes, non-admitted values marked
    pareto          latency vs peak memory per arm, CIs, non-exact arms marked, frontier
    capacity_lines  sessions N vs a metric per arm, with the cadence line
    soak_panel      allocator bytes and chunk latency over a long stream, mismatches marked
    pointer_figure  the carry's address per call (flat) against a stock cache's
    audit_figure    per call, did each shadow audit agree; the output's max |diff| vs stock
    misses_figure   calls per shape class: replayed, or eager by miss reason
    idle_progress   idle and busy time accumulating kernel by kernel, eager vs replay
"""

from .admission import misses_figure
from .catalog import catalog_grid
from .memory import rho_bars
from .options import (
    CapacityOptions,
    FigureOptions,
    ParetoOptions,
    TimelineOptions,
    WaterfallOptions,
    require_columns,
)
from .progress import idle_progress
from .reliability import soak_panel
from .state import audit_figure, pointer_figure
from .timeline import kernel_timeline
from .tradeoffs import capacity_lines, pareto, pareto_frontier
from .waterfall import waterfall

__all__ = [
    "waterfall", "kernel_timeline", "rho_bars", "catalog_grid", "pareto", "pareto_frontier", "capacity_lines",
    "soak_panel", "pointer_figure", "audit_figure", "misses_figure", "idle_progress",
    "FigureOptions", "WaterfallOptions", "TimelineOptions", "ParetoOptions", "CapacityOptions",
    "require_columns",
]
