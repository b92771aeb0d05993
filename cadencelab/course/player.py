"""The kernel-timeline player: walk one chunk kernel by kernel, eager beside replay, idle accumulating.

    timeline_player(eager, replay)   a play/step player over two kernel frames of one chunk
                                     (frames from :func:`cadencelab.course.live.chunk_timelines`)
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .. import viz
from ..profile import gaps
from ..profile.events import accumulate_idle, short_kernel_name
from ..viz.options import TimelineOptions, require_columns
from .display import html_table, ipywidgets_module, render

__all__ = ["TimelinePlayer", "timeline_player"]


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
        self.acc = {k: accumulate_idle(v) for k, v in self.events.items()}
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
        ks, gs, cursors = [], [], {}
        for name, ev in self.events.items():
            i = self._index(name, k)
            lo = max(0, i - self.window + 1)
            t0 = int(ev["start_ns"].iloc[0])
            w = ev.iloc[lo: i + 1].copy()
            g = gaps(ev.iloc[lo: i + 1])
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

    def progress_frame(self, points: int = 600) -> pd.DataFrame:
        """Accumulated idle and busy ms per variant at up to ``points`` evenly spaced kernel indices."""
        rows = []
        for name, a in self.acc.items():
            n = len(a["elapsed_ns"])
            idx = np.unique(np.linspace(0, n - 1, min(n, points)).astype(int))
            rows.append(pd.DataFrame(dict(variant=name, kernel_index=idx, idle_ms=a["idle_ns"][idx] / 1e6,
                                          busy_ms=a["busy_ns"][idx] / 1e6)))
        return pd.concat(rows, ignore_index=True)

    def progress_figure(self, k: int | None = None, points: int = 600) -> go.Figure:
        """Accumulated idle (solid) and busy (dotted) time vs kernel index; the cursor at ``k``."""
        return viz.idle_progress(self.progress_frame(points), cursor=self.k if k is None else k)

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
        w = ipywidgets_module()
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
        self.readout.value = html_table(st[cols], "{:.1f}")
        render(self.out, self.figure())
        render(self.out_progress, self.progress_figure())

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget if self.widget is not None else self.state())


def timeline_player(kernels_df_eager: pd.DataFrame, kernels_df_replay: pd.DataFrame, window: int = 40) -> TimelinePlayer:
    """A play/step player over two kernel frames (eager, replay) of one chunk."""
    return TimelinePlayer(kernels_df_eager, kernels_df_replay, window)
