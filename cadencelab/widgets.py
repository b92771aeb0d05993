"""Interactive panels for the course, and the small frames and figures they are built from.

Every panel is a plain object: its widget tree is ``panel.widget`` (notebooks display the panel
itself), its callbacks are ordinary methods (``panel.set(...)``, ``panel.show(k)``) that tests call
without a browser, and each re-renders a plain ``go.Figure`` into an ``ipywidgets.Output``.

    anatomy_frame / overrun_table    a duplex second: paper, recorded H200, composed
    clock_sliders                    f_retained, f_chunk, n_steps -> extents, rho_r, K_r instantly
    catalog_grid_frame               a declaration's catalog in the columns viz.catalog_grid wants
    rules_panel                      state rule / replay / granularity / steps -> the arm on the Pareto
    chunk_timelines, timeline_player a recorded chunk kernel by kernel, eager beside replay
    pointer_figure, audit_figure,
    misses_figure                    the carry's address, the audit's verdicts, replay misses
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from . import viz
from .contract import T2W_CLOCKS, catalog, region_table, token2wav_declaration, trajectory
from .viz.options import IDLE_COLORS, TimelineOptions, require_columns

__all__ = [
    "anatomy_frame", "overrun_table", "ClockSliders", "clock_sliders", "derive_clock_table", "catalog_grid_frame",
    "ARM_RULES", "PANEL_ARMS", "arm_for", "RulesPanel", "rules_panel", "live_factorial", "ChunkTimelines", "chunk_timelines",
    "profile_chunk", "timeline_events", "short_kernel_name", "TimelinePlayer", "timeline_player",
    "pointer_figure", "audit_figure", "misses_figure",
]

CADENCE_MS = 1000.0


def _widgets():
    import ipywidgets

    return ipywidgets


def _render(out, fig) -> None:
    """Replace what an Output widget shows with ``fig``."""
    from IPython.display import display

    out.clear_output(wait=True)
    with out:
        display(fig)


def _html_table(df: pd.DataFrame, floatfmt: str = "{:.2f}") -> str:
    return df.to_html(index=False, float_format=lambda v: floatfmt.format(v), border=0, classes="cadencelab-table")


# =======================================================================================
# 1. the duplex second
# =======================================================================================


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
    from . import data

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


# =======================================================================================
# 2. native clocks and regions
# =======================================================================================


#: the clock sliders' (min, max, step); f_chunk moves a whole token at a time
SLIDER_RANGES = {"f_retained": (10, 400, 10), "f_chunk": (10, 120, T2W_CLOCKS.frames_per_token), "n_steps": (1, 16, 1)}


def _clock_params(f_retained=None, f_chunk=None, n_steps=None) -> dict:
    """Slider values, the Token2wav clocks' where not given."""
    c = T2W_CLOCKS
    return dict(f_retained=c.retained_frames if f_retained is None else f_retained,
                f_chunk=c.chunk_frames if f_chunk is None else f_chunk,
                n_steps=c.n_steps if n_steps is None else n_steps)


