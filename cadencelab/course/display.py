"""What every panel shares: ipywidgets on demand, a figure rendered into an Output, a readout table."""

from __future__ import annotations

import pandas as pd

__all__ = ["ipywidgets_module", "render", "html_table"]


def ipywidgets_module():
    """ipywidgets, imported when a panel builds its widgets (the course runs headless without it)."""
    import ipywidgets

    return ipywidgets


def render(out, fig) -> None:
    """Replace what an Output widget shows with ``fig``."""
    from IPython.display import display

    out.clear_output(wait=True)
    with out:
        display(fig)


def html_table(df: pd.DataFrame, floatfmt: str = "{:.2f}") -> str:
    """``df`` as a borderless HTML table (the panels' readouts)."""
    return df.to_html(index=False, float_format=lambda v: floatfmt.format(v), border=0, classes="cadencelab-table")
