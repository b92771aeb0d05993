"""Notebook 5 in a real browser: JupyterLab on a free loopback port, headless Chromium driven by
Playwright. Run all cells, check the rules panel renders, click a rule and check the plotted point
moves. The screenshot is kept under the pytest tmp dir (and copied to $CADENCELAB_ARTIFACTS).

Skips with the reason when Playwright, Chromium or JupyterLab is missing. Chromium comes from the
OS (Debian: ``apt-get install chromium``); ``$CADENCELAB_CHROMIUM`` names another binary.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "05_mutual_enabling.py"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
PANEL = ".cadencelab-rules-panel"


def _chromium() -> str | None:
    for c in (os.environ.get("CADENCELAB_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
              shutil.which("chromium-browser")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _requirements() -> str:
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install playwright; never `playwright install`)"
    if _chromium() is None:
        return "no Chromium binary (apt-get install -y chromium, or set CADENCELAB_CHROMIUM)"
    if importlib.util.find_spec("jupyterlab") is None:
        return "jupyterlab is not installed"
    if importlib.util.find_spec("jupytext") is None:
        return "jupytext is not installed"
    if importlib.util.find_spec("ipywidgets") is None:
        return "ipywidgets is not installed"
    return ""


pytestmark = pytest.mark.skipif(bool(_requirements()), reason=_requirements() or "ok")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """JupyterLab serving a copy of notebook 5 (autosave must not touch the committed file), set up as
    `cadencelab lab` sets it up: jupytext's contents manager and the settings that open a click on a
    .py source as a notebook."""
    from cadencelab.course.tour import LAB_CONTENTS_MANAGER, kernel_env, lab_settings_dir

    root = tmp_path / "course"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    shutil.copy(NOTEBOOK.parent / "jupytext.toml", root / "jupytext.toml")
    port, token = _free_port(), secrets.token_hex(16)
    env = kernel_env()
    for var in ("JUPYTERLAB_SETTINGS_DIR", "JUPYTERLAB_WORKSPACES_DIR", "JUPYTER_RUNTIME_DIR"):
        env[var] = str(tmp_path / var.lower())
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           "--LabApp.expose_app_in_browser=True",
           f"--ServerApp.contents_manager_class={LAB_CONTENTS_MANAGER}",
           f"--LabApp.app_settings_dir={lab_settings_dir(tmp_path / 'app_settings')}", "--LabApp.news_url=None",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers and CI runners often run as root
        cmd.append("--allow-root")
    log = open(tmp_path / "jupyterlab.log", "w")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                log.flush()
                pytest.fail("JupyterLab did not start:\n" + (tmp_path / "jupyterlab.log").read_text()[-3000:])
            time.sleep(0.5)
        yield dict(base=base, token=token, root=root)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the server we started and the kernels it started
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()


_CELLS_JS = """() => {
  const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.content || !panel.sessionContext) return null;
  const cells = panel.content.widgets.filter(w => w.model.type === 'code');
  return {
    status: panel.sessionContext.session ? panel.sessionContext.session.kernel.status : 'none',
    counts: cells.map(c => c.model.executionCount),
    errors: cells.flatMap(c => { const o = []; for (let i = 0; i < c.model.outputs.length; i++) {
      const x = c.model.outputs.get(i); if (x.type === 'error') o.push(x.toJSON().ename + ': ' + x.toJSON().evalue); }
      return o; }),
    check: (() => { const c = cells[cells.length - 1]; let t = '';
      for (let i = 0; i < c.model.outputs.length; i++) { const j = c.model.outputs.get(i).toJSON();
        if (j.text) t += Array.isArray(j.text) ? j.text.join('') : j.text; } return t; })(),
  };
}"""

_POINT_JS = """(sel) => {
  const root = document.querySelector(sel);
  if (!root) return null;
  const plot = root.querySelector('.js-plotly-plot');
  if (!plot || !plot.data) return null;
  const t = plot.data.find(d => d.name === 'selected');
  return t ? [Number(t.x[0]), Number(t.y[0]), String(t.text ? t.text[0] : '')] : null;
}"""


def _wait(page, js, arg=None, pred=lambda v: bool(v), timeout=120.0, what="condition"):
    deadline = time.time() + timeout
    value = None
    while time.time() < deadline:
        value = page.evaluate(js, arg) if arg is not None else page.evaluate(js)
        if pred(value):
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last value: {value!r}")


def test_rules_panel_in_jupyterlab(lab, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    shot = tmp_path / "notebook5_rules_panel.png"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{lab['base']}/lab/tree/{NOTEBOOK.name}?token={lab['token']}", wait_until="domcontentloaded")
            _wait(page, _CELLS_JS, pred=lambda v: v is not None and v["status"] == "idle", timeout=120,
                  what="the notebook and an idle kernel")
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            state = _wait(page, _CELLS_JS, pred=lambda v: v and v["status"] == "idle" and all(v["counts"]),
                          timeout=240, what="all cells executed")
            assert not state["errors"], state["errors"]
            assert "CHECK OK" in state["check"], state["check"]

            # the widgets render: checkboxes, granularity buttons, slider, readout, the Pareto plot
            panel = page.locator(PANEL).first
            panel.scroll_into_view_if_needed()
            panel.wait_for(state="visible", timeout=60_000)
            assert panel.locator("input[type=checkbox]").count() == 2
            assert panel.locator(".widget-toggle-buttons button").count() == 2
            assert panel.locator(".widget-slider").count() == 1
            before = _wait(page, _POINT_JS, PANEL, timeout=60, what="the plotted point")
            assert before[2] == "SRc", before  # the notebook's last set() leaves both rules on, chunk granularity
            # textContent, polled: the readout is an HTML widget that can render after the plot, and
            # JupyterLab's windowed notebook may leave an off-screen cell unrendered (innerText is then "")
            expect(panel.locator(".cadencelab-readout")).to_contain_text("arm SRc", timeout=60_000)

            # toggle the state rule off: the point must move to Rc (replay alone)
            panel.get_by_text("state rule (carry + demand sizing)").click()
            after = _wait(page, _POINT_JS, PANEL, pred=lambda v: bool(v) and v[2] != before[2], timeout=60,
                          what="the point to move")
            assert after[2] == "Rc" and after[1] > before[1] and (after[0], after[1]) != (before[0], before[1])
            expect(panel.locator(".cadencelab-readout")).to_contain_text("arm Rc", timeout=60_000)
            panel.scroll_into_view_if_needed()
            panel.screenshot(path=str(shot))
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
    dest = os.environ.get("CADENCELAB_ARTIFACTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(dest) / shot.name)


# ----------------------------------------------------------------------------------------------
# The tour's HTML report, read as a person reads it: Chromium at a 1400 px viewport
# ----------------------------------------------------------------------------------------------

#: what the page must not show, checked in the browser (innerText: what a reader sees)
_REPORT_JS = """() => {
  const doc = document.documentElement;
  const cells = [...document.querySelectorAll('td, th')].map(c => c.innerText.trim());
  const text = document.body.innerText;
  const prose = document.body.cloneNode(true);  // what is not code: printed source may hold a docstring's reST
  prose.querySelectorAll('pre, code, script, style').forEach(e => e.remove());
  const wide = [...document.querySelectorAll('.output table')]
    .filter(t => t.offsetWidth > t.closest('.output').clientWidth + 1)
    .map(t => ({width: t.offsetWidth, scrolls: getComputedStyle(t.closest('.output')).overflowX}));
  return {
    pageScroll: doc.scrollWidth - doc.clientWidth,
    // cut: a name shortened with an ellipsis, or a cell pandas cut to its 50-character display limit (47
    // characters and "..."; a question's own " ..." blank, after a space, is not a cut)
    cut: cells.filter(c => c.length > 3 && (c.endsWith('…')
      || (c.length === 50 && c.endsWith('...') && !c.endsWith(' ...')))).slice(0, 10),
    rst: (prose.textContent.match(/``[^`\\n]+``/g) || []).slice(0, 10),
    temp: (text.match(/\\S*(ipykernel_|\\/tmp\\/)\\S*/g) || []).slice(0, 10),
    wide: wide,
    // squeezed: a long cell under 150 px, or a short phrase broken over lines
    narrow: [...document.querySelectorAll('.output td')].filter(c => { const t = c.innerText.trim();
      if (t.length > 32) return c.getBoundingClientRect().width < 150;
      const r = document.createRange(); r.selectNodeContents(c);
      return t.includes(' ') && new Set([...r.getClientRects()].map(x => Math.round(x.top))).size > 1; })
      .map(c => c.innerText.slice(0, 40)).slice(0, 10),
    tables: document.querySelectorAll('.output table').length,
    figures: document.querySelectorAll('.js-plotly-plot').length,
  };
}"""

#: per figure on the page, the pairs of its text boxes that overlap: the title, each annotation (panel titles,
#: line labels) and the legend, as Chromium laid them out
_LABELS_JS = """() => {
  const out = [];
  const over = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const boxes = [];
    const add = (el, what) => { if (!el) return; const r = el.getBoundingClientRect();
      if (r.width > 0 && r.height > 0) boxes.push([what, r]); };
    add(plot.querySelector('.g-gtitle text'), 'title');
    plot.querySelectorAll('.annotation-text-g').forEach(a => add(a, 'annotation: ' + a.textContent.slice(0, 40)));
    add(plot.querySelector('.legend .bg'), 'legend');
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++)
      if (over(boxes[i][1], boxes[j][1])) out.push([plot.id, boxes[i][0], boxes[j][0]]);
  }
  return out;
}"""


def _read_report(page_path: Path, shot: Path | None = None) -> tuple[dict, list]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(page_path.resolve().as_uri(), wait_until="load")
            page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')].every(p => p._fullLayout)",
                                   timeout=120_000)
            seen, labels = page.evaluate(_REPORT_JS), page.evaluate(_LABELS_JS)
            if shot is not None:
                page.screenshot(path=str(shot), full_page=False)
        finally:
            browser.close()
    return seen, labels


def _assert_reads_well(seen: dict, labels: list) -> None:
    assert seen["pageScroll"] <= 0, f"the page scrolls sideways by {seen['pageScroll']} px at 1400 px"
    assert not seen["cut"], f"table cells cut short: {seen['cut']}"
    assert not seen["rst"], f"raw reST markup on the page: {seen['rst']}"
    assert not seen["temp"], f"temporary paths on the page: {seen['temp']}"
    assert all(w["scrolls"] in ("auto", "scroll") for w in seen["wide"]), f"wide table, no scroll block: {seen['wide']}"
    assert not seen["narrow"], f"long cells squeezed under 150 px: {seen['narrow']}"
    assert not labels, f"figure labels that overlap (figure, one, other): {labels}"


def _tour_report() -> Path | None:
    """index.html of the tour in $CADENCELAB_TOUR_DIR when that tour was made from these sources (as the
    notebook tests decide it), else None."""
    from cadencelab.course import tour

    where = os.environ.get("CADENCELAB_TOUR_DIR")
    if not where or not (Path(where) / "index.html").is_file():
        return None
    first = tour.course()[0]
    return Path(where) / "index.html" if tour.load_run(where, first) is not None else None


def test_tour_report_reads_well_at_1400px(tmp_path):
    """The tour's report (the one in $CADENCELAB_TOUR_DIR, as CI makes it, else the report of notebooks 2 and 8
    rendered here by the tour's renderer): no sideways page scroll at a 1400 px viewport, no table cell cut with
    an ellipsis, no raw reST markup, no temporary path, every wide table in a scroll block of its own, and no two
    labels of a figure (title, panel titles, line labels, legend) on top of each other."""
    from cadencelab.course import tour
    from cadencelab.course.report import render_report

    report = _tour_report()
    if report is None:  # no tour to read: render a small one (the glossary, the K chart, the preflight tables),
        # the two notebooks run in one kernel (the page is the tour's; a fresh kernel each adds only seconds)
        nbs = [p for p in tour.course() if p.name.startswith(("02_", "08_"))]
        with tour.SharedKernel(nbs[0].parent, env=tour.COURSE_ENV) as kernel:
            runs = [tour.execute_notebook(p, timeout=300, parameters=tour.COURSE_PARAMETERS, kernel=kernel)
                    for p in nbs]
        report = render_report(runs, tmp_path / "tour")
    seen, labels = _read_report(report, tmp_path / "report_top.png")
    assert seen["tables"] > 0 and seen["figures"] > 0, seen
    _assert_reads_well(seen, labels)


def test_report_fits_wide_and_long_tables(tmp_path):
    """A report of a made-up notebook with the hard cases: a 24-column table, sentences and a 120-character
    kernel name in cells, an empty table, a glossary docstring in reST, a preflight site in a notebook cell.
    Read in Chromium it keeps every character, scrolls only the wide table's own block, wraps the long cells."""
    import nbformat
    import pandas as pd

    from cadencelab.course import display, report
    from cadencelab.course.tour import NotebookRun

    kernel = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_warpsize2x2x1"
    sentence = "control: the stock runtime again, in another process, to check that the reference holds " * 2
    wide = pd.DataFrame({f"column_number_{i}": [1.5, 2.5] for i in range(24)})
    long = pd.DataFrame({"arm": ["B0", "SRc"], "what it is": [sentence, "short"], "kernel": [kernel, "k"],
                         "steady_latency_ms_median": [306.2, 60.1]})
    empty = pd.DataFrame(columns=["kind", "severity", "op"])

    def html_out(df):
        return nbformat.v4.new_output("execute_result", data={"text/html": display.frame_html(df)}, execution_count=1)

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Made up\n\nYou will learn:\n- to read tables"),
        nbformat.v4.new_code_cell("wide", outputs=[html_out(wide)]),
        nbformat.v4.new_code_cell("long", outputs=[html_out(long)]),
        nbformat.v4.new_code_cell("empty", outputs=[html_out(empty)]),
    ])
    run = NotebookRun(Path("99_made_up.py"), "Made up", ["to read tables"], seconds=1.234, check="CHECK OK", nb=nb)
    page = report.render_report([run], tmp_path, pngs=False)
    text = page.read_text()
    assert sentence.strip() in text.replace("<wbr>", "") and kernel in text.replace("<wbr>", "")
    assert "(no rows)" in text and "1.23&nbsp;s" in text
    seen, labels = _read_report(page)
    assert len(seen["wide"]) == 1 and seen["wide"][0]["width"] > 1100, seen["wide"]  # only the 24 columns overflow
    _assert_reads_well(seen, labels)