def _t2w_decl(f_retained: int | None = None, f_chunk: int | None = None, n_steps: int | None = None,
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


def catalog_grid_frame(decl, operator: str = "flow_chunk") -> pd.DataFrame:
    """``decl``'s catalog of ``operator`` as viz.catalog_grid rows (clock, value, class_id, admitted).

    Two rows of cells: the cached extent a steady call sees (one class per value: the K_r
    classes) and the frames a call carries (steady stride and flush sizes; values above the
    admission predicate are marked not admitted).
    """
    cat = catalog(decl, operator)
    ext = [c for c in cat.columns if c.startswith("ext_")]
    steady = cat[cat["kind"] == "steady"]
    rows = [dict(clock=f"cached extent ({ext[0][4:]})", value=int(v), class_id=i, admitted=True)
            for i, v in enumerate(sorted(set(steady[ext[0]].astype(int))))]
    calls = cat[cat["kind"].isin(["steady", "flush"])]
    for i, f in enumerate(sorted(set(calls["f"].astype(int)))):
        ok = bool(calls.loc[calls["f"].astype(int) == f, "admitted"].astype(bool).any())
        rows.append(dict(clock="call frames f", value=f, class_id=i, admitted=ok))
    return pd.DataFrame(rows)


class ClockSliders:
    """Sliders for f_retained, f_chunk and n_steps; every move re-derives the Token2wav declaration.

    ``update(f_retained=..., f_chunk=..., n_steps=...)`` is the callback (tests call it); it sets
    ``table`` (per region A_r, shapes, rho_r, K_r), ``extents`` (the cached extents L of the
    estimator cache) and ``summary``, and re-renders the rho figure.
    """

    def __init__(self, f_retained: int | None = None, f_chunk: int | None = None, n_steps: int | None = None,
                 f_prompt: int | None = None, build: bool = True):
        self.f_prompt = T2W_CLOCKS.prompt_frames if f_prompt is None else f_prompt
        self.params = _clock_params(f_retained, f_chunk, n_steps)
        self.decl = None
        self.table = self.extents = None
        self.summary = ""
        self.widget = None
        self._compute()
        if build:
            self._build()

    # -- the callback ------------------------------------------------------------------
    def _compute(self) -> None:
        p = self.params
        self.decl = _t2w_decl(p["f_retained"], p["f_chunk"], p["n_steps"], self.f_prompt)
        self.table = derive_clock_table(self.decl)
        traj = trajectory(self.decl, "estimator_att_cache")
        self.extents = sorted(set(int(v) for v in traj["shape_extent"]))
        t = self.table.set_index("region")
        ws = t.loc["solver_workspace"]
        self.summary = (
            f"f_prompt={self.f_prompt}, f_retained={p['f_retained']}, f_chunk={p['f_chunk']}, n_steps={p['n_steps']}: "
            f"estimator cache extents L = {{{', '.join(map(str, self.extents))}}} so K = {int(t.loc['estimator_att_cache', 'K'])}; "
            f"solver workspace {ws['stock_shape'][0]}x{ws['stock_shape'][4]} (stock) vs "
            f"{ws['demand_shape'][0]}x{ws['demand_shape'][4]} (declared), rho = {ws['rho']:.2f}"
        )

    def update(self, **params) -> pd.DataFrame:
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise TypeError(f"ClockSliders.update: unknown parameters {unknown}; known: {sorted(self.params)}")
        self.params.update({k: int(v) for k, v in params.items()})
        self._compute()
        if self.widget is not None:
            self._refresh()
        return self.table

    def figure(self) -> go.Figure:
        """Reserved (stock) vs declared MiB per region, rho annotated."""
        t = self.table
        df = pd.DataFrame({"region": t["region"], "reserved_bytes": t["stock_MiB"] * 2**20,
                           "live_bytes": t["demand_MiB"] * 2**20})
        return viz.rho_bars(df, viz.FigureOptions(title=f"rho_r per region ({self.summary.split(':')[0]})", height=420))

    # -- widgets ----------------------------------------------------------------------
    def _build(self) -> None:
        w = _widgets()
        p = self.params
        style = dict(continuous_update=True, style={"description_width": "initial"})  # re-derive while dragging
        self.sliders = {name: w.IntSlider(value=p[name], min=lo, max=hi, step=step, description=name, **style)
                        for name, (lo, hi, step) in SLIDER_RANGES.items()}
        self.text = w.HTML()
        self.tab = w.HTML()
        self.out = w.Output()
        for name, s in self.sliders.items():
            s.observe(lambda ch, name=name: self.update(**{name: ch["new"]}), names="value")
        self.widget = w.VBox([w.HBox(list(self.sliders.values())), self.text, self.tab, self.out])
        self._refresh()

    def _refresh(self) -> None:
        for name, s in self.sliders.items():
            if s.value != self.params[name]:
                s.value = self.params[name]
        self.text.value = f"<b>{self.summary}</b>"
        cols = ["region", "A", "demand_shape", "stock_shape", "rho", "K"]
        self.tab.value = _html_table(self.table[cols])
        _render(self.out, self.figure())

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget if self.widget is not None else self.table)


def clock_sliders(f_retained: int | None = None, f_chunk: int | None = None, n_steps: int | None = None) -> ClockSliders:
    """Sliders for f_retained, f_chunk, n_steps that re-derive extents, rho_r and K_r instantly."""
    return ClockSliders(f_retained, f_chunk, n_steps)


# =======================================================================================
# 5. mutual enabling: the rules panel
# =======================================================================================

#: (state rule, replay, granularity) -> arm; granularity is ignored without replay
ARM_RULES = {
    (False, False, None): "B0", (True, False, None): "S",
    (False, True, "step"): "R", (False, True, "chunk"): "Rc",
    (True, True, "step"): "SR", (True, True, "chunk"): "SRc",
}


#: arms the panel's Pareto shows: the factorial and the strongest control (the vendor graph re-bucketed)
PANEL_ARMS = ("B0", "S", "R", "Rc", "SR", "SRc", "vendor_graph_50")


def arm_for(state_rule: bool, replay: bool, granularity: str = "chunk") -> str:
    """The factorial arm a combination of rules names."""
    if granularity not in ("step", "chunk"):
        raise ValueError(f"granularity must be 'step' or 'chunk', got {granularity!r}")
    return ARM_RULES[(bool(state_rule), bool(replay), granularity if replay else None)]


def _rules_frame(condition: str) -> pd.DataFrame:
    """The recorded factorial in pareto columns, with exact_blocks/blocks, deltas and replay summaries."""
    from . import data

    pf = data.pareto_frame(condition)
    fac = data.factorial(condition)
    keep = [c for c in ("arm", "exact_blocks", "blocks", "latency_delta", "latency_delta_lo", "latency_delta_hi",
                        "peak_delta", "replay") if c in fac.columns]
    out = pf.merge(fac[keep], on="arm", how="left")
    prov = data.provenance("factorial" if condition == "exact" else f"factorial_{condition}")
    out.attrs["n_steps"] = int(prov.get("study", {}).get("n_timesteps", 10))
    out.attrs["source"] = f"recorded on {prov.get('gpu', 'a GPU')} ({condition} kernels)"
    return out


