"""Notebook 1's frames and figures: the recorded duplex second shown stage by stage, with its spread.

The recorded H200 second (``python -m cadencelab.bench duplex``) runs *stand-in* language models
(random weights at the declared sizes, Hugging Face eager decoding: launch-bound) before the
real-size Token2wav. Stacking their per-stage medians into one bar would pass a made-up second
off as a measured one, so these frames keep every timed second:

    duplex_condition     the recording a condition reads (the exact one when the condition has none)
    stage_spread         per arm and stage: seconds, min / median / max ms, launches, idle share, what ran
    seconds_frame        every timed second's stage durations and its whole length (one row per stage)
    stage_spread_figure  those points per stage, arms side by side, what ran named under each stage
    label_composed       a composed frame's sources named for what they are (paper GPU + H200)
    profiled_window      per arm, the profiled second's synthesis ranges: kernels, busy, wall, idle share
                         (is the window whole? the same device work in both arms)
    seconds_count        per arm, the seconds run: warm-up, timed, and the profiled one after them
    served_frame         the second with its language models served (static cache + graph decode) beside
                         eager decoding: stage medians and spread, and how far the served tokens part from
                         eager (a non-exact control, labelled in every row)
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ..viz.options import label_hline_outside, set_caption
from . import data
from .frames import CADENCE_MS

__all__ = ["LM_STAGES", "duplex_condition", "seconds_frame", "stage_spread", "stage_spread_figure",
           "label_composed", "served_frame", "profiled_window", "seconds_count"]

#: the stages run by stand-in language models in the recorded second
LM_STAGES = ("backbone", "speech_decoder")
_ARM_COLORS = {"B0": "#d62728", "SRc": "#2ca02c", "B0+graphLM": "#ff9896", "SRc+graphLM": "#98df8a"}
WHOLE = "whole second"


def duplex_condition(condition: str) -> str:
    """``condition`` when a duplex second was recorded under it, else "exact" (the recording every condition
    can fall back to; the notebook says which it shows)."""
    data.check_condition(condition)
    name = "duplex_second" if condition == "exact" else f"duplex_second_{condition}"
    return condition if data.is_recorded(name) else "exact"


def _what(stage: str, t2w: str, decode: str) -> str:
    if stage in LM_STAGES:
        if decode != "eager":
            return "stand-in LM served: static KV cache, captured decode step (a control, not exact)"
        return "stand-in LM: random weights, eager decoding (same code in both arms)"
    if stage == "synthesis":
        return f"Token2wav, real size: {'stock runtime' if t2w == 'B0' else 'both rules'} ({t2w})"
    return "every stage of one second, end to end"


def profiled_window(condition: str = "exact", ranges: tuple = ("synthesis", "flow", "vocoder")) -> pd.DataFrame:
    """Per arm and range of the profiled second: kernels, launches, busy_ms, wall_ms, idle_ms, slack_frac."""
    profiles, rel = data.duplex_profiles(duplex_condition(condition))
    rows = []
    for arm, prof in profiles.items():
        for st in prof["stages"]:
            if st["range"] in ranges:
                rows.append(dict(arm=arm, range=st["range"], kernels=st["kernels"],
                                 launches=st["kernel_launches"] + st["graph_launches"], busy_ms=st["busy_us"] / 1e3,
                                 wall_ms=st["wall_us"] / 1e3, idle_ms=(st["wall_us"] - st["busy_us"]) / 1e3,
                                 slack_frac=st["slack_frac"]))
    return pd.DataFrame(rows)


def seconds_count(condition: str = "exact") -> pd.DataFrame:
    """Per arm: the unprofiled seconds run (warm-up and timed, the ones whose audio is hashed) and how many
    of them were warm-up; the profiled second runs after them."""
    rows = data.duplex_seconds(duplex_condition(condition))
    top = rows[rows["parent"].fillna("") == ""].drop_duplicates(["arm", "second"])
    g = top.groupby("arm")["warmup"]
    return pd.DataFrame(dict(run=g.size(), warmup=g.sum().astype(int), timed=g.size() - g.sum().astype(int)))


def seconds_frame(condition: str = "exact", served: bool = False) -> pd.DataFrame:
    """One row per timed second, arm and top-level stage (plus the whole second): arm, second, stage, dur_ms.
    ``served``: the recording with the language models also served, one "arm" per run label."""
    rows = data.duplex_seconds(duplex_condition(condition), served=served)
    timed = rows[~rows["warmup"].astype(bool) & (rows["parent"].fillna("") == "")]
    whole = timed.groupby(["arm", "second"], sort=False).apply(
        lambda d: float((d["start_ms"] + d["dur_ms"]).max() - d["start_ms"].min()), include_groups=False)
    whole = whole.rename("dur_ms").reset_index().assign(stage=WHOLE)
    return pd.concat([timed[["arm", "second", "stage", "dur_ms"]], whole], ignore_index=True)


def stage_spread(condition: str = "exact", served: bool = False) -> pd.DataFrame:
    """Per arm and stage: seconds, min / median / max ms, kernel launches and idle share of the profiled
    second (NaN for the whole second), the run's ``token2wav_arm`` and LM ``decode`` mode, and what ran.
    ``served``: the served-LM recording's runs (their decode mode from its summary, not from their names)."""
    cond = "exact" if served else duplex_condition(condition)
    s = data.duplex_served_summary() if served else data.duplex_summary(cond)
    g = seconds_frame(cond, served).groupby(["arm", "stage"], sort=False)["dur_ms"]
    out = g.agg(seconds="count", min_ms="min", median_ms="median", max_ms="max").reset_index()
    out["launches"] = [s.loc[a].get(f"{st}_launches", float("nan")) for a, st in zip(out["arm"], out["stage"])]
    out["idle_frac"] = [s.loc[a].get(f"{st}_slack_frac", float("nan")) for a, st in zip(out["arm"], out["stage"])]
    # the Token2wav arm and how the LMs decoded, per run (an eager recording's runs are its arms)
    runs = s[["token2wav_arm", "decode"]] if served else pd.DataFrame(dict(token2wav_arm=s.index, decode="eager"),
                                                                      index=s.index)
    out["token2wav_arm"], out["decode"] = runs.loc[out["arm"]].to_numpy().T
    out["what"] = [_what(st, t, d) for st, t, d in zip(out["stage"], out["token2wav_arm"], out["decode"])]
    out.attrs["condition"] = cond
    return out


