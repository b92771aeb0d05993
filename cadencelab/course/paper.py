"""The paper's published figures beside this project's recordings of the same quantities.

    recovered_share(eager, replay, vendor)   the share of a vendor graph's latency reduction a replay
                                             recovers, (eager - replay) / (eager - vendor): the paper's
                                             definition of its Mimi "89%"
    paper_vs_recording(condition)            one row per figure: the paper's value and set-up beside this
                                             recording's value, set-up and source file
    paper_vs_table(condition)                the same, printed: figure, paper, this recording, note, recorded in
    format_figure(value, unit, hi)           "2.85x", "-38.5%", "57.0-65.0%", "not recorded": how tables
                                             print a figure

Both sides are read from files: the paper's figures from ``data/paper/`` (``data.paper_figures``,
``data.paper_duplex_second``), the recording's from the H200 study files. A figure the recording lacks
is left NaN with a note, not dropped, so the table always shows what the paper claims.
"""

from __future__ import annotations

import math

import pandas as pd

from . import data

__all__ = ["recovered_share", "recovered_share_blocks", "paper_vs_recording", "paper_vs_table", "format_figure",
           "format_recorded",
           "PAPER_VS_COLUMNS"]

PAPER_VS_COLUMNS = ["key", "figure", "unit", "paper", "paper_hi", "recorded", "recorded_lo", "recorded_hi",
                    "paper_setting", "recorded_setting", "recorded_from", "note"]


def recovered_share(eager: float, replay: float, vendor: float) -> float:
    """(eager - replay) / (eager - vendor) for per-call latencies: 1.0 means replay saves exactly what the
    vendor's graphs save, above 1 more. ValueError when the vendor saves nothing (the share is undefined)."""
    saved = eager - vendor
    if not saved > 0:
        raise ValueError(f"recovered_share: the vendor path saves nothing (eager {eager} ms, vendor {vendor} ms); "
                         "the share of its reduction is undefined")
    return (eager - replay) / saved


def recovered_share_blocks(name: str = "mimi") -> pd.DataFrame:
    """The recovered share per timed block of a recorded vendor comparison (eager, replay, vendor_graph each
    timed in the same block): ``block``, the three latencies and ``share``; ``attrs['processes']``: how many
    processes the blocks came from (one where the blocks carry no process), so a reader knows the spread between
    processes is not in it."""
    blocks = pd.DataFrame(data.result(name)["blocks"])
    blocks = blocks[~blocks["warmup"]]
    lat = blocks.pivot(index="block", columns="arm", values="latency_ms_median")
    out = lat[["eager", "replay", "vendor_graph"]].reset_index()
    out["share"] = [recovered_share(e, r, v) for e, r, v in zip(out["eager"], out["replay"], out["vendor_graph"])]
    out.attrs["processes"] = int(blocks["process"].nunique()) if "process" in blocks else 1
    return out


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def format_figure(value: float, unit: str, hi: float | None = None) -> str:
    """A figure as tables print it: a ratio as "2.85x", a fraction as a percentage ("-38.5%"), a range
    when ``hi`` is given ("57.0-65.0%"), NaN as "not recorded"."""
    if _missing(value):
        return "not recorded"
    if unit == "x":
        return f"{value:.2f}-{hi:.2f}x" if not _missing(hi) else f"{value:.2f}x"
    if unit == "fraction":
        return f"{100 * value:.1f}-{hi:.1%}" if not _missing(hi) else f"{value:.1%}"
    raise ValueError(f"format_figure: unknown unit {unit!r} (x or fraction)")


def format_recorded(value: float, lo: float, hi: float, unit: str, change: bool = True) -> str:
    """A recorded figure with its 95% interval ("4.02x [3.44, 4.70]", "+1.0% [-18.9, +30.0], no clear
    difference"); a change (a fraction) also says the direction its interval supports, and only that.
    Without an interval the note says why."""
    text = format_figure(value, unit)
    if _missing(value) or _missing(lo) or _missing(hi):
        return text
    if unit == "x":
        return f"{text} [{lo:.2f}, {hi:.2f}]"
    if not change:  # a share, not a change: no direction to claim
        return f"{text} [{lo:.1%}, {hi:.1%}]"
    word = "no clear difference" if lo <= 0 <= hi else ("higher" if lo > 0 else "lower")
    return f"{100 * value:+.1f}% [{100 * lo:+.1f}, {100 * hi:+.1f}], {word}"


def is_change(key: str) -> bool:
    """Whether a figure is a change between two arms (a direction can be claimed) rather than a share."""
    return key.endswith("_delta") or "_than_" in key


