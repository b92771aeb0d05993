"""The course's live cells: what each one runs on a GPU, at which size, and the GPU memory it needs, measured.

A *live cell* is a notebook cell that runs its workload on this machine's GPU when there is one (``LIVE``).
:data:`CELLS` names each: its notebook, what it runs (the library call the cell makes, so a test can hold
the table to the notebooks) and whether its size follows the notebook's ``LIVE_PRESET``. :data:`PRESETS`
are the sizes: ``"full"`` (the recordings' sizes: the real Token2wav config, the H200 duplex models) and
``"small"`` (the teaching Token2wav config and the tiny duplex models, for a smaller GPU).

:func:`measure` runs the cells one after another in this process, each from a clean allocator
(``gc.collect``, ``empty_cache``, ``reset_peak_memory_stats``), and records per cell and preset the peak of
``torch.cuda.max_memory_allocated`` (and ``max_memory_reserved``, nearer what ``nvidia-smi`` shows), what was
still allocated before it, its seconds and whether it ran. On a CPU the peaks are n/a (None) and the cells
that run only on a GPU are skipped, saying so. :func:`record` writes ``live_memory.json`` (provenance and
rows) and ``live_memory.csv``::

    python -m cadencelab.course.live_cells --memory --out DIR [--device cuda] [--presets full,small] [--cells ...]

:func:`guide` is the README's "running live" table, read from the recorded file (``data/h200/live_memory.json``)
when there is one, otherwise a sentence saying how to record it; nothing in it is typed by hand.
"""

from __future__ import annotations

import gc
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

__all__ = ["PRESETS", "live_preset", "LiveCell", "CELLS", "cell", "measure", "record", "recorded", "guide", "FILE",
           "CSV", "COMMAND", "COLUMNS"]

#: the sizes the live cells run at (a notebook's ``LIVE_PRESET`` names one)
PRESETS = {"full": dict(token2wav="real", duplex="h200"), "small": dict(token2wav="teaching", duplex="tiny")}
#: what :func:`record` writes, and the device command that writes it
FILE, CSV = "live_memory.json", "live_memory.csv"
COMMAND = "python -m cadencelab.course.live_cells --memory --out $OUT/memory"
COLUMNS = ["cell", "notebook", "what", "preset", "sizes", "device", "status", "seconds", "peak_allocated_MiB",
           "peak_reserved_MiB", "resident_before_MiB"]
_MIB = 2 ** 20


def live_preset(name: str) -> dict:
    """The sizes of preset ``name`` (a ValueError lists the presets)."""
    if name not in PRESETS:
        raise ValueError(f"LIVE_PRESET must be one of {list(PRESETS)}, got {name!r}")
    return dict(PRESETS[name])


# ---------------------------------------------------------------------------------------
# the workloads, as the cells run them
# ---------------------------------------------------------------------------------------


def _profile_chunk(device, sizes):
    from .live import profile_chunk

    profile_chunk("B0", "teaching", device)


def _duplex_second(device, sizes):
    from ..adapters.duplex import build_models, run_second

    models = build_models(sizes["duplex"], device)
    for arm, decode in (("B0", "eager"), ("SRc", "eager"), ("SRc", "graph")):
        run_second(sizes["duplex"], arm=arm, device=device, models=models, decode=decode)


def _carry(device, sizes):
    from ..adapters.token2wav import TEACHING
    from ..adapters.token2wav.runtime import build_runtime
    from ..adapters.token2wav.clocks import T2W_CLOCKS

    rt, prompt = build_runtime(TEACHING, "S", 0, device)
    rt.set_stream_cache(prompt)
    n, la = T2W_CLOCKS.tokens_per_chunk, T2W_CLOCKS.lookahead_tokens
    tokens = list(range(100, 100 + 4 * n))
    for i in range(3):
        rt.stream(tokens[i * n: (i + 1) * n + la])


def _graph_lesson(device, sizes):
    from . import graph_lesson

    graph_lesson.lesson(True, device)


def _noisy_certify(device, sizes):
    from ..adapters import teaching

    noisy = teaching.TinyStreamer(teaching.TeachingConfig().replace(noise_std=0.05))
    teaching.certify(noisy.to(device), backend="cuda")


def _rules_panel(device, sizes):
    from .live import live_factorial

    live_factorial(config=sizes["token2wav"], device=str(device))
    live_factorial(n_steps=6, config=sizes["token2wav"], device=str(device))


def _chunk_timelines(device, sizes):
    from .live import chunk_timelines

    chunk_timelines("live", config=sizes["token2wav"], device=str(device))


