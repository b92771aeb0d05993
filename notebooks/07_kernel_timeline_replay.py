# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 7 · Kernel timeline replay
#
# A steady Token2wav chunk is thousands of device ops either way (the summary below counts them). Eagerly,
# the host issues them one by one and the GPU waits in between (`host_wait`); replayed, two
# `cudaGraphLaunch` calls issue them all and the gaps shrink to the device's own scheduling (`kernel_wait`).
# The *orchestration slack* is the idle share of the chunk's wall time.
#
# **You will learn**
# - to predict, then read, a chunk's device-busy time eager and replayed, and to compute its slack (a graded
#   exercise);
# - what "replay runs the same kernels" means precisely: the two streams aligned op by op by sequence
#   matching, with the copies that become kernels and the host-to-device copies that vanish counted;
# - to estimate the idle time from launches x per-launch cost, and to correct a profiled slack for the
#   profiler's own overhead.
#
# Uses the recorded H200 traces of one steady chunk (B0 and SRc). Without them it profiles the teaching
# config live on the CPU (host ops instead of kernels); with a GPU (`LIVE`) it also profiles one live.

# %% tags=["parameters"]
# parameters: the tour and CI may override these (papermill style)
import torch

LIVE = torch.cuda.is_available()  # run the GPU-only cells live
LIVE_PRESET = "full"  # the live cells' size: "full" (the recordings') or "small" (a smaller GPU; README: Running live)
CONDITION = "exact"  # recorded H200 data: "exact" (the exact device condition) or an older recording: pinned, unpinned
PREDICT_BUSY_MS = None  # your prediction of one steady chunk's device-busy ms: {"eager": ..., "replay": ...}

# %%
import pandas as pd
from IPython.display import HTML, display

from cadencelab import viz
from cadencelab.course import data, glossary, grading, predict
from cadencelab.course.display import show
from cadencelab.course.exercises import check_slack, slack_exercise_frame
from cadencelab.course.live import chunk_timelines
from cadencelab.course.live_cells import live_preset
from cadencelab.course.player import timeline_player
from cadencelab.profile import compare

# %%
HTML(glossary.to_html(notebook=7))

# %%
tl = chunk_timelines("auto")
print(tl.source)
print("events:", tl.what, f"({len(tl.eager)} eager, {len(tl.replay)} replayed)")

# %% [markdown]
# ## Predict first
#
# The eager chunk takes hundreds of milliseconds of wall time, the replayed one a few tens. How long is the
# *device* busy in each (the union of its kernels' and copies' execution time)? Enter your numbers in ms.

# %%
guess = predict.Prediction("Device-busy time of one steady chunk, eager and replayed?", unit="ms",
                           value=PREDICT_BUSY_MS, parts=["eager", "replay"])
guess

# %%
s = tl.summary.set_index("variant")
busy = predict.reveal(guess, {v: s.loc[v, "busy_us"] / 1e3 for v in ("eager", "replay")})
busy_fig = predict.reveal_figure(busy)
show(busy_fig)
busy[["key", "predicted", "measured", "verdict"]]

# %%
tl.summary[["variant", "wall_us", "busy_us", "host_wait_us", "kernel_wait_us", "other_idle_us",
            "kernel_launches", "graph_launches", "kernels"]]  # the slack column is the exercise's: left out

# %% [markdown]
# The busy times nearly agree: the device does almost the same work. What replay removes is the idle time
# between the ops, and the eager idle is almost all `host_wait`: the GPU finished and the next launch had
# not been issued yet.
#
# ## Exercise: the slack
#
# From the recorded H200 chunk below (B0 eager, SRc replayed; the grader reads the same file itself), compute each
# variant's orchestration slack, the idle share of the chunk's wall time, as a fraction (graded within 0.01).
# Replace the `...` and run the cell.

# %%
exercise_chunk = slack_exercise_frame()
exercise_chunk

# %% tags=["answer"]
answer = {"eager": ..., "replay": ...}

# %%
feedback = grading.grade(check_slack, answer)  # graded against the recorded chunk, which the grader reads itself
feedback

# %% [markdown]
# ## The same kernels? Aligned by sequence, not by index
#
# Pairing the n-th op of one stream with the n-th of the other drifts within a few ops: inside a graph a
# device-to-device memcpy runs as a copy kernel, the host-to-device copies of eager inputs vanish, and the
# carry replaces a concatenation by plain copies. `compare.align_kernels` matches the two streams on
# normalised names; each row is an equal pair, a stretch one side runs in place of the other (`replace`), or
# an op only one side has.

# %%
if "kernels" in tl.what:
    streams = {v: compare.kernel_stream(tl.traces[v], "chunk") for v in ("eager", "replay")}
else:  # a CPU profile: host ops stand in for kernels
    streams = {"eager": tl.eager, "replay": tl.replay}
aligned = compare.align_kernels(streams["eager"], streams["replay"], ("eager", "replay"))
counts = aligned["op"].value_counts()
kinds = {v: st["op_kind"].value_counts() for v, st in streams.items() if "op_kind" in st.columns}
print({v: len(st) for v, st in streams.items()}, "ops;", counts.to_dict())
display(counts.to_frame("aligned rows"))

# %%
if kinds:  # ops per kind on each side: where the copies went
    display(pd.DataFrame(kinds).fillna(0).astype(int))
first_diff = int(aligned.index[aligned["op"] != "equal"][0]) if (aligned["op"] != "equal").any() else 0
pairs = viz.kernel_pairs(aligned, start=max(0, first_diff - 20), count=60)
show(pairs)

