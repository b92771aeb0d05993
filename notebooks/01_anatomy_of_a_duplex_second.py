# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 1 · Anatomy of a duplex second
#
# A full-duplex speech model hears one second of the person and must answer with one second of its own
# speech before the next second arrives: its **cadence** is 1 s. Every second runs the same stages in
# order (the language backbone, the speech-token decoder, then *synthesis*: Token2wav turning 25 speech
# tokens into 1 s of audio), and nothing inside one session can be batched.
#
# **You will learn**
# - to read a duplex second as a waterfall of stages against the 1 s cadence;
# - where the second overruns: the synthesis tail that starts after the autoregressive stages;
# - how much of that tail the two rules (state + replay) take back, on recorded H200 data, and what stays over.
#
# Runs on a CPU from recorded data. With a GPU (`LIVE`), the last section also times a live second.

# %% tags=["parameters"]
# parameters: the tour and CI may override these (papermill style)
import torch

LIVE = torch.cuda.is_available()  # run the GPU-only cells live
CONDITION = "exact"  # recorded H200 data: "exact" (the exact device condition) or an older recording: pinned, unpinned

# %%
import pandas as pd
from IPython.display import display

from cadencelab import viz
from cadencelab.course import data, frames

# %% [markdown]
# ## The paper's second
#
# The paper measures the stock MiniCPM-o 4.5 runtime: 842 ms of earlier stages, then 327 ms of
# synthesis. The second ends at 1,169 ms, 16.9% past the cadence. `data.paper_duplex_second` holds the
# published figures; `viz.waterfall` draws any frame of `stage, start_ms, dur_ms`.

# %%
paper = data.paper_duplex_second("anatomy")
paper[["stage", "start_ms", "dur_ms", "where"]]

# %%
viz.waterfall(paper, options=viz.WaterfallOptions(title="The paper's duplex second (stock MiniCPM-o 4.5)"))

# %% [markdown]
# ## A duplex second measured on an H200
#
# `frames.anatomy_frame` puts recorded H200 numbers into the same picture. The recorded second
# (`python -m cadencelab.bench duplex`) runs stand-in language models with random weights at the declared
# sizes (a backbone and a speech-token decoder in bfloat16, Hugging Face eager decoding; the next cell
# prints their sizes from the recording's provenance) and then the real-size Token2wav under B0 or SRc.
# The `source` column says where each row comes from.

# %%
second = frames.anatomy_frame(CONDITION)
cfg = data.provenance("duplex_second")["config"]
print(f"stand-ins: backbone {cfg['backbone']['parameters'] / 1e9:.1f} B, speech-token decoder "
      f"{cfg['speech']['parameters'] / 1e6:.0f} M parameters, {cfg['dtype']}")
second.groupby("source", sort=False)["origin"].first()

# %%
viz.waterfall(second, options=viz.WaterfallOptions(layout="facets", title="Stage waterfall against the 1 s cadence"))

# %% [markdown]
# Read the spread before the medians. The two language-model stages are identical code in both arms, yet
# their per-second durations vary a lot (min and max below): eager token-by-token decoding launches tens
# of thousands of kernels per second and leaves the GPU idle most of the time (the second table: kernel
# launches and idle share, `slack_frac`, per stage of the profiled second), so host-side jitter shows
# directly. Synthesis is the stage the rules change, and it is tight.

# %%
secs = data.duplex_seconds(CONDITION)
timed = secs[~secs["warmup"] & (secs["parent"].fillna("") == "")]
display(timed.groupby(["arm", "stage"], sort=False)["dur_ms"].describe()[["count", "min", "50%", "max"]].round(1))
data.duplex_summary(CONDITION).filter(regex="_(launches|slack_frac)$").round(2)

# %% [markdown]
# To see only what the rules change, *compose* each arm's second: the paper's earlier stages (842 ms, the
# stock MiniCPM-o 4.5 measurement) followed by the Token2wav synthesis segment recorded for that arm in
# the factorial study.

# %%
composed = frames.anatomy_frame(CONDITION, compose=True)
viz.waterfall(composed, options=viz.WaterfallOptions(layout="facets", title="Paper's earlier stages + H200 synthesis"))

# %% [markdown]
# ## Where the tail overruns
#
# `frames.overrun_table` says where each second ends, by how much it misses the cadence (negative:
# headroom) and which stage crosses the line. In the paper's second and in the composed ones the crossing
# stage is synthesis: everything before it is sequential, so its whole duration lands on the deadline. In
# the recorded H200 second the slow stand-in language models already cross it: the lesson of notebook 2
# applies, their catalogs are outside the lossless scope.

# %%
pd.concat([frames.overrun_table(second), frames.overrun_table(composed[composed["origin"] == "composed"])])

# %% [markdown]
# The synthesis numbers come from the factorial study (notebook 5): B0 is the stock runtime, SRc applies
# both rules. Note the tail as well as the median: p95 latency is what a listener hears as a stall.

# %%
data.factorial(CONDITION).set_index("arm").loc[
    ["B0", "SRc"], ["steady_latency_ms_median", "steady_latency_ms_p95", "peak_MiB_median", "exact"]]

# %% [markdown]
# The paper's live measurement (table 5) makes the same point end to end: mean SPEAK time of a one-second
# unit falls from 1,141 ms (14.1% over) to 976 ms (2.4% under). What remains over at p95 comes from the
# autoregressive stages, which notebook 2 shows are outside the lossless scope (their catalogs are too wide).

# %%
data.paper_duplex_second("live_speak")[["stage", "dur_ms", "arm", "note"]]

# %% [markdown]
# ## Live (GPU only)
#
# With CUDA, `cadencelab.adapters.duplex.run_second` times one second of stand-in models at H200 sizes
# (random weights, declared shapes) under B0 and SRc.

# %%
if LIVE:
    from cadencelab.adapters.duplex import build_models, run_second

    models = build_models("h200", "cuda")
    live = pd.concat([run_second("h200", arm=a, device="cuda", models=models).assign(source=f"live {a}")
                      for a in ("B0", "SRc")])
    top = live[live["parent"].fillna("") == ""]
    display(viz.waterfall(top, options=viz.WaterfallOptions(layout="facets", title="A live duplex second")))
    display(frames.overrun_table(top))
else:
    print("No CUDA device: the recorded H200 numbers above stand in for a live second.")

# %% [markdown]
# ## Check
#
# Run the next cell: it asserts what this notebook taught and prints `CHECK OK` when it holds.

# %% tags=["check"]
over = frames.overrun_table(second).set_index("source")
stock = over.loc["paper (stock)"]
assert stock["crossing_stage"] == "synthesis" and round(stock["over_pct"], 1) == 16.9
b0, both = (over[over.index.str.contains(f"H200 {arm} ")].iloc[0] for arm in ("B0", "SRc"))
assert both["end_ms"] < b0["end_ms"], "the two rules should shorten the second"
comp = frames.overrun_table(composed).set_index("source")
assert comp.loc["H200 SRc (composed)", "over_ms"] < 0 < comp.loc["H200 B0 (composed)", "over_ms"]
print(f"CHECK OK: notebook 1: stock second ends at {stock['end_ms']:.0f} ms (synthesis crosses the cadence); "
      f"with H200 synthesis B0 ends at {b0['end_ms']:.0f} ms, SRc at {both['end_ms']:.0f} ms")
