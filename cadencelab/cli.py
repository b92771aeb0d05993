"""``cadencelab``: the command line.

    cadencelab catalog [--model token2wav] [--f-prompt P --f-retained R --f-chunk C --steps S] [--json FILE]
        derive regions, catalogs, checks and verdicts from a shipped declaration (no torch work)
    cadencelab bench STUDY ...
        the benchmark studies (same as ``python -m cadencelab.bench``)
    cadencelab profile [--config teaching] [--device cpu] [--arm B0] [--chunks 2] [--out DIR]
        profile a short Token2wav stream: Chrome trace (.json.gz) + per-chunk summary CSV
    cadencelab lab [--port N]
        open the notebooks in JupyterLab
    cadencelab tour OUT_DIR
        run the notebooks end to end and write an HTML report

Every subcommand returns an exit code (0 on success). Flags are checked before any model is
built: a bad value exits 2 with one line naming the flag; a failure exits 1 with one line. The
traceback is printed only with ``--debug`` (anywhere on the line) or ``CADENCELAB_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from .course import tour
from .profile.outputs import guard_output, write_atomic
from .contract.examples import T2W_CLOCKS
from .bench.flags import (MAX_PROFILE_CHUNKS, MAX_SEED, FlagError, OneLineParser, check_device, check_out_dir,
                          check_out_file, check_steps, int_range, run_main)

#: subcommands whose arguments go untouched to another entry point
_PASSTHROUGH = ("bench",)
#: the subcommands (named in one-line errors)
_COMMANDS = ("catalog", "bench", "profile", "lab", "tour")

#: declaration parameters the token2wav factory accepts from the command line
_T2W_FLAGS = (("f_prompt", "--f-prompt"), ("f_retained", "--f-retained"), ("f_chunk", "--f-chunk"),
              ("n_steps", "--steps"))


# ---------------------------------------------------------------------------------------
# catalog
# ---------------------------------------------------------------------------------------


def _declaration(args):
    """The declaration named by ``--model``, with the token2wav parameters that were given."""
    from .contract import EXAMPLES

    from .contract import DeclarationError

    given = {name: getattr(args, name) for name, _ in _T2W_FLAGS if getattr(args, name) is not None}
    typed = ", ".join(f"{flag} {given[name]}" for name, flag in _T2W_FLAGS if name in given)
    if given and args.model != "token2wav":
        flags = ", ".join(flag for name, flag in _T2W_FLAGS if name in given)
        print(f"cadencelab catalog: {flags} apply to --model token2wav only", file=sys.stderr)
        return None
    try:
        return EXAMPLES[args.model](**given)
    except DeclarationError as e:  # a combination the declaration refuses: name what was typed
        raise FlagError(typed or "--model", f"not a valid {args.model} declaration ({e.reason}; field {e.field})") from e


def given_flags(args) -> str:
    """The declaration flags typed (``--steps 100``), or ``--model NAME`` when none was."""
    typed = [f"{flag} {getattr(args, name)}" for name, flag in _T2W_FLAGS if getattr(args, name, None) is not None]
    return ", ".join(typed) or f"--model {args.model}"


def _past_the_stock(decl, typed: str) -> list[str]:
    """One warning per region whose declared demand exceeds the stock runtime's reserve (ρ < 1), naming
    the region, both shapes and the ratio; refused (FlagError naming ``typed``) when the declared state
    (its bounded regions) needs more memory than this machine has free on any device."""
    import torch

    from .contract.derivation import region_table
    from .state.alloc import format_bytes, free_bytes

    t = region_table(decl)
    own = t[t["resident_in"].isna() & t["bounded"]]  # an unbounded region is the C2 check's finding, not a size
    need = float(own["demand_bytes"].sum())
    free = max([free_bytes("cpu")] + [free_bytes(f"cuda:{i}") for i in range(torch.cuda.device_count())])
    if not math.isfinite(need) or need > free:
        big = own.loc[own["demand_bytes"].idxmax()]
        raise FlagError(typed, f"the declared state needs {format_bytes(need)} (largest region {big['region']!r} at "
                               f"{tuple(big['demand_shape'])}, {format_bytes(big['demand_bytes'])}), more than the "
                               f"{format_bytes(free)} free on this machine's largest device")
    return [f"region {r.region!r}: declared demand {tuple(r.demand_shape)} ({format_bytes(r.demand_bytes)}) is "
            f"{1 / r.rho:.3g} x the stock reserve {tuple(r.stock_shape)} ({format_bytes(r.stock_bytes)}): ρ {r.rho:.2g} < 1, "
            f"the stock runtime cannot hold it ({typed})" for r in t.itertuples() if r.rho == r.rho and r.rho < 1]


def catalog_summary(derivation) -> str:
    """Class counts per operator and kind (admitted / eager), one line per operator."""
    cat = derivation.catalog
    lines = ["## catalog summary"]
    listed = set(cat["operator"]) if not cat.empty else set()
    for op, g in (cat.groupby("operator", sort=False) if listed else ()):
        parts = []
        for kind in ("steady", "flush", "priming"):
            k = g[g["kind"] == kind]
            if len(k):
                adm = int(k["admitted"].astype(bool).sum())
                parts.append(f"{kind} {len(k)} ({adm} admitted, {len(k) - adm} eager)")
        lines.append(f"  {op}: {len(g)} classes: " + "; ".join(parts))
    skipped = getattr(derivation, "not_enumerated", {})
    for op in derivation.verdict["operator"]:
        if op in skipped:
            lines.append(f"  {op}: {skipped[op]:,} rows: counted, not enumerated (see the verdict)")
        elif op not in listed:
            lines.append(f"  {op}: no finite catalog")
    return "\n".join(lines)


def _jsonable(v):
    """Plain JSON values: tuples as lists, numpy scalars unwrapped, inf as "inf", NaN as null."""
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        try:
            v = v.item()
        except (ValueError, TypeError):
            return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return None
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if v is None or isinstance(v, (bool, int, str)):
        return v
    return str(v)


def derivation_dict(derivation) -> dict:
    """region_table, catalog, checks and verdict as lists of records (plus model and params)."""
    d = derivation.declaration

    def records(df):
        return [_jsonable(r) for r in df.to_dict("records")]

    return dict(model=d.model, params=_jsonable(dict(d.params or {})),
                region_table=records(derivation.regions), catalog=records(derivation.catalog),
                checks=records(derivation.checks), verdict=records(derivation.verdict))


def cmd_catalog(args) -> int:
    from .contract import derive

    if args.json is not None:  # '' is refused, not ignored
        check_out_file("--json", args.json, overwrite=args.overwrite)
    decl = _declaration(args)
    if decl is None:
        return 2
    past = _past_the_stock(decl, given_flags(args))
    der = derive(decl, k_max=args.k_max)
    for line in past:
        print(f"cadencelab catalog: warning: {line}", file=sys.stderr)
    print(der.report())
    print()
    print(catalog_summary(der))
    if args.json is not None:
        path = write_atomic(args.json, json.dumps(derivation_dict(der), indent=1))
        print(f"\nwrote {path}")
    return 0


# ---------------------------------------------------------------------------------------
# bench (pass-through)
# ---------------------------------------------------------------------------------------


def cmd_bench(argv: list[str]) -> int:
    from .bench.__main__ import main as bench_main

    return int(bench_main(argv, prog="cadencelab bench") or 0)


# ---------------------------------------------------------------------------------------
# profile
# ---------------------------------------------------------------------------------------


def _stream_plan(n_chunks: int, vocab: int, seed: int, flush_tokens: int = 13) -> list[tuple[list[int], bool]]:
    """The chunks of one turn: ``n_chunks`` steady calls (a chunk plus its lookahead, dropping the chunk), then a flush."""
    import numpy as np

    from .adapters.token2wav.turns import chunk_pieces, turn_tokens

    toks = np.random.default_rng([seed, 7]).integers(0, vocab, turn_tokens(n_chunks, flush_tokens)).tolist()
    return list(chunk_pieces(toks))


def cmd_profile(args) -> int:
    import torch

    from .adapters.token2wav import REAL, TEACHING
    from .adapters.token2wav.runtime import build_runtime
    from .bench.common import write_csv
    from .profile import export_chrome_trace
    from .profile.capture import profiled

    check_device("--device", args.device)
    check_steps("--steps", args.steps)
    check_out_dir("--out", args.out)
    stem = f"token2wav_{args.config}_{args.arm}"
    guard_output(args.out, "--out", results=(f"{stem}*",), overwrite=args.overwrite)
    cfg = TEACHING if args.config == "teaching" else REAL
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    rt, prompt = build_runtime(cfg, args.arm, args.seed, device, n_timesteps=args.steps)
    plan = _stream_plan(args.chunks, cfg.vocab_size, args.seed)
    rt.ranges = True  # flow / vocoder / synthesis sub-ranges inside each chunk
    with profiled(device, window="chunk") as prof:
        with torch.profiler.record_function("priming"):
            rt.set_stream_cache(prompt)
        for piece, last in plan:
            with torch.profiler.record_function("chunk"):
                rt.stream(piece, last_chunk=last)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
    rt.ranges = False

    out = Path(args.out)
    trace_path = export_chrome_trace(prof, out / f"{stem}.pt.trace.json.gz")
    chunks = _chunk_rows(prof, plan)
    csv_path = out / f"{stem}_chunks.csv"
    write_csv(chunks, csv_path)
    print(_profile_table(chunks, args, device))
    print(f"\ntrace:   {trace_path}  (open in https://ui.perfetto.dev or chrome://tracing)")
    print(f"summary: {csv_path}")
    return 0


def _chunk_rows(prof, plan):
    """prof.windows("chunk") plus kind, host op count and the flow / vocoder stage walls per chunk."""
    chunks = prof.windows("chunk")
    chunks.insert(1, "kind", ["flush" if last else ("first" if i == 0 else "steady")
                              for i, (_, last) in enumerate(plan)][: len(chunks)])
    starts = prof.cpu_ops["start_ns"].to_numpy()
    chunks["cpu_ops"] = [int(((starts >= s) & (starts < e)).sum()) for s, e in zip(chunks["start_ns"], chunks["end_ns"])]
    stages = prof.stages(["flow", "vocoder"])
    for name in ("flow", "vocoder"):
        wall = stages.loc[stages["range"] == name, "wall_us"].to_numpy()
        chunks[f"{name}_us"] = wall if len(wall) == len(chunks) else float("nan")
    return chunks


def _profile_table(chunks, args, device) -> str:
    t = chunks[["occurrence", "kind"]].copy()
    for col in ("wall", "flow", "vocoder", "busy"):
        t[f"{col}_ms"] = chunks[f"{col}_us"] / 1e3
    for col in ("slack_frac", "cpu_ops", "kernel_launches", "graph_launches"):
        t[col] = chunks[col]
    head = f"# Token2wav {args.config}, arm {args.arm}, {device}: {len(t)} chunks"
    lines = [head, t.to_string(index=False, float_format=lambda v: f"{v:.2f}")]
    reason = chunks.attrs.get("na_reason") or ""
    if reason:
        lines.append(f"note: {reason}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# lab / tour
# ---------------------------------------------------------------------------------------


def cmd_lab(args) -> int:
    kw = {} if args.browser else {"open_browser": False}
    try:
        rc = tour.launch_lab(port=args.port, **kw)
    except RuntimeError as e:  # e.g. JupyterLab missing
        print(f"cadencelab lab: {e}", file=sys.stderr)
        return 2
    return int(rc or 0)


def cmd_tour(args) -> int:
    try:
        tour.check_tour_dir(args.out_dir)
    except ValueError as e:  # TourRefused: would overwrite files the tour did not write
        raise FlagError("OUT_DIR", str(e)) from None
    try:
        report = tour.run_tour(args.out_dir, progress=not args.quiet)
    except tour.TourFailed as e:
        print(f"cadencelab tour: {e}", file=sys.stderr)
        return 1
    print(f"report: {report}")
    return 0


# ---------------------------------------------------------------------------------------
# parser and entry point
# ---------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from .contract import EXAMPLES, K_MAX

    p = OneLineParser(prog="cadencelab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("catalog", help="derive regions, catalogs and verdicts from a declaration")
    c.add_argument("--model", choices=sorted(EXAMPLES), default="token2wav")
    t2w = T2W_CLOCKS
    c.add_argument("--f-prompt", dest="f_prompt", type=int_range(0), help=f"token2wav: prompt frames ({t2w.prompt_frames})")
    c.add_argument("--f-retained", dest="f_retained", type=int_range(1),
                   help=f"token2wav: retained frames ({t2w.retained_frames})")
    c.add_argument("--f-chunk", dest="f_chunk", type=int_range(1),
                   help=f"token2wav: frames per chunk, a whole number of tokens ({t2w.chunk_frames})")
    c.add_argument("--steps", dest="n_steps", type=int_range(1), help=f"token2wav: solver steps ({t2w.n_steps})")
    c.add_argument("--k-max", type=int_range(1), default=K_MAX, help=f"affordable catalog width (default {K_MAX})")
    c.add_argument("--json", metavar="FILE", help="also write region_table/catalog/checks/verdict as JSON")
    c.add_argument("--overwrite", action="store_true", help="replace an existing --json file (never in data/)")
    c.set_defaults(fn=cmd_catalog)

    sub.add_parser("bench", add_help=False, help="benchmark studies (python -m cadencelab.bench ...)")

    pr = sub.add_parser("profile", help="profile a short Token2wav stream (trace + per-chunk summary)")
    pr.add_argument("--config", choices=["teaching", "real"], default="teaching")
    pr.add_argument("--device", default="cpu")
    pr.add_argument("--arm", default="B0", choices=["B0", "S", "R", "Rc", "SR", "SRc"])
    pr.add_argument("--chunks", type=int_range(1, MAX_PROFILE_CHUNKS), default=2, help="steady chunks before the flush")
    pr.add_argument("--steps", type=int, default=T2W_CLOCKS.n_steps, help="solver steps")
    pr.add_argument("--seed", type=int_range(0, MAX_SEED), default=0)
    pr.add_argument("--out", default=os.path.join("out", "profile"))
    pr.add_argument("--overwrite", action="store_true", help="replace this config and arm's files in --out")
    pr.set_defaults(fn=cmd_profile)

    lab = sub.add_parser("lab", help="open the notebooks in JupyterLab")
    lab.add_argument("--port", type=int_range(1, 65535), default=None, help="TCP port (1..65535)")
    lab.add_argument("--no-browser", dest="browser", action="store_false", help="do not open a web browser")
    lab.set_defaults(fn=cmd_lab)

    t = sub.add_parser("tour", help="run the notebooks and write an HTML report")
    t.add_argument("out_dir")
    t.add_argument("--quiet", action="store_true", help="no progress lines")
    t.set_defaults(fn=cmd_tour)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _PASSTHROUGH:
        return cmd_bench(argv[1:])

    def run(a):
        args = build_parser().parse_args(a)
        return args.fn(args)

    command = next((a for a in argv if not a.startswith("-")), None)
    return run_main(f"cadencelab {command}" if command in _COMMANDS else "cadencelab", run, argv)


if __name__ == "__main__":
    sys.exit(main())
