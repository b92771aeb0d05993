"""The raw CUDA-graph lesson of notebook 4: capture and replay by hand, then break it on purpose.

Before ``ExactShapeReplay`` does it for you, the lesson does it with plain torch: a static input,
a warm-up on a side stream, the capture, ``copy_`` of new values into the static input, replay.
Then it breaks the graph three ways and reads back what the device computed:

    basic_replay   the recipe; each replay is compared with the eager call on the same values
    new_shape      an input of another shape: ``copy_`` refuses a larger one and silently
                   broadcasts a smaller one (the replay answers for an input nobody gave)
    moved_input    the graph read a ``torch.cat`` result in place; the next ``torch.cat`` lives at
                   another address, so the replay reads the stale one
    rng_classes    one row per randomness class: device draws (Philox) replay what eager draws
                   would; a host draw is frozen at capture (or refused by the capture)

Every function returns a DataFrame (one row per step: what was done, what happened, the first
values read back, whether they equal the eager reference) and needs CUDA. :func:`record` writes
all four with provenance to ``graph_lesson.json`` (``python -m cadencelab.course.graph_lesson
--out DIR``); :func:`recorded` reads the committed H200 file back (None when it is not there, and
:data:`MISSING` says how to make it); :func:`lesson` picks live or recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Callable

import pandas as pd
import torch

from ..profile.outputs import OutputRefused, guard_output, write_atomic
from ..profile.provenance import run_provenance as provenance
from .studies import device_task

__all__ = ["STEP_COLUMNS", "RNG_COLUMNS", "FILE", "MISSING", "RECORD_COMMAND", "capture", "basic_replay",
           "new_shape", "moved_input", "rng_classes", "run_all", "outcome", "breaks_table", "provenance", "record",
           "recorded", "lesson", "SCENARIOS"]

STEP_COLUMNS = ["step", "what", "happened", "read_back", "eager", "equal_to_eager"]
RNG_COLUMNS = ["rng_class", "rng", "call", "path", "read_back", "eager", "equal_to_eager"]
SCENARIOS = ("basic_replay", "new_shape", "moved_input", "rng_classes")
#: the recorded file, relative to the data folder
FILE = device_task("graph_lesson").path
RECORD_COMMAND = "python -m cadencelab.course.graph_lesson --out data/h200"
MISSING = (f"recorded H200 output not present (data/{FILE}): run `{RECORD_COMMAND}` on a GPU "
           "(set $CADENCELAB_COMMIT to the commit it runs) and commit the file")
_SHOW = 4  # values read back per row


def _values(t: torch.Tensor) -> list:
    return [round(float(v), 6) for v in t.detach().flatten()[:_SHOW].cpu()]


def _need_cuda(device: str) -> torch.device:
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(f"the raw CUDA-graph lesson needs a CUDA device, got {device!r} "
                           f"(cuda available: {torch.cuda.is_available()}); on a CPU read the recorded file: {MISSING}")
    return dev


def _layer(n: int, dev, seed: int) -> Callable:
    g = torch.Generator(device="cpu").manual_seed(seed)
    w = torch.randn(n, n, generator=g).to(dev)
    return lambda x: torch.tanh(x @ w)


def capture(fn: Callable, static_x: torch.Tensor, warmup: int = 3):
    """The recipe: warm ``fn`` up on a side stream, capture one call on ``static_x``; (graph, static output)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream: lazy init, autotuning, allocator
        for _ in range(warmup):
            fn(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # kernels are recorded, not run
        static_y = fn(static_x)
    return graph, static_y


def _row(step, what, happened, got=None, want=None) -> dict:
    eq = None if got is None or want is None else bool(got.shape == want.shape and torch.equal(got, want))
    return dict(step=step, what=what, happened=happened, read_back=None if got is None else _values(got),
                eager=None if want is None else _values(want), equal_to_eager=eq)


def basic_replay(device: str = "cuda", n: int = 8, seed: int = 0) -> pd.DataFrame:
    """Static input, side-stream warm-up, capture, ``copy_``, replay; each replay against eager."""
    dev = _need_cuda(device)
    f = _layer(n, dev, seed)
    static_x = torch.zeros(n, n, device=dev)
    rows = [_row(1, "static input", f"zeros {tuple(static_x.shape)} at 0x{static_x.data_ptr():x}")]
    graph, static_y = capture(f, static_x)
    rows.append(_row(2, "warm-up on a side stream, capture", "graph recorded; nothing computed for new values yet"))
    g = torch.Generator(device="cpu").manual_seed(seed + 1)
    for i in range(2):
        x = torch.randn(n, n, generator=g).to(dev)
        static_x.copy_(x)
        graph.replay()
        torch.cuda.synchronize(dev)
        rows.append(_row(3 + i, f"copy_ new values, replay ({i + 1})", "replayed into the static output",
                         static_y.clone(), f(x)))
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def new_shape(device: str = "cuda", n: int = 8, seed: int = 0) -> pd.DataFrame:
    """Feed a captured graph an input of another shape: larger (``copy_`` refuses) and broadcastable."""
    dev = _need_cuda(device)
    f = _layer(n, dev, seed)
    static_x = torch.zeros(n, n, device=dev)
    graph, static_y = capture(f, static_x)
    g = torch.Generator(device="cpu").manual_seed(seed + 2)
    rows = []
    bigger = torch.randn(n + 2, n, generator=g).to(dev)
    try:
        static_x.copy_(bigger)
        graph.replay()
        torch.cuda.synchronize(dev)
        rows.append(_row(1, f"copy_ a {tuple(bigger.shape)} input", "copied and replayed", static_y.clone(), f(bigger)))
    except RuntimeError as e:
        rows.append(_row(1, f"copy_ a {tuple(bigger.shape)} input", f"refused: {str(e).splitlines()[0][:120]}"))
    row = torch.randn(1, n, generator=g).to(dev)
    static_x.copy_(row)  # broadcasts: every row of the static input becomes this one row
    graph.replay()
    torch.cuda.synchronize(dev)
    rows.append(_row(2, f"copy_ a {tuple(row.shape)} input", "broadcast silently: the replay returns a "
                     f"{tuple(static_y.shape)} output for a {tuple(row.shape)} input", static_y.clone(), f(row)))
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def moved_input(device: str = "cuda", n: int = 8, keep: int = 6, seed: int = 0) -> pd.DataFrame:
    """Capture a graph that reads a ``torch.cat`` result in place; the next cat moves, the replay reads stale."""
    dev = _need_cuda(device)
    f = _layer(n, dev, seed)
    g = torch.Generator(device="cpu").manual_seed(seed + 3)
    cache = torch.randn(keep, n, generator=g).to(dev)
    x0 = torch.cat([cache, torch.randn(n - keep, n, generator=g).to(dev)])  # the stock retention: a new tensor
    graph, static_y = capture(f, x0)
    rows = [_row(1, "capture on x0 = torch.cat([cache, new])", f"x0 at 0x{x0.data_ptr():x}")]
    x1 = torch.cat([x0[n - keep:], torch.randn(n - keep, n, generator=g).to(dev)])  # the next chunk's cache
    graph.replay()
    torch.cuda.synchronize(dev)
    moved = x1.data_ptr() != x0.data_ptr()
    rows.append(_row(2, "next chunk: x1 = torch.cat(...), replay", f"x1 at 0x{x1.data_ptr():x} "
                     f"({'moved' if moved else 'same address'}); the graph still reads x0", static_y.clone(), f(x1)))
    stale = bool(torch.equal(static_y, f(x0)))
    rows.append(_row(3, "compare the replay with f(x0)", "stale read: it is the old input's answer" if stale
                     else "not the old answer either", static_y.clone(), f(x0)))
    x0.copy_(x1)  # the fix: a stable address (the carry) written in place
    graph.replay()
    torch.cuda.synchronize(dev)
    rows.append(_row(4, "fix: copy_ x1 into the captured address, replay", "replayed on the new values",
                     static_y.clone(), f(x1)))
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def _rng_class(name: str, rng: str, fn: Callable, x: torch.Tensor, calls: int, seed: int) -> list[dict]:
    dev = x.device
    torch.manual_seed(seed)
    eager = []
    for _ in range(calls):
        eager.append(fn(x).clone())
        torch.cuda.synchronize(dev)  # a host draw is copied asynchronously: let it land before the next draw
    torch.manual_seed(seed)
    rows = [dict(rng_class=name, rng=rng, call=0, path="eager probe", read_back=_values(fn(x)),
                 eager=_values(eager[0]), equal_to_eager=None)]
    rows[0]["equal_to_eager"] = rows[0]["read_back"] == rows[0]["eager"]
    host, device_state = torch.get_rng_state(), torch.cuda.get_rng_state(dev)
    try:
        graph, out = capture(fn, x)
    except RuntimeError as e:
        torch.set_rng_state(host)
        torch.cuda.set_rng_state(device_state, dev)
        return rows + [dict(rng_class=name, rng=rng, call=1, path=f"capture refused: {str(e).splitlines()[0][:120]}",
                            read_back=None, eager=_values(eager[1]), equal_to_eager=False)]
    torch.set_rng_state(host)  # the capture and its warm-up drew nothing the eager calls see
    torch.cuda.set_rng_state(device_state, dev)
    for i in range(1, calls):
        graph.replay()
        torch.cuda.synchronize(dev)
        rows.append(dict(rng_class=name, rng=rng, call=i, path="replay", read_back=_values(out),
                         eager=_values(eager[i]), equal_to_eager=bool(torch.equal(out, eager[i]))))
    return rows


def rng_classes(device: str = "cuda", n: int = 8, calls: int = 4, seed: int = 0) -> pd.DataFrame:
    """Per randomness class, replay n against eager call n after the same seed: device draws vs a host draw."""
    dev = _need_cuda(device)
    x = torch.zeros(n, n, device=dev)
    rows = _rng_class("noise drawn on the device (Philox)", "device", lambda v: v + torch.randn_like(v), x, calls, seed)
    staging = torch.empty(n, n).pin_memory()  # a host draw lands here and is copied to the device

    def host_noise(v):
        staging.normal_()  # runs on the host when called: at capture, once
        return v + staging.to(v.device, non_blocking=True)

    rows += _rng_class("noise drawn on the host, copied over", "host", host_noise, x, calls, seed)
    return pd.DataFrame(rows, columns=RNG_COLUMNS)


def run_all(device: str = "cuda") -> dict[str, pd.DataFrame]:
    """Every scenario, live."""
    return {name: globals()[name](device) for name in SCENARIOS}


# ---------------------------------------------------------------------------------------
# reading the outcome (device-free)
# ---------------------------------------------------------------------------------------


def outcome(frame: pd.DataFrame) -> str:
    """What a scenario's rows show: "exact" (every compared replay equals eager), "refused" (a step
    was refused), "stale read" (a replay gave an older input's answer), "wrong" (a replay differs)."""
    if "step" in frame.columns:
        if frame["happened"].astype(str).str.startswith("stale read").any():
            return "stale read"
        refused = frame["happened"].astype(str).str.startswith("refused").any()
        if refused and not frame["equal_to_eager"].eq(False).any():
            return "refused"
    else:
        if frame["path"].astype(str).str.startswith("capture refused").any():
            return "refused"
    compared = frame["equal_to_eager"].dropna()
    if compared.empty:
        raise ValueError("outcome: no row compares a replay with eager")
    return "exact" if compared.astype(bool).all() else "wrong"


def breaks_table(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per scenario (and per RNG class): its outcome and the replays that equal eager."""
    missing = [s for s in SCENARIOS if s not in frames]
    if missing:
        raise ValueError(f"breaks_table: missing scenarios {missing}; got {sorted(frames)}")
    rows = []
    for name in SCENARIOS[:-1]:
        f = frames[name]
        cmp = f["equal_to_eager"].dropna()
        rows.append(dict(scenario=name, rng="", outcome=outcome(f), equal_replays=f"{int(cmp.sum())}/{len(cmp)}"))
    for cls, f in frames["rng_classes"].groupby("rng_class", sort=False):
        reps = f[f["path"] == "replay"]["equal_to_eager"]
        rows.append(dict(scenario=f"rng: {cls}", rng=f["rng"].iloc[0], outcome=outcome(f),
                         equal_replays=f"{int(reps.sum())}/{len(reps)}"))
    return pd.DataFrame(rows, columns=["scenario", "rng", "outcome", "equal_replays"])


# ---------------------------------------------------------------------------------------
# recording
# ---------------------------------------------------------------------------------------


def record(out_dir: str | os.PathLike, device: str = "cuda", overwrite: bool = False) -> Path:
    """Run every scenario live and write ``out_dir/graph_lesson.json`` (provenance + one record list per scenario);
    never into the recorded data folder, nor over an earlier record unless ``overwrite``."""
    path = guard_output(out_dir, "--out", results=(Path(FILE).name,), overwrite=overwrite) / Path(FILE).name
    frames = run_all(device)
    obj = dict(provenance=provenance(device), command=RECORD_COMMAND,
               frames={k: json.loads(v.to_json(orient="records")) for k, v in frames.items()},
               summary=breaks_table(frames).to_dict(orient="records"))
    return write_atomic(path, json.dumps(obj, indent=1))  # a failed write leaves any earlier file whole


def recorded(path: str | os.PathLike | None = None) -> dict | None:
    """The recorded lesson: {"provenance": ..., scenario: DataFrame, ...}; None when the file is absent."""
    if path is None:
        from .data import data_dir

        path = data_dir() / FILE
    p = Path(path)
    if not p.exists():
        return None
    obj = json.loads(p.read_text())
    if "frames" not in obj or "provenance" not in obj:
        raise ValueError(f"{p}: not a graph-lesson record (needs 'provenance' and 'frames'); re-run {RECORD_COMMAND}")
    cols = {name: (RNG_COLUMNS if name == "rng_classes" else STEP_COLUMNS) for name in SCENARIOS}
    out = {"provenance": obj["provenance"]}
    for name in SCENARIOS:
        if name not in obj["frames"]:
            raise ValueError(f"{p}: scenario {name!r} missing; re-run {RECORD_COMMAND}")
        out[name] = pd.DataFrame(obj["frames"][name], columns=cols[name])
    return out


def lesson(live: bool, device: str = "cuda", path: str | os.PathLike | None = None) -> dict | None:
    """Live frames on CUDA when ``live`` (provenance: this machine), else the recorded ones (None if absent)."""
    if live:
        return {"provenance": provenance(device), **run_all(device)}
    return recorded(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cadencelab.course.graph_lesson", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder to write graph_lesson.json into")
    ap.add_argument("--device", default="cuda", help="a CUDA device (default: cuda)")
    ap.add_argument("--overwrite", action="store_true", help="replace an earlier graph_lesson.json in --out")
    a = ap.parse_args(argv)
    try:
        guard_output(a.out, "--out", results=(Path(FILE).name,), overwrite=a.overwrite)
    except OutputRefused as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    _need_cuda(a.device)
    path = record(a.out, a.device, a.overwrite)
    print(breaks_table(recorded(path)).to_string(index=False))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