class RulesPanel:
    """State rule on/off, replay on/off, granularity step/chunk, solver steps -> one arm's point.

    data: a frame with the columns viz.pareto wants (arm, lat_ms, peak_MiB, exact; optional CI
    columns, exact_blocks, blocks, latency_delta*, peak_delta, replay). Default: the recorded
    H200 factorial (``condition``). ``measure(n_steps) -> frame`` (live mode) supplies the frame
    for a step count the data was not recorded at; without it such a choice keeps the recorded
    point and says so.

    arms: the arms drawn on the Pareto (None: every arm in the data).
    Callbacks: ``set(state_rule=, replay=, granularity=, steps=)`` (what the widgets call),
    ``point()`` (the chosen arm's numbers), ``figure()`` (the Pareto with the arm ringed).
    """

    def __init__(self, data: pd.DataFrame | None = None, condition: str = "exact",
                 measure: Callable[[int], pd.DataFrame] | None = None, arms=PANEL_ARMS, build: bool = True,
                 fallback: pd.DataFrame | None = None):
        self.fallback = fallback  # recorded rows for arms a live run could not measure
        self.frames: dict[int, pd.DataFrame] = {}
        frame = data if data is not None else _rules_frame(condition)
        require_columns(frame, ["arm", "lat_ms", "peak_MiB"], "rules_panel")
        self.recorded_steps = int(frame.attrs.get("n_steps", 10))
        self.frames[self.recorded_steps] = frame
        self.source = frame.attrs.get("source", "given data")
        self.measure = measure
        self.arms = tuple(arms) if arms is not None else None
        self.state = dict(state_rule=True, replay=True, granularity="chunk", steps=self.recorded_steps)
        self.history: list[dict] = []
        self.widget = None
        if build:
            self._build()

    # -- the model behind the widgets ------------------------------------------------------
    @property
    def live(self) -> bool:
        """True when the numbers are measured on this machine (a ``measure`` function is set)."""
        return self.measure is not None

    @property
    def arm(self) -> str:
        s = self.state
        return arm_for(s["state_rule"], s["replay"], s["granularity"])

    def frame(self) -> tuple[pd.DataFrame, int, str]:
        """(frame, steps it was measured at, note) for the current step count."""
        steps = self.state["steps"]
        if steps not in self.frames and self.measure is not None:
            f = self.measure(steps)
            f.attrs.setdefault("n_steps", steps)
            self.frames[steps] = f
        if steps in self.frames:
            return self.frames[steps], steps, ""
        note = (f"measured at n_steps={self.recorded_steps} only ({self.source}); "
                f"a live measurement at n_steps={steps} needs a CUDA device")
        return self.frames[self.recorded_steps], self.recorded_steps, note

    def derived(self, steps: int | None = None) -> dict:
        """What the declaration says about the chosen arm at ``steps``: captured bindings and the
        solver workspace it allocates (declared for S*, the stock 16 x 1000 otherwise)."""
        steps = self.state["steps"] if steps is None else steps
        decl = _t2w_decl(n_steps=steps)
        t = region_table(decl).set_index("region")
        cat = {op.name: int((catalog(decl, op.name)["kind"] == "steady").sum()) for op in decl.operators}
        s = self.state
        if not s["replay"]:
            bindings = 0
        elif s["granularity"] == "chunk":
            bindings = cat["flow_chunk"] + cat["vocoder_core"]
        else:
            bindings = cat["flow_encoder"] + cat["estimator_step"] * steps + cat["vocoder_core"]
        ws = t.loc["solver_workspace", "demand_bytes" if s["state_rule"] else "stock_bytes"]
        return dict(steps=steps, steady_bindings=bindings, solver_workspace_MiB=float(ws) / 2**20)

    def point(self) -> dict:
        """The chosen arm's recorded (or live) numbers and where they come from."""
        frame, measured_at, note = self.frame()
        rows = frame[frame["arm"] == self.arm]
        source = frame.attrs.get("source", self.source)
        if rows.empty:
            why = frame.attrs.get("failed", {}).get(self.arm)
            fb = self.fallback
            if fb is None or int(fb.attrs.get("n_steps", -1)) != measured_at or not (fb["arm"] == self.arm).any():
                raise KeyError(f"rules_panel: arm {self.arm} is not in the data (arms: {sorted(frame['arm'])})"
                               + (f"; its live run failed: {why}" if why else ""))
            rows = fb[fb["arm"] == self.arm]
            source = fb.attrs.get("source", "recorded data")
            note = (note + "; " if note else "") + (f"the live run of {self.arm} failed ({why or 'no result'}); "
                                                    f"showing the recorded value")
        r = rows.iloc[0]
        out = dict(arm=self.arm, lat_ms=float(r["lat_ms"]), peak_MiB=float(r["peak_MiB"]),
                   exact=bool(r.get("exact", True)), exact_blocks=r.get("exact_blocks"), blocks=r.get("blocks"),
                   latency_delta=r.get("latency_delta"), peak_delta=r.get("peak_delta"),
                   replay=r.get("replay") or {}, measured_at_steps=measured_at,
                   source=source, note=note)
        out.update(self.derived())
        return out

    def figure(self) -> go.Figure:
        """The Pareto of every arm at the measured step count, the chosen arm ringed."""
        frame, _, _ = self.frame()
        cols = [c for c in ("arm", "lat_ms", "peak_MiB", "lat_lo", "lat_hi", "peak_lo", "peak_hi", "exact")
                if c in frame.columns]
        if self.arms is not None:
            frame = frame[frame["arm"].isin(self.arms)]
        p = self.point()
        fig = viz.pareto(frame[cols], viz.ParetoOptions(title=f"{p['arm']}: {p['lat_ms']:.1f} ms, "
                                                               f"{p['peak_MiB']:.0f} MiB", height=460))
        fig.add_trace(go.Scatter(x=[p["lat_ms"]], y=[p["peak_MiB"]], mode="markers", name="selected",
                                 text=[p["arm"]], marker=dict(symbol="circle-open", size=26, color="crimson",
                                                              line=dict(width=3)),
                                 hovertemplate="selected %{text}<extra></extra>"))
        fig.update_xaxes(title_text="steady chunk latency (ms)")
        return fig

    def set(self, state_rule: bool | None = None, replay: bool | None = None, granularity: str | None = None,
            steps: int | None = None) -> dict:
        """Change any of the rules (the widgets' callback); returns the new point."""
        new = dict(state_rule=state_rule, replay=replay, granularity=granularity, steps=steps)
        for k, v in new.items():
            if v is not None:
                self.state[k] = int(v) if k == "steps" else (v if k == "granularity" else bool(v))
        arm_for(self.state["state_rule"], self.state["replay"], self.state["granularity"])  # validates
        p = self.point()
        self.history.append(dict(p, **{k: self.state[k] for k in ("state_rule", "replay", "granularity")}))
        if self.widget is not None:
            self._refresh()
        return p

    def table(self) -> pd.DataFrame:
        """Every arm at the measured step count (what the Pareto shows)."""
        frame, _, _ = self.frame()
        cols = [c for c in ("arm", "lat_ms", "peak_MiB", "exact", "exact_blocks", "blocks", "latency_delta",
                            "peak_delta") if c in frame.columns]
        return frame[cols]

    # -- widgets ---------------------------------------------------------------------------
    def _build(self) -> None:
        w = _widgets()
        s = self.state
        self.controls = dict(
            state_rule=w.Checkbox(value=s["state_rule"], description="state rule (carry + demand sizing)",
                                  indent=False),
            replay=w.Checkbox(value=s["replay"], description="replay (ExactShapeReplay)", indent=False),
            granularity=w.ToggleButtons(options=["step", "chunk"], value=s["granularity"], description="granularity"),
            steps=w.IntSlider(value=s["steps"], min=1, max=16, description="solver steps", continuous_update=False),
        )
        for name, c in self.controls.items():
            c.observe(lambda ch, name=name: self._on(name, ch["new"]), names="value")
        self.readout = w.HTML()
        self.out = w.Output()
        self.widget = w.VBox([w.HBox([self.controls["state_rule"], self.controls["replay"]]),
                              w.HBox([self.controls["granularity"], self.controls["steps"]]), self.readout, self.out])
        self.widget.add_class("cadencelab-rules-panel")
        self._refresh()

    def _on(self, name: str, value) -> None:
        if self.state.get(name) != value:
            self.set(**{name: value})

    def _readout(self, p: dict) -> str:
        exact = "bit-exact" if p["exact"] else "NOT bit-exact"
        blocks = (f" ({int(p['exact_blocks'])}/{int(p['blocks'])} blocks)"
                  if p.get("exact_blocks") is not None and p.get("blocks") is not None
                  and not (isinstance(p["blocks"], float) and math.isnan(p["blocks"])) else "")
        delta = ""
        if p.get("latency_delta") is not None and p.get("peak_delta") is not None:
            delta = f"; vs B0: latency {100 * p['latency_delta']:+.1f}%, peak {100 * p['peak_delta']:+.1f}%"
        replay = "".join(f"<br>&nbsp;&nbsp;{v}" for v in (p["replay"] or {}).values())
        note = f"<br><i>{p['note']}</i>" if p["note"] else ""
        return (f"<div class='cadencelab-readout'><b>arm {p['arm']}</b>: {p['lat_ms']:.1f} ms per steady chunk, "
                f"peak {p['peak_MiB']:.0f} MiB, {exact}{blocks}{delta}<br>"
                f"declared at n_steps={p['steps']}: {p['steady_bindings']} steady graph bindings, solver workspace "
                f"{p['solver_workspace_MiB']:.0f} MiB<br><small>{p['source']}</small>{replay}{note}</div>")

    def _refresh(self) -> None:
        s = self.state
        for name, c in self.controls.items():
            if c.value != s[name]:
                c.value = s[name]
        self.controls["granularity"].disabled = not s["replay"]
        p = self.point()
        self.readout.value = self._readout(p)
        _render(self.out, self.figure())

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget if self.widget is not None else self.table())


