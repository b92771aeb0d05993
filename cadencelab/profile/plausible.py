"""Recorded data checked for plausibility where a sign is known: a duration, a time, a size or a count of bytes
is never negative.

The loaders check a recorded file's schema (its columns and types); a negative latency passed that check and
drew as a figure. :func:`nonnegative` names the fields that cannot be negative by their name (units in the
name, as the project writes them: ``latency_ms``, ``dur_us``, ``peak_bytes``, ``peak_MiB``, ``wall_s``); a
difference, change, offset or slack can be (``latency_delta``, ``vs_B0``, ``slack_ms``, ``start_ms``).
:func:`check_frame` and :func:`check_record` refuse a negative one with the file and the field.
"""

from __future__ import annotations

import math
import re

import pandas as pd

__all__ = ["check_frame", "check_record", "nonnegative"]

_UNITS = re.compile(r"(^|_)(ms|us|ns|s|seconds|bytes|MiB|GiB|KiB)(_|$)|^(latency|dur|duration|wall|busy|peak|elapsed)")
_SIGNED = ("delta", "diff", "change", "vs_", "slack", "offset", "start", "end", "skew", "drift", "gain", "saving",
           "error", "residual", "headroom", "margin", "ratio", "ci", "_lo", "_hi", "rel")


def nonnegative(name: str) -> bool:
    """Whether a field called ``name`` holds a quantity that cannot be negative (a duration, time or size)."""
    n = str(name)
    return bool(_UNITS.search(n)) and not any(s in n for s in _SIGNED)


def check_frame(df: pd.DataFrame, source) -> pd.DataFrame:
    """``df`` when no non-negative column holds a negative number; else a ValueError naming ``source``, the
    column, how many rows and the first (row, value)."""
    for col in df.columns:
        if not nonnegative(col) or not pd.api.types.is_numeric_dtype(df[col]) or pd.api.types.is_bool_dtype(df[col]):
            continue
        bad = df[col] < 0
        if bad.any():
            i = bad.idxmax()
            raise ValueError(f"{source}: column '{col}' holds {int(bad.sum())} negative value(s) (first at row {i}: "
                             f"{df[col][i]!r}); a duration, time or size is never negative: the file is not a "
                             f"plausible recording")
    return df


def check_record(obj, source) -> None:
    """A parsed JSON result: every number under a non-negative key (at any depth, lists of them included) is
    >= 0; else a ValueError naming ``source`` and the path of the field. Iterative: any depth JSON reads."""
    stack = [(obj, "")]
    while stack:
        node, where = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            path = f"{where}[{k}]" if isinstance(node, list) else f"{where}.{k}" if where else str(k)
            if isinstance(node, dict) and nonnegative(k) and _negative(v):
                raise ValueError(f"{source}: field '{path}' is negative ({v!r}); a duration, time or size is never "
                                 f"negative: the file is not a plausible recording")
            if isinstance(v, (dict, list)):
                stack.append((v, path))


def _negative(v) -> bool:
    """A negative number, or a flat list holding one."""
    vals = v if isinstance(v, list) else [v]
    return any(isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x) and x < 0 for x in vals)
