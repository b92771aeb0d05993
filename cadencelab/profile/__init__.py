"""cadencelab.profile: traces in, DataFrames out.

    trace    load a Kineto / Chrome trace (plain or .gz) into frames: kernels, cpu_ops,
             launches, ranges (integer ns); TraceError names the file on bad input.
    metrics  busy time, orchestration slack, the idle split (host_wait / kernel_wait / other,
             graph-replay aware), launch counts, per-window summary, per-stage attribution.
    compare  two kernel streams: op kinds, sequence alignment, duration histogram, launch-cost
             estimate, two duplex seconds per stage and tick on the cadence.
    capture  profile_call / profiled / profile_stream around torch.profiler.
    memory   rho per region, allocator peaks, allocator snapshot timelines.
    export   Chrome trace (Perfetto), HTA folder, TensorBoard log dir.
"""

from .capture import CALL_RANGE, Profile, profile_call, profile_stream, profiled
from .compare import (
    OP_KINDS,
    TickMarker,
    align_kernels,
    cadence_diff,
    duplex_ticks,
    duration_histogram,
    kernel_stream,
    launch_cost_estimate,
    normalise_kernel_name,
    op_kind,
    short_kernel_name,
)
from .export import (
    export_chrome_trace,
    export_hta_folder,
    export_tensorboard_logdir,
    trace_to_dict,
)
from .memory import allocator_peak, memory_timeline, reset_allocator_peak, rho_table
from .metrics import (
    CPU_ONLY_REASON,
    IDLE_CATEGORIES,
    GraphKernelsMissing,
    busy_ns,
    check_graph_kernels,
    device_intervals,
    gaps,
    idle_split,
    launch_counts,
    stages,
    summary,
    windows,
)
from .trace import (
    Trace,
    TraceError,
    launch_kind,
    load_trace,
    parse_trace,
    read_trace_json,
)

__all__ = [
    "Trace", "TraceError", "load_trace", "parse_trace", "read_trace_json", "launch_kind",
    "device_intervals", "gaps", "windows", "busy_ns", "idle_split", "launch_counts", "summary", "stages",
    "CPU_ONLY_REASON", "IDLE_CATEGORIES", "GraphKernelsMissing", "check_graph_kernels",
    "OP_KINDS", "op_kind", "short_kernel_name", "normalise_kernel_name", "kernel_stream", "align_kernels",
    "duration_histogram", "launch_cost_estimate", "TickMarker", "duplex_ticks", "cadence_diff",
    "Profile", "profile_call", "profiled", "profile_stream", "CALL_RANGE",
    "rho_table", "allocator_peak", "reset_allocator_peak", "memory_timeline",
    "trace_to_dict", "export_chrome_trace", "export_hta_folder", "export_tensorboard_logdir",
]