def rules_panel(data: pd.DataFrame | None = None, condition: str = "exact", live: bool = False,
                **live_kw) -> RulesPanel:
    """The rules panel over the recorded factorial of ``condition`` (a key of ``data.CONDITIONS``;
    ``live=True``: measured on this GPU instead, under the same device condition)."""
    if live:
        live_kw["condition"] = condition
        first = live_factorial(**live_kw)
        try:
            fallback = _rules_frame(condition)
        except FileNotFoundError:
            fallback = None
        return RulesPanel(first, measure=lambda steps: live_factorial(n_steps=steps, **live_kw), fallback=fallback)
    return RulesPanel(data, condition)


def live_factorial(n_steps: int = 10, config: str = "real", arms=("B0", "S", "R", "Rc", "SR", "SRc"),
                   blocks: int = 1, chunks_per_turn: int = 3, out: str | None = None, progress=None,
                   condition: str = "exact") -> pd.DataFrame:
    """Run the factorial on this GPU (one process per arm, as the bench does) -> a rules-panel frame.

    Needs CUDA. Latency is the median steady-chunk synthesis time, peak the allocator peak per
    block, exact = every block's hashes equal B0's. ``condition``: a key of ``data.CONDITIONS``, run
    under its device condition (``data.DEVICE_CONDITIONS``). Takes about a minute per call on an H200.
    """
    import tempfile

    import torch

    from .bench.token2wav import StudyConfig, run_study

    from . import data

    data._condition(condition)
    if not torch.cuda.is_available():
        raise RuntimeError("live_factorial needs a CUDA device; use the recorded data (rules_panel(live=False))")
    cfg = StudyConfig(config=config, device="cuda", arms=tuple(arms), blocks=blocks, chunks_per_turn=chunks_per_turn,
                      n_timesteps=n_steps, profile=False, condition=data.DEVICE_CONDITIONS[condition],
                      out=out or tempfile.mkdtemp(prefix="cadencelab-live-"))
    res = run_study(cfg, progress=progress or (lambda *_: None))
    rows, failed = [], {}
    for a, r in res["arms"].items():
        if r.get("failed"):
            failed[a] = str(r["failed"])[:300]
            continue
        rows.append(dict(arm=a, lat_ms=r["steady_latency_ms_median"], peak_MiB=r["peak_MiB_median"],
                         exact=bool(r["exact"]), exact_blocks=r["exact_blocks"], blocks=r["blocks"],
                         latency_delta=r.get("latency_delta"), peak_delta=r.get("peak_delta"),
                         replay=r.get("replay") or {}))
    df = pd.DataFrame(rows)
    df.attrs["n_steps"] = n_steps
    df.attrs["failed"] = failed
    df.attrs["source"] = (f"live on {torch.cuda.get_device_name()} ({config} config, {blocks} block(s), "
                          f"{condition} kernels)")
    return df