def _setting(dataset: str, extra: str = "") -> str:
    prov = data.provenance(dataset)
    study = prov.get("study") or prov.get("config") or {}
    cond = (prov.get("determinism") or {}).get("condition", "?")
    parts = [prov.get("gpu", "?"), f"torch {prov.get('torch', '?')}", f"condition {cond}"]
    if isinstance(study, dict) and study.get("config"):
        parts.append(f"{study['config']} config")
    return ", ".join(parts + ([extra] if extra else []))


def _file(dataset: str) -> str:
    return data.DATASETS[dataset][0]


def _peak_extremes(condition: str, arm: str, ref: str, reduction: bool = False) -> tuple[float, float]:
    """The range of ``peak(arm) / peak(ref) - 1`` (or ``1 - peak(arm) / peak(ref)``) over every timed block's
    peaks: the allocator peak is the same bytes in every block of a deterministic run, so this range is its
    interval (zero width when nothing moved)."""
    blocks = data.factorial_blocks(condition)
    per = blocks[~blocks["warmup"]].groupby("arm")["peak_bytes"].agg(["min", "max"])
    lo, hi = per.loc[arm, "min"] / per.loc[ref, "max"], per.loc[arm, "max"] / per.loc[ref, "min"]
    return (float(1 - hi), float(1 - lo)) if reduction else (float(lo - 1), float(hi - 1))


def _factorial_rows(condition: str) -> dict[str, tuple]:
    """key -> (recorded value, 95% lo, 95% hi, setting, file, note) from the Token2wav factorial (and, for the
    exact condition, the headline run's speedup, measured over the most processes). Intervals are the
    recorded ones (over processes and blocks; the older recordings: over one process's blocks)."""
    ds = "factorial" if condition == "exact" else f"factorial_{condition}"
    fac = data.factorial(condition).set_index("arm")
    summ = data.factorial_summary(condition)
    setting, rel = _setting(ds, "seeded random weights"), _file(ds)
    nan = math.nan

    def delta(arm, what="latency"):
        r = fac.loc[arm]
        return (float(r[f"{what}_delta"]), float(r.get(f"{what}_delta_lo", nan)), float(r.get(f"{what}_delta_hi", nan)))

    sp_ci = summ.get("speedup_SRc_vs_B0_ci") or (nan, nan)
    rows = {
        "t2w_speedup": (summ["speedup_SRc_vs_B0"], *sp_ci, "steady chunk, SRc vs B0"),
        "t2w_peak_reduction": (summ["peak_reduction_SRc_vs_B0"], *_peak_extremes(condition, "SRc", "B0", reduction=True),
                               "peak allocator memory, SRc vs B0; interval: every block's extremes"),
        "srC_latency_delta": (*delta("SRc"), "vs B0"),
        "srC_peak_delta": (*delta("SRc", "peak"), "vs B0"),
        "s_latency_delta": (*delta("S"), "vs B0"),
        "rc_peak_delta": (*delta("Rc", "peak"), "vs B0"),
    }
    if "vendor_graph_50" in fac.index:
        v, peak = "vendor_graph_50", fac["peak_MiB_median"]
        rows["vendor50_latency_delta"] = (*delta(v), "vs B0")
        vs = summ.get("speedup_SRc_vs_vendor_graph_50")
        vs_ci = summ.get("speedup_SRc_vs_vendor_graph_50_ci") or (nan, nan)
        rows["vendor50_slower_than_srC"] = (vs - 1, vs_ci[0] - 1, vs_ci[1] - 1, "vendor_graph_50 / SRc - 1")
        rows["vendor50_larger_than_srC"] = (float(peak[v] / peak["SRc"] - 1), *_peak_extremes(condition, v, "SRc"),
                                            "peak medians; interval: every block's extremes")
    floor = summ.get("busy_floor")
    if floor:
        slack = 1 - floor["B0_busy_ms"] / floor["B0_latency_ms"]
        lo = hi = nan
        if "processes_per_arm" in summ:  # B0's latency interval over processes carries to the slack
            from .trust import latency_interval

            _, lat_lo, lat_hi = latency_interval(ds, "B0")
            lo, hi = 1 - floor["B0_busy_ms"] / lat_lo, 1 - floor["B0_busy_ms"] / lat_hi
        rows["eager_slack"] = (slack, lo, hi, "1 - B0 busy / B0 unprofiled latency")
    out = {k: (v, lo, hi, setting, rel, n) for k, (v, lo, hi, n) in rows.items()}
    if condition == "exact" and data.is_recorded("headline"):
        h = data.result("headline")["summary"]
        out["t2w_speedup"] = (h["speedup_SRc_vs_B0"], *h["speedup_SRc_vs_B0_ci"], _setting("headline", "seeded random "
                              "weights"), _file("headline"), f"steady chunk, SRc vs B0, {h['processes_per_arm']} fresh "
                              "processes per arm")
    return out


