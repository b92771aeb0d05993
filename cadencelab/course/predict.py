"""Predict, then measure: a prediction asked before a reveal, and the reveal beside the measurement.

A :class:`Prediction` holds a question, its unit and the student's answer. In JupyterLab (a kernel
and ipywidgets present) it shows one input per key (a number box, or a dropdown for a choice). A
notebook takes the value from its ``parameters`` cell, which is blank (None) in the lab: the boxes
start empty, and :func:`reveal` refuses (it shows no measurement, only "predict first") until every
box holds an answer. The headless tour injects its predictions (:data:`TOUR_PREDICTIONS`) into the
parameters, so it runs with those and nothing waits for a click.

    >>> p = Prediction("Kernel launches per steady chunk, stock runtime?", unit="launches", value=1000, build=False)
    >>> reveal(p, 11506).iloc[0]["verdict"]
    'under'

:func:`reveal` returns a DataFrame (prediction, measurement, error, verdict within a tolerance);
:func:`reveal_figure` draws it. :func:`interval_verdict` and :func:`pareto_quadrants` turn the
recorded factorial's paired intervals into the categories a Pareto prediction is made in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go

from .gradebook import note_reveal
from .switches import TOUR_PREDICTIONS
from ..viz.options import FigureOptions, integer_axis, require_columns

__all__ = ["Prediction", "kernel_present", "reveal", "reveal_figure", "REVEAL_COLUMNS", "interval_verdict",
           "pareto_quadrants", "NO_CLEAR_DIFFERENCE", "REL_TOL", "NOT_PREDICTED", "TOUR_PREDICTIONS", "is_refused"]

#: default relative tolerance of a numeric reveal: within it the prediction is "close"
REL_TOL = 0.1
#: what a paired interval that includes zero says
NO_CLEAR_DIFFERENCE = "no clear difference"
REVEAL_COLUMNS = ["question", "key", "unit", "predicted", "measured", "error", "rel_error", "verdict"]
_SINGLE = "value"  # the key of a prediction with one answer
#: a reveal whose values span this ratio or more is drawn on a log axis
LOG_SPAN = 100
#: the verdict of a reveal asked before every part of its prediction was given: the measurement stays hidden
NOT_PREDICTED = "predict first"


def _blank(v) -> bool:
    return v is None or v is Ellipsis or (isinstance(v, str) and not v.strip())


def kernel_present() -> bool:
    """True inside a running Jupyter kernel (where widgets can render)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass
