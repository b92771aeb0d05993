# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 6 · Many sessions on one GPU: capacity and lanes
#
# Notebook 5 measured one session at a time. A voice service serves many, each at the 1 s cadence. Stages
# inside a session cannot be batched, so serving N people means N states resident and N chunks served
# within each second. The sessions study measured how many sessions one H200 holds with each arm.
#
# **You will learn**
# - to predict, then read, how many sessions one GPU serves at the cadence (B0, SRc, lanes SRl, experimental
#   SRb), and which counts are lower bounds;
# - why every lane stays bit-identical to the session run alone, and why lanes gain less than their count;
# - why B0 serving one session is not the factorial's B0: compare arms within one study.

# %% tags=["parameters"]
# parameters: the tour and CI may override these (papermill style)
import torch

LIVE = torch.cuda.is_available()  # nothing runs live here: the sessions study runs through the bench (README)
# your prediction before the reveal: sessions B0 and SRc each hold at the cadence (None: type it in the widget)
PREDICT_SESSIONS = None

# %%
from IPython.display import HTML, display

from cadencelab import viz
from cadencelab.course import capacity, data, glossary, grading, lanes_limit, predict
from cadencelab.course.display import show
from cadencelab.course.exercises import check_capacity
from cadencelab.course.frames import lanes_window
from cadencelab.profile.streams import stream_overlap

# %% [markdown]
# The terms this notebook leans on (the arms SRc, SRl and SRb, the cadence, goodput) are defined in the
# glossary; the tour's report has the whole glossary at its end.

# %%
HTML(glossary.to_html(notebook=6))

# %% [markdown]
# ## How the sessions were served
#
# The session manager keeps one set of weights and one set of captured graphs; each session owns only its
# state snapshot, swapped into the graphs' addresses when its chunk comes up (no re-capture). Sessions were
# fed at the 1 s cadence under two workloads (`speak_heavy`: every session speaks every second; `mixed`:
# alternating 2 s turns), and every chunk was checked bit for bit against a reference named in the legend.
# A session holds the cadence when its p95 chunk latency is at most 1 s (with 2-3 chunks per session and N,
# p95 is close to the worst chunk).
#
# ## Predict first
#
# Speak-heavy, every session's chunk arriving on the whole second: how many sessions does B0 hold at the
# cadence, and how many SRc? Notebook 5's chunk latencies are a start; remember the chunks of one second
# queue behind each other on one GPU.

# %%
guess = predict.Prediction("Sessions held at the cadence, speak-heavy, arrivals on the second",
                           unit="sessions", value=PREDICT_SESSIONS, parts=["B0", "SRc"])
guess

# %% [markdown]
# ## Exercise: read a capacity
#
# Now read it off the recording yourself. `data.sessions_capacity("speak_heavy")` has one row per arm and N
# that ran: `all_hold` says whether every session held the cadence, `goodput` how many seconds of audio were
# served per second of wall time. Give SRc's capacity (`sessions`: the largest N at which every session held
# the cadence) and its goodput plateau (`plateau`: the most audio seconds per second at any N). Replace the
# `...` and run the cell; the checker says what is wrong.

# %% tags=["answer"]
answer = {"sessions": ..., "plateau": ...}

# %%
feedback = grading.grade(check_capacity, answer, arm="SRc", workload="speak_heavy")
feedback

# %% [markdown]
# The reveal: your prediction beside the recorded counts, then every arm's count in both workloads.

# %%
bounds = capacity.capacity_bounds("sessions")
held = bounds[bounds["workload"] == "speak_heavy"].set_index("arm")
shown = predict.reveal(guess, {a: int(held.loc[a, "max_sessions"]) for a in ("B0", "SRc")}, rel_tol=0.25)
display(shown[["key", "predicted", "measured", "verdict"]])
bounds.pivot(index="arm", columns="workload", values="shown")

# %% [markdown]
# Each figure below is one workload: the p95 chunk latency of the sessions against their number, one line
# per arm, the cadence drawn across.

# %%
for w in capacity.WORKLOADS:
    f = capacity.capacity_figure(w, "sessions")
    show(f)
print(capacity.lower_bounds("sessions"))

