"""The tour's HTML report: each executed notebook as a lecturer reads it, prose and figures in order.

    render_report(runs, out_dir)   write out_dir/index.html and out_dir/summary.json
    cells_html(nb, prefix)         one notebook's markdown cells (as HTML) and outputs in cell order:
                                   each plotly figure with its caption (``viz.caption``) under it,
                                   printed text, and small tables
    glossary_section()             the course glossary (``course.glossary.to_html``) as the page's
                                   last section, which every notebook section links to

A run is any object with the fields of :class:`cadencelab.course.tour.NotebookRun` (path, title,
goals, seconds, error, check, figures, nb, ok). The page embeds plotly.js once, so it works offline.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
from pathlib import Path

from .display import CAPTION_METADATA

__all__ = ["render_report", "cells_html", "figure_caption", "glossary_section", "GLOSSARY_ID", "MAX_TABLE_CHARS"]

PLOTLY_MIME = "application/vnd.plotly.v1+json"
#: the glossary section's anchor
GLOSSARY_ID = "glossary"
#: an HTML table output longer than this is left out of the page (the executed notebook keeps it)
MAX_TABLE_CHARS = 20_000
#: code cells the section shows elsewhere or that are machinery: parameters (injected ones too) and the check
_QUIET_TAGS = {"parameters", "injected-parameters", "check"}

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { margin-bottom: 0.2em; } .meta { color: #666; }
table.runs { border-collapse: collapse; margin: 1em 0; } table.runs td, table.runs th { padding: 4px 10px;
  border-bottom: 1px solid #ddd; text-align: left; }
.ok { color: #18794e; font-weight: bold; } .fail { color: #c62828; font-weight: bold; }
section { border-top: 2px solid #eee; margin-top: 2em; padding-top: 1em; }
pre { background: #f6f8fa; padding: 0.8em; overflow-x: auto; white-space: pre-wrap; }
.figure { margin: 1em 0; } .caption { color: #444; font-size: 0.92em; margin: 0.2em 0 1.2em; }
.output table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
.output td, .output th { padding: 2px 8px; border-bottom: 1px solid #eee; }
dl.cadencelab-glossary dt { margin-top: 0.6em; }
"""


def _markdown(text: str) -> str:
    import mistune

    return mistune.html(text)


def figure_caption(fig: dict) -> str:
    """The caption a figure function stored in the figure's ``layout.meta`` (empty when none)."""
    meta = (fig.get("layout") or {}).get("meta")
    return str(meta.get("caption", "")) if isinstance(meta, dict) else ""


def _figure_html(fig: dict, div_id: str) -> str:
    import plotly.io as pio

    body = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})
    cap = figure_caption(fig)
    cap_html = f"<p class='caption'><b>Figure.</b> {html.escape(cap)}</p>" if cap else ""
    return f"<div class='figure'>{body}</div>{cap_html}"


def _output_html(o: dict, div_id: str) -> str:
    kind = o.get("output_type")
    if (o.get("metadata") or {}).get(CAPTION_METADATA):  # course.display.show's copy: _figure_html prints it
        return ""
    if kind == "stream":
        text = o.get("text", "")
        return f"<pre>{html.escape(text.rstrip())}</pre>" if text.strip() else ""
    if kind == "error":
        return f"<pre class='fail'>{html.escape(o.get('ename', ''))}: {html.escape(o.get('evalue', ''))}</pre>"
    data = o.get("data", {})
    if PLOTLY_MIME in data:
        return _figure_html(data[PLOTLY_MIME], div_id)
    if "application/vnd.jupyter.widget-view+json" in data:  # widgets need a kernel: the page shows the figures
        return ""
    if "text/markdown" in data and "text/html" not in data:
        md = data["text/markdown"]
        return f"<div class='output'>{_markdown(''.join(md) if isinstance(md, list) else md)}</div>"
    table = data.get("text/html")
    if isinstance(table, list):
        table = "".join(table)
    if table and len(table) <= MAX_TABLE_CHARS and "<script" not in table:
        return f"<div class='output'>{table}</div>"
    text = data.get("text/plain", "")
    return f"<pre>{html.escape(text)}</pre>" if text and not table else ""