class Prediction:
    """A question asked before a reveal.

    question: what to predict, in words.
    unit:     the answer's unit ("launches", "ms", "classes"; "" for a choice).
    value:    the answer used headless, and the widget's starting value: a number or a choice, or a
              mapping key -> answer for a question about several things (one input per key); None
              (or None per key) while not predicted yet: the boxes start empty.
    choices:  the allowed answers of a categorical question (None: numeric).
    parts:    the keys of a question about several things, for a blank ``value`` (None).
    build:    build the widget (None: when a kernel and ipywidgets are present).
    """

    question: str
    unit: str = ""
    value: Any = None
    choices: Sequence[str] | None = None
    build: bool | None = None
    parts: Sequence[str] | None = None
    widget: Any = field(default=None, repr=False)
    inputs: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError(f"Prediction: question must be a non-empty string, got {self.question!r}")
        if self.choices is not None:
            self.choices = tuple(self.choices)
            if not self.choices or not all(isinstance(c, str) for c in self.choices):
                raise ValueError(f"Prediction: choices must be a non-empty list of strings, got {self.choices!r}")
        if self.parts is not None:
            self.parts = tuple(str(k) for k in self.parts)
            if not self.parts:
                raise ValueError("Prediction: parts is empty; give one key per thing predicted")
        values = self._as_map(self.value)
        for k, v in values.items():
            self._validate(k, v)
        build = self.build if self.build is not None else kernel_present()
        if build:
            self._build(values)

    # -- answers ---------------------------------------------------------------------------
    def _as_map(self, value) -> dict:
        if isinstance(value, Mapping):
            if not value:
                raise ValueError("Prediction: value is an empty mapping; give one answer per key")
            got = {str(k): v for k, v in value.items()}
            if self.parts is not None and set(got) != set(self.parts):
                raise ValueError(f"Prediction: value has keys {sorted(got)}, the question asks for {list(self.parts)}")
            return got
        if _blank(value) and self.parts is not None:
            return dict.fromkeys(self.parts)
        return {_SINGLE: value}

    def _validate(self, key: str, v) -> None:
        if _blank(v):
            return  # not predicted yet
        where = "value" if key == _SINGLE else f"value[{key!r}]"
        if self.choices is not None:
            if v not in self.choices:
                raise ValueError(f"Prediction: {where} = {v!r} is not one of the choices {list(self.choices)}")
        elif not _is_number(v):
            raise ValueError(f"Prediction: {where} = {v!r} is not a finite number")

    @property
    def keys(self) -> list[str]:
        return list(self._as_map(self.value))

    def answers(self) -> dict:
        """key -> the current answer (the widget's value when a widget was built; None where still blank)."""
        out = self._as_map(self.value)
        for k, w in self.inputs.items():
            out[k] = _read_box(w.value, self.choices is None, k)
        for k, v in out.items():
            self._validate(k, v)
        return {k: None if _blank(v) else v for k, v in out.items()}

    @property
    def given(self) -> bool:
        """True when every key holds an answer."""
        return all(v is not None for v in self.answers().values())

    @property
    def answer(self):
        """The answer of a single-answer prediction (a mapping for a keyed one)."""
        a = self.answers()
        return a[_SINGLE] if list(a) == [_SINGLE] else a

    # -- widget ----------------------------------------------------------------------------
    def _build(self, values: dict) -> None:
        import ipywidgets as w

        for k, v in values.items():
            label = self.unit if k == _SINGLE else k
            style = {"description_width": "initial"}
            if self.choices is not None:
                self.inputs[k] = w.Dropdown(options=list(self.choices), value=None if _blank(v) else v,
                                            description=label, style=style)
            else:
                self.inputs[k] = w.Text(value="" if _blank(v) else f"{v:g}", placeholder="your number",
                                        description=label, style=style)
        self.widget = w.VBox([w.HTML(f"<b>Predict:</b> {self.question}"), *self.inputs.values()])

    def _ipython_display_(self):
        from IPython.display import display

        if self.widget is not None:
            display(self.widget)
        elif not self.given:
            print(f"Predict: {self.question}\n  not predicted yet: set the PREDICT_ value in the parameters cell")
        else:
            print(f"Predict: {self.question}\n  your answer: {self.answer} {self.unit}".rstrip())


def _read_box(v, numeric: bool, key: str):
    """A widget's value: a typed number box parsed (blank stays None), a dropdown as it is."""
    if not numeric or not isinstance(v, str):
        return v
    if not v.strip():
        return None
    try:
        return float(v.replace(",", "").replace("_", ""))
    except ValueError:
        raise ValueError(f"Prediction: the box {key!r} holds {v!r}, not a number") from None


def _measured_map(prediction: Prediction, measured) -> dict:
    keys = prediction.keys
    if isinstance(measured, Mapping):
        got = {str(k): v for k, v in measured.items()}
        missing = [k for k in keys if k not in got]
        if missing:
            raise ValueError(f"reveal: no measurement for {missing}; measured has keys {sorted(got)}")
        return {k: got[k] for k in keys}
    if keys != [_SINGLE]:
        raise ValueError(f"reveal: the prediction has keys {keys}; pass the measurement as a mapping of them")
    return {_SINGLE: measured}


