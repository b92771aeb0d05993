"""cadencelab.viz: DataFrames in, plotly figures out (never shown from here), each with its caption.

    waterfall       stage waterfall of one window (a duplex second, a call) against the cadence
    kernel_timeline kernels per stream on a µs axis, idle gaps by category, eager vs replay
    rho_bars        reserved vs live MiB per region, rho annotated
    catalog_grid    clock values -> shape classes, non-admitted values marked
    catalog_heatmap an operator's catalog: cached extent x call size, steady / flush / rejected
    kernel_pairs    two aligned kernel streams (profile.align_kernels) on one time axis
    duration_bars   kernel-duration histogram on a log µs axis
    launch_cost_bars launches x per-launch cost vs the measured idle
    cadence_ticks   two duplex seconds per stage and tick on the cadence (profile.cadence_diff)
    pareto          latency vs peak memory per arm, CIs (kind named), non-exact arms marked, frontier
    capacity_lines  sessions N vs a metric per arm, with the cadence line
    soak_panel      allocator bytes and chunk latency over a long stream, mismatches marked
    pointer_figure  the carry's address per call (flat) against a stock cache's
    audit_figure    per call, did each shadow audit agree; the output's max |diff| vs stock
    misses_figure   calls per shape class: replayed, or eager by miss reason
    idle_progress   idle and busy time accumulating kernel by kernel, eager vs replay
    process_means   one point per fresh process (its mean, its block range) per arm
    caption         what a figure shows and how to read it, as the figure stores it
"""

from .admission import misses_figure
from .catalog import catalog_grid, catalog_heatmap, extent_labels
from .kernels import cadence_ticks, duration_bars, launch_cost_bars
from .memory import rho_bars
from .options import (
    CapacityOptions,
    FigureOptions,
    ParetoOptions,
    TimelineOptions,
    WaterfallOptions,
    annotation_boxes,
    boxes_overlap,
    caption,
    integer_axis,
    label_hline_outside,
    require_columns,
    wrap_label,
)
from .processes import process_means
from .progress import idle_progress
from .reliability import soak_panel
from .state import audit_figure, pointer_figure
from .timeline import kernel_pairs, kernel_timeline
from .tradeoffs import (
    capacity_lines,
    metric_title,
    metric_unit,
    pareto,
    pareto_frontier,
    place_labels,
)
from .waterfall import waterfall

__all__ = [
    "waterfall", "kernel_timeline", "rho_bars", "catalog_grid", "pareto", "pareto_frontier", "capacity_lines",
    "soak_panel", "pointer_figure", "audit_figure", "misses_figure", "idle_progress", "process_means", "catalog_heatmap", "extent_labels", "kernel_pairs", "duration_bars", "launch_cost_bars", "cadence_ticks",
    "place_labels", "metric_title", "caption", "annotation_boxes", "boxes_overlap",
    "FigureOptions", "WaterfallOptions", "TimelineOptions", "ParetoOptions", "CapacityOptions",
    "require_columns", "wrap_label", "integer_axis", "label_hline_outside", "metric_unit",
]
