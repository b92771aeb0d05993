# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 0 · Profile a chunk yourself
#
# Before reading anyone's measurements, make one. A streaming model answers chunk by chunk; each chunk is a
# few dozen operations (matmuls, concatenations, cuts), and between them the host runs Python and the
# framework's dispatch. This notebook has you run the course's small teaching model on your CPU under
# `torch.profiler`, load the trace with `cadencelab.profile`, and measure two numbers every later notebook
# uses: **busy time** (how long the processor was inside an operation) and **slack** (the idle share of the
# chunk's wall time: orchestration).
#
# **You will learn**
# - to profile one chunk with `torch.profiler` and load the trace as DataFrames (`profile.load_trace`);
# - to compute busy time as a union of intervals and slack as the idle share, and check them against
#   `profile.summary`;
# - why a CPU trace needs its innermost ops to stand in for kernels, and what a GPU trace adds.
#
# Runs on a CPU in a few seconds. With a GPU (`LIVE`), the last cell profiles a chunk on the device too.

# %% tags=["parameters"]
# parameters: the tour and CI may override these (papermill style)
import torch

LIVE = torch.cuda.is_available()  # also profile a chunk on the GPU
PREDICT_SLACK = None  # your prediction of each chunk's slack: {"stock torch.cat": ..., "carry": ...}, or the boxes

# %%
import tempfile
from pathlib import Path

from IPython.display import HTML, display

from cadencelab import profile
from cadencelab.course import exercises, glossary, grading, handson
from cadencelab.course.display import show
from cadencelab.course.predict import Prediction, reveal

HTML(glossary.to_html(notebook=0))  # the terms this notebook uses

# %% [markdown]
# ## The chunk
#
# The teaching model is a one-layer streaming attention model (notebook 3 opens it up). Its runtime keeps
# the attention cache in a **carry**; the stock runtime rebuilds it with `torch.cat` every call. Three chunks
# warm it up; you profile the fourth.

# %%
rt, chunk = handson.teaching_chunk()
print(f"one chunk: input {tuple(chunk.shape)}; the runtime has streamed {rt.calls} calls of this turn so far")

# %% [markdown]
# ## Predict
#
# What share of one chunk's wall time is the CPU *not* inside an operation? For the carry runtime, and for
# the stock one (which concatenates a new cache tensor every call)? A fraction between 0 and 1 each.

# %%
guess = Prediction("Slack of one chunk: the idle share of its wall time", unit="fraction", value=PREDICT_SLACK,
                   parts=["stock torch.cat", "carry"])
guess

# %% [markdown]
# ## Profile it
#
# The whole recipe: a profiler around the call, a named range (`record_function`) around the chunk so the
# library knows the window, then the Chrome trace written and read back. Each row of `cpu_ops` is one op
# with its start, duration and nesting depth (an `aten::linear` holds an `aten::addmm`).

# %%
trace_file = Path(tempfile.gettempdir()) / "cadencelab_chunk.json"
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    with torch.profiler.record_function("chunk"):  # the window profile.summary reads
        rt.stream(chunk)
prof.export_chrome_trace(str(trace_file))
trace = profile.load_trace(trace_file)  # (open the file in ui.perfetto.dev to see it drawn)
trace.cpu_ops[["name", "start_ns", "dur_ns", "depth"]].head(8)

# %% [markdown]
# The library's summary of the window: on a CPU-only trace busy and slack are blank, and it says why. There
# are no kernels: the same processor computes and orchestrates.

# %%
profile.summary(trace, "chunk")[["window", "wall_us", "busy_us", "slack_frac", "na_reason"]]

# %% [markdown]
# On a CPU the **innermost** ops (those with no op inside them) stand in for kernels: they are where the
# arithmetic happens. `handson.host_ops_as_kernels` makes them the trace's "device" work.

# %%
host = handson.host_ops_as_kernels(trace)
host.kernels[["name", "start_ns", "dur_ns"]].head(5)

# %% [markdown]
# ## Exercise: busy and slack, as code
#
# Write `busy_and_slack(starts_ns, ends_ns, window_start_ns, window_end_ns)`: from intervals `[start, end)` in
# nanoseconds (numpy arrays) and a window, it returns `dict(busy_ms=..., slack=...)`: (1) the busy time in ms,
# the length of the union of the intervals inside the window, (2) the slack, the idle share of the window's
# wall time. The grader runs it on your chunk (`host.kernels`' `start_ns` and `end_ns`, the window from
# `profile.windows(trace, "chunk")`) and on interval sets it draws when it runs: nested, overlapping, crossing
# the window's edges. Busy is graded within 2% (or 0.01 ms), slack within 0.01.

# %% tags=["answer"]
def busy_and_slack(starts_ns, ends_ns, window_start_ns, window_end_ns):
    """Busy ms (the union of the intervals inside the window) and slack (the idle share of the window)."""
    return ...


# %%
feedback = grading.grade(exercises.check_busy_slack, busy_and_slack, trace=trace)
feedback

# %% [markdown]
# The reveal: the library's summary of your trace, and the same chunk under the stock runtime.

# %%
mine = profile.summary(host, "chunk")
stock = profile.summary(handson.host_ops_as_kernels(handson.profile_teaching_chunk(state_rule=False)), "chunk")
slack = {"stock torch.cat": stock["slack_frac"].iloc[-1], "carry": mine["slack_frac"].iloc[-1]}
display(reveal(guess, slack, abs_tol=0.05))
show(handson.busy_idle_figure({"stock torch.cat": stock, "carry": mine}))

# %% [markdown]
# Most of a small chunk's wall time is spent between operations, whichever runtime: the arithmetic is short
# and the host's work around it is not. That idle share is the **orchestration slack**. On a GPU it has the
# same definition, with the device's kernels as the busy intervals: notebook 1 reads it from a recorded H200
# second, notebook 7 walks it kernel by kernel, and notebook 9 has you remove it with CUDA graphs.

# %%
if LIVE:
    from cadencelab.course.live import profile_chunk
    display(profile.summary(profile_chunk("B0", "teaching", "cuda"), "chunk")[["wall_us", "busy_us", "slack_frac"]])
else:
    print("No CUDA device: profile a GPU chunk later with `cadencelab profile --device cuda --out DIR`.")

# %% [markdown]
# ## Check
#
# Run the next cell: it asserts what this notebook taught and prints `CHECK OK` when it holds.

# %% tags=["check"]
s = mine.iloc[-1]
assert s["busy_us"] <= s["wall_us"] and abs(s["slack_frac"] - (1 - s["busy_us"] / s["wall_us"])) < 1e-9
assert (host.kernels["dur_ns"] <= s["wall_us"] * 1e3).all() and len(host.kernels) < len(trace.cpu_ops)
assert profile.summary(trace, "chunk")["busy_us"].isna().all(), "a CPU trace alone has no device busy time"
assert min(slack.values()) > 0.5, "most of a small chunk's wall time is between operations, in both runtimes"
print(f"CHECK OK: notebook 0: one chunk {s['wall_us'] / 1e3:.1f} ms, busy {s['busy_us'] / 1e3:.1f} ms, slack "
      f"{s['slack_frac']:.2f} over {len(host.kernels)} innermost ops; exercise {grading.verdict(feedback)}")
print(grading.record(0, feedback))
