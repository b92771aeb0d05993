"""The frames the course's figures and panels are drawn from (recorded data and declarations in, DataFrames out).

    anatomy_frame / overrun_table   a duplex second: paper, recorded H200, composed; where it ends
    clock_params / token2wav_at     the clock sliders' values and the declaration they derive
    derive_clock_table              per region: A_r, demand vs stock shape and MiB, rho_r, K_r
    catalog_figure                  a declaration's catalog as the extent × call-size grid, checked against
                                    its closed-form counts
    ARM_RULES / arm_for / rules_frame
                                    which arm a combination of rules names; the recorded factorial
                                    in the rules panel's columns
"""

from __future__ import annotations

import pandas as pd

from ..contract import region_table
from ..adapters.token2wav.clocks import T2W_CLOCKS, token2wav_declaration
from .. import viz
from ..adapters.arms import CELLS, arm_for
from ..viz.options import require_columns
from . import data

__all__ = [
    "CADENCE_MS", "anatomy_frame", "overrun_table", "SLIDER_RANGES", "clock_params", "token2wav_at",
    "derive_clock_table", "catalog_figure", "ARM_RULES", "PANEL_ARMS", "arm_for", "rules_frame",
    "lanes_window", "capacity_by_reference",
]

CADENCE_MS = 1000.0


# ---------------------------------------------------------------------------------------
# the duplex second
# ---------------------------------------------------------------------------------------


def anatomy_frame(condition: str = "exact", arms=("B0", "SRc"), compose: bool | None = None) -> pd.DataFrame:
    """Waterfall rows of one duplex second: the paper's anatomy, then the H200 recordings.

    Columns stage, start_ms, dur_ms, source (plus origin: "paper", "recorded", "composed").
    ``compose=None``: when a recorded duplex second exists (``data.duplex_second``) its top-level
    stages are used, otherwise each arm is composed. ``compose=True``: each arm is *composed*: the
    paper's earlier stages (842 ms, stock) followed by the Token2wav synthesis segment recorded on
    the H200 for that arm (steady-chunk median), which isolates what the two rules change.
    ``compose=False``: the recorded second only (FileNotFoundError when there is none). The
    ``source`` label says which: "H200 <arm> (recorded)" or "H200 <arm> (composed)".
    """
    paper = data.paper_duplex_second("anatomy")
    rows = [dict(stage=r.stage, start_ms=float(r.start_ms), dur_ms=float(r.dur_ms), source="paper (stock)",
                 origin="paper") for r in paper.itertuples()]
    measured = None
    if compose is not True:
        try:
            measured = data.duplex_second(condition)
        except FileNotFoundError:
            if compose is False:
                raise
    if measured is not None and len(measured):
        top = measured[measured.get("parent", pd.Series("", index=measured.index)).fillna("") == ""]
        for arm in [a for a in arms if a in set(top["arm"])]:
            for r in top[top["arm"] == arm].itertuples():
                rows.append(dict(stage=r.stage, start_ms=float(r.start_ms), dur_ms=float(r.dur_ms),
                                 source=f"H200 {arm} (recorded)", origin="recorded"))
    else:
        fac = data.factorial(condition).set_index("arm")
        earlier = paper[paper["stage"] != "synthesis"]
        head = float((earlier["start_ms"] + earlier["dur_ms"]).max())
        for arm in [a for a in arms if a in fac.index]:
            src = f"H200 {arm} (composed)"
            for r in earlier.itertuples():
                rows.append(dict(stage=r.stage, start_ms=float(r.start_ms), dur_ms=float(r.dur_ms), source=src,
                                 origin="composed"))
            rows.append(dict(stage="synthesis", start_ms=head, dur_ms=float(fac.loc[arm, "steady_latency_ms_median"]),
                             source=src, origin="composed"))
    return pd.DataFrame(rows)


def overrun_table(frame: pd.DataFrame, cadence_ms: float = CADENCE_MS) -> pd.DataFrame:
    """Per source: where the second ends, by how much it misses (or meets) the cadence, and which
    stage crosses the cadence line (``tail_ms`` of it lies past the line).

    Columns source, end_ms, over_ms (negative = headroom), over_pct, crossing_stage, tail_ms.
    """
    require_columns(frame, ["stage", "start_ms", "dur_ms", "source"], "overrun_table")
    rows = []
    for src, d in frame.groupby("source", sort=False):
        d = d.dropna(subset=["start_ms"])
        end = d["start_ms"] + d["dur_ms"]
        e = float(end.max())
        crossing = d[(d["start_ms"] < cadence_ms) & (end > cadence_ms)]
        stage = crossing["stage"].iloc[-1] if len(crossing) else ""
        tail = float((end[crossing.index] - cadence_ms).max()) if len(crossing) else 0.0
        rows.append(dict(source=src, end_ms=e, over_ms=e - cadence_ms, over_pct=100 * (e / cadence_ms - 1),
                         crossing_stage=stage, tail_ms=tail))
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------
# native clocks and regions
# ---------------------------------------------------------------------------------------


#: the clock sliders' (min, max, step); f_chunk moves a whole token at a time
SLIDER_RANGES = {"f_retained": (10, 400, 10), "f_chunk": (10, 120, T2W_CLOCKS.frames_per_token), "n_steps": (1, 16, 1)}


