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
# - how f_retained, f_chunk and n_steps move those numbers (sliders that re-derive them instantly).

# %% tags=["parameters"]
# parameters: the tour and CI may override these (papermill style)
import torch

LIVE = torch.cuda.is_available()  # run the GPU-only cells live
CONDITION = "exact"  # recorded H200 data: "exact" (the exact device condition) or an older recording: pinned, unpinned

# %%
from cadencelab import viz
from cadencelab.course import frames, panels
from cadencelab.contract import (T2W_CLOCKS, Admission, Clock, Declaration, Operator, PromptRetained, Region,
                                 backbone_declaration, catalog_width, clocks_table, derive, region_table,
                                 token2wav_declaration, trajectory)

# %% [markdown]
# ## 1. Clocks
#
# One stream call (a *chunk*) carries 25 speech tokens plus 3 lookahead tokens; each token is 2 mel frames;
# the flow-matching solver runs 10 Euler steps per chunk. Rates are ratios to a parent clock.

# %%
clocks = (
    Clock("chunks", "stream call (one second of speech)", rate_hz=1.0),
    Clock("tokens", "speech token", parent="chunks", ratio=25, offset=3),
    Clock("frames", "mel frame", parent="tokens", ratio=2),
    Clock("steps", "Euler solver step", parent="chunks", ratio=10),
    Clock("turns", "conversation turn"),
)
clocks_table(clocks)

# %% [markdown]
# ## 2. Regions
#
# The DiT's attention cache keeps a 302-frame prompt plus 100 frames of history, newest frames first
# (`PromptRetained(302, 100, layout="newest_first")`). The stock code reserves it for 16 solver slots, and
# its solver workspace for 16 slots x 1000 frames: implementation constants, declared as `stock`.

# %%
cache = PromptRetained(prompt=302, retained=100, layout="newest_first")
kv = ("n_steps", 16, 2, 8, "frames", 128)  # (solver steps, DiT blocks, CFG pair, heads, frames, K|V)
regions = (
    Region("estimator_att_cache", clock="frames", shape=kv, policy=cache, growth=50, max_call=56, initial=302,
           lifetime="turn", stock={"n_steps": 16}, address_stable=True),
    Region("solver_workspace", clock="frames", shape=kv, policy=cache, growth=50, max_call=56, initial=302,
           role="workspace", envelope="attended", stock={"n_steps": 16, "frames": 1000}, address_stable=True),
)

# %% [markdown]
# ## 3. An operator and the admission predicate
#
# The flow chunk reads the cache; a steady call advances 50 frames; a final flush carries 6 to 54 frames.
# Admission: a call of f frames is admitted when f ≤ f_chunk = 50.

# %%
flow_chunk = Operator("flow_chunk", reads=("estimator_att_cache",), clock="frames", call=50, flush=(6, 54, 2))
mine = Declaration("my-token2wav", clocks, regions, (flow_chunk,), admission=Admission("frames", 50),
                   dims={"n_steps": 10})
derive(mine).checks

# %% [markdown]
# ## Derived: extents, envelope, ρ_r, K_r
#
# The cached extent walks 302 → 352 → 402 and stays: the retention bound caps it. That trajectory is
# the set of shapes the operator can ever see.

# %%
trajectory(mine, "estimator_att_cache", calls=6)

# %%
region_table(mine)[["region", "A_minus", "A", "A_attended", "demand_shape", "stock_shape", "rho", "K"]]

# %% [markdown]
# The 16 x 1000 envelope collapses to 10 x 458 (10 steps; 402 retained + 56 of one call): ρ = 3.49.
# K_r = ⌈W_r / s_r⌉ + 1 with the retention window W_r = A_r − A_r⁻ and the stride s_r:

# %%
catalog_width(mine, "estimator_att_cache")

# %% [markdown]
# ## The shipped declaration
#
# `token2wav_declaration()` declares every region of the adapter (conformer, vocoder caches, the solver
# noise table, ...). Same arithmetic, whole model:

# %%
shipped = token2wav_declaration()
frames.derive_clock_table(shipped)

# %%
viz.catalog_grid(frames.catalog_grid_frame(shipped, "flow_chunk"))

# %% [markdown]
# Not every stage qualifies. The same arithmetic on a language backbone decoding one token per call over
# a 2,000-token window gives K = 2,001 shape classes, and a speech-token decoder whose query length
# follows the traffic has no clock-determined signature at all: both stay outside the lossless scope.

# %%
derive(backbone_declaration()).verdict[["operator", "K", "affordable", "reason"]]

# %% [markdown]
# ## Sliders: change the configuration, re-derive instantly
#
# Move f_retained, f_chunk or n_steps. With f_retained = 150 the trajectory needs one more step
# (302, 352, 402, 452: K = 4); with f_chunk = 40 the stride no longer divides the window and truncation
# adds a class (302, 342, 382, 402). n_steps scales the per-step regions.

# %%
sliders = panels.clock_sliders()
sliders

# %%
sliders.figure()

# %%
sliders.update(f_retained=150)
print(sliders.summary)
sliders.update(f_retained=T2W_CLOCKS.retained_frames, f_chunk=40)
print(sliders.summary)
sliders.update(f_chunk=T2W_CLOCKS.chunk_frames)  # back to the shipped clocks

# %% [markdown]
# ## Check
#
# Run the next cell: it asserts what this notebook taught and prints `CHECK OK` when it holds.

# %% tags=["check"]
t = region_table(mine).set_index("region")
assert sorted(trajectory(mine, "estimator_att_cache")["shape_extent"].unique()) == [302, 352, 402]
assert t.loc["solver_workspace", "demand_shape"] == (10, 16, 2, 8, 458, 128)
assert round(t.loc["solver_workspace", "rho"], 2) == 3.49 and t.loc["estimator_att_cache", "K"] == 3
assert sliders.update(f_retained=150).set_index("region").loc["estimator_att_cache", "K"] == 4
sliders.update(f_retained=100)
print("CHECK OK: notebook 2: L = {302, 352, 402}, K = 3, 16x1000 -> 10x458 (rho 3.49); f_retained=150 gives K = 4")
