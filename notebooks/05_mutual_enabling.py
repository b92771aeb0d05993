# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 5 · Mutual enabling
#
# Two rules, four questions: state rule on or off, replay on or off, replay per solver step or per chunk,
# and how many solver steps. The factorial study measured every combination on an H200 (repeated timed
# blocks per arm, paired bootstrap intervals, bit-exactness against the stock runtime per block).
#
# **You will learn**
# - that each rule alone fails in its own direction: the state rule saves memory without speed, replay
#   gains speed and *costs* memory (most at chunk granularity);
# - that only the two together reach the corner of the Pareto plot;
# - that exactness is a precondition of the comparison, and what it costs: the device condition under
#   which every arm is bit-exact across processes, chosen by measurement.

# %% tags=["parameters"]
# parameters: the tour and CI may override these (papermill style)
import torch

LIVE = torch.cuda.is_available()  # run the GPU-only cells live
CONDITION = "exact"  # recorded H200 data: "exact" (the exact device condition) or an older recording: pinned, unpinned

# %%
import pandas as pd
from IPython.display import display

from cadencelab import viz
from cadencelab.course import data, panels

# %% [markdown]
# ## The recorded factorial
#
# Each point is one arm: median steady-chunk latency vs median peak allocator memory, with the paired
# 95% intervals; arms that are not bit-exact are drawn as open crosses.

# %%
viz.pareto(data.pareto_frame(CONDITION), viz.ParetoOptions(title=f"Token2wav on an H200 ({CONDITION} kernels)"))

# %% [markdown]
# ## The rules panel
#
# Toggle the rules; the ringed point is the arm they name, read from the recorded data (measured live on
# this GPU when `LIVE`). The readout adds what the declaration says about the choice: how many steady graph
# bindings replay captures and how large a solver workspace the state rule allocates.

# %%
panel = panels.rules_panel(condition=CONDITION, live=LIVE)
panel

# %% [markdown]
# The panel's callbacks are plain methods. Walk the six cells of the factorial:

# %%
walk = [panel.set(state_rule=s, replay=r, granularity=g)
        for s, r, g in [(False, False, "chunk"), (True, False, "chunk"), (False, True, "step"),
                        (False, True, "chunk"), (True, True, "step"), (True, True, "chunk")]]
pd.DataFrame(walk)[["arm", "lat_ms", "peak_MiB", "exact", "latency_delta", "peak_delta", "steady_bindings",
                    "solver_workspace_MiB"]]

# %% [markdown]
# Read the rows against each other:
#
# - **S** (state rule only) cuts the peak to a fraction of B0's (`peak_delta`) without a speedup (its
#   `latency_delta` is near zero or above): demand sizing is a memory mechanism.
# - **R / Rc** (replay only) are fast, and memory goes *up*: without a contract-owned carry the engine must
#   stage a copy of every cache input per captured class, at the stock envelope. At chunk granularity that
#   is the whole stacked cache per class: Rc's peak is a multiple of B0's.
# - **SR / SRc**: the carry is aliased by address (no staging), the envelope it freezes is the declared one.
#   Both gains survive, neither cost does.

# %%
panel.figure()

# %% [markdown]
# Solver steps: the recorded study ran at 10 steps. Other step counts change what the declaration derives
# (bindings at step granularity, the solver workspace) at once; their latency needs a live GPU run.

# %%
print(panel.set(steps=6)["note"] or "measured live at 6 steps")
panel.set(steps=10)

# %% [markdown]
# ## Exactness is a precondition, and it has a price
#
# The bitwise gate compares arms that run in different processes, so each process must pick the same
# kernels. Three knobs decide that (TF32, cuDNN's deterministic algorithms, cuBLAS's workspace), and
# each can slow the stock runtime. The conditions study ran every candidate setting with B0, a second
# B0 process, SRc and the re-bucketed vendor graph, all interleaved in one run: a condition is exact
# when every arm equals its own condition's B0 in every block. The exact condition is the least pinning
# that is exact; every recorded study now runs under it, and the factorial checks that B0 there is no
# slower than B0 with nothing pinned (the fairness gate).

# %%
cond = data.device_conditions()
s = cond.attrs["summary"]
fair = data.factorial_summary()["fairness"]
print(f"exact condition: {s['chosen']} (least pinning that is exact); "
      f"B0 there vs nothing pinned, paired over the factorial's blocks: {100 * fair['B0_slower_by']:+.1f}% "
      f"(95% CI {100 * fair['B0_slower_by_ci'][0]:+.1f}..{100 * fair['B0_slower_by_ci'][1]:+.1f}%)")
cond[["condition", "pins", "B0_ms", "B0_cost_vs_fastest", "B0_repeat_exact_blocks", "SRc_exact_blocks",
      "vendor_graph_50_exact_blocks", "exact"]].round(3)

# %% [markdown]
# Two readings: where B0 itself is not reproducible across processes (`B0_repeat_exact_blocks` below the
# block count), no comparison with it can be bitwise; and the cuBLAS workspace pin of the older recordings
# is the one knob whose cost stands far above the run's noise. The older unpinned recording shows the
# drift: mel and int16 PCM match, float32 PCM does not, even for `vendor_graph`, which runs B0's kernels.