def cells_html(nb, prefix: str) -> tuple[str, int]:
    """(HTML, figure count) of one executed notebook: markdown cells rendered, code outputs in order.

    The first markdown cell (title and learning goals) is left out: the section header shows it."""
    parts, n_fig, first = [], 0, True
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            if first:
                first = False
                continue
            parts.append(_markdown(cell.source))
            continue
        if cell.cell_type != "code" or _QUIET_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        for o in cell.get("outputs", []):
            piece = _output_html(o, f"{prefix}-fig{n_fig}")
            if PLOTLY_MIME in o.get("data", {}):
                n_fig += 1
            parts.append(piece)
    return "".join(p for p in parts if p), n_fig


def glossary_section() -> str:
    """The course glossary as the page's last section (anchor :data:`GLOSSARY_ID`)."""
    from .glossary import to_html

    return f"<section id='{GLOSSARY_ID}'>{to_html()}</section>"


def render_report(runs: list, out_dir: Path, check_marker: str = "CHECK OK") -> Path:
    """Write ``out_dir/index.html`` for ``runs`` (plotly.js embedded once: the page works offline) and
    ``out_dir/summary.json``; returns the page's path."""
    from plotly.offline import get_plotlyjs

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    total = sum(r.seconds for r in runs)
    try:
        import torch

        device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (recorded H200 data)"
    except Exception:  # torch missing or broken: the report still says something
        device = "unknown"
    rows, sections = [], []
    for i, r in enumerate(runs):
        status = "<span class='ok'>OK</span>" if r.ok else "<span class='fail'>FAILED</span>"
        check_line = next((ln for ln in r.check.splitlines() if check_marker in ln), "")
        rows.append(f"<tr><td><a href='#nb{i}'>{html.escape(r.title)}</a></td><td>{r.seconds:.1f} s</td>"
                    f"<td>{len(r.figures)}</td><td>{status}</td><td>{html.escape(check_line)}</td></tr>")
        goals = "".join(f"<li>{html.escape(g)}</li>" for g in r.goals)
        body, _ = cells_html(r.nb, f"nb{i}") if r.nb is not None else ("", 0)
        err = f"<h3>Error</h3><pre>{html.escape(r.error)}</pre>" if r.error else ""
        sections.append(
            f"<section id='nb{i}'><h2>{html.escape(r.title)}</h2>"
            f"<p class='meta'>{html.escape(r.path.name)} · {r.seconds:.1f} s · {status} · "
            f"<a href='notebooks/{r.path.stem}.ipynb'>executed notebook</a> · "
            f"<a href='#{GLOSSARY_ID}'>glossary</a></p>"
            f"<h3>You will learn</h3><ul>{goals}</ul>{body}"
            f"<h3>Check cell</h3><pre>{html.escape(r.check.strip() or '(no output)')}</pre>{err}</section>")
    when = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    ok = sum(r.ok for r in runs)
    page = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>cadencelab course tour</title>"
        f"<style>{_CSS}</style><script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
        f"<h1>cadencelab: the course, executed</h1><p class='meta'>{when} · {html.escape(device)} · "
        f"{ok}/{len(runs)} notebooks passed their checks · {total:.0f} s of execution · "
        f"<a href='#{GLOSSARY_ID}'>glossary</a></p>"
        "<table class='runs'><tr><th>notebook</th><th>time</th><th>figures</th><th>status</th><th>check</th></tr>"
        + "".join(rows) + "</table>" + "".join(sections) + glossary_section() + "</body></html>"
    )
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    summary = [dict(notebook=r.path.name, title=r.title, seconds=round(r.seconds, 2), ok=r.ok, error=r.error,
                    figures=len(r.figures), check=r.check.strip()) for r in runs]
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return path