# %% [markdown]
# So replay runs the same ops in the same order *apart from* the rows counted above: the equal pairs are
# the same kernel on both sides; the copies show up by kind (memcpy calls in the eager stream, copy kernels
# inside the graphs), and the host-to-device copies of eager inputs are the ones only the eager side has.
#
# ## How long do the ops run?

# %%
hist = compare.duration_histogram(streams)
hist_fig = viz.duration_bars(hist)
show(hist_fig)

# %% [markdown]
# Most ops run for a few microseconds: shorter than it takes the host to issue one. That is why an eager
# chunk is launch-bound.
#
# ## Launches x per-launch cost, and the profiler's own cost
#
# A back-of-the-envelope: host calls x the median host time per call, against the measured idle. These
# traces were taken *under the profiler*, which lengthens every host call; the factorial timed the same
# steady chunks without it, so the estimate below also carries the unprofiled wall and the slack the same
# device work leaves there.

# %%
fac = data.factorial(CONDITION).set_index("arm")
unprof = {v: 1e3 * float(fac.loc[a, "steady_wall_ms_median"]) for v, a in (("eager", "B0"), ("replay", "SRc"))}
est = compare.launch_cost_estimate(tl.traces, "chunk", unprofiled_wall_us=unprof) if "kernels" in tl.what else None
if est is not None:
    est_fig = viz.launch_cost_bars(est)
    show(est_fig)
    display(est[["variant", "host_calls", "kernel_launches", "per_launch_us", "est_launch_ms", "idle_ms",
                 "est_over_idle", "wall_ms", "unprofiled_wall_ms", "profiler_overhead", "profiled_slack",
                 "unprofiled_slack"]].round(3))

# %% [markdown]
# Two lessons. Launching alone explains only part of the eager idle (`est_over_idle`, the estimate over the
# measured idle, in the table: well below 1): between launches the host also runs Python and the framework's
# dispatch. (`host_calls` counts every host call into the device, the copies and memsets as well as the
# kernel launches.) And the profiler inflates an eager chunk's wall far more than a replayed one's: a slack
# read from a profiled eager run overstates it. Quote the unprofiled slack for a claim, the profiled one only
# for where the time goes. Two overhead figures, measuring two things: `profiler_overhead` above is *this*
# traced chunk's wall over the unprofiled median; the factorial's `profiler_wall_ratio` below is the median
# profiled chunk over the same unprofiled median. The traced eager chunk is one of the slower profiled ones:

# %%
ratios = fac[["profiler_wall_ratio", "steady_wall_ms_median", "wall_ms_median", "busy_ms_median"]].loc[["B0", "SRc"]]
if est is not None:
    ratios["this_chunk_overhead"] = est.set_index("variant")["profiler_overhead"].set_axis(["B0", "SRc"])
ratios.round(3)

# %% [markdown]
# ## The player
#
# Press play (or drag, or step one op at a time). The player walks the alignment above, not the index: one
# step is one aligned row, so both cursors sit on the same op (a copy is shown as a copy, by its kind), or one
# side shows "none" and says why (an op only the other side runs). Both panels show that side's ops in the
# last 40 steps, each from its own window start on one shared ms axis, with the idle gaps between them; the
# table accumulates busy and idle time; the lower figure shows the whole chunk's accumulation with the cursor.

# %%
player = timeline_player(tl.eager, tl.replay)
player

# %%
player.show(player.n // 2)

# %%
player_fig = player.figure()
show(player_fig)

# %%
progress = player.progress_figure()
show(progress)

# %% [markdown]
# ## Live (GPU only)
#
# On a GPU, profile your own chunk: the trace opens in Perfetto (ui.perfetto.dev) from `live.traces`.

# %%
if LIVE:
    live = chunk_timelines("live", config=live_preset(LIVE_PRESET)["token2wav"], device="cuda")
    display(live.summary[["variant", "wall_us", "busy_us", "slack_frac", "host_wait_us", "graph_launches"]])
    display(timeline_player(live.eager, live.replay))
else:
    print("No CUDA device: the recorded H200 chunk above stands in for a live profile.")

# %% [markdown]
# ## Check
#
# Run the next cell: it asserts what this notebook taught and prints `CHECK OK` when it holds.

# %% tags=["check"]
end, graded = player.state(player.n).set_index("variant"), grading.verdict(feedback)
if "kernels" in tl.what:  # device traces: the slack story, measured against the files
    assert end.loc["eager", "slack_frac"] > 3 * end.loc["replay", "slack_frac"]
    assert abs(s.loc["eager", "busy_us"] / s.loc["replay", "busy_us"] - 1) < 0.1  # the same device work
    assert counts.get("equal", 0) > 0.95 * min(len(st) for st in streams.values()) and len(counts) > 1
    assert (est["unprofiled_slack"] < est["profiled_slack"]).all() and (est["est_over_idle"] < 1).all()
    assert ratios.loc["B0", "this_chunk_overhead"] > ratios.loc["B0", "profiler_wall_ratio"]  # the slower eager chunk
assert len(tl.eager) > 0 and len(tl.replay) > 0 and len(busy) == 2
print(f"CHECK OK: notebook 7: slack of the chunk (the exercise's) eager {s.loc['eager', 'slack_frac']:.3f} vs replay "
      f"{s.loc['replay', 'slack_frac']:.3f}; over the player's aligned steps {end.loc['eager', 'slack_frac']:.3f} vs "
      f"{end.loc['replay', 'slack_frac']:.3f}; {len(tl.eager)} / {len(tl.replay)} events; exercise {graded}")
print(grading.record(7, feedback))