def clock_params(f_retained=None, f_chunk=None, n_steps=None) -> dict:
    """Slider values, the Token2wav clocks' where not given."""
    c = T2W_CLOCKS
    return dict(f_retained=c.retained_frames if f_retained is None else f_retained,
                f_chunk=c.chunk_frames if f_chunk is None else f_chunk,
                n_steps=c.n_steps if n_steps is None else n_steps)


def token2wav_at(f_retained: int | None = None, f_chunk: int | None = None, n_steps: int | None = None,
              f_prompt: int | None = None):
    """The Token2wav declaration at these slider values, derived exactly as ``cadencelab catalog`` derives it
    (the chunk's tokens follow from f_chunk; a value not given is the clocks')."""
    given = dict(f_prompt=f_prompt, f_retained=f_retained, f_chunk=f_chunk, n_steps=n_steps)
    return token2wav_declaration(**{k: v for k, v in given.items() if v is not None})


def derive_clock_table(decl) -> pd.DataFrame:
    """Per region: policy, A_r, demand vs stock shape and MiB, rho_r, K_r (from ``region_table``)."""
    t = region_table(decl)
    out = t[["region", "role", "policy", "A", "demand_shape", "stock_shape", "rho", "K"]].copy()
    out["demand_MiB"] = t["demand_bytes"] / 2**20
    out["stock_MiB"] = t["stock_bytes"] / 2**20
    return out


def catalog_figure(decl, operator: str = "flow_chunk"):
    """``decl``'s catalog of ``operator`` as the extent × call-size grid (``viz.catalog_heatmap`` of the
    declaration): rows the K steady classes (every region the operator reads), columns the call sizes in the
    operator's clock, each cell steady / admitted flush / rejected; checked against the closed-form counts and
    captioned with the flush bound s_r of a region on the operator's clock."""
    try:
        decl.operator(operator)
    except KeyError as e:
        raise ValueError(f"catalog_figure: {e.args[0]}") from None
    return viz.catalog_heatmap(decl, operator=operator)


# ---------------------------------------------------------------------------------------
# mutual enabling: which arm the rules name
# ---------------------------------------------------------------------------------------

#: (state rule, replay, granularity) -> arm; granularity is ignored without replay (the one arm table's cells)
ARM_RULES = {(a.state_rule, a.replay is not None, a.granularity): a.name for a in CELLS.values()}


#: arms the panel's Pareto shows: the factorial and the strongest control (the vendor graph re-bucketed)
PANEL_ARMS = ("B0", "S", "R", "Rc", "SR", "SRc", "vendor_graph_50")


def rules_frame(condition: str) -> pd.DataFrame:
    """The recorded factorial in pareto columns, with exact_blocks/blocks, deltas and replay summaries."""
    pf = data.pareto_frame(condition)
    fac = data.factorial(condition)
    keep = [c for c in ("arm", "exact_blocks", "blocks", "latency_delta", "latency_delta_lo", "latency_delta_hi",
                        "peak_delta", "replay") if c in fac.columns]
    out = pf.merge(fac[keep], on="arm", how="left")
    prov = data.provenance("factorial" if condition == "exact" else f"factorial_{condition}")
    out.attrs["n_steps"] = int(prov.get("study", {}).get("n_timesteps", 10))
    out.attrs["source"] = f"recorded on {prov.get('gpu', 'a GPU')} ({condition} kernels)"
    return out


def lanes_window(trace, start_ms: float = 20.0, width_ms: float = 2.0) -> pd.DataFrame:
    """The device ops of a lanes trace in ``[start_ms, start_ms + width_ms)`` after its first op, with a
    ``stream`` label per lane ("lane 0", "lane 1", ... in stream order): the rows
    :func:`cadencelab.viz.kernel_timeline` draws one row per lane from."""
    k = trace.kernels.dropna(subset=["stream"])
    if k.empty:
        raise ValueError("lanes_window: the trace has no device records with stream ids")
    t0 = int(k["start_ns"].min())
    lo, hi = t0 + int(start_ms * 1e6), t0 + int((start_ms + width_ms) * 1e6)
    w = k[(k["start_ns"] >= lo) & (k["start_ns"] < hi)].copy()
    lanes = {s: f"lane {i}" for i, s in enumerate(sorted(k["stream"].unique()))}
    w["stream"] = w["stream"].map(lanes)
    return w


def capacity_by_reference(workload: str, dataset: str = "sessions") -> pd.DataFrame:
    """The sessions study's capacity rows for ``workload`` with each arm labelled by the reference its chunks
    were checked against ("SRl · exact vs solo B0", "SRb · exact vs batched eager (experimental)")."""
    cap = data.sessions_capacity(workload, dataset=dataset)
    refs = data.sessions_summary(dataset).get("exactness_reference", {})
    names = {"solo_B0": "exact vs solo B0", "batched_eager": "exact vs batched eager (experimental)"}

    def label(arm: str) -> str:
        r = refs.get(arm) or (["solo_B0"] if arm == "B0" else [])
        return f"{arm} · " + ", ".join(names.get(x, x) for x in r) if r else f"{arm} · unchecked"

    return cap.assign(arm=cap["arm"].map(label))