# =======================================================================================
# 6. kernel timeline replay
# =======================================================================================

_TEMPLATE = re.compile(r"<[^<>]*>")


def short_kernel_name(name: str, keep: int = 2) -> str:
    """'void at::native::reduce_kernel<512, 1, ...>(...)' -> 'native::reduce_kernel'."""
    s = str(name)
    if s.startswith("void "):
        s = s[5:]
    for _ in range(8):  # strip nested template arguments
        t = _TEMPLATE.sub("", s)
        if t == s:
            break
        s = t
    s = s.split("(")[0].strip()
    parts = [p for p in s.split("::") if p and not p.startswith("{")]
    return "::".join(parts[-keep:]) if parts else str(name)[:40]


def timeline_events(trace, window: str = "chunk", occurrence: int = -1) -> tuple[pd.DataFrame, str]:
    """The events a timeline shows for one window of ``trace``, and what they are.

    With device activity: the kernels (and memcpy/memset) launched inside the host range
    ``window`` (occurrence ``occurrence``; -1 = the last). On a CPU-only trace: the top-level host
    ops inside it (what a CPU executes in place of kernels). Columns name, kernel (short name),
    start_ns, end_ns, dur_ns, launch_ns, graph, correlation, cat.
    """
    r = trace.ranges[(trace.ranges["side"] == "cpu") & (trace.ranges["name"] == window)]
    if len(r):
        w = r.sort_values("start_ns").iloc[occurrence]
        ws, we = int(w["start_ns"]), int(w["end_ns"])
    else:
        ws, we = trace.span_ns()
    if trace.has_device_activity:
        k = trace.kernels
        if "launch_ns" in k.columns and k["launch_ns"].notna().any():
            inside = k["launch_ns"].fillna(k["start_ns"]).between(ws, we)
        else:
            inside = k["start_ns"].between(ws, we)
        ev = k[inside].copy()
        what = "device kernels"
    else:
        ops = trace.cpu_ops
        ev = ops[(ops["depth"] == 0) & (ops["start_ns"] >= ws) & (ops["end_ns"] <= we)].copy()
        ev["launch_ns"] = pd.array([pd.NA] * len(ev), dtype="Int64")
        ev["graph"] = False
        ev["correlation"] = pd.array([pd.NA] * len(ev), dtype="Int64")
        ev["cat"] = "cpu_op"
        what = "top-level host ops (CPU-only trace: no kernels)"
    ev = ev.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True)
    ev["kernel"] = [short_kernel_name(n) for n in ev["name"]]
    cols = ["name", "kernel", "start_ns", "end_ns", "dur_ns", "launch_ns", "graph", "correlation", "cat"]
    return ev[cols], what


@dataclass
class ChunkTimelines:
    """One steady chunk, eager (B0) and replayed (SRc): events, per-chunk summary, provenance."""

    eager: pd.DataFrame
    replay: pd.DataFrame
    summary: pd.DataFrame
    source: str
    what: str
    traces: dict = field(default_factory=dict)


