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

_EXPORTS = {  # module -> the names this package exports from it
    "capture": ("CALL_RANGE", "Profile", "profile_call", "profile_stream", "profiled"),
    "compare": ("OP_KINDS", "TickMarker", "align_kernels", "cadence_diff", "duplex_ticks", "duration_histogram",
                "kernel_stream", "launch_cost_estimate", "normalise_kernel_name", "op_kind", "short_kernel_name"),
    "export": ("export_chrome_trace", "export_hta_folder", "export_tensorboard_logdir", "trace_to_dict"),
    "memory": ("allocator_peak", "memory_timeline", "reset_allocator_peak", "rho_table"),
    "metrics": ("CPU_ONLY_REASON", "IDLE_CATEGORIES", "GraphKernelsMissing", "busy_ns", "check_graph_kernels",
                "device_intervals", "gaps", "idle_split", "launch_counts", "stages", "summary", "windows"),
    "trace": ("Trace", "TraceError", "launch_kind", "load_trace", "parse_trace", "read_trace_json"),
}

__all__ = [name for names in _EXPORTS.values() for name in names]


from ..support.lazy import exports_table, lazy_package

# a name is imported from its module on first use: importing one light module of this package imports none of the others
__getattr__, __dir__ = lazy_package(__name__, globals(), *exports_table(_EXPORTS))
