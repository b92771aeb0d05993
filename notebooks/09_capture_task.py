# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 9 · The capture task: make it faster, keep it exact
#
# A performance problem in the style of a kernel leaderboard: you get a model, a reference (eager), and a
# grader that runs your submission on traffic you never see. Your job is the wrapper notebook 4 built by
# hand, for a model of your own: you write the warm-up, the capture and the replay, one graph per exact input
# shape. It is graded in this order: **exact** (every output `torch.equal` to eager, at the call and after later
# calls), **captures** (each shape warmed up and captured once, then replayed, every output from the replayed
# graph: a call to the model beside it is caught), and, on a GPU, **speed**: the interval of your speedup over
# eager on the hidden shapes must lie above the target. On a CPU the grade is for correctness only, and says so.
#
# **You will learn**
# - to write a capture-and-replay wrapper: side-stream warm-up, capture, static input, `copy_` in, replay,
#   `clone` out, one graph per shape;
# - the three ways such a wrapper goes wrong silently (stale input, aliased output, one graph for every shape),
#   each caught by the grader by name;
# - to read a leaderboard honestly: on a CPU the graphs are simulated and cannot be faster; on a GPU they are.
#
# Runs on a CPU (a simulated graph with a CUDA graph's semantics: the grader stays meaningful); with a GPU
# (`LIVE`) the same wrapper captures real CUDA graphs and is timed on the device.

# %% tags=["parameters"]
# parameters: the tour and CI may override these (papermill style)
import torch

LIVE = torch.cuda.is_available()  # capture real CUDA graphs
DEVICE = "cuda" if LIVE else "cpu"
PREDICT_SPEEDUP = None  # your prediction: your wrapper's speedup over eager on this machine (e.g. 2.0)

# %%
import inspect

from IPython.display import HTML, display

from cadencelab.course import capture_task as task
from cadencelab.course import glossary, grading, graph_kit
from cadencelab.course.display import show
from cadencelab.course.predict import Prediction, reveal, reveal_figure

HTML(glossary.to_html(notebook=9))  # the terms this notebook uses

# %% [markdown]
# ## The problem
#
# The model: a pre-norm MLP block over `(1, frames, dim)`; `frames` changes from call to call (each call is
# one chunk of a stream), and the same sizes come back. The reference is eager. Shown traffic: a few calls;
# the grader's traffic has other sizes, other values, and more calls.

# %%
print(inspect.getsource(task.TaskModel))
model = task.make_model(DEVICE)
shown = task.shown_traffic(DEVICE)
print("shown calls, frames per call:", [x.shape[1] for x in shown])

# %% [markdown]
# What you are given, `graphs`: a side stream to warm the model up in, and graphs to capture and replay. After
# `with g.capture(): static_y = model(static_x)`, `g.replay()` recomputes `static_y` from **whatever `static_x`
# holds now**, into **the same `static_y` tensor**. On CUDA these are notebook 4's real things (a side stream,
# `torch.cuda.graph`); on a CPU a stand-in with the same semantics:

# %%
print(graph_kit.__doc__)

# %% [markdown]
# ## Your submission
#
# Write `make_wrapper(model, graphs)`: it returns a function `run(x)` that gives `model(x)`, keeping one
# `(static input, graph, static output)` per exact `x.shape`. The first time a shape comes: a static input
# (`x.clone()`), a few warm-up calls in `graphs.side_stream()`, then a new graph and the capture. Every call:
# copy the new values in, replay, hand back something the next call cannot overwrite.

# %% tags=["answer"]
def make_wrapper(model, graphs):
    """Your capture-and-replay wrapper: warm-up, capture, replay; one graph per exact input shape."""
    return ...  # a function run(x) -> model(x)


# %% [markdown]
# Predict before you grade: how much faster than eager will your wrapper be on this machine?

# %%
guess = Prediction("Your wrapper's speedup over eager on this machine", unit="x", value=PREDICT_SPEEDUP)
guess

# %% [markdown]
# ## Grade it
#
# The grader runs your wrapper on the hidden traffic and names what went wrong (never the outputs).

# %%
feedback = grading.grade(task.check_wrapper, make_wrapper, device=DEVICE)
feedback

# %% [markdown]
# ## The leaderboard
#
# The eager reference and your submission, timed on this machine over the same hidden traffic (the best of
# three passes each, alternated: the least disturbed). Exactness comes first: a fast wrong answer ranks
# below a slow right one.

# %%
board = task.leaderboard(feedback, device=DEVICE)
display(board)
mine = board[board["submission"] != "eager (reference)"]
if len(mine):
    show(reveal_figure(reveal(guess, float(mine["speedup"].iloc[0]), rel_tol=0.25)))

# %% [markdown]
# Read the board honestly. On a CPU the graph is simulated: replay runs the same operations as eager, plus
# the copies in and out and the wrapper's own Python, so the wrapper has nothing to win there: expect a ratio
# near 1 or below, which moves from run to run on a shared machine (the check below only asserts it stays under
# 1.5), and the CPU grade does not time you. What it *does* certify is the part that is hard to see: exact on
# shapes you never saw, no stale input, no aliased output, each shape warmed up and captured once, every output
# from the replayed graph. On a GPU the same wrapper replays real CUDA graphs, one launch per call instead of
# one per kernel: that is where the speedup appears, and where the grade times it.
#
# ## The slips the grader names
#
# Three of them are silent without a grader: no error, a plausible tensor, the wrong values. A fourth looks
# right and is not: replaying the graph and then returning `model(x)` anyway (the grader counts every call the
# model runs outside a capture or a replay). On a GPU a fifth: exact but not faster than eager by the target
# (the speedup's interval must lie above it). What the grader tells you for each:

# %%
slips = task.mistakes_table()
slips

# %% [markdown]
# ## Check
#
# Run the next cell: it asserts what this notebook taught and prints `CHECK OK` when it holds.

# %% tags=["check"]
assert {"stale_input", "aliased_output", "shape_mismatch", "side_call"} <= set(slips["mistake"])
assert board.loc[board["submission"] == "eager (reference)", "exact"].all()
assert LIVE or mine.empty or mine["speedup"].iloc[0] < 1.5, "a simulated graph cannot beat eager on a CPU"
print(f"CHECK OK: notebook 9: {len(slips)} slips the grader names on hidden shapes drawn as it runs; your wrapper: "
      f"{grading.verdict(feedback)}" + (f", {mine['speedup'].iloc[0]:.2f}x eager on {DEVICE}, graded for "
                                        f"{mine['graded'].iloc[0]}" if len(mine) else ""))
print(grading.record(9, feedback))