def _mimi_rows() -> dict[str, tuple]:
    arms = data.mimi_arms().set_index("arm")
    lat = arms["latency_ms_median"]
    setting, rel = _setting("mimi", "seeded random weights, encode + decode per 80 ms frame"), _file("mimi")
    nan = math.nan
    return {
        "mimi_vendor_speedup": (float(arms.loc["vendor_graph", "speedup_vs_eager"]), nan, nan, setting, rel,
                                "medians; an older one-process recording: no interval"),
        "mimi_replay_speedup": (float(arms.loc["replay", "speedup_vs_eager"]), nan, nan, setting, rel,
                                "medians; an older one-process recording: no interval"),
        "mimi_recovered_share": (recovered_share(lat["eager"], lat["replay"], lat["vendor_graph"]), nan, nan, setting,
                                 rel, "per-frame medians; above 100%: replay saves more than the vendor; no interval"),
    }


def _live_synthesis_row(condition: str) -> dict:
    """The duplex second's synthesis segment, stock -> both rules, as a speedup (paper: table 5)."""
    paper = data.paper_duplex_second("live_synthesis").set_index("arm")["dur_ms"]
    row = dict(key="live_synthesis_speedup", figure="Duplex second: synthesis segment, stock vs both rules (speed)",
               unit="x", paper=float(paper["stock"] / paper["duplexcadence"]), paper_hi=math.nan,
               recorded_lo=math.nan, recorded_hi=math.nan,
               paper_setting="live MiniCPM-o 4.5 path, paper's GPU", recorded=math.nan, recorded_setting="",
               recorded_from="", note="")
    try:
        summ = data.duplex_summary(condition)
    except FileNotFoundError as e:
        return {**row, "note": f"not recorded: {e}"}
    ds = "duplex_second" if condition == "exact" else f"duplex_second_{condition}"
    row.update(recorded=float(summ.loc["B0", "synthesis_ms_median"] / summ.loc["SRc", "synthesis_ms_median"]),
               recorded_setting=_setting(ds, "stand-in language models, not MiniCPM-o's"),
               recorded_from=_file(ds),
               note="B0 / SRc synthesis medians (stand-in language models before it)")
    return row


def paper_vs_recording(condition: str = "exact") -> pd.DataFrame:
    """The paper's figures (``data.paper_figures`` and its live synthesis segment) beside this project's
    recording of the same quantity under ``condition`` (columns :data:`PAPER_VS_COLUMNS`).

    ``unit`` is "x" (a ratio) or "fraction" (0.388 is 38.8%); ``recorded`` is NaN with a note where the
    recording lacks the figure. Set-ups differ (the paper: its A100 and trained weights; here: the H200
    and seeded random weights), so a row compares what each set-up measures, not one number twice."""
    data.check_condition(condition)
    figs = data.paper_figures()
    got: dict[str, tuple[float, str, str, str]] = {}
    for source in (lambda: _factorial_rows(condition), _mimi_rows):
        try:
            got.update(source())
        except FileNotFoundError:  # that study is not recorded in this data folder: NaN rows below say so
            pass
    rows = []
    for key, f in figs.iterrows():
        value, lo, hi, setting, rel, note = got.get(key, (math.nan, math.nan, math.nan, "", "",
                                                          "not recorded in this data folder"))
        note = "; ".join(n for n in (note, f["note"] and f"paper: {f['note']}") if n)
        rows.append(dict(key=key, figure=f["figure"], unit=f["unit"], paper=float(f["value"]),
                         paper_hi=float(f["value_hi"]), recorded=value, recorded_lo=lo, recorded_hi=hi,
                         paper_setting=f"{f['setting']}; {f['where']}", recorded_setting=setting, recorded_from=rel,
                         note=note))
    rows.append(_live_synthesis_row(condition))
    return pd.DataFrame(rows, columns=PAPER_VS_COLUMNS)


def paper_vs_table(condition: str = "exact") -> pd.DataFrame:
    """:func:`paper_vs_recording` as a table prints it (every value through :func:`format_figure`):
    columns figure, paper, this recording, note, recorded in."""
    df = paper_vs_recording(condition)
    return pd.DataFrame({
        "figure": df["figure"],
        "paper": [format_figure(r.paper, r.unit, r.paper_hi) for r in df.itertuples()],
        "this recording": [format_recorded(r.recorded, r.recorded_lo, r.recorded_hi, r.unit, is_change(r.key))
                           for r in df.itertuples()],
        "note": df["note"],
        "recorded in": df["recorded_from"].replace("", "-"),
    })
