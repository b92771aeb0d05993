"""The report a person reads, without a browser: tables whole and fitted, empty tables said in words, the
glossary's reST rendered, a notebook cell named as IPython names it, the notebooks' measured wall times, and
every figure as a PNG beside the page (when kaleido and a Chromium are there)."""

from __future__ import annotations

import html as _html
import importlib.util
import json
import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pandas as pd
import pytest

from cadencelab import viz
from cadencelab.course import display, glossary, report
from cadencelab.course.tour import NotebookRun

SENTENCE = "control: the vendor's CUDA-graph branch re-bucketed to the live 50-frame chunk (padded cache)"


def _cells(table: str) -> list[str]:
    """The text of each ``<td>`` as a reader sees it (tags dropped, entities read)."""
    return [_html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", table, re.S)]


def test_frame_html_keeps_every_character_and_fits_long_cells():
    df = pd.DataFrame({"arm": ["B0", "vendor_graph_50"], "what it is": ["stock runtime", SENTENCE],
                       "steady_latency_ms_median": [306.25, 61.0]})
    with pd.option_context("display.max_colwidth", 20):  # what cut cells before: pandas' repr limit
        html = display.frame_html(df)
    assert SENTENCE in _cells(html) and "vendor_graph_50" in _cells(html)
    assert "..." not in html.replace("<wbr>", "")
    long_td = re.search(r"<td style=\"([^\"]+)\">control", html)
    assert long_td and long_td.group(1) == display.LONG_CELL_STYLE  # wraps in a readable width
    assert "<td>B0</td>" in html                                       # a short word is left alone,
    assert '<td style="white-space: nowrap">stock runtime</td>' in html  # a short phrase kept on one line
    assert "steady_<wbr>latency_<wbr>ms_<wbr>median" in html           # a header may break after "_"


def test_fit_table_html_breaks_a_long_name_after_underscores_and_leaves_tags_alone():
    name = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc"
    out = display.fit_table_html(f"<table><thead><tr><th>kernel_name</th></tr></thead>"
                                 f"<tbody><tr><td><a href='x_y'>{name}</a></td></tr></tbody></table>")
    assert "<a href='x_y'>" in out and out.count("_<wbr>") == name.count("_") + 1
    assert "<thead>" in out  # the header row's own tag is not taken for a cell
    assert re.sub(r"<[^>]+>", "", out).endswith(name)
    assert display.fit_table_html(out) == out  # the report fits a notebook's fitted tables again: no change


def test_an_empty_frame_is_a_line_not_a_headers_only_table():
    html = display.frame_html(pd.DataFrame(columns=["kind", "severity", "op"]))
    assert "<table" not in html and "(no rows)" in html and "kind, severity, op" in html


def test_install_table_format_takes_over_dataframes_in_ipython_only():
    from IPython.core.interactiveshell import InteractiveShell

    assert display.install_table_format(object()) is False  # not an IPython shell: nothing changes
    shell = InteractiveShell.instance()
    try:
        assert display.install_table_format(shell) is True
        data, _ = shell.display_formatter.format(pd.DataFrame({"what": [SENTENCE * 2]}))
        assert SENTENCE * 2 in _cells(data["text/html"])
        plain, _ = shell.display_formatter.format(pd.Series({"note": SENTENCE * 2}))
        assert (SENTENCE * 2) in plain["text/plain"]
    finally:
        InteractiveShell.clear_instance()


def test_glossary_renders_rest_inline_code():
    html = glossary.to_html()
    md = glossary.to_markdown()
    assert "``" not in html and "``" not in md and ":class:`" not in html
    # the conversion itself, on a docstring sentence (the glossary's own entries are written as sentences now)
    text = "An immutable prompt of ``prompt`` frames plus ``retained`` frames (:class:`~x.PromptRetained`)"
    assert glossary._rst_inline(text, "<code>{}</code>") == ("An immutable prompt of <code>prompt</code> frames plus "
                                                              "<code>retained</code> frames (<code>x.PromptRetained</code>)")
    assert "`prompt` frames plus `retained`" in glossary._rst_inline(text, "`{}`")


def test_preflight_names_a_notebook_cell_as_ipython_does(monkeypatch):
    import IPython

    import cadencelab.replay.sites as sites

    temp = "/tmp/ipykernel_9335/2708381683.py"
    shell = SimpleNamespace(compile=SimpleNamespace(_filename_map={temp: 17}))
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    site = sites.Site(temp, 6, 6, None, None)
    assert site.where == "cell In[17], line 6"
    assert sites.Site(os.path.abspath(__file__), 3, 3, None, None).where.endswith("test_report.py:3")
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert sites.Site(temp, 6, 6, None, None).where == f"{temp}:6"  # outside a kernel: the file as it is


def _run(seconds=9.6543, with_figure=True):
    """A made-up executed notebook: one capacity figure, its cell timed by the kernel at 2.75 s."""
    fig = viz.capacity_lines(pd.DataFrame({"sessions": [1, 2], "arm": ["B0", "B0"], "p95_chunk_ms": [300.0, 900]}))
    outs = ([nbformat.v4.new_output("display_data", data={report.PLOTLY_MIME: fig.to_plotly_json()})]
            if with_figure else [])
    code = nbformat.v4.new_code_cell("fig", outputs=outs)
    code.metadata["execution"] = {"iopub.execute_input": "2026-12-02T05:21:45.500000Z",
                                  "iopub.status.idle": "2026-12-02T05:21:48.250000Z"}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# T\n\nYou will learn:\n- x"), code])
    return NotebookRun(Path("01_t.py"), "T", ["x"], seconds=seconds, check="CHECK OK", nb=nb,
                       figures=[o["data"][report.PLOTLY_MIME] for o in outs])


def test_report_states_measured_wall_times(tmp_path):
    run = _run()
    assert report.cell_seconds(run.nb) == pytest.approx(2.75)
    page = report.render_report([run], tmp_path, wall_s=12.345, pngs=False).read_text()
    assert "9.65&nbsp;s (cells&nbsp;2.75&nbsp;s)" in page      # per notebook: wall, and its cells' share
    assert "the tour ran 12.3&nbsp;s before writing this page" in page and "9.7&nbsp;s of measured wall time" in page
    assert "no PNGs: not asked for" in page
    row = json.loads((tmp_path / "summary.json").read_text())[0]
    assert row["seconds"] == 9.65 and row["cell_seconds"] == 2.75


def test_report_files_are_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """The page and the summary are written to a temporary file and renamed into place: a write that fails
    (here the rename of summary.json) leaves the earlier tour's file whole and no temporary file behind."""
    run = _run()
    report.render_report([run], tmp_path, pngs=False)
    before = {n: (tmp_path / n).read_bytes() for n in ("index.html", "summary.json")}
    real = os.replace

    def no_summary(src, dst):
        if Path(dst).name == "summary.json":
            raise OSError("disk full")
        real(src, dst)

    monkeypatch.setattr(os, "replace", no_summary)
    with pytest.raises(OSError, match="disk full"):
        report.render_report([_run(seconds=1.5)], tmp_path, pngs=False)
    assert (tmp_path / "summary.json").read_bytes() == before["summary.json"]
    assert (tmp_path / "index.html").read_bytes() != before["index.html"]  # the page itself was replaced whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html", "summary.json"]


def test_notebook_figures_match_the_page(tmp_path):
    run = _run()
    figs = report.notebook_figures(run.nb, "01_t")
    body, n = report.cells_html(run.nb, "01_t", {"01_t-fig00": "figures/01_t-fig00.png"})
    assert [f[0] for f in figs] == ["01_t-fig00"] and n == 1
    assert "id=\"01_t-fig00\"" in body and "href='figures/01_t-fig00.png'" in body


def test_write_pngs_without_kaleido_says_why(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_kaleido(name, *a, **k):
        if name == "kaleido":
            raise ImportError("no kaleido")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_kaleido)
    note = report.write_pngs([("f", {"data": [], "layout": {}})], tmp_path)
    assert "kaleido" in note and not list(tmp_path.glob("*.png"))
    assert report.write_pngs([], tmp_path) == ""


def _chromium() -> str | None:
    c = os.environ.get("CADENCELAB_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    return c if c and os.access(c, os.X_OK) else None


@pytest.mark.skipif(importlib.util.find_spec("kaleido") is None or _chromium() is None,
                    reason="PNG export needs kaleido (the 'browser' extra) and a Chromium (apt-get install chromium)")
def test_report_writes_every_figure_as_a_png(tmp_path):
    run = _run()
    (tmp_path / report.FIGURES_DIR).mkdir()
    (tmp_path / report.FIGURES_DIR / "stale-fig09.png").write_bytes(b"old")  # an earlier tour's figure
    page = report.render_report([run], tmp_path).read_text()
    pngs = sorted((tmp_path / report.FIGURES_DIR).glob("*.png"))
    assert [p.name for p in pngs] == ["01_t-fig00.png"]
    assert pngs[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and pngs[0].stat().st_size > 5_000
    assert "href='figures/01_t-fig00.png'" in page and "every figure also as a PNG" in page


def test_report_shows_each_notebooks_gradebook(tmp_path):
    """The tour's report: per notebook the gradebook line, each exercise's state and each prediction's distance."""
    run = _run()
    run.gradebook = {"exercises": {"t2w_K": "solved", "t2w_rho": "attempted", "t2w_extents": "blank"},
                     "predictions": [dict(question="K", part="flow_chunk", unit="classes", predicted=3, measured=4,
                                          off=-1.0, verdict="under")]}
    page = report.render_report([run, _run()], tmp_path, pngs=False).read_text()
    assert "1 of 3 solved (1 attempted, 1 blank); predictions: 0 of 1 close or right" in page
    assert "attempted" in page and "under" in page and "(no gradebook entry recorded)" in page
    row = json.loads((tmp_path / "summary.json").read_text())[0]
    assert row["gradebook"]["exercises"]["t2w_K"] == "solved"