# %% [markdown]
# A count with `>=` is a lower bound: the study's time budget ran out before that arm broke, so the sweep
# stopped there (ringed in the figures; the line above names them). A lower bound cannot be compared with
# another arm's measured break. The arms are named with their reference: B0, SRc and SRl chunks equal the
# session run alone through B0; SRb, **experimental**, batches chunks of different sessions and is gated only
# on the same batches run eagerly (batching changes GEMM shapes and the vocoder's noise draws).
#
# ## Lanes: why bit-identical, and why they gain less than their count
#
# SRl runs several SRc graph sets at once over one set of weights, each on its own CUDA stream. Below: a
# window of a few milliseconds of the recorded round where lanes serve chunks side by side, one row per lane,
# on one time axis, and the overlap factor (busy time summed over the lanes over the time at least one is busy).

# %%
lanes_trace = data.recorded_trace("SRl", "lanes")
overlap = stream_overlap(lanes_trace)
ov = overlap.iloc[0]
lanes_fig = viz.kernel_timeline(lanes_window(lanes_trace), label="name", options=viz.TimelineOptions(
    title=f"{ov['streams']:.0f} lanes on one H200: device ops per lane", height=420))
show(lanes_fig)
print(f"{ov['streams']:.0f} lanes: {ov['busy_sum_ms']:.1f} ms of device work summed over the lanes, in "
      f"{ov['busy_union_ms']:.1f} ms of busy device time: overlap {ov['overlap']:.2f} of a possible "
      f"{ov['streams']:.0f}")
assert 1 < ov["overlap"] < ov["streams"]  # read below: the lanes overlap, and less than their count

# %% [markdown]
# **Why each lane stays bit-identical to solo B0.** Replaying a captured graph changes no kernel and no
# shape; what could leak between sessions is state and randomness. Each lane owns its state (carries, solver
# buffers, graphs, staging) and its own device generator: its graphs were captured while the default
# generator shared that generator's state, so a lane's replays advance only its own draws, and a session's
# seed and offset travel with it from lane to lane. Eager work (a probe, a capture, the priming) runs with
# the other lanes held off. So every SRl chunk equals the session run alone through B0.
#
# **Why they gain less than their count.** Lanes overlap by less than their number: while they run side by
# side they share the SMs, so much of one lane's work waits for another's. Served audio per second
# (**goodput**) therefore grows with lanes only until the device is full. The table gives each arm's plateau
# in audio seconds per wall second and its ratio to SRc's; the line under it says what this recording
# settles about SRl's.

# %%
lanes = capacity.lanes_reading("speak_heavy", "sessions")
print(f"The study ran SRl with {lanes['lanes']} lanes; its plateau is {lanes['ratio']:.2f}x SRc's. {lanes['reading']}.")
assert 1 < lanes["ratio"] < lanes["lanes"]  # lanes gain, less than their count
capacity.goodput_plateau("speak_heavy", "sessions").round(2)

# %% [markdown]
# ## What limits the lanes
#
# A lane's chunk spends its host time in parts: waiting for the pool's lock, swapping the session's state in,
# classifying the call and checking its signature, staging inputs, launching the graphs, waiting for the
# device, copying the PCM out. The lanes-limiter study (`python -m cadencelab.bench lanes-limiter`) timed
# every part of every chunk, one lane alone and then around the lanes' break, and profiled one second at the
# last count that held. The figure stacks a chunk's parts per session count; the dotted line is how many
# graph launches were in flight at once. The lines under it are computed from the recording: read them
# against the figure.

# %%
show(capacity.limiter_figure())
limiter = capacity.limiter_reading()
print(limiter["reading"])
data.lanes_limiter()[["sessions", "chunks_per_s", "wall_ms", "launch_ms", "device_wait_ms", "other_ms",
                      "launch_concurrency", "launch_slowdown", "device_share", "reading"]].round(2)