def profile_chunk(arm: str = "B0", config: str = "teaching", device: str = "cpu", warm_chunks: int = 3,
                  seed: int = 0):
    """Profile one steady Token2wav chunk live: build the arm, warm it through the catalog's
    classes (``warm_chunks`` chunks), then profile one more chunk. Returns the Trace."""
    import torch

    from .adapters.token2wav import REAL, TEACHING
    from .adapters.token2wav.runtime import build_runtime
    from .profile import profile_stream

    cfg = TEACHING if config == "teaching" else REAL
    dev = torch.device(device)
    rt, prompt = build_runtime(cfg, arm, seed, dev)
    rt.set_stream_cache(prompt)
    c = rt.clocks
    toks = np.random.default_rng(seed).integers(0, cfg.vocab_size, c.tokens_per_chunk * (warm_chunks + 1)
                                                 + c.lookahead_tokens).tolist()
    pieces = [toks[c.tokens_per_chunk * i: c.tokens_per_chunk * i + c.call_tokens] for i in range(warm_chunks + 1)]
    for p in pieces[:-1]:
        rt.stream(p)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    rt.ranges = True
    prof = profile_stream([lambda: rt.stream(pieces[-1])], device=dev, window="chunk")
    rt.ranges = False
    return prof.trace


def chunk_timelines(source: str = "auto", config: str = "teaching", device: str = "cpu",
                    warm_chunks: int = 3) -> ChunkTimelines:
    """The B0 and SRc timelines of one steady chunk.

    source "recorded": the H200 traces (``data.recorded_trace``); "live": profile
    ``config`` on ``device`` now (:func:`profile_chunk`); "auto": recorded when the files exist,
    live otherwise (on a CPU the live trace has host ops only, which is what the player then walks).
    ``warm_chunks``: live only, chunks streamed before the profiled one (3 reach the steady class).
    """
    from . import data
    from .profile import summary

    if source not in ("auto", "recorded", "live"):
        raise ValueError(f"chunk_timelines: source must be 'auto', 'recorded' or 'live', got {source!r}")
    traces = {}
    if source in ("auto", "recorded"):
        try:
            traces = {"eager": data.recorded_trace("B0"), "replay": data.recorded_trace("SRc")}
            src = "recorded: one steady chunk of the real config on an H200 (B0 eager, SRc replayed)"
        except FileNotFoundError:
            if source == "recorded":
                raise
    if not traces:
        traces = {"eager": profile_chunk("B0", config, device, warm_chunks),
                  "replay": profile_chunk("SRc", config, device, warm_chunks)}
        src = f"live: one steady chunk of the {config} config on {device} (B0 eager, SRc replay backend 'auto')"
    ev = {}
    what = ""
    for k, t in traces.items():
        ev[k], what = timeline_events(t)
    rows = []
    for k, t in traces.items():
        s = summary(t, "chunk").iloc[[-1]].copy()
        s.insert(0, "variant", k)
        rows.append(s)
    return ChunkTimelines(ev["eager"], ev["replay"], pd.concat(rows, ignore_index=True), src, what, traces)


def _accumulate(events: pd.DataFrame) -> dict:
    """Per event index: elapsed, busy and idle (by category) since the first event, in ns."""
    from .profile import gaps

    k = events.reset_index(drop=True)
    g = gaps(k)
    s = k["start_ns"].to_numpy(np.int64)
    e = k["end_ns"].to_numpy(np.int64)
    t0 = int(s[0])
    reach = np.maximum.accumulate(e) - t0  # elapsed at the end of event i (device time reached)
    cats = list(IDLE_COLORS) + sorted(set(g["category"]) - set(IDLE_COLORS))
    idle = {}
    gend = g["end_ns"].to_numpy(np.int64)
    for c in cats:
        m = (g["category"] == c).to_numpy()
        cs = np.concatenate([[0], np.cumsum(g["gap_ns"].to_numpy(np.int64)[m])])
        idle[c] = cs[np.searchsorted(gend[m], s, side="right")]  # gaps that ended by the start of event i
    total = sum(idle.values())
    return dict(start_ns=s - t0, end_ns=e - t0, elapsed_ns=reach, idle_ns=total, busy_ns=reach - total, idle=idle)