def _adapter(device, sizes, answers):
    from ..adapters.kit import KitModel, certify, factorial
    from . import sample_encoder as se

    declaration = answers["declaration_solution"]
    s, backend = se.VISIBLE, "cuda" if device.type == "cuda" else "eager"
    model = se.SampleEncoder(s).to(device)
    step, stock, frames = se.steps(model)
    traffic = se.traffic(s, declaration(s), device=device)
    spec = KitModel(declaration(s), step, stock, traffic, frames=frames, modules=(model,), device=device)
    certify(spec, backend=backend)
    factorial(spec, blocks=3, backend=backend)


def _capture_task(device, sizes, answers):
    from . import capture_task as task

    task.leaderboard(task.check_wrapper(answers["wrapper_solution"], device=str(device)), device=str(device))
    for wrong in answers["PLANTED_WRAPPERS"].values():
        task.check_wrapper(wrong, device=str(device))


def _capstone(device, sizes, answers):
    from . import capstone

    ADAPTER_SOLUTIONS = answers["ADAPTER_SOLUTIONS"]
    backend = "cuda" if device.type == "cuda" else "eager"
    for name in capstone.MODELS:
        capstone.check_adapter(ADAPTER_SOLUTIONS[name], backend=backend, device=str(device), model=name)
        capstone.certificate(ADAPTER_SOLUTIONS[name], backend=backend, device=str(device), model=name)


@dataclass(frozen=True)
class LiveCell:
    """One live cell: ``name``, its ``notebook``, ``what`` it runs, ``call`` (the library call the notebook's cell
    makes), ``sized`` (its size follows ``LIVE_PRESET``), ``cpu`` (the workload also runs on a CPU) and ``run``
    (``run(device, sizes)``: the cell's workload)."""

    name: str
    notebook: int
    what: str
    call: str
    run: Callable
    sized: bool = False
    cpu: bool = True
    answers: bool = False  # runs the course's answers: ``run(device, sizes, answers)``, answers from --answers


CELLS = (
    LiveCell("profile_chunk", 0, "one teaching-size Token2wav chunk profiled on the GPU", "profile_chunk",
             _profile_chunk),
    LiveCell("duplex_second", 1, "one live duplex second: B0, SRc, and SRc with the language models served",
             "run_second", _duplex_second, sized=True, cpu=False),
    LiveCell("carry", 3, "arm S of the teaching Token2wav streaming three chunks", "build_runtime", _carry),
    LiveCell("graph_lesson", 4, "the raw CUDA-graph lesson, every scenario", "graph_lesson.lesson", _graph_lesson,
             cpu=False),
    LiveCell("noisy_certify", 4, "the noisy teaching model certified with CUDA graphs", "teaching.certify",
             _noisy_certify, cpu=False),
    LiveCell("rules_panel", 5, "the live factorial (six arms, three runs) and the panel's 6-step run",
             "rules_panel", _rules_panel, sized=True, cpu=False),
    LiveCell("chunk_timelines", 7, "B0 and SRc steady chunks profiled live", "chunk_timelines", _chunk_timelines,
             sized=True),
    LiveCell("adapter", 8, "the sample encoder's adapter certified, then its factorial", "factorial", _adapter,
             answers=True),
    LiveCell("capture_task", 9, "the capture task graded on hidden shapes, with its slips", "check_wrapper",
             _capture_task, answers=True),
    LiveCell("capstone", 10, "every capstone model's adapter graded and certified", "check_adapter", _capstone,
             answers=True),
)


def cell(name: str) -> LiveCell:
    """The live cell called ``name`` (a ValueError lists them)."""
    for c in CELLS:
        if c.name == name:
            return c
    raise ValueError(f"no live cell {name!r}; cells: {[c.name for c in CELLS]}")


# ---------------------------------------------------------------------------------------
# measuring
# ---------------------------------------------------------------------------------------


def _clean(dev) -> float | None:
    """Collect garbage and return the allocator's cache; on CUDA reset the peaks and return what is still
    allocated (MiB)."""
    import torch

    gc.collect()
    if dev.type != "cuda":
        return None
    torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)
    return torch.cuda.memory_allocated(dev) / _MIB


