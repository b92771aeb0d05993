"""The tour's HTML report: each executed notebook as a lecturer reads it, prose and figures in order.

    render_report(runs, out_dir)   write out_dir/index.html, out_dir/summary.json and every figure as a PNG in
                                   out_dir/figures/ (plotly's static export: kaleido driving the local Chromium)
    cells_html(nb, prefix)         one notebook's markdown cells (as HTML) and outputs in cell order:
                                   each plotly figure with its caption (``viz.caption``) under it,
                                   printed text, and small tables (fitted: ``course.display.fit_table_html``)
    notebook_figures(nb, prefix)   the (name, figure) pairs cells_html shows, in the same order and names
    write_pngs(figures, folder)    each figure as folder/<name>.png; returns why not, when it could not
    cell_seconds(nb)               the time a notebook's code cells ran, from the kernel's own timestamps
    glossary_section()             the course glossary (``course.glossary.to_html``) as the page's
                                   last section, which every notebook section links to

A run is any object with the fields of :class:`cadencelab.course.tour.NotebookRun` (path, title,
goals, seconds, error, check, figures, nb, ok); ``seconds`` is the notebook's measured wall time (kernel
start, every cell, shutdown). The page embeds plotly.js once, so it works offline.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import os
from pathlib import Path

from .display import CAPTION_METADATA, fit_table_html

__all__ = ["render_report", "cells_html", "notebook_figures", "write_pngs", "cell_seconds", "figure_caption",
           "glossary_section", "GLOSSARY_ID", "MAX_TABLE_CHARS", "FIGURES_DIR", "PNG_WIDTH"]

PLOTLY_MIME = "application/vnd.plotly.v1+json"
#: the glossary section's anchor
GLOSSARY_ID = "glossary"
#: an HTML table output longer than this is left out of the page (the executed notebook keeps it)
MAX_TABLE_CHARS = 20_000
#: code cells the section shows elsewhere or that are machinery: parameters (injected ones too) and the check
_QUIET_TAGS = {"parameters", "injected-parameters", "check"}
#: the folder beside index.html that holds each figure as a PNG
FIGURES_DIR = "figures"
#: a PNG's width when its figure sets none: the page's text column, which the figure fills there
PNG_WIDTH = 1100
#: the text column of the page (px); every table wider than it scrolls in its own block, never the page
_COLUMN_PX = PNG_WIDTH

_CSS = f"""
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: {_COLUMN_PX}px; color: #222; }}
h1 {{ margin-bottom: 0.2em; }} .meta {{ color: #666; }}
table.runs {{ border-collapse: collapse; margin: 1em 0; }} table.runs td, table.runs th {{ padding: 4px 10px;
  border-bottom: 1px solid #ddd; text-align: left; vertical-align: top; }}
table.runs td.num, table.runs td.name {{ white-space: nowrap; }} table.runs td.num {{ text-align: right; }}
.ok {{ color: #18794e; font-weight: bold; }} .fail {{ color: #c62828; font-weight: bold; }}
section {{ border-top: 2px solid #eee; margin-top: 2em; padding-top: 1em; }}
pre {{ background: #f6f8fa; padding: 0.8em; overflow-x: auto; white-space: pre-wrap; overflow-wrap: anywhere; }}
.figure {{ margin: 1em 0; }} .caption {{ color: #444; font-size: 0.92em; margin: 0.2em 0 1.2em; }}
.output {{ overflow-x: auto; max-width: 100%; }}
.output table {{ border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }}
.output td, .output th {{ padding: 2px 8px; border-bottom: 1px solid #eee; vertical-align: top; }}
dl.cadencelab-glossary dt {{ margin-top: 0.6em; }}
"""


def _markdown(text: str) -> str:
    import mistune

    return mistune.html(text)


def _inline_markdown(text: str) -> str:
    """One line of markdown (a learning goal: *emphasis*, `code`) as inline HTML, without a paragraph."""
    out = _markdown(text).strip()
    return out[3:-4] if out.startswith("<p>") and out.endswith("</p>") else out


def figure_caption(fig: dict) -> str:
    """The caption a figure function stored in the figure's ``layout.meta`` (empty when none)."""
    meta = (fig.get("layout") or {}).get("meta")
    return str(meta.get("caption", "")) if isinstance(meta, dict) else ""


def _figure_html(fig: dict, div_id: str, png: str | None) -> str:
    import plotly.io as pio

    body = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})
    cap = figure_caption(fig)
    link = f" <a href='{html.escape(png)}'>PNG</a>" if png else ""
    cap_html = (f"<p class='caption'><b>Figure.</b> {html.escape(cap)}{link}</p>" if cap
                else f"<p class='caption'>{link}</p>" if link else "")
    return f"<div class='figure'>{body}</div>{cap_html}"


def _output_html(o: dict, div_id: str, png: str | None = None) -> str:
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
        return _figure_html(data[PLOTLY_MIME], div_id, png)
    if "application/vnd.jupyter.widget-view+json" in data:  # widgets need a kernel: the page shows the figures
        return ""
    if "text/markdown" in data and "text/html" not in data:
        md = data["text/markdown"]
        return f"<div class='output'>{_markdown(''.join(md) if isinstance(md, list) else md)}</div>"
    table = data.get("text/html")
    if isinstance(table, list):
        table = "".join(table)
    if table and len(table) <= MAX_TABLE_CHARS and "<script" not in table:
        return f"<div class='output'>{fit_table_html(table)}</div>"
    text = data.get("text/plain", "")
    return f"<pre>{html.escape(text)}</pre>" if text and not table else ""


def _shown(nb):
    """What a section shows, in order: ("markdown", source) and ("output", output) pairs. The first markdown
    cell (title and learning goals: the section header shows them) and quiet cells are left out."""
    first = True
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            if not first:
                yield "markdown", cell.source
            first = False
            continue
        if cell.cell_type != "code" or _QUIET_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        for o in cell.get("outputs", []):
            yield "output", o


def _figure_name(prefix: str, k: int) -> str:
    return f"{prefix}-fig{k:02d}"


def notebook_figures(nb, prefix: str) -> list[tuple[str, dict]]:
    """(name, plotly figure dict) of every figure :func:`cells_html` shows for ``nb``, in page order; the
    name is the figure's element id on the page and its PNG's file name."""
    figs = [o["data"][PLOTLY_MIME] for kind, o in _shown(nb) if kind == "output" and PLOTLY_MIME in o.get("data", {})]
    return [(_figure_name(prefix, k), f) for k, f in enumerate(figs)]


def cells_html(nb, prefix: str, pngs: dict | None = None) -> tuple[str, int]:
    """(HTML, figure count) of one executed notebook: markdown cells rendered, code outputs in order.

    pngs: figure name -> the PNG's path relative to the page, linked under that figure's caption.
    The first markdown cell (title and learning goals) is left out: the section header shows it."""
    parts, n_fig = [], 0
    for kind, item in _shown(nb):
        if kind == "markdown":
            parts.append(_markdown(item))
            continue
        name = _figure_name(prefix, n_fig)
        parts.append(_output_html(item, name, (pngs or {}).get(name)))
        if PLOTLY_MIME in item.get("data", {}):
            n_fig += 1
    return "".join(p for p in parts if p), n_fig


class _ExportStopped(Exception):
    """The PNG export failed part-way (its one-line reason); the temporary files are gone."""


def write_pngs(figures: list[tuple[str, dict]], folder: Path) -> str:
    """Write each (name, figure) as ``folder/<name>.png`` (the figure's own size, else :data:`PNG_WIDTH` wide
    and plotly's default height) with plotly's static export, kaleido driving a local Chromium
    (``$CADENCELAB_CHROMIUM`` when set, else the one kaleido finds: ``chromium`` on PATH). Returns "" when
    every figure was written, else one line saying why not (the page then links no PNG it lacks)."""
    if not figures:
        return ""
    try:
        import kaleido  # noqa: F401  (plotly's static export needs it)
        import plotly.io as pio
    except ImportError:
        return "no PNGs: plotly's static export needs kaleido (pip install 'kaleido>=1', or the 'browser' extra)"
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):  # an earlier tour's figures: none may pass for this one's
        old.unlink()
    lays = [f.get("layout") or {} for _, f in figures]
    chromium = os.environ.get("CADENCELAB_CHROMIUM")
    before = os.environ.get("BROWSER_PATH")
    if chromium and not before:
        os.environ["BROWSER_PATH"] = chromium  # kaleido (choreographer) starts the browser it names
    from contextlib import ExitStack

    from ..profile.outputs import atomic_path

    try:  # every PNG under a temporary name, renamed into place once the whole export succeeded
        with ExitStack() as stack:
            tmps = [stack.enter_context(atomic_path(folder / f"{n}.png")) for n, _ in figures]
            try:
                pio.write_images([f for _, f in figures], tmps,
                                 width=[int(lay.get("width") or PNG_WIDTH) for lay in lays],
                                 height=[int(lay.get("height") or 450) for lay in lays])
            except Exception as e:  # no browser, a browser that would not start, a figure kaleido refused
                done = sum(t.is_file() and t.stat().st_size > 0 for t in tmps)
                raise _ExportStopped(f"PNG export stopped after {done} of {len(figures)} figures (none kept): "
                                     f"{type(e).__name__}: {e}".splitlines()[0]) from e
    except _ExportStopped as stopped:
        return str(stopped)
    finally:
        if chromium and not before:
            os.environ.pop("BROWSER_PATH", None)
    return ""


def cell_seconds(nb) -> float | None:
    """Seconds the code cells of an executed notebook ran, summed from the kernel's timestamps (nbclient's
    ``record_timing``: each cell's execute_input to its idle); None when a notebook carries none."""
    total, seen = 0.0, False
    for cell in nb.cells:
        ex = cell.get("metadata", {}).get("execution", {}) if cell.cell_type == "code" else {}
        a, b = ex.get("iopub.execute_input"), ex.get("iopub.status.idle")
        if a and b:
            t0, t1 = (_dt.datetime.fromisoformat(t.replace("Z", "+00:00")) for t in (a, b))
            total += (t1 - t0).total_seconds()
            seen = True
    return total if seen else None


def glossary_section() -> str:
    """The course glossary as the page's last section (anchor :data:`GLOSSARY_ID`)."""
    from .glossary import to_html

    return f"<section id='{GLOSSARY_ID}'>{to_html()}</section>"


def _time_cells(seconds: float, cells: float | None) -> str:
    """'9.65 s' and, when known, '(cells 5.61 s)' with non-breaking spaces: a time never wraps."""
    out = f"{seconds:.2f}&nbsp;s"
    return out + (f" (cells&nbsp;{cells:.2f}&nbsp;s)" if cells is not None else "")


def gradebook_html(entry: dict | None) -> str:
    """A notebook's gradebook entry as HTML: the line ("2 of 3 solved"), each exercise's state, each prediction
    (given, measured, how far off in its unit, verdict)."""
    import pandas as pd

    from .gradebook import summary_line

    if not entry:
        return "<h3>Gradebook</h3><p class='meta'>(no gradebook entry recorded)</p>"
    ex, pr = entry.get("exercises") or {}, entry.get("predictions") or []
    states = pd.DataFrame([dict(exercise=e, state=s) for e, s in ex.items()], columns=["exercise", "state"])
    preds = pd.DataFrame(pr, columns=["question", "part", "unit", "predicted", "measured", "off", "verdict"])
    return (f"<h3>Gradebook</h3><p>{html.escape(summary_line(ex, pr))}</p>"
            + states.to_html(index=False, border=0, classes="gradebook")
            + (preds.to_html(index=False, border=0, classes="gradebook", na_rep="") if len(preds) else ""))


def render_report(runs: list, out_dir: Path, check_marker: str = "CHECK OK", wall_s: float | None = None,
                  pngs: bool = True) -> Path:
    """Write ``out_dir/index.html`` for ``runs`` (plotly.js embedded once: the page works offline),
    ``out_dir/summary.json`` and, with ``pngs``, every figure as ``out_dir/figures/<name>.png``; returns the
    page's path.

    wall_s: the tour's measured wall time before the page is written (said beside the notebooks' sum)."""
    from plotly.offline import get_plotlyjs

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    total = sum(r.seconds for r in runs)
    try:
        import torch

        device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (recorded H200 data)"
    except Exception:  # torch missing or broken: the report still says something
        device = "unknown"
    prefixes = [r.path.stem for r in runs]
    figures = [f for r, p in zip(runs, prefixes) if r.nb is not None for f in notebook_figures(r.nb, p)]
    png_note = write_pngs(figures, out_dir / FIGURES_DIR) if pngs else "no PNGs: not asked for"
    links = {n: f"{FIGURES_DIR}/{n}.png" for n, _ in figures if (out_dir / FIGURES_DIR / f"{n}.png").is_file()}
    rows, sections, cells = [], [], []
    for i, (r, prefix) in enumerate(zip(runs, prefixes)):
        status = "<span class='ok'>OK</span>" if r.ok else "<span class='fail'>FAILED</span>"
        check_line = next((ln for ln in r.check.splitlines() if check_marker in ln), "")
        cells.append(cell_seconds(r.nb) if r.nb is not None else None)
        rows.append(f"<tr><td class='name'><a href='#nb{i}'>{html.escape(r.title)}</a></td>"
                    f"<td class='num'>{_time_cells(r.seconds, cells[-1])}</td>"
                    f"<td class='num'>{len(r.figures)}</td><td>{status}</td><td>{html.escape(check_line)}</td></tr>")
        goals = "".join(f"<li>{_inline_markdown(g)}</li>" for g in r.goals)
        body, _ = cells_html(r.nb, prefix, links) if r.nb is not None else ("", 0)
        err = f"<h3>Error</h3><pre>{html.escape(r.error)}</pre>" if r.error else ""
        sections.append(
            f"<section id='nb{i}'><h2>{html.escape(r.title)}</h2>"
            f"<p class='meta'>{html.escape(r.path.name)} · {_time_cells(r.seconds, cells[-1])} of wall time · "
            f"{status} · <a href='notebooks/{r.path.stem}.ipynb'>executed notebook</a> · "
            f"<a href='#{GLOSSARY_ID}'>glossary</a></p>"
            f"<h3>You will learn</h3><ul>{goals}</ul>{body}"
            f"<h3>Check cell</h3><pre>{html.escape(r.check.strip() or '(no output)')}</pre>"
            f"{gradebook_html(getattr(r, 'gradebook', None))}{err}</section>")
    when = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    ok = sum(r.ok for r in runs)
    timing = (f"{total:.1f}&nbsp;s of measured wall time over the {len(runs)} notebooks (each from its kernel's "
              "start to its shutdown; cells: the time its code cells ran)")
    if wall_s is not None:
        timing = f"the tour ran {wall_s:.1f}&nbsp;s before writing this page: " + timing
    fig_note = (f"every figure also as a PNG in <a href='{FIGURES_DIR}/'>{FIGURES_DIR}/</a>" if not png_note
                else html.escape(png_note))
    page = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>cadencelab course tour</title>"
        f"<style>{_CSS}</style><script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
        f"<h1>cadencelab: the course, executed</h1><p class='meta'>{when} · {html.escape(device)} · "
        f"{ok}/{len(runs)} notebooks passed their checks · {timing} · {fig_note} · "
        f"<a href='#{GLOSSARY_ID}'>glossary</a></p>"
        "<table class='runs'><tr><th>notebook</th><th>wall time</th><th>figures</th><th>status</th><th>check</th></tr>"
        + "".join(rows) + "</table>" + "".join(sections) + glossary_section() + "</body></html>"
    )
    from ..profile.outputs import write_atomic  # a failed or interrupted write leaves an earlier tour's files whole

    path = write_atomic(out_dir / "index.html", page)
    summary = [dict(notebook=r.path.name, title=r.title, seconds=round(r.seconds, 2),
                    cell_seconds=None if c is None else round(c, 2), ok=r.ok, error=r.error,
                    figures=len(r.figures), check=r.check.strip(), gradebook=getattr(r, "gradebook", None))
               for r, c in zip(runs, cells)]
    write_atomic(out_dir / "summary.json", json.dumps(summary, indent=1))
    return path
