"""The course's interactive panels: clock sliders and the rules panel.

Every panel is a plain object: its widget tree is ``panel.widget`` (notebooks display the panel
itself), its callbacks are ordinary methods (``panel.update(...)``, ``panel.set(...)``) that tests call
without a browser, and each re-renders a plain ``go.Figure`` into an ``ipywidgets.Output``.

    clock_sliders   f_retained, f_chunk, n_steps -> extents, rho_r, K_r instantly
    rules_panel     state rule / replay / granularity / steps -> the arm on the Pareto
                    (recorded, or measured live on this GPU through :mod:`cadencelab.course.live`)
The kernel-timeline player is in :mod:`cadencelab.course.player`.
"""

from __future__ import annotations

import math
from typing import Callable

import pandas as pd
import plotly.graph_objects as go

from .. import viz
from ..contract import catalog, region_table, trajectory
from ..adapters.token2wav.clocks import T2W_CLOCKS
from ..profile.intervals import direction
from ..viz.options import require_columns
from .display import html_table, ipywidgets_module, render
from .frames import PANEL_ARMS, SLIDER_RANGES, arm_for, clock_params, derive_clock_table, rules_frame, token2wav_at

__all__ = ["ClockSliders", "clock_sliders", "RulesPanel", "rules_panel"]


# ---------------------------------------------------------------------------------------
# native clocks and regions: the sliders
# ---------------------------------------------------------------------------------------


class ClockSliders:
    """Sliders for f_retained, f_chunk and n_steps; every move re-derives the Token2wav declaration.

    ``update(f_retained=..., f_chunk=..., n_steps=...)`` is the callback (tests call it); it sets
    ``table`` (per region A_r, shapes, rho_r, K_r), ``extents`` (the cached extents L of the
    estimator cache) and ``summary``, and re-renders the rho figure.
    """

    def __init__(self, f_retained: int | None = None, f_chunk: int | None = None, n_steps: int | None = None,
                 f_prompt: int | None = None, build: bool = True):
        self.f_prompt = T2W_CLOCKS.prompt_frames if f_prompt is None else f_prompt
        self.params = clock_params(f_retained, f_chunk, n_steps)
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
        self.decl = token2wav_at(p["f_retained"], p["f_chunk"], p["n_steps"], self.f_prompt)
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
        w = ipywidgets_module()
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
        self.tab.value = html_table(self.table[cols])
        render(self.out, self.figure())

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget if self.widget is not None else self.table)


def clock_sliders(f_retained: int | None = None, f_chunk: int | None = None, n_steps: int | None = None) -> ClockSliders:
    """Sliders for f_retained, f_chunk, n_steps that re-derive extents, rho_r and K_r instantly."""
    return ClockSliders(f_retained, f_chunk, n_steps)


# ---------------------------------------------------------------------------------------
# mutual enabling: the rules panel
# ---------------------------------------------------------------------------------------


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
        frame = data if data is not None else rules_frame(condition)
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
        decl = token2wav_at(n_steps=steps)
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
                   latency_delta_lo=r.get("latency_delta_lo"), latency_delta_hi=r.get("latency_delta_hi"),
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
        w = ipywidgets_module()
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
            lo, hi = p.get("latency_delta_lo"), p.get("latency_delta_hi")
            ci = (f" [{100 * lo:+.1f}, {100 * hi:+.1f}], {direction(lo, hi)}"
                  if p["arm"] != "B0" and lo is not None and hi is not None and lo == lo and hi == hi else "")
            delta = f"; vs B0: latency {100 * p['latency_delta']:+.1f}%{ci}, peak {100 * p['peak_delta']:+.1f}%"
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
        render(self.out, self.figure())

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget if self.widget is not None else self.table())


def rules_panel(data: pd.DataFrame | None = None, condition: str = "exact", live: bool = False,
                **live_kw) -> RulesPanel:
    """The rules panel over the recorded factorial of ``condition`` (a key of ``data.CONDITIONS``;
    ``live=True``: measured on this GPU instead, under the same device condition)."""
    if live:
        from .live import live_factorial

        live_kw["condition"] = condition
        first = live_factorial(**live_kw)
        try:
            fallback = rules_frame(condition)
        except FileNotFoundError:
            fallback = None
        return RulesPanel(first, measure=lambda steps: live_factorial(n_steps=steps, **live_kw), fallback=fallback)
    return RulesPanel(data, condition)