# %% [markdown]
# Two readings sit side by side here. The device's timeline is nearly full where one process's lanes break,
# yet the lanes served from two processes held more sessions in another run: a busy union says when some
# kernel runs, not how many SMs it fills, so a device "busy" most of the wall can still take more work side
# by side. One sweep of each cannot tell whether the second process removed a host limit or the margin is a
# single sweep's noise; repeating both sweeps would.
#
# ## Lanes from four processes, under MPS
#
# Without MPS the GPU time-slices between processes: kernels of two processes never run at once. Under MPS
# (`--mps`: one daemon started for the arm, the lane processes its clients) they share the SMs as one
# process's streams do, and each process still has its own interpreter and its own launch path. One run
# served SRl that way, with B0 and SRc measured beside it; the line is computed from that recording.

# %%
mps = capacity.mps_reading()
print(mps["reading"])
capacity.capacity_bounds("sessions_mps")[["arm", "workload", "shown", "breaks_at", "bound"]]

# %% [markdown]
# So the lanes passed the 2x of one process. The count they held, 2.4x SRc, is short of the 2.5x the course
# set as the goal, but the sweep jumped from the count that held to one that broke, and the goal's count lies
# between them: this run does not decide it. Every chunk checked still equals the session alone.
#
# ## Through the goal's count, three times
#
# Two more sweeps, on a later lent H100, tried the goal's count itself, and a third gave the four processes
# 40 lanes instead of 32 (without B0, so its chunks were not checked against the session alone: a control for
# the lane count, nothing more). The table holds every sweep under MPS; the lines are computed from them.

# %%
print(capacity.mps_sweeps_reading()["reading"])
capacity.mps_sweeps()[["lanes", "held_B0", "held_SRc", "held_SRl", "broke_SRl", "srl_over_src", "target", "checked",
                       "exact", "control"]].round(2)

# %% [markdown]
# The goal sits inside the spread of the sweeps: met once, missed by one session once. More lanes held no
# more. What the sweeps share is a rate: the figure shows, for each session count, the rate at which the
# first chunk of every session (all arriving at once) was served. Past 16 sessions the line is flat, the
# same with 40 lanes: serving more at once no longer serves faster. A count holds the 1 s cadence only while
# its wave fits in a second at that rate, which is why the sessions held sit near the rate itself.

# %%
show(capacity.served_rate_figure())

# %% [markdown]
# ## What limits them now
#
# Is that rate the device's? The lanes-limiter study served 38 sessions from the same four processes with
# every process under the profiler and, in the same call, from eight processes of four lanes. The lines are
# computed from both runs; the two markers in the figure above are theirs.

# %%
lim = capacity.mps_limiter_reading()
print(lim["reading"])
lim["runs"][["processes", "lanes", "sessions", "chunks_per_s", "host_cores_per_process", "worst_p95_ms"]].round(2)

# %% [markdown]
# The device's timeline was nearly always busy, yet eight processes served the same wave faster than four, in
# both of its waves: kernels from more processes still fit beside each other. So the flat line need not be
# the GPU's ceiling, and each process's own path (its interpreter, its launches) looks like the next limit.
# Inside a chunk the launches took most of its time on the lane, yet its thread was on a CPU for less than
# half of that: the launches waited, and for what the recording does not say. One run of each cannot settle
# it, and the limiter study checks no chunk against the session alone: a sessions sweep from eight processes
# is the next measurement.

# %% [markdown]
# ## Eight processes, and what the launches wait for
#
# Both measurements ran on a lent H200, in two calls one after the other. First the lanes-limiter again, from
# four processes and from eight, now with a thread in every lane process that sleeps 2 ms and times how late
# it wakes: a thread that wakes late waited for Python's lock, or for a core. The lines and the figure are
# computed from both runs.

# %%
probe = lanes_limit.lock_probe_reading()
print(probe["reading"])
show(lanes_limit.lock_probe_figure())

# %% [markdown]
# The probe woke on time in every run: the lock was free. From four processes the launches still outlasted
# their thread's whole time on a CPU, so they wait in the CUDA calls with the lock released, and eight
# processes again served the same lanes faster than four, at both counts. Fewer Python operations per call
# would shorten the time on a CPU, not this wait; more processes may pass it. So, the sessions sweep from
# eight processes, its chunks checked against each session run alone:

# %%
eight = lanes_limit.eight_process_reading()
print(eight["reading"])