def stage_spread_figure(condition: str = "exact", served: bool = False) -> go.Figure:
    """Every timed second's stage durations as points (arms side by side), the cadence on the whole second.
    ``served``: the served-LM recording, eager and served runs side by side (served ones labelled a control)."""
    sec = seconds_frame(condition, served)
    spread = stage_spread(condition, served).set_index(["arm", "stage"])
    order = [*dict.fromkeys(sec.loc[sec["stage"] != WHOLE, "stage"]), WHOLE]
    ticks = []
    for st in order:
        if st in LM_STAGES:
            at = spread.xs(st, level="stage")
            idle = at.groupby(at["decode"] == "eager")["idle_frac"].min()  # True: eager runs, False: served
            if served:
                ticks.append(f"{st}<br>(stand-in LM, eager idle ≥ {idle[True]:.0%};<br>served idle ≥ "
                             f"{idle[False]:.0%})")
            else:
                ticks.append(f"{st}<br>(stand-in LM, eager,<br>idle ≥ {idle[True]:.0%})")
        elif st == "synthesis":
            ticks.append(f"{st}<br>(Token2wav,<br>where the rules act)")
        else:
            ticks.append(f"{st}<br>(end to end)")
    fig = go.Figure()
    for arm, d in sec.groupby("arm", sort=False):
        fig.add_trace(go.Box(x=d["stage"].map(dict(zip(order, ticks))), y=d["dur_ms"], name=arm, boxpoints="all",
                             pointpos=0, jitter=0.3, marker=dict(color=_ARM_COLORS.get(arm)), line=dict(width=1)))
    fig.add_hline(y=CADENCE_MS, line_dash="dash", line_color="black")
    label_hline_outside(fig, CADENCE_MS, f"cadence<br>{CADENCE_MS:g} ms")  # beside the line's end, off the boxes
    n = int(sec.groupby("arm")["second"].nunique().min())
    what = "with the LMs also served (+graphLM: a control, not exact)" if served else "stage by stage"
    fig.update_layout(boxmode="group", template="plotly_white", legend_title_text="arm", height=480,
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1),
                      title=f"Recorded H200 duplex seconds, {what} ({n} timed seconds per arm)",
                      xaxis=dict(title="stage", categoryorder="array", categoryarray=ticks),
                      yaxis=dict(title="duration per second (ms)", rangemode="tozero"), margin=dict(b=110))
    cond = spread.attrs.get("condition", duplex_condition(condition))
    caption = (f"Each point is one timed second of the recorded duplex run (condition {cond!r}); "
               "boxes span the quartiles. The backbone and speech decoder are stand-in language models "
               "with random weights decoded eagerly: launch-bound, their spread is host jitter in identical "
               "code, not an effect of the rules. Synthesis is the real-size Token2wav, the only stage the "
               "rules change. The dashed line is the 1 s cadence, which only the whole second must meet.")
    if served:
        caption += (" The +graphLM runs serve both language models with a static KV cache and one captured "
                    "decode step replayed per token: a control, not exact (its tokens part from eager decoding; "
                    "their Token2wav PCM is compared with B0 fed the same tokens).")
    return set_caption(fig, caption)


