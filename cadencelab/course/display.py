"""What every panel shares: ipywidgets on demand, a figure rendered into an Output, a readout table."""

from __future__ import annotations

import pandas as pd

__all__ = ["ipywidgets_module", "render", "html_table", "show", "CAPTION_METADATA"]

#: the output metadata key that marks a caption :func:`show` displayed under its figure (the HTML report
#: prints captions from the figure itself and skips these, so a caption appears once)
CAPTION_METADATA = "cadencelab_caption"


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


def show(fig) -> None:
    """Display ``fig`` and, under it, its caption (``viz.caption``) as markdown, marked with
    :data:`CAPTION_METADATA`; a figure without a caption is displayed alone."""
    from IPython.display import Markdown, display

    from ..viz import caption

    display(fig)
    text = caption(fig)
    if text:
        display(Markdown(f"*Figure.* {text}"), metadata={CAPTION_METADATA: True})


def html_table(df: pd.DataFrame, floatfmt: str = "{:.2f}") -> str:
    """``df`` as a borderless HTML table (the panels' readouts)."""
    return df.to_html(index=False, float_format=lambda v: floatfmt.format(v), border=0, classes="cadencelab-table")