# %% [markdown]
# Eight processes of four lanes held three times SRc's count on this card, past the 2.5x goal, and every
# chunk checked equals its session run alone; not every chunk was checked, as the reading says. One sweep on
# one card is a result without an interval, and the sweeps from four processes ran on other cards.

# %% [markdown]
# ## Batching, exactly
#
# SRb stacks the chunks of a second into one batched call: more sessions, but rows that differ from each
# session run alone (it is gated on the same batches run eagerly). SRbi runs the operations whose kernels
# could follow the batch size once per session, at the solo call's shapes, and draws each session's noise
# from its own generator: it is gated on the session run alone through B0. The table is one recording of
# both; both arms are experimental. In this recording every checked SRbi chunk equals its session alone, but a
# CUDA test on the small teaching model then found rows that did not (`data/h100/logs/cuda_tests.log`). The
# cause: a session's rows reached a kernel at another pointer alignment than the solo call's (kernels are
# chosen on it). With the rows placed at the solo alignment the same test passed on the H100 a day later
# (`data/h100/logs/2026-12-07_cuda_tests_ws.log`); the capacities in the table were recorded before that fix,
# and SRbi stays gated on the session run alone.

# %%
capacity.exact_batching()

# %% [markdown]
# ## With arrivals spread over the second
#
# Arrivals at the whole second queue every chunk at once: the worst case for a single graph set, and, one
# would guess, the best for batching (every batch fills at once). The same study with each second's arrivals
# spread evenly over it (`--stagger`):

# %%
print(capacity.lower_bounds("sessions_staggered"))
capacity.capacity_bounds("sessions_staggered").pivot(index="arm", columns="workload", values="shown")

# %%
srb = {d: capacity.capacity_bounds(d).set_index(["arm", "workload"]).loc[("SRb", "speak_heavy")]
       for d in ("sessions", "sessions_staggered", "sessions_srb_staggered")}
print("SRb, speak-heavy: " + "; ".join(f"{d}: {r['shown']} ({r['bound']})" for d, r in srb.items()))

# %% [markdown]
# The guess about batching does not hold in this recording: SRb held more speak-heavy sessions with the
# arrivals spread than on the second (the line above), so aligned arrivals are not its best case here. A
# separate staggered run of SRb alone ended its sweep without the cadence breaking, so its count is a lower
# bound below the larger one: it neither confirms nor contradicts it. SRb is marked experimental in these
# studies; compare it within one study only.

# %%
for w in capacity.WORKLOADS:
    f = capacity.capacity_figure(w, "sessions_staggered")
    show(f)

# %% [markdown]
# ## B0 serving one session vs the factorial's B0
#
# B0's one-session chunk latency in the sessions study is not the factorial's B0 median. Both are computed
# here, with what each measures:

# %%
alone = capacity.b0_alone("sessions")
alone.round(1)

# %% [markdown]
# They measure different things in different processes: the factorial times the synthesis segment with CUDA
# events over the steady chunks of several fresh processes; the sessions study times a chunk from its arrival
# to its completion on the host clock, over 2-3 chunks per turn, in its own process. The B0_repeat row shows how
# far the same eager code moves between processes of one run (notebook 5's A/A check); the one-session figure
# also includes the chunk's host work before and after synthesis.
# Compare arms within one study, never a number across the two.
#
# ## Check
#
# Run the next cell: it asserts what this notebook taught and prints `CHECK OK` when it holds.

# %% tags=["check"]
summary = data.sessions_summary()
assert summary["all_checked_chunks_exact"] and len(shown) == 2
graded = grading.verdict(feedback)
assert set(bounds.loc[bounds["bound"] == "lower_bound", "shown"].str[:2]) <= {">="}
print(f"CHECK OK: notebook 6 (exercise: {graded}): speak-heavy sessions at the cadence B0 "
      f"{held.loc['B0', 'shown']}, SRc {held.loc['SRc', 'shown']}, SRl {held.loc['SRl', 'shown']}; "
      f"{ov['streams']:.0f} lanes overlap {ov['overlap']:.2f}; {summary['chunks_exact']} of "
      f"{summary['chunks_checked']} checked chunks exact")
print(grading.record(6, feedback))
