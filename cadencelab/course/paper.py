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

__all__ = ["recovered_share", "paper_vs_recording", "paper_vs_table", "format_figure", "PAPER_VS_COLUMNS"]

PAPER_VS_COLUMNS = ["key", "figure", "unit", "paper", "paper_hi", "recorded", "paper_setting", "recorded_setting",
                    "recorded_from", "note"]


def recovered_share(eager: float, replay: float, vendor: float) -> float:
    """(eager - replay) / (eager - vendor) for per-call latencies: 1.0 means replay saves exactly what the
    vendor's graphs save, above 1 more. ValueError when the vendor saves nothing (the share is undefined)."""
    saved = eager - vendor
    if not saved > 0:
        raise ValueError(f"recovered_share: the vendor path saves nothing (eager {eager} ms, vendor {vendor} ms); "
                         "the share of its reduction is undefined")
    return (eager - replay) / saved


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


def _factorial_rows(condition: str) -> dict[str, tuple[float, str, str, str]]:
    """key -> (recorded value, setting, file, note) from the Token2wav factorial."""
    ds = "factorial" if condition == "exact" else f"factorial_{condition}"
    fac = data.factorial(condition).set_index("arm")
    summ = data.factorial_summary(condition)
    setting, rel = _setting(ds, "seeded random weights"), _file(ds)
    lat, peak = fac["steady_latency_ms_median"], fac["peak_MiB_median"]
    rows = {
        "t2w_speedup": (summ["speedup_SRc_vs_B0"], "steady chunk, SRc vs B0"),
        "t2w_peak_reduction": (summ["peak_reduction_SRc_vs_B0"], "peak allocator memory, SRc vs B0"),
        "srC_latency_delta": (float(fac.loc["SRc", "latency_delta"]), "paired over blocks"),
        "srC_peak_delta": (float(fac.loc["SRc", "peak_delta"]), "paired over blocks"),
        "s_latency_delta": (float(fac.loc["S", "latency_delta"]),
                            f"95% CI {fac.loc['S', 'latency_delta_lo']:+.1%} .. {fac.loc['S', 'latency_delta_hi']:+.1%}"),
        "rc_peak_delta": (float(fac.loc["Rc", "peak_delta"]), "paired over blocks"),
    }
    if "vendor_graph_50" in fac.index:
        v = "vendor_graph_50"
        rows["vendor50_latency_delta"] = (float(lat[v] / lat["B0"] - 1), "medians; eager = B0")
        rows["vendor50_slower_than_srC"] = (float(lat[v] / lat["SRc"] - 1), "medians")
        rows["vendor50_larger_than_srC"] = (float(peak[v] / peak["SRc"] - 1), "medians")
    floor = summ.get("busy_floor")
    if floor:
        slack = 1 - floor["B0_busy_ms"] / floor["B0_latency_ms"]
        rows["eager_slack"] = (slack, "1 - B0 busy / B0 unprofiled latency")
    return {k: (v, setting, rel, n) for k, (v, n) in rows.items()}


def _mimi_rows() -> dict[str, tuple[float, str, str, str]]:
    arms = data.mimi_arms().set_index("arm")
    lat = arms["latency_ms_median"]
    setting, rel = _setting("mimi", "seeded random weights, encode + decode per 80 ms frame"), _file("mimi")
    return {
        "mimi_vendor_speedup": (float(arms.loc["vendor_graph", "speedup_vs_eager"]), setting, rel, "medians"),
        "mimi_replay_speedup": (float(arms.loc["replay", "speedup_vs_eager"]), setting, rel, "medians"),
        "mimi_recovered_share": (recovered_share(lat["eager"], lat["replay"], lat["vendor_graph"]), setting, rel,
                                 "per-frame medians; above 100%: replay saves more than the vendor"),
    }


def _live_synthesis_row(condition: str) -> dict:
    """The duplex second's synthesis segment, stock -> both rules, as a speedup (paper: table 5)."""
    paper = data.paper_duplex_second("live_synthesis").set_index("arm")["dur_ms"]
    row = dict(key="live_synthesis_speedup", figure="Duplex second: synthesis segment, stock vs both rules (speed)",
               unit="x", paper=float(paper["stock"] / paper["duplexcadence"]), paper_hi=math.nan,
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
        value, setting, rel, note = got.get(key, (math.nan, "", "", "not recorded in this data folder"))
        note = "; ".join(n for n in (note, f["note"] and f"paper: {f['note']}") if n)
        rows.append(dict(key=key, figure=f["figure"], unit=f["unit"], paper=float(f["value"]),
                         paper_hi=float(f["value_hi"]), recorded=value,
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
        "this recording": [format_figure(r.recorded, r.unit) for r in df.itertuples()],
        "note": df["note"],
        "recorded in": df["recorded_from"].replace("", "-"),
    })
