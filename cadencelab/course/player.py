"""The kernel-timeline player: walk one chunk op by op along the alignment of eager and replay.

    timeline_player(eager, replay)   a play/step player over two kernel frames of one chunk
                                     (frames from :func:`cadencelab.course.live.chunk_timelines`)

The two streams are not the same list of ops (inside a graph a memcpy runs as a copy kernel, the
host-to-device copies of eager inputs vanish, the carry replaces a concatenation by copies), so
the n-th op of one is soon a different op of the other. The player therefore steps through
:func:`cadencelab.profile.compare.align_kernels`: one step is one aligned row, both cursors sit on
the same op, or one side shows "none" and says why.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .. import viz
from ..profile import gaps
from ..profile.compare import align_kernels, normalise_kernel_name, op_kind
from ..profile.events import accumulate_idle, short_kernel_name
from ..viz.options import CHAR_PX, TimelineOptions, plot_area_px, require_columns
from .display import html_table, ipywidgets_module, render

__all__ = ["TimelinePlayer", "timeline_player"]

#: what the cursor of the side without an op says, per alignment op ({this}: that side, {other}: the side with it)
_NONE_REASONS = {
    "delete": "none: only {other} runs this op here",
    "insert": "none: only {other} runs this op here",
    "replace": "none: {other} runs different ops than {this} in this stretch (replaced block {block})",
}


def _fit(text: str, chars: int) -> str:
    """``text`` cut to ``chars`` characters (at least 12) with an ellipsis when longer."""
    chars = max(12, chars)
    return text if len(text) <= chars else text[: chars - 1] + "…"


class TimelinePlayer:
    """Walk a chunk op by op, eager and replay side by side, accumulating idle time.

    The walk follows the sequence alignment of the two streams (:attr:`steps`, one row per aligned
    row): at every step both cursors show the same op (equal normalised names; a copy is shown as a
    copy, by its op kind), or one side shows "none" with the reason. ``show(k)`` (the slider's
    callback) moves both cursors to step ``k`` and re-renders the last ``window`` steps of each
    variant (each panel from its own window start, one shared ms axis; idle gaps coloured by
    category) and the accumulated-idle curves. ``state(k)`` is the readout as a frame (the op at
    each cursor, elapsed, busy, idle by category, slack so far).
    """

    def __init__(self, eager: pd.DataFrame, replay: pd.DataFrame, window: int = 40, labels=("eager", "replay"),
                 build: bool = True):
        for name, df in (("eager", eager), ("replay", replay)):
            require_columns(df, ["name", "start_ns", "end_ns"], f"timeline_player {name}")
            if len(df) == 0:
                raise ValueError(f"timeline_player: no {name} events")
        if int(window) < 1:
            raise ValueError(f"timeline_player: window must be >= 1 step, got {window!r}")
        self.labels = tuple(labels)
        self.events = {labels[0]: self._prep(eager), labels[1]: self._prep(replay)}
        self.acc = {k: accumulate_idle(v) for k, v in self.events.items()}
        self.steps = self._align()
        self.n = len(self.steps)
        self.window = int(window)
        self.k = 0
        self.widget = None
        if build:
            self._build()

    @staticmethod
    def _prep(df: pd.DataFrame) -> pd.DataFrame:
        d = df.sort_values(["start_ns", "end_ns"], kind="stable").reset_index(drop=True).copy()
        d["kernel"] = [short_kernel_name(n) for n in d["name"]]
        cats = d["cat"].astype(str).tolist() if "cat" in d.columns else ["kernel"] * len(d)
        d["norm"] = [normalise_kernel_name(n, c) for n, c in zip(d["name"].astype(str), cats)]
        d["op_kind"] = [op_kind(n, c) for n, c in zip(d["name"].astype(str), cats)]
        for c, default in (("launch_ns", pd.NA), ("graph", False), ("correlation", pd.NA)):
            if c not in d.columns:
                d[c] = default
        return d

    def _align(self) -> pd.DataFrame:
        """One row per step: the aligned row, and per side the op index, names, kind and the cursor text."""
        la, lb = self.labels
        strip = ["norm", "op_kind", "launch_via", "start_us", "dur_us"]  # align_kernels derives them itself
        al = align_kernels(*(self.events[x].drop(columns=strip, errors="ignore") for x in self.labels), (la, lb))
        out = pd.DataFrame({"step": np.arange(len(al), dtype=np.int64), "op": al["op"].to_numpy(object),
                            "block": al["block"].to_numpy(np.int64)})
        for x, other in ((la, lb), (lb, la)):
            ev = self.events[x]
            i = al[f"i_{x}"]
            have = i.notna().to_numpy(bool)
            idx = i.fillna(0).to_numpy(np.int64)
            if not (ev["kernel"].to_numpy(object)[idx][have] == al[f"kernel_{x}"].to_numpy(object)[have]).all():
                raise RuntimeError(f"timeline_player: the alignment's {x} ops are not the player's {x} ops "
                                   "(the two orderings differ)")
            out[f"i_{x}"] = i.to_numpy()
            out[f"upto_{x}"] = np.maximum.accumulate(np.where(have, idx, -1))  # last op of x at or before the step
            for col in ("kernel", "norm", "op_kind"):
                out[f"{col}_{x}"] = np.where(have, ev[col].to_numpy(object)[idx], None)
            reason = [f"{o}: same op on both sides" if o == "equal" else f"{o}: only {x} runs this op here" if h
                      else _NONE_REASONS[o].format(this=x, other=other, block=b)
                      for o, h, b in zip(out["op"], have, out["block"])]
            out[f"reason_{x}"] = reason
        out.attrs.update(labels=self.labels, counts=al.attrs["counts"])
        return out

    # -- the model behind the widgets ------------------------------------------------------
    def _step(self, k: int) -> int:
        return int(min(max(k, 0), self.n - 1))

    def _acc_at(self, name: str, i: int) -> dict:
        """Elapsed, busy, idle (total and per category) in ns after op ``i`` of ``name`` (all 0 before its first)."""
        a = self.acc[name]
        if i < 0:
            return dict(elapsed=0, busy=0, idle=0, cats={c: 0 for c in a["idle"]})
        return dict(elapsed=int(a["elapsed_ns"][i]), busy=int(a["busy_ns"][i]), idle=int(a["idle_ns"][i]),
                    cats={c: int(v[i]) for c, v in a["idle"].items()})

    def state(self, k: int | None = None) -> pd.DataFrame:
        """Per variant at step ``k``: the op at its cursor (kernel, op_kind, norm; "none" and the reason
        when only the other side runs an op there), ops so far, elapsed_us, busy_us, idle_us (+ per
        category) and slack_frac up to its last op at or before the step."""
        k = self._step(self.k if k is None else k)
        s = self.steps.iloc[k]
        rows = []
        for name in self.labels:
            i = s[f"i_{name}"]
            have = not pd.isna(i)
            upto = int(s[f"upto_{name}"])
            a = self._acc_at(name, upto)
            row = dict(variant=name, step=k, op=s["op"], kernel_index=pd.NA if not have else int(i),
                       kernels=len(self.events[name]), ops_so_far=upto + 1,
                       kernel=s[f"kernel_{name}"] if have else "none", op_kind=s[f"op_kind_{name}"] if have else "none",
                       norm=s[f"norm_{name}"] if have else None, reason=s[f"reason_{name}"],
                       elapsed_us=a["elapsed"] / 1e3, busy_us=a["busy"] / 1e3, idle_us=a["idle"] / 1e3)
            for c, v in a["cats"].items():
                row[f"{c}_us"] = v / 1e3
            row["slack_frac"] = a["idle"] / a["elapsed"] if a["elapsed"] else 0.0
            rows.append(row)
        out = pd.DataFrame(rows)
        out["kernel_index"] = out["kernel_index"].astype("Int64")
        return out

    def _window_ops(self, name: str, k: int) -> tuple[int, int]:
        """First and last op index of ``name`` the window of steps ending at ``k`` shows (at least one op)."""
        lo = max(0, k - self.window + 1)
        i = self.steps[f"i_{name}"].iloc[lo: k + 1].dropna()
        hi = int(self.steps[f"upto_{name}"].iloc[k])
        if hi < 0:  # nothing of this side yet: its first op, for context
            return 0, 0
        return (int(i.iloc[0]) if len(i) else hi), hi

    def figure(self, k: int | None = None) -> go.Figure:
        """The last ``window`` steps up to step ``k``: each variant's ops in them, each panel from its own
        window start on one shared ms axis; a solid cursor on the op at the step, a dashed one at the
        last op of a side that has none there."""
        k = self._step(self.k if k is None else k)
        s = self.steps.iloc[k]
        ks, gs, cursors, titles = [], [], {}, {}
        for name, ev in self.events.items():
            lo, hi = self._window_ops(name, k)
            w = ev.iloc[lo: hi + 1].copy()
            g = gaps(ev.iloc[lo: hi + 1])
            t0 = int(w["start_ns"].min())  # the window origin kernel_timeline uses for this panel
            w["variant"] = name
            g["variant"] = name
            ks.append(w[[c for c in ("kernel", "name", "cat", "op_kind", "start_ns", "end_ns", "variant")
                         if c in w.columns]])
            gs.append(g[["start_ns", "end_ns", "category", "variant"]])
            have = not pd.isna(s[f"i_{name}"])
            at = int(s[f"upto_{name}"])
            cursors[name] = ((int(ev["end_ns"].iloc[at]) - t0) / 1e6 if at >= 0 else 0.0, have)
            titles[name] = ((f"{name}: op {int(s[f'i_{name}'])}, ", str(s[f"kernel_{name}"]),
                             f" ({s[f'op_kind_{name}']}), {cursors[name][0]:.3f} ms into the window")
                            if have else (f"{name}: {s[f'reason_{name}']}", "", ""))
        fig = viz.kernel_timeline(pd.concat(ks, ignore_index=True), pd.concat(gs, ignore_index=True), label="kernel",
                                  options=TimelineOptions(height=620, time_unit="ms",
                                                          title=f"step {k} of {self.n} ({s['op']}): the last "
                                                                f"{self.window} aligned steps of each variant"))
        for row, name in enumerate(self.events, start=1):
            x, have = cursors[name]
            fig.add_vline(x=x, line_color="black" if have else "#7f7f7f", line_width=1,
                          line_dash="solid" if have else "dash", row=row, col=1)
        width = int(plot_area_px(fig)[0] // CHAR_PX)
        for a in fig.layout.annotations:  # panel titles: the op at each cursor, or why there is none
            if a.text in titles:  # on one line: a long kernel name is shortened, never run past the figure
                head, kernel, tail = titles[a.text]
                a.text = head + _fit(short_kernel_name(kernel), width - len(head) - len(tail)) + tail if kernel else head
        fig.update_xaxes(showticklabels=True)  # each variant from its own window start, on one shared time scale
        return fig

    def progress_frame(self, points: int = 600) -> pd.DataFrame:
        """Accumulated idle and busy ms per variant at up to ``points`` evenly spaced steps (each side's
        total after its last op at or before the step)."""
        idx = np.unique(np.linspace(0, self.n - 1, min(self.n, points)).astype(int))
        rows = []
        for name, a in self.acc.items():
            upto = self.steps[f"upto_{name}"].to_numpy(np.int64)[idx]
            safe = np.maximum(upto, 0)
            rows.append(pd.DataFrame(dict(variant=name, step=idx, kernel_index=upto,
                                          idle_ms=np.where(upto >= 0, a["idle_ns"][safe], 0) / 1e6,
                                          busy_ms=np.where(upto >= 0, a["busy_ns"][safe], 0) / 1e6)))
        return pd.concat(rows, ignore_index=True)

    def progress_figure(self, k: int | None = None, points: int = 600) -> go.Figure:
        """Accumulated idle (solid) and busy (dotted) time vs aligned step; the cursor at step ``k``."""
        return viz.idle_progress(self.progress_frame(points), cursor=self._step(self.k if k is None else k), x="step")

    def show(self, k: int) -> pd.DataFrame:
        """Move both cursors to aligned step ``k`` (the slider callback); returns ``state(k)``."""
        self.k = self._step(k)
        if self.widget is not None:
            self._refresh()
        return self.state()

    def step(self, delta: int = 1) -> pd.DataFrame:
        """Move ``delta`` aligned steps (negative: back); returns the new ``state()``."""
        return self.show(self.k + delta)

    # -- widgets ---------------------------------------------------------------------------
    def _build(self) -> None:
        w = ipywidgets_module()
        self.slider = w.IntSlider(value=0, min=0, max=self.n - 1, description="step", continuous_update=False,
                                  layout=w.Layout(width="70%"))
        self.play = w.Play(value=0, min=0, max=self.n - 1, step=max(1, self.n // 200), interval=400,
                           description="play")
        w.jslink((self.play, "value"), (self.slider, "value"))
        self.back = w.Button(description="◀ step", layout=w.Layout(width="90px"))
        self.fwd = w.Button(description="step ▶", layout=w.Layout(width="90px"))
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
        self.slider.value = self._step(k)

    def _refresh(self) -> None:
        if self.slider.value != self.k:
            self.slider.value = self.k
        st = self.state()
        cols = [c for c in st.columns
                if c.endswith("_us") or c in ("variant", "kernel_index", "kernel", "op_kind", "reason", "slack_frac")]
        self.readout.value = html_table(st[cols], "{:.1f}")
        render(self.out, self.figure())
        render(self.out_progress, self.progress_figure())

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget if self.widget is not None else self.state())


def timeline_player(kernels_df_eager: pd.DataFrame, kernels_df_replay: pd.DataFrame, window: int = 40) -> TimelinePlayer:
    """A play/step player over two kernel frames (eager, replay) of one chunk, stepping along their alignment."""
    return TimelinePlayer(kernels_df_eager, kernels_df_replay, window)
