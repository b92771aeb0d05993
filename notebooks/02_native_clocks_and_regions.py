# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 2 · Native clocks and regions
#
# A model in this class advances on several **native clocks** whose rates are fixed by configuration
# (C1), and keeps persistent state under a **declared retention policy** (C2). Write those down once, as a
# `Declaration`, and every extent, byte count and shape class follows by arithmetic, before any traffic.
#
# **You will learn**
# - to write the Token2wav declaration: clocks, regions with retention policies, an operator, admission;
# - to derive the extent trajectory a_r(t), the envelope A_r, the over-reservation ρ_r and the catalog width K_r;
# - to predict how f_retained and f_chunk move K, then derive extents, K and ρ by hand for a new configuration
#   and have them graded.

# %% tags=["parameters"]
# parameters: the tour and CI may override these (papermill style)
import torch

LIVE = torch.cuda.is_available()  # run the GPU-only cells live
CONDITION = "exact"  # recorded H200 data: "exact" (the exact device condition) or an older recording: pinned, unpinned
PREDICT_K = None  # your prediction of K under each change, e.g. {"f_retained=150": ..., "f_chunk=40": ...}
EXERCISE = dict(f_retained=200, f_chunk=60)  # the configuration you derive by hand in the exercises

# %%
from IPython.display import HTML

from cadencelab.contract import (Admission, Clock, Declaration, Operator, PromptRetained, Region, catalog_width,
                                 clocks_table, derive, region_table, trajectory)
from cadencelab.adapters.token2wav.clocks import T2W_CLOCKS, token2wav_declaration
from cadencelab.adapters.duplex.models import backbone_declaration
from cadencelab.course import exercises, frames, glossary, grading, panels
from cadencelab.course.display import show
from cadencelab.course.predict import Prediction, reveal, reveal_figure

HTML(glossary.to_html(notebook=2))  # the terms this notebook uses

# %% [markdown]
# ## 1. Clocks
#
# One stream call (a *chunk*) carries a fixed number of speech tokens plus a few lookahead tokens; each
# token is a fixed number of mel frames; the flow-matching solver runs a fixed number of Euler steps per
# chunk. Rates are ratios to a parent clock. The numbers come from one object, `T2W_CLOCKS`:

# %%
c = T2W_CLOCKS
clocks = (
    Clock("chunks", "stream call (one second of speech)", rate_hz=1.0),
    Clock("tokens", "speech token", parent="chunks", ratio=c.tokens_per_chunk, offset=c.lookahead_tokens),
    Clock("frames", "mel frame", parent="tokens", ratio=c.frames_per_token),
    Clock("steps", "Euler solver step", parent="chunks", ratio=c.n_steps),
    Clock("turns", "conversation turn"),
)
f_chunk = c.tokens_per_chunk * c.frames_per_token  # frames committed per steady call
f_call = (c.tokens_per_chunk + c.lookahead_tokens) * c.frames_per_token  # frames read by it, lookahead included
clocks_table(clocks)

# %% [markdown]
# ## 2. Regions
#
# The DiT's attention cache keeps the prompt plus a retained history, newest frames first
# (`PromptRetained(prompt, retained, layout="newest_first")`). A steady call commits `f_chunk` frames and
# reads `f_call` (its lookahead included). The stock code reserves the cache for a fixed number of solver
# slots and its workspace for a fixed frame count: implementation constants, declared as `stock` (read here
# from the shipped adapter's declaration, with the tensor layout).

# %%
ws = token2wav_declaration().region("solver_workspace")  # the vendor tensor layout and the stock constants
cache = PromptRetained(prompt=c.prompt_frames, retained=c.retained_frames, layout="newest_first")
common = dict(clock="frames", shape=ws.shape, policy=cache, growth=f_chunk, max_call=f_call,
              initial=c.prompt_frames, address_stable=True)
regions = (
    Region("estimator_att_cache", lifetime="turn", stock={"n_steps": ws.stock["n_steps"]}, **common),
    Region("solver_workspace", lifetime="stream", role="workspace", envelope="attended", stock=ws.stock, **common),
)
print(f"f_chunk = {f_chunk} frames committed per call, f_call = {f_call} frames read; stock constants {ws.stock}")

# %% [markdown]
# ## 3. An operator and the admission predicate
#
# The flow chunk reads the cache; a steady call advances `f_chunk` frames; a final flush carries a range of
# sizes. Admission: a call of f frames is admitted when f ≤ f_chunk.

# %%
flush = token2wav_declaration().operator("flow_chunk").flush  # (smallest, largest, step) of a final flush
flow_chunk = Operator("flow_chunk", reads=("estimator_att_cache",), clock="frames", call=f_chunk, flush=flush)
mine = Declaration("my-token2wav", clocks, regions, (flow_chunk,), admission=Admission("frames", f_chunk),
                   dims={"n_steps": c.n_steps})
derive(mine).checks

# %% [markdown]
# ## Derived: extents, envelope, ρ_r, K_r
#
# The cached extent walks up by `f_chunk` per call from the prompt and stays at the retention bound. That
# trajectory is the set of shapes the operator can ever see.

# %%
trajectory(mine, "estimator_att_cache", calls=6)

# %%
table = region_table(mine)
table[["region", "A_minus", "A", "A_attended", "demand_shape", "stock_shape", "rho", "K"]]

# %% [markdown]
# Two "attended" extents, not to be confused: the trajectory's `attended` column is what a *steady* call
# attends (the cached extent plus its f_chunk new frames); the table's `A_attended` is the envelope a
# workspace must hold for the *largest* call, the bound plus f_call (a final flush keeps its lookahead).
# The stock workspace envelope collapses to n_steps x (bound + one call), and K_r = ⌈W_r / s_r⌉ + 1 with the
# retention window W_r = A_r − A_r⁻ and the stride s_r:

