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