def reveal(prediction: Prediction, measured, rel_tol: float = REL_TOL, abs_tol: float = 0.0) -> pd.DataFrame:
    """The prediction beside the measurement, one row per key.

    Columns: question, key, unit, predicted, measured, error (predicted - measured), rel_error
    (error / |measured|), verdict. Numeric: "close" when |error| <= max(abs_tol, rel_tol x |measured|),
    else "over" or "under"; a choice: "right" or "wrong" (error NaN). Refuses while any part is not
    predicted: every verdict is :data:`NOT_PREDICTED` and the measurement is withheld (NaN).
    """
    if not isinstance(prediction, Prediction):
        raise TypeError(f"reveal: expected a Prediction, got {type(prediction).__name__}")
    if not (_is_number(rel_tol) and rel_tol >= 0 and _is_number(abs_tol) and abs_tol >= 0):
        raise ValueError(f"reveal: tolerances must be non-negative numbers, got rel_tol={rel_tol!r}, abs_tol={abs_tol!r}")
    got = _measured_map(prediction, measured)
    if not prediction.given:  # refuse: the measurement stays hidden until every part is predicted
        df = pd.DataFrame(dict(question=prediction.question, key=list(got), unit=prediction.unit,
                               predicted=[prediction.answers()[k] for k in got], measured=math.nan,
                               error=math.nan, rel_error=math.nan, verdict=NOT_PREDICTED))
        df.attrs["refused"] = True
        note_reveal(df)  # the gradebook keeps it as not predicted
        return df[REVEAL_COLUMNS]
    rows = []
    for k, p in prediction.answers().items():
        m = got[k]
        if prediction.choices is not None:
            rows.append(dict(predicted=p, measured=m, error=math.nan, rel_error=math.nan,
                             verdict="right" if p == m else "wrong"))
            continue
        if not _is_number(m):
            raise ValueError(f"reveal: measurement for {k!r} is {m!r}, not a finite number")
        err = float(p) - float(m)
        close = abs(err) <= max(abs_tol, rel_tol * abs(m))
        rows.append(dict(predicted=float(p), measured=float(m), error=err,
                         rel_error=err / abs(m) if m else (0.0 if err == 0 else math.inf),
                         verdict="close" if close else ("over" if err > 0 else "under")))
    df = pd.DataFrame(rows)
    df.insert(0, "unit", prediction.unit)
    df.insert(0, "key", list(got))
    df.insert(0, "question", prediction.question)
    note_reveal(df)  # scored for the gradebook: the prediction was made before this reveal ran
    return df[REVEAL_COLUMNS]


_VERDICT_COLORS = {"close": "#2ca02c", "right": "#2ca02c", "over": "#d62728", "under": "#1f77b4", "wrong": "#d62728"}


def reveal_figure(df: pd.DataFrame, options: FigureOptions | None = None) -> go.Figure:
    """A reveal frame drawn: numeric answers as predicted vs measured markers per key, choices as a table."""
    require_columns(df, REVEAL_COLUMNS, "reveal_figure")
    opts = options or FigureOptions()
    title = df["question"].iloc[0] if len(df) else "prediction"
    if is_refused(df):
        fig = go.Figure()
        fig.add_annotation(text="Predict first: give every part of the prediction above, then run this cell again.",
                           showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        return opts.apply(fig, title)
    numeric = pd.to_numeric(df["measured"], errors="coerce").notna().all() and df["error"].notna().all()
    if not numeric:
        fig = go.Figure(go.Table(
            header=dict(values=["", "predicted", "measured", "verdict"]),
            cells=dict(values=[df["key"], df["predicted"], df["measured"], df["verdict"]],
                       fill_color=[["white"] * len(df), ["white"] * len(df), ["white"] * len(df),
                                   [_VERDICT_COLORS.get(v, "white") for v in df["verdict"]]])))
        return opts.apply(fig, title)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=df["key"], y=df["measured"], mode="markers", name="measured",
                             marker=dict(symbol="diamond", size=14, color="black")))
    fig.add_trace(go.Scatter(x=df["key"], y=df["predicted"], mode="markers", name="your prediction",
                             marker=dict(size=12, color=[_VERDICT_COLORS.get(v, "gray") for v in df["verdict"]]),
                             text=df["verdict"], hovertemplate="%{x}: %{y} (%{text})<extra></extra>"))
    unit = df["unit"].iloc[0]
    fig.update_layout(yaxis_title=unit or None, xaxis_title=None)
    values = pd.concat([df["measured"], pd.to_numeric(df["predicted"], errors="coerce")]).astype(float).dropna()
    if len(values) and (values > 0).all() and values.max() / values.min() >= LOG_SPAN:  # 8 beside 11,510: both visible
        fig.update_yaxes(type="log", title=f"{unit} (log scale)" if unit else "log scale")
    else:
        integer_axis(fig, [*df["measured"], *pd.to_numeric(df["predicted"], errors="coerce")])  # a count: whole ticks
    return opts.apply(fig, title)