class TimelinePlayer:
    """Walk a chunk kernel by kernel, eager and replay side by side, accumulating idle time.

    ``show(k)`` (the slider's callback) moves both cursors to kernel ``k`` and re-renders a
    window of the last ``window`` kernels of each variant (idle gaps coloured by category) and
    the accumulated-idle curves. ``state(k)`` is the readout as a frame (elapsed, busy, idle by
    category, slack so far).
    """

    def __init__(self, eager: pd.DataFrame, replay: pd.DataFrame, window: int = 40, labels=("eager", "replay"),
                 build: bool = True):
        for name, df in (("eager", eager), ("replay", replay)):
            require_columns(df, ["name", "start_ns", "end_ns"], f"timeline_player {name}")
            if len(df) == 0:
                raise ValueError(f"timeline_player: no {name} events")
        self.labels = labels
        self.events = {labels[0]: self._prep(eager), labels[1]: self._prep(replay)}
        self.acc = {k: _accumulate(v) for k, v in self.events.items()}
        self.n = max(len(v) for v in self.events.values())
        self.window = window
        self.k = 0
        self.widget = None
        if build:
            self._build()

    @staticmethod
    def _prep(df: pd.DataFrame) -> pd.DataFrame:
        d = df.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True).copy()
        if "kernel" not in d.columns:
            d["kernel"] = [short_kernel_name(n) for n in d["name"]]
        for c, default in (("launch_ns", pd.NA), ("graph", False), ("correlation", pd.NA)):
            if c not in d.columns:
                d[c] = default
        return d

    # -- the model behind the widgets ------------------------------------------------------
    def _index(self, name: str, k: int) -> int:
        return int(min(max(k, 0), len(self.events[name]) - 1))

    def state(self, k: int | None = None) -> pd.DataFrame:
        """Per variant at kernel ``k``: kernel, elapsed_us, busy_us, idle_us (+ per category), slack."""
        k = self.k if k is None else k
        rows = []
        for name, a in self.acc.items():
            i = self._index(name, k)
            row = dict(variant=name, kernel_index=i, kernels=len(self.events[name]),
                       kernel=self.events[name]["kernel"].iloc[i], elapsed_us=a["elapsed_ns"][i] / 1e3,
                       busy_us=a["busy_ns"][i] / 1e3, idle_us=a["idle_ns"][i] / 1e3)
            for c, v in a["idle"].items():
                row[f"{c}_us"] = v[i] / 1e3
            row["slack_frac"] = a["idle_ns"][i] / a["elapsed_ns"][i] if a["elapsed_ns"][i] else 0.0
            rows.append(row)
        return pd.DataFrame(rows)

    def figure(self, k: int | None = None) -> go.Figure:
        """The last ``window`` kernels up to kernel ``k`` of each variant, time since chunk start."""
        k = self.k if k is None else k
        from .profile import gaps as _gaps

        ks, gs, cursors = [], [], {}
        for name, ev in self.events.items():
            i = self._index(name, k)
            lo = max(0, i - self.window + 1)
            t0 = int(ev["start_ns"].iloc[0])
            w = ev.iloc[lo: i + 1].copy()
            g = _gaps(ev.iloc[lo: i + 1])
            for d in (w, g):
                d["start_ns"] = d["start_ns"] - t0
                d["end_ns"] = d["end_ns"] - t0
                d["variant"] = name
            ks.append(w[[c for c in ("kernel", "name", "cat", "start_ns", "end_ns", "variant") if c in w.columns]])
            gs.append(g[["start_ns", "end_ns", "category", "variant"]])
            cursors[name] = (int(ev["end_ns"].iloc[i]) - t0) / 1e3
        fig = viz.kernel_timeline(pd.concat(ks, ignore_index=True), pd.concat(gs, ignore_index=True), label="kernel",
                                  options=TimelineOptions(origin_ns=0, height=620, title=f"kernel {k}: the last "
                                                          f"{self.window} kernels of each variant"))
        for row, name in enumerate(self.events, start=1):
            fig.add_vline(x=cursors[name], line_color="black", line_width=1, row=row, col=1)
        for a in fig.layout.annotations:  # panel titles: where each variant's cursor is
            if a.text in cursors:
                a.text = f"{a.text}: kernel {self._index(a.text, k)}, {cursors[a.text] / 1e3:.2f} ms into the chunk"
        fig.update_xaxes(showticklabels=True)  # each variant from its own chunk start, on one shared time scale
        return fig

    def progress_figure(self, k: int | None = None, points: int = 600) -> go.Figure:
        """Accumulated idle (solid) and busy (dotted) time vs kernel index; the cursor at ``k``."""
        k = self.k if k is None else k
        fig = go.Figure()
        colors = {self.labels[0]: "#d62728", self.labels[1]: "#1f77b4"}
        for name, a in self.acc.items():
            n = len(a["elapsed_ns"])
            idx = np.unique(np.linspace(0, n - 1, min(n, points)).astype(int))
            fig.add_trace(go.Scatter(x=idx, y=a["idle_ns"][idx] / 1e6, name=f"{name}: idle", mode="lines",
                                     line=dict(color=colors[name])))
            fig.add_trace(go.Scatter(x=idx, y=a["busy_ns"][idx] / 1e6, name=f"{name}: busy", mode="lines",
                                     line=dict(color=colors[name], dash="dot")))
        fig.add_vline(x=k, line_color="black", line_width=1)
        fig.update_layout(template="plotly_white", height=320, xaxis_title="kernel index",
                          yaxis_title="accumulated ms", title="Idle accumulates where the host launches one by one")
        return fig

    def show(self, k: int) -> pd.DataFrame:
        """Move the cursor to kernel ``k`` (the slider callback); returns ``state(k)``."""
        self.k = int(min(max(k, 0), self.n - 1))
        if self.widget is not None:
            self._refresh()
        return self.state()

    def step(self, delta: int = 1) -> pd.DataFrame:
        return self.show(self.k + delta)

    # -- widgets ---------------------------------------------------------------------------
    def _build(self) -> None:
        w = _widgets()
        self.slider = w.IntSlider(value=0, min=0, max=self.n - 1, description="kernel", continuous_update=False,
                                  layout=w.Layout(width="70%"))
        self.play = w.Play(value=0, min=0, max=self.n - 1, step=max(1, self.n // 200), interval=400,
                           description="play")
        w.jslink((self.play, "value"), (self.slider, "value"))
        self.back = w.Button(description="◀ kernel", layout=w.Layout(width="90px"))
        self.fwd = w.Button(description="kernel ▶", layout=w.Layout(width="90px"))
        self.back.on_click(lambda _: self._set_slider(self.k - 1))
        self.fwd.on_click(lambda _: self._set_slider(self.k + 1))
        self.slider.observe(lambda ch: self.show(ch["new"]), names="value")
        self.readout = w.HTML()
        self.out = w.Output()
        self.out_progress = w.Output()
        self.widget = w.VBox([w.HBox([self.play, self.back, self.fwd, self.slider]), self.readout, self.out,
                              self.out_progress])
        self._refresh()

    def _set_slider(self, k: int) -> None:
        self.slider.value = int(min(max(k, 0), self.n - 1))

    def _refresh(self) -> None:
        if self.slider.value != self.k:
            self.slider.value = self.k
        st = self.state()
        cols = [c for c in st.columns if c.endswith("_us") or c in ("variant", "kernel_index", "kernel", "slack_frac")]
        self.readout.value = _html_table(st[cols], "{:.1f}")
        _render(self.out, self.figure())
        _render(self.out_progress, self.progress_figure())

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget if self.widget is not None else self.state())