def label_composed(frame: pd.DataFrame) -> pd.DataFrame:
    """A composed anatomy frame (``frames.anatomy_frame(compose=True)``) with each composed source named for
    what it is: the paper's earlier stages (its GPU, stock model) + the H200 synthesis of that arm."""
    out = frame.copy()
    comp = out["origin"] == "composed"
    arms = out.loc[comp, "source"].str.extract(r"H200 (\S+) \(composed\)")[0]
    out.loc[comp, "source"] = "COMPOSED: paper-GPU stages + H200 " + arms + " synthesis"
    return out


def served_frame() -> pd.DataFrame:
    """One row per run of the served-LM recording (``data.duplex_served_summary``): run, Token2wav arm, how
    the language models decoded, each stage's median ms, the second's median and max, PCM equality within
    the decode mode, and ``lm_vs_eager``: "exact (the stock path)" for eager rows, else "control, not
    certified exact: k/n seconds' tokens equal to eager, x% of positions" (its measured deviation)."""
    s = data.duplex_served_summary()
    out = pd.DataFrame({
        "token2wav": s["token2wav_arm"], "lm_decode": s["decode"],
        **{f"{st}_ms": s[f"{st}_ms_median"] for st in (*LM_STAGES, "synthesis")},
        "second_ms_median": s["second_ms_median"], "second_ms_max": s["second_ms_max"],
        "pcm_equal": s["pcm_equal_to"].astype(str) + " " + s["pcm_equal_seconds"].astype(str),
    })
    agreement = s.get("lm_token_agreement", pd.Series(index=s.index, dtype=float))
    equal = s.get("lm_tokens_equal_seconds", pd.Series(index=s.index, dtype=object))
    out["lm_vs_eager"] = [
        "exact (the stock path)" if bool(s.loc[a, "lm_exact"]) else
        (f"control, not certified exact: {equal[a]} seconds' tokens equal to eager, {agreement[a]:.0%} of positions"
         if isinstance(equal[a], str) else "control, not certified exact: no eager run to compare")
        for a in s.index]
    return out