# %%
viz.pareto(data.pareto_frame("unpinned"), viz.ParetoOptions(title="Older recording, TF32 off only: float32 PCM drifts"))

# %% [markdown]
# ## Many sessions on one GPU
#
# Stages inside a session cannot be batched, so serving N people means N states resident and N chunks
# served in turn within each second. The session manager keeps one set of weights and one set of captured
# graphs; each session owns only its state snapshot, swapped into the graphs' addresses when its chunk
# comes up (no re-capture). Each session was fed at the 1 s cadence under two workloads (`speak_heavy`:
# every session speaks every second; `mixed`: alternating 2 s turns) and every chunk was checked
# against that session run alone through B0.

# %%
cap = data.sessions_capacity()
ran = cap[~cap["skipped"].astype(bool) & ~cap["oom"]]
paper_arms = ran[ran["arm"].isin(["B0", "SRc"])]
viz.capacity_lines(paper_arms[paper_arms["workload"] == "speak_heavy"], options=viz.CapacityOptions(
    title="speak-heavy: worst per-session p95 chunk latency vs sessions", hline_label="cadence (ms)"))

# %%
sess = data.sessions_summary()
data.sessions_table()

# %% [markdown]
# The state rule sets what a session costs (its declared state: demand-sized carries instead of stock
# buffers); replay sets how many fit in a second. With p95 taken over each session's own chunks (2-3 per
# session and N here, so p95 is close to the worst chunk), SRc holds the cadence for several times as many
# sessions as B0 in both workloads (the table has the counts). One B0 chunk takes about half the cadence,
# so B0's speak-heavy count sits on the edge between one and two sessions and moves from run to run.
#
# ## An open question: batching across sessions (experimental)
#
# The paper leaves one thing open: chunks of *different* sessions that arrive together could share one
# call. Arm `SRb` tries it: the chunks arriving in the same second with the same shape class are stacked
# along the batch dimension and run as one flow call and one vocoder call, through CUDA graphs keyed on the
# batch size (the declared sizes are the bench's `--batch-sizes`; a size outside them runs eagerly and is
# counted). Three things to keep in mind when reading the lines below:
#
# * its gate is the **batched eager path** (the same batches, seeds and order without graphs), not the
#   session run alone: batching changes GEMM shapes and the vocoder's noise draws, so a batched session's
#   output differs from its solo output (the mel matches only while a session has never been batched);
# * every arrival in these workloads is at a whole second, the best case for batching: nothing waits for
#   a batch to fill;
# * its stacked workspaces and per-class graph inputs are a large fixed cost (the memory panel: SRb's
#   peak at one session, against SRc's).

# %%
heavy = ran[ran["workload"] == "speak_heavy"]
display(viz.capacity_lines(heavy, options=viz.CapacityOptions(
    title="speak-heavy, with the experimental batched arm SRb", hline_label="cadence (ms)")))
viz.capacity_lines(heavy, metric="peak_MiB", cadence_ms=None, options=viz.CapacityOptions(
    title="peak allocation vs sessions: SRb's fixed cost, then about one state per session"))

# %% [markdown]
# Arrivals at the whole second are the best case for batching. The same study with each second's
# arrivals spread evenly over it (`--stagger`) asks whether batches still form when nobody waits for
# them: the batcher serves whatever has arrived whenever the device is free, so an idle device runs
# single chunks and batches appear only under load. (SRb's share of that run's time budget ran out
# before SRb broke, so the first table gives its counts as lower bounds; a follow-up run of SRb alone,
# the second table, went further.)

# %%
display(data.sessions_table("sessions_staggered"))
data.sessions_table("sessions_srb_staggered")

# %% [markdown]
# ## Check
#
# Run the next cell: it asserts what this notebook taught and prints `CHECK OK` when it holds.

# %% tags=["check"]
pts = {p["arm"]: p for p in panel.history}
assert {"B0", "S", "R", "Rc", "SR", "SRc"} <= set(pts)
assert pts["SRc"]["lat_ms"] < 0.5 * pts["B0"]["lat_ms"] and pts["SRc"]["peak_MiB"] < 0.5 * pts["B0"]["peak_MiB"]
assert pts["Rc"]["peak_MiB"] > 2 * pts["B0"]["peak_MiB"] and pts["S"]["peak_MiB"] < 0.5 * pts["B0"]["peak_MiB"]
if panel.live:  # one short live block: too few chunks for a +-15% claim; the state rule alone is still slow
    assert pts["S"]["lat_ms"] > 2 * pts["SRc"]["lat_ms"]
elif CONDITION != "unpinned":  # in the older unpinned recording S / B0 is 1.19
    assert abs(pts["S"]["lat_ms"] / pts["B0"]["lat_ms"] - 1) < 0.15
assert CONDITION == "unpinned" or all(p["exact"] for p in pts.values())
assert sess["target_ratio_3x_met"] and sess["all_checked_chunks_exact"]  # SRb gated on the batched eager path
print(f"CHECK OK: notebook 5: SRc {pts['SRc']['lat_ms']:.1f} ms / {pts['SRc']['peak_MiB']:.0f} MiB vs "
      f"B0 {pts['B0']['lat_ms']:.1f} ms / {pts['B0']['peak_MiB']:.0f} MiB; Rc peak {pts['Rc']['peak_MiB']:.0f} MiB")