def timeline_player(kernels_df_eager: pd.DataFrame, kernels_df_replay: pd.DataFrame, window: int = 40) -> TimelinePlayer:
    """A play/step player over two kernel frames (eager, replay) of one chunk."""
    return TimelinePlayer(kernels_df_eager, kernels_df_replay, window)


# =======================================================================================
# 3-4. figures for the carry and replay notebooks
# =======================================================================================


def pointer_figure(tables: dict[str, pd.DataFrame]) -> go.Figure:
    """Cache address per call for each run (offset from its first address, KiB): a carry is flat.

    tables: name -> a StreamRun.table (columns call, cache_ptr, extent).
    """
    fig = go.Figure()
    for name, t in tables.items():
        require_columns(t, ["call", "cache_ptr", "extent"], "pointer_figure")
        off = (t["cache_ptr"].astype("int64") - int(t["cache_ptr"].iloc[0])) / 1024
        fig.add_trace(go.Scatter(x=t["call"], y=off, mode="lines+markers", name=name, text=t["extent"],
                                 hovertemplate="call %{x}<br>address +%{y:.1f} KiB<br>extent %{text}<extra></extra>"))
    fig.update_layout(template="plotly_white", height=340, xaxis_title="call",
                      yaxis_title="cache address - first address (KiB)",
                      title="Where the K|V cache lives after each call")
    return fig


def audit_figure(records: dict[str, pd.DataFrame], exact: pd.DataFrame | None = None,
                 tolerance: float = 1e-5) -> go.Figure:
    """Per call: did each audit agree (1) or flag a divergence (0). With ``exact`` (a
    ``teaching.bit_exact`` frame) a second panel shows the output's max |diff| against the stock
    stream (log) and the ``tolerance`` a value check would use."""
    from plotly.subplots import make_subplots

    rows = 2 if exact is not None else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=["audit verdict per retention"] + (["output max |diff| vs stock"] if rows == 2 else []))
    for name, r in records.items():
        require_columns(r, ["call", "agreed"], "audit_figure")
        fig.add_trace(go.Scatter(x=r["call"], y=r["agreed"].astype(int), mode="lines+markers", name=name,
                                 line_shape="hv"), row=1, col=1)
    fig.update_yaxes(title_text="agrees (1)", range=[-0.15, 1.15], tickvals=[0, 1], row=1, col=1)
    if exact is not None:
        require_columns(exact, ["call", "max_abs_diff"], "audit_figure exact")
        d = exact["max_abs_diff"].clip(lower=1e-12)
        fig.add_trace(go.Bar(x=exact["call"], y=d, name="max |diff|", marker_color="#7f7f7f"), row=2, col=1)
        fig.add_hline(y=tolerance, line_dash="dash", line_color="black", row=2, col=1,
                      annotation_text=f"tolerance {tolerance:g}", annotation_position="top left")
        fig.update_yaxes(type="log", title_text="max |diff|", row=2, col=1)
    fig.update_xaxes(title_text="call", dtick=1, row=rows, col=1)
    fig.update_layout(template="plotly_white", height=260 + 180 * rows, title="Shadow audit per retention")
    return fig


def misses_figure(counters: pd.DataFrame) -> go.Figure:
    """Calls per class label: replayed vs eager by miss reason (stacked)."""
    require_columns(counters, ["label", "replays", "miss_reasons"], "misses_figure")
    reasons_ = counters["reason"] if "reason" in counters.columns else [""] * len(counters)
    labels = [str(l) if l is not None else f"(no class: {r or 'unkeyed'})" for l, r in zip(counters["label"], reasons_)]
    fig = go.Figure([go.Bar(x=labels, y=counters["replays"], name="replayed")])
    reasons = sorted({r for m in counters["miss_reasons"] for r in (m or {})})
    for r in reasons:
        fig.add_trace(go.Bar(x=labels, y=[(m or {}).get(r, 0) for m in counters["miss_reasons"]], name=f"eager: {r}"))
    fig.update_layout(barmode="stack", template="plotly_white", height=360, xaxis_title="class (cached extent, f)",
                      yaxis_title="calls", title="Admission per class: replays and misses by reason")
    return fig