def is_refused(df: pd.DataFrame) -> bool:
    """True for a reveal made before the prediction was given (its measurement withheld)."""
    return bool(len(df)) and (df["verdict"] == NOT_PREDICTED).any()


# ---------------------------------------------------------------------------------------
# categories from paired intervals
# ---------------------------------------------------------------------------------------


def interval_verdict(lo: float, hi: float, below: str = "lower", above: str = "higher") -> str:
    """What a paired interval of a difference says: ``below`` when it lies under 0, ``above`` over it,
    :data:`NO_CLEAR_DIFFERENCE` when it includes 0."""
    if not (_is_number(lo) and _is_number(hi)) or lo > hi:
        raise ValueError(f"interval_verdict: need finite lo <= hi, got lo={lo!r}, hi={hi!r}")
    if hi < 0:
        return below
    if lo > 0:
        return above
    return NO_CLEAR_DIFFERENCE


#: the categories of a Pareto-plane prediction (latency, memory), each against the reference arm
LATENCY_CHOICES = ("faster", "slower", NO_CLEAR_DIFFERENCE)
MEMORY_CHOICES = ("less memory", "more memory", NO_CLEAR_DIFFERENCE)


def pareto_quadrants(factorial: pd.DataFrame, arms: Sequence[str] | None = None) -> pd.DataFrame:
    """Where each arm lands against the reference on the latency / peak-memory plane, from the paired
    intervals of a factorial frame (``data.factorial``). Columns arm, latency, memory, place
    ("<latency>, <memory>")."""
    cols = ["arm", "latency_delta_lo", "latency_delta_hi", "peak_delta_lo", "peak_delta_hi"]
    require_columns(factorial, cols, "pareto_quadrants")
    f = factorial.set_index("arm")
    names = list(arms) if arms is not None else list(f.index)
    unknown = [a for a in names if a not in f.index]
    if unknown:
        raise ValueError(f"pareto_quadrants: unknown arms {unknown}; the frame has {list(f.index)}")
    rows = []
    for a in names:
        r = f.loc[a]
        lat = interval_verdict(r["latency_delta_lo"], r["latency_delta_hi"], *LATENCY_CHOICES[:2])
        mem = interval_verdict(r["peak_delta_lo"], r["peak_delta_hi"], *MEMORY_CHOICES[:2])
        rows.append(dict(arm=a, latency=lat, memory=mem, place=f"{lat}, {mem}"))
    return pd.DataFrame(rows, columns=["arm", "latency", "memory", "place"])


#: every place on the Pareto plane (the choices of a Pareto prediction)
PLACES = tuple(f"{lat}, {mem}" for lat in LATENCY_CHOICES for mem in MEMORY_CHOICES)
__all__ += ["LATENCY_CHOICES", "MEMORY_CHOICES", "PLACES"]
