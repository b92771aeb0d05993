"""What every panel shares: ipywidgets on demand, a figure rendered into an Output, a readout table; and how
a table fits the page.

    fit_table_html(table)   an HTML table whose long cells wrap in a readable width (words kept whole, a long
                            name broken after its underscores) and whose headers may break after an underscore
    frame_html(df)          a DataFrame as the notebook shows it, no cell cut ("..."), fitted as above; an
                            empty frame says so in a line instead of a headers-only table
    install_table_format()  make the running IPython kernel show every DataFrame through :func:`frame_html`
                            (importing :mod:`cadencelab.course` does it inside a kernel)
"""

from __future__ import annotations

import html as _html
import re
import sys

import pandas as pd

__all__ = ["ipywidgets_module", "render", "html_table", "show", "CAPTION_METADATA", "LONG_CELL_CHARS",
           "fit_table_html", "frame_html", "install_table_format"]

#: the output metadata key that marks a caption :func:`show` displayed under its figure (the HTML report
#: prints captions from the figure itself and skips these, so a caption appears once)
CAPTION_METADATA = "cadencelab_caption"
#: a table cell longer than this many characters is given a readable width and wraps inside it
LONG_CELL_CHARS = 32
#: a word of such a cell longer than this may break after its underscores (a kernel name); shorter ones stay whole
LONG_WORD_CHARS = 20
#: the style of such a cell: at least a short line wide, at most a readable one; a name longer than the
#: line breaks (after an underscore where it has one) rather than widening the table
LONG_CELL_STYLE = "min-width: 12em; max-width: 28em; overflow-wrap: anywhere; white-space: normal; text-align: left"

_TD = re.compile(r"<td>(.*?)</td>", re.S)
_TH = re.compile(r"(<th(?:\s[^>]*)?>)(.*?)(</th>)", re.S)
_TAG = re.compile(r"(<[^>]+>)")


def _soft_breaks(cell: str, longer_than: int = 0) -> str:
    """``cell`` (escaped HTML) with a break opportunity (``<wbr>``) after each underscore of each word of its
    text longer than ``longer_than`` characters (the ones it had are placed anew: fitting twice changes nothing)."""
    def words(text: str) -> str:
        return re.sub(r"\S+", lambda m: m.group(0).replace("_", "_<wbr>") if len(m.group(0)) > longer_than
                      else m.group(0), text)

    return "".join(p if p.startswith("<") else words(p) for p in _TAG.split(cell.replace("<wbr>", "")))


def _plain(cell: str) -> str:
    return _html.unescape(_TAG.sub("", cell))


def fit_table_html(table: str) -> str:
    """An HTML table (pandas' markup: ``<td>`` cells) fitted to a text column: a cell longer than
    :data:`LONG_CELL_CHARS` characters gets :data:`LONG_CELL_STYLE` (it wraps at word boundaries within a
    readable width; a name longer than :data:`LONG_WORD_CHARS` breaks after an underscore), a shorter phrase
    stays on one line, and header text may break after any underscore.
    Nothing is cut: every character of every cell stays."""
    def td(m: re.Match) -> str:
        cell = m.group(1)
        text = _plain(cell)
        if len(text) <= LONG_CELL_CHARS:  # a short phrase reads on one line: never squeezed into a column of words
            return f"<td style=\"white-space: nowrap\">{cell}</td>" if " " in text.strip() else m.group(0)
        return f"<td style=\"{LONG_CELL_STYLE}\">{_soft_breaks(cell, LONG_WORD_CHARS)}</td>"

    out = _TD.sub(td, table)
    return _TH.sub(lambda m: m.group(1) + _soft_breaks(m.group(2)) + m.group(3), out)


def frame_html(df: pd.DataFrame) -> str:
    """``df`` as the notebook shows it (pandas' HTML, its row and column limits kept) with no cell cut to
    ``display.max_colwidth``, fitted by :func:`fit_table_html`. A frame with no rows is one line saying so and
    naming its columns (a headers-only table reads as a rendering fault)."""
    if len(df) == 0:
        cols = ", ".join(str(c) for c in df.columns)
        return (f"<p class='cadencelab-empty'><i>(no rows)</i> an empty {_html.escape(type(df).__name__)}"
                + (f" with columns {_html.escape(cols)}" if cols else "") + "</p>")
    with pd.option_context("display.max_colwidth", None):
        table = df.to_html(notebook=True, max_rows=pd.get_option("display.max_rows"),
                           max_cols=pd.get_option("display.max_columns"),
                           show_dimensions=pd.get_option("display.show_dimensions"))
    return fit_table_html(table) if table else _html.escape(repr(df))


def _series_text(s: pd.Series, p, cycle: bool) -> None:
    with pd.option_context("display.max_colwidth", None):
        p.text(repr(s))


def install_table_format(shell=None) -> bool:
    """Have ``shell`` (default: the running IPython, if any) show DataFrames through :func:`frame_html` and
    Series uncut; True when installed. Outside IPython nothing changes (the CLI's printed tables are kept)."""
    if shell is None:  # a kernel has IPython imported already: never import it here (the CLI stays light)
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "display_formatter"):
        return False
    formatters = shell.display_formatter.formatters
    formatters["text/html"].for_type(pd.DataFrame, frame_html)
    formatters["text/plain"].for_type(pd.Series, _series_text)
    return True


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
    """``df`` as a borderless HTML table (the panels' readouts), every cell whole and fitted
    (:func:`fit_table_html`)."""
    return fit_table_html(df.to_html(index=False, float_format=lambda v: floatfmt.format(v), border=0,
                                     classes="cadencelab-table"))