def measure(device: str = "cuda", presets=("full", "small"), cells=None, progress: Callable | None = None,
            on_row: Callable | None = None, answers: dict | None = None) -> pd.DataFrame:
    """Run each live cell (``cells``: names, default all) at each of ``presets`` where its size follows the preset
    (once otherwise, at the notebooks' default) on ``device``; one row per run with :data:`COLUMNS`.
    ``on_row(rows, planned)``, when given, is called after every row with the rows so far (a frame) and the
    number of runs planned (what :func:`record` writes as it goes). ``answers``: the course's answers (the globals
    of ``course-solutions/solutions.py``, which is not part of the package) for the cells that run them; without
    them those cells are skipped and say so."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"measure: device {device!r} needs CUDA, and there is no CUDA device here")
    for p in presets:
        live_preset(p)
    chosen = [cell(n) for n in cells] if cells else list(CELLS)
    plan = [(c, p) for c in chosen for p in (presets if c.sized else (None,))]
    rows = []

    def done(row):
        rows.append(row)
        if on_row:
            on_row(pd.DataFrame(rows, columns=COLUMNS), len(plan))

    for c, p in plan:
        sizes = live_preset(p or "full")
        row = dict(cell=c.name, notebook=c.notebook, what=c.what, preset=p or "-",
                   sizes=", ".join(f"{k} {v}" for k, v in sizes.items()) if c.sized else "fixed",
                   device=str(dev), seconds=0.0, peak_allocated_MiB=None, peak_reserved_MiB=None,
                   resident_before_MiB=None)
        if dev.type != "cuda" and not c.cpu:
            done(dict(row, status="skipped: the notebook runs it on a GPU only"))
            continue
        if c.answers and answers is None:
            done(dict(row, status="skipped: runs the course's answers (--answers course-solutions/solutions.py)"))
            continue
        if progress:
            progress(f"{c.name} ({p or 'fixed'}) on {dev}")
        before = _clean(dev)
        t0 = time.perf_counter()
        try:
            c.run(dev, sizes, answers) if c.answers else c.run(dev, sizes)
            status = "ok"
        except Exception as e:  # a cell that fails is reported, the others still measured
            status = f"error: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
            row.update(peak_allocated_MiB=round(torch.cuda.max_memory_allocated(dev) / _MIB, 1),
                       peak_reserved_MiB=round(torch.cuda.max_memory_reserved(dev) / _MIB, 1),
                       resident_before_MiB=round(before, 1))
        done(dict(row, status=status, seconds=round(time.perf_counter() - t0, 2)))
    _clean(dev)
    return pd.DataFrame(rows, columns=COLUMNS)


def record(out_dir: str | os.PathLike, device: str = "cuda", presets=("full", "small"), cells=None,
           overwrite: bool = False, progress: Callable | None = None, answers: dict | None = None) -> Path:
    """Measure and write ``out_dir/live_memory.json`` (provenance, the command, rows, ``planned`` runs and whether
    the record is ``complete``) and ``live_memory.csv``, both rewritten whole after every run (a run stopped at a
    time limit keeps its finished rows, marked incomplete); never into the recorded data folder, nor over earlier
    files unless ``overwrite``."""
    from ..profile.outputs import guard_output, write_atomic
    from ..profile.provenance import run_provenance

    out = guard_output(out_dir, "--out", results=(FILE, CSV), overwrite=overwrite)  # refused before anything runs
    prov = run_provenance(device)

    def write(df: pd.DataFrame, planned: int):  # after every run: a run stopped midway keeps what it measured
        out.mkdir(parents=True, exist_ok=True)
        obj = dict(provenance=prov, command=COMMAND, presets=PRESETS, planned=planned, complete=len(df) == planned,
                   rows=json.loads(df.to_json(orient="records")))
        write_atomic(out / CSV, df.to_csv(index=False))
        return write_atomic(out / FILE, json.dumps(obj, indent=1))

    df = measure(device, presets, cells, progress, on_row=write, answers=answers)
    return write(df, len(df)) if df.empty else out / FILE  # nothing planned: still one (empty, complete) record


def recorded(path: str | os.PathLike | None = None) -> pd.DataFrame | None:
    """The recorded measurement (default: the data folder's ``live_memory.json``) as rows, its provenance in
    ``attrs``; None when it has not been recorded."""
    from . import data

    p = Path(path) if path is not None else data.dataset_path("live_memory")
    if not p.is_file():
        return None
    obj = json.loads(p.read_text(encoding="utf-8"))
    if not isinstance(obj, dict) or not isinstance(obj.get("rows"), list):
        raise ValueError(f"{p}: not a live-memory record (an object with 'rows')")
    df = pd.DataFrame(obj["rows"], columns=COLUMNS)
    df.attrs.update(provenance=obj.get("provenance", {}), complete=bool(obj.get("complete", True)),
                    planned=int(obj.get("planned", len(df))))
    return df


def _mib(v) -> str:
    return "n/a" if v is None or pd.isna(v) else f"{float(v):,.0f}"


def guide(df: pd.DataFrame | None = None) -> str:
    """The README's "running live" table: per live cell and preset the peak GPU memory measured (allocated and
    reserved, MiB) and its seconds, with the GPU and commit it was measured on; a sentence naming the device
    command while nothing is recorded."""
    df = recorded() if df is None else df
    sized = "; ".join(f"notebook {c.notebook}: {c.what}" for c in CELLS if c.sized)
    presets = "; ".join(f"`{k}`: " + ", ".join(f"{m} {v}" for m, v in p.items()) for k, p in PRESETS.items())
    intro = (f"The live cells whose size follows `LIVE_PRESET` ({sized}); every other live cell runs at one "
             f"small size. The presets ({presets}).")
    if df is None:
        return intro + ("\n\n" f"Not measured yet: run `{COMMAND}` on the GPU, copy `{FILE}` and `{CSV}` to "
                        "`data/h200/`, then `python docs/results_table.py --write-readme` writes each live cell's "
                        "peak GPU memory here.")
    prov = df.attrs.get("provenance", {})
    head = (f"Measured with `{COMMAND}` on {prov.get('gpu') or 'no GPU'} (torch {prov.get('torch')}, commit "
            f"`{prov.get('git_commit')}`, {str(prov.get('date', ''))[:10]}): each cell's workload from a clean "
            f"allocator, its peak `torch.cuda.max_memory_allocated` and `max_memory_reserved` (MiB).")
    if not df.attrs.get("complete", True):
        head += (f" **Incomplete:** the run stopped after {len(df)} of its {df.attrs.get('planned')} planned cell runs; "
                 "the cells not listed are not measured.")
    lines = [intro, "", head, "", "| notebook | live cell | preset | peak allocated MiB | peak reserved MiB | s | status |",
             "|---:|---|---|---:|---:|---:|---|"]
    lines += [f"| {r.notebook} | {r.what} | {r.preset if r.preset != '-' else 'fixed'} | {_mib(r.peak_allocated_MiB)} "
              f"| {_mib(r.peak_reserved_MiB)} | {float(r.seconds):.0f} | {r.status} |" for r in df.itertuples()]
    return "\n".join(lines)


def main(argv=None) -> int:
    """``python -m cadencelab.course.live_cells --memory --out DIR``: see the module docstring."""
    import argparse
    import sys

    from ..profile.outputs import OutputRefused
    from ..state.alloc import device_problem

    ap = argparse.ArgumentParser(prog="python -m cadencelab.course.live_cells",
                                 description="measure the GPU memory each live cell of the course needs")
    ap.add_argument("--memory", action="store_true", required=True, help="measure each live cell's peak GPU memory")
    ap.add_argument("--out", required=True, help=f"folder to write {FILE} and {CSV} into")
    ap.add_argument("--device", default="cuda", help="where the cells run (default: cuda; on cpu the peaks are n/a)")
    ap.add_argument("--presets", default=",".join(PRESETS), help=f"comma-separated, of {list(PRESETS)} (default: all)")
    ap.add_argument("--cells", default="", help=f"comma-separated cell names (default: all of {[c.name for c in CELLS]})")
    ap.add_argument("--overwrite", action="store_true", help="replace earlier files in --out")
    ap.add_argument("--answers", default="course-solutions/solutions.py",
                    help="the course's answers, a file of a checkout, for the cells that run them (not part of the "
                         "package; default: %(default)s; absent: those cells are skipped)")
    a = ap.parse_args(argv)
    try:
        presets = tuple(p for p in a.presets.split(",") if p)
        if not presets:
            raise ValueError(f"--presets {a.presets!r}: name at least one of {list(PRESETS)} (nothing to measure)")
        for p in presets:
            live_preset(p)
        cells = [c for c in a.cells.split(",") if c]
        for c in cells:
            cell(c)
        why = device_problem(a.device)
        if why:
            raise ValueError(f"--device: {why}")
        import runpy

        answers = runpy.run_path(a.answers) if Path(a.answers).is_file() else None
        path = record(a.out, a.device, presets, cells or None, a.overwrite,
                      progress=lambda s: print(f"measuring {s}", file=sys.stderr, flush=True), answers=answers)
    except (OutputRefused, ValueError) as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    df = recorded(path)
    shown = df[["cell", "preset", "status", "seconds", "peak_allocated_MiB", "peak_reserved_MiB"]].astype(object)
    print(shown.where(shown.notna(), "n/a").to_string(index=False))
    print(f"wrote {path} and {path.with_name(CSV)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