# %%
w = table.set_index("region").loc["solver_workspace"]
steady_attended = int(trajectory(mine, "estimator_att_cache")["attended"].max())
print(f"attended: a steady call {steady_attended} frames (A + f_chunk), the envelope A_attended "
      f"{w['A_attended']} frames (A + f_call)")
print(f"stock {w['stock_shape']} -> declared {w['demand_shape']}: rho = {w['rho']:.2f}")
assert (steady_attended, w["A_attended"]) == (w["A"] + f_chunk, w["A"] + f_call), "the two attended extents"
catalog_width(mine, "estimator_att_cache")

# %% [markdown]
# ## The shipped declaration
#
# `token2wav_declaration()` declares every region of the adapter (conformer, vocoder caches, the solver
# noise table, ...). Same arithmetic, whole model. The grid lays the flow chunk's catalog out as cached
# extent × call size: steady classes, admitted flushes, rejected flushes.

# %%
shipped = token2wav_declaration()
frames.derive_clock_table(shipped)

# %%
grid = frames.catalog_figure(shipped, "flow_chunk")
show(grid)

# %% [markdown]
# Not every stage qualifies. The same arithmetic on a language backbone decoding one token per call over
# its attention window gives one shape class per window length, and a speech-token decoder whose query
# length follows the traffic has no clock-determined signature at all: both stay outside the lossless scope.

# %%
derive(backbone_declaration()).verdict[["operator", "K", "class_budget", "affordable", "reason"]]

# %% [markdown]
# ## Predict: K under a new configuration
#
# Before moving a slider: what is K for the flow chunk (a) with f_retained = 150 instead of the shipped
# retention, (b) with f_chunk = 40? Does K change when the stride stops dividing the window?

# %%
guess = Prediction("K of flow_chunk under each change", unit="classes", value=PREDICT_K,
                   parts=["f_retained=150", "f_chunk=40"])
guess

# %% [markdown]
# ## Sliders: change the configuration, re-derive instantly
#
# Move f_retained, f_chunk or n_steps. n_steps scales the per-step regions; f_retained and f_chunk move
# the trajectory. The two changes of the prediction:

# %%
sliders = panels.clock_sliders()
sliders

# %%
measured = {}
for key, change in (("f_retained=150", dict(f_retained=150)), ("f_chunk=40", dict(f_chunk=40))):
    k = sliders.update(**change).set_index("region").loc["estimator_att_cache", "K"]
    measured[key] = int(k)
    print(sliders.summary)
    sliders.update(f_retained=c.retained_frames, f_chunk=f_chunk)  # back to the shipped clocks
reveal_figure(reveal(guess, measured, rel_tol=0))

# %% [markdown]
# With f_chunk = 40 the stride no longer divides the window: the last step is cut short at the bound, and
# that truncated step is one more class.
#
# ## Exercises: derive it by hand
#
# For the configuration `EXERCISE` (parameters cell), derive by hand, without calling `trajectory` or
# `region_table` on it: (1) the cached extents each region passes through, entering each call; (2) K per
# operator; (3) ρ for two regions. Replace each `...`, run the cell, read the feedback: a wrong answer
# that matches a common slip says which. Extents and K are whole numbers (extents in any order); ρ is graded
# within 0.01 (two decimals).

# %%
print(f"exercise configuration: {EXERCISE}; extents for {exercises.EXTENT_REGIONS}, rho for {exercises.RHO_REGIONS}")

# %% tags=["answer"]
answer_extents = {"estimator_att_cache": ..., "vocoder_mel_cache": ...}  # lists of frames, e.g. [302, ...]

# %%
fb_extents = grading.grade(exercises.check_extents, answer_extents, **EXERCISE)
fb_extents

# %% tags=["answer"]
answer_K = {"flow_chunk": ..., "estimator_step": ..., "flow_encoder": ..., "vocoder_core": ...}

# %%
fb_K = grading.grade(exercises.check_K, answer_K, **EXERCISE)
fb_K

# %% tags=["answer"]
answer_rho = {"solver_workspace": ..., "estimator_att_cache": ...}  # two decimals

# %%
fb_rho = grading.grade(exercises.check_rho, answer_rho, **EXERCISE)
fb_rho

# %% [markdown]
# ## Check
#
# Run the next cell: it asserts what this notebook taught and prints `CHECK OK` when it holds.

# %% tags=["check"]
t, ref = table.set_index("region"), region_table(shipped).set_index("region")
cols = ["A_minus", "A", "A_attended", "demand_shape", "stock_shape", "rho", "K"]
assert t[cols].equals(ref.loc[t.index, cols]), "your declaration derives what the shipped one does"
steps = sorted(trajectory(mine, "estimator_att_cache")["shape_extent"].unique())
assert (steps[0], steps[-1], len(steps)) == (c.prompt_frames, c.prompt_frames + c.retained_frames,
                                             t.loc["estimator_att_cache", "K"]) and t.loc["solver_workspace", "rho"] > 1
assert measured == {k: int(catalog_width(frames.token2wav_at(**ch), "estimator_att_cache")["K"])
                    for k, ch in (("f_retained=150", dict(f_retained=150)), ("f_chunk=40", dict(f_chunk=40)))}
print(f"CHECK OK: notebook 2: L = {[int(e) for e in steps]}, K = {t.loc['estimator_att_cache', 'K']}, "
      f"rho {t.loc['solver_workspace', 'rho']:.2f}; K {measured}; exercises: "
      f"{', '.join(grading.verdict(fb) for fb in (fb_extents, fb_K, fb_rho))}",
      grading.record(2, fb_extents, fb_K, fb_rho), sep="\n")
