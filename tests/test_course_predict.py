"""Predictions and the glossary: headless values, reveal frames and figures, clear errors."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
import pytest

from cadencelab.course import glossary as gl
from cadencelab.course.predict import (NO_CLEAR_DIFFERENCE, PLACES, Prediction, interval_verdict, pareto_quadrants,
                                       reveal, reveal_figure)


def test_headless_prediction_takes_its_value_and_reveal_grades_it():
    p = Prediction("K at f_retained = 150?", unit="classes", value=4, build=False)
    assert p.widget is None and p.answer == 4
    df = reveal(p, 4)
    assert df["verdict"].tolist() == ["close"] and df["error"].tolist() == [0.0]
    df = reveal(Prediction("launches", value=1000, build=False), 11506)
    assert df["verdict"].iloc[0] == "under" and math.isclose(df["rel_error"].iloc[0], (1000 - 11506) / 11506)
    assert reveal(Prediction("x", value=110, build=False), 100)["verdict"].iloc[0] == "close"  # within 10%
    assert reveal(Prediction("x", value=120, build=False), 100)["verdict"].iloc[0] == "over"
    assert isinstance(reveal_figure(df), go.Figure)


def test_widget_starts_from_the_value_and_is_read_back():
    pytest.importorskip("ipywidgets")
    p = Prediction("busy ms", unit="ms", value={"eager": 50.0, "replay": 50.0}, build=True)
    assert p.widget is not None and p.answers() == {"eager": 50.0, "replay": 50.0}
    p.inputs["replay"].value = "57"
    df = reveal(p, {"eager": 57.2, "replay": 57.8})
    assert df.set_index("key")["predicted"].to_dict() == {"eager": 50.0, "replay": 57.0}
    assert df.set_index("key")["verdict"].to_dict() == {"eager": "under", "replay": "close"}


def test_choice_predictions_on_the_recorded_pareto_plane():
    from cadencelab.course import data

    q = pareto_quadrants(data.factorial(), ["S", "Rc", "SRc"]).set_index("arm")
    assert q.loc["S", "place"] == f"{NO_CLEAR_DIFFERENCE}, less memory"
    assert q.loc["Rc", "place"] == "faster, more memory" and q.loc["SRc", "place"] == "faster, less memory"
    p = Prediction("Where do S, Rc land against B0?", value={"S": "faster, less memory", "Rc": "faster, more memory"},
                   choices=PLACES, build=False)
    df = reveal(p, q["place"].to_dict())
    assert df.set_index("key")["verdict"].to_dict() == {"S": "wrong", "Rc": "right"}
    assert isinstance(reveal_figure(df).data[0], go.Table)


def test_bad_predictions_are_named():
    with pytest.raises(ValueError, match="'fast' is not one of"):
        Prediction("where", value="fast", choices=("faster", "slower"), build=False)
    with pytest.raises(ValueError, match="'ten' is not a finite number"):
        Prediction("K", value="ten", build=False)
    p = Prediction("busy", value={"eager": 1.0}, build=False)
    with pytest.raises(ValueError, match=r"no measurement for \['eager'\]"):
        reveal(p, {"replay": 1.0})
    with pytest.raises(ValueError, match="missing columns"):
        reveal_figure(pd.DataFrame({"key": [1]}))
    with pytest.raises(ValueError, match="unknown arms"):
        pareto_quadrants(pd.DataFrame(columns=["arm", "latency_delta_lo", "latency_delta_hi", "peak_delta_lo",
                                               "peak_delta_hi"]), ["S"])
    assert interval_verdict(-0.2, -0.1) == "lower" and interval_verdict(-0.1, 0.2) == NO_CLEAR_DIFFERENCE


def test_glossary_covers_the_course_terms_from_the_code():
    g = gl.glossary()
    want = {"B0", "S", "R", "Rc", "SR", "SRc", "SRb", "SRl", "B0_repeat", "vendor_graph", "vendor_graph_50", "probe",
            "priming", "f_chunk vs f_call", "envelope", "retention bound", "K vs catalog size", "rho_r", "slack",
            "carry", "exact condition"}
    assert want <= set(g["term"]) and g["definition"].str.len().gt(0).all()
    from cadencelab.adapters.token2wav.runtime import ARMS

    assert gl.term("rc") == ARMS["Rc"].description  # read from the code, not retyped
    assert set(range(1, 8)) <= set(n for ns in g["notebooks"] for n in ns)
    md, html = gl.to_markdown(notebook=4), gl.to_html()
    assert "**probe**" in md and "**SRl**" not in md and "<dt id='glossary-SRl'>" in html
    with pytest.raises(KeyError, match="no glossary term 'B9'"):
        gl.term("B9")


def test_a_blank_prediction_starts_empty_and_the_reveal_refuses():
    from cadencelab.course.predict import NOT_PREDICTED, is_refused

    p = Prediction("launches", unit="launches", value=None, parts=["B0", "SRc"], build=False)
    assert p.answers() == {"B0": None, "SRc": None} and not p.given
    df = reveal(p, {"B0": 11510, "SRc": 8})
    assert is_refused(df) and set(df["verdict"]) == {NOT_PREDICTED} and df["measured"].isna().all()  # withheld
    fig = reveal_figure(df)
    assert "Predict first" in fig.layout.annotations[0].text and not fig.data
    with pytest.raises(ValueError, match="the question asks for"):
        Prediction("launches", value={"B0": 1}, parts=["B0", "SRc"], build=False)


def test_blank_boxes_in_the_lab_then_typed_answers():
    pytest.importorskip("ipywidgets")
    p = Prediction("launches", unit="launches", value=None, parts=["B0", "SRc"], build=True)
    assert all(w.value == "" for w in p.inputs.values()) and not p.given
    p.inputs["B0"].value, p.inputs["SRc"].value = "1,000", "8"
    df = reveal(p, {"B0": 11510, "SRc": 8})
    assert df.set_index("key")["verdict"].to_dict() == {"B0": "under", "SRc": "close"}
    p.inputs["B0"].value = "lots"
    with pytest.raises(ValueError, match="'lots', not a number"):
        p.answers()
    c = Prediction("where", choices=("a", "b"), value=None, build=True)
    assert c.inputs["value"].value is None and not c.given


def test_a_reveal_spanning_orders_of_magnitude_is_drawn_on_a_log_axis():
    from cadencelab.course.predict import TOUR_PREDICTIONS

    p = Prediction("launches", unit="launches", value=TOUR_PREDICTIONS["PREDICT_LAUNCHES"], build=False)
    fig = reveal_figure(reveal(p, {"B0": 11510, "SRc": 8}))
    assert fig.layout.yaxis.type == "log"  # SRc's 8 visible beside B0's 11,510
    assert reveal_figure(reveal(Prediction("x", value=110, build=False), 100)).layout.yaxis.type != "log"
