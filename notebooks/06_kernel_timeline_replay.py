# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 6 · Kernel timeline replay
#
# A steady Token2wav chunk is thousands of kernels either way (the summary below counts them). Eagerly, the
# host issues them one by
# one and the GPU waits in between (`host_wait`); replayed, one `cudaGraphLaunch` issues them all and the
# gaps shrink to the device's own scheduling (`kernel_wait`). The *orchestration slack* is the idle share
# of the chunk's wall time.
#
# **You will learn**
# - to read a kernel timeline with its idle gaps classified (host_wait, kernel_wait, other);
# - to watch idle time accumulate kernel by kernel, eager beside replay;
# - that replay runs the same kernels in the same order and removes the time between them.
#
# Uses the recorded H200 traces of one steady chunk (B0 and SRc). Without them it profiles the teaching
# config live on the CPU (host ops instead of kernels); with a GPU (`LIVE`) it also profiles one live.

# %% tags=["parameters"]
# parameters: the tour and CI may override these (papermill style)
import torch

LIVE = torch.cuda.is_available()  # run the GPU-only cells live
CONDITION = "exact"  # recorded H200 data: "exact" (the exact device condition) or an older recording: pinned, unpinned

# %%
from IPython.display import display

from cadencelab.course.live import chunk_timelines
from cadencelab.course.player import timeline_player

# %%
tl = chunk_timelines("auto")
print(tl.source)
print("events:", tl.what, f"({len(tl.eager)} eager, {len(tl.replay)} replayed)")

# %%
tl.summary[["variant", "wall_us", "busy_us", "slack_frac", "host_wait_us", "kernel_wait_us", "other_idle_us",
            "kernel_launches", "graph_launches", "kernels"]]

# %% [markdown]
# ## The player
#
# Press play (or drag, or step one kernel at a time): both panels show the last 40 kernels up to the
# cursor, with the idle gaps between them; the table accumulates busy and idle time; the lower figure shows
# the whole chunk's accumulation with the cursor.

# %%
player = timeline_player(tl.eager, tl.replay)
player

# %% [markdown]
# The callbacks are plain methods: `player.show(k)` moves the cursor to kernel k and returns the readout.

# %%
player.show(len(tl.eager) // 2)

# %%
player.figure()

# %%
player.progress_figure()

# %% [markdown]
# Busy time is nearly the same in both: the same kernels run. What replay removes is idle time, and the
# eager idle is almost all `host_wait`: the GPU finished and the next launch had not been issued yet.
#
# ## Live (GPU only)

# %%
if LIVE:
    live = chunk_timelines("live", config="real", device="cuda")
    display(live.summary[["variant", "wall_us", "busy_us", "slack_frac", "host_wait_us", "graph_launches"]])
    display(timeline_player(live.eager, live.replay))
else:
    print("No CUDA device: the recorded H200 chunk above stands in for a live profile.")

# %% [markdown]
# ## Check
#
# Run the next cell: it asserts what this notebook taught and prints `CHECK OK` when it holds.

# %% tags=["check"]
end = player.state(player.n).set_index("variant")
s = tl.summary.set_index("variant")
if "kernels" in tl.what:  # device traces: the slack story, and the player agrees with the summary
    assert end.loc["eager", "slack_frac"] > 3 * end.loc["replay", "slack_frac"]
    assert end.loc["eager", "host_wait_us"] > 0.5 * end.loc["eager", "idle_us"]
    idle = s.loc["eager", "wall_us"] - s.loc["eager", "busy_us"]
    assert abs(end.loc["eager", "idle_us"] - idle) < 0.05 * s.loc["eager", "wall_us"]
assert len(tl.eager) > 0 and len(tl.replay) > 0
print(f"CHECK OK: notebook 6: slack eager {end.loc['eager', 'slack_frac']:.2f} vs replay "
      f"{end.loc['replay', 'slack_frac']:.2f} over {len(tl.eager)} / {len(tl.replay)} events")
