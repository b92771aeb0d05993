"""cadencelab COMMAND ...: the workbench's command line (COMMAND --help: its options and their defaults).

  catalog [--model M] [--f-prompt P --f-retained R --f-chunk C --steps S] [--k-max K] [--json FILE]
      prints what a declaration derives (regions, envelopes and rho, shape catalogs, checks C1-C3, verdicts),
      then a catalog summary; no model built for a registered name
  certify --model M [--device D] [--backend B]
      certifies a model against its own stock step: the clause table, then one line (exit 1 if one fails)
  profile [--model M] [--config C] [--device D] [--arm A] [--chunks N] [--steps S] [--seed N] [--out DIR]
      profiles one short Token2wav turn (or M's traffic) under torch.profiler; prints one row per call
      (first, steady..., flush) and writes a Chrome trace and the rows' CSV
  bench STUDY ...
      the benchmark studies (the same as python -m cadencelab.bench): progress, then a short table
  tour OUT_DIR [--quiet] [--only N,...]
      runs the course notebooks, writes OUT_DIR/index.html; one line per notebook (exit 1 if one fails)
  lab [--port N] [--no-browser]
      opens the course notebooks in JupyterLab; prints where it starts, then the server's address

M is a registered model (cadencelab.adapters.registry) or a user's package.module:function. Every command returns
an exit code (0 on success); flags are checked before any model is built (a bad value exits 2 with one line naming
the flag); a failure exits 1 with one line, its traceback only with --debug (anywhere) or CADENCELAB_DEBUG=1.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from .bench.flags import (MAX_PROFILE_CHUNKS, MAX_SEED, MODEL_CONFIGS, FlagError, HelpFormatter, OneLineParser,
                          check_device, check_out_dir, check_out_file, check_steps, int_range, run_main)

#: subcommands whose arguments go untouched to another entry point
_PASSTHROUGH = ("bench",)

#: declaration parameters the token2wav factory accepts from the command line
_T2W_FLAGS = (("f_prompt", "--f-prompt"), ("f_retained", "--f-retained"), ("f_chunk", "--f-chunk"),
              ("n_steps", "--steps"))


# ---------------------------------------------------------------------------------------
# catalog
# ---------------------------------------------------------------------------------------


def _declaration(args):
    """The declaration named by ``--model`` (a registered name or package.module:function), with the
    token2wav parameters that were given."""
    from .adapters import registry
    from .contract import DeclarationError

    given = {name: getattr(args, name) for name, _ in _T2W_FLAGS if getattr(args, name) is not None}
    typed = ", ".join(f"{flag} {given[name]}" for name, flag in _T2W_FLAGS if name in given)
    if given and args.model != "token2wav":
        flags = ", ".join(flag for name, flag in _T2W_FLAGS if name in given)
        print(f"cadencelab catalog: {flags} apply to --model token2wav only", file=sys.stderr)
        return None
    try:
        return registry.declaration(args.model, **given)
    except DeclarationError as e:  # a combination the declaration refuses: name what was typed
        raise FlagError(typed or "--model", f"not a valid {args.model} declaration ({e.reason}; field {e.field})") from e
    except ValueError as e:  # not registered, not importable, not a declaration
        raise FlagError("--model", str(e)) from None


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
        from .profile.outputs import write_atomic

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
    """The stream calls of one turn: ``n_chunks`` chunk calls (a chunk plus its lookahead, dropping the chunk:
    the first, behind the priming silence, then ``n_chunks - 1`` steady ones), then the flush."""
    import numpy as np

    from .adapters.token2wav.turns import chunk_pieces, turn_tokens

    toks = np.random.default_rng([seed, 7]).integers(0, vocab, turn_tokens(n_chunks, flush_tokens)).tolist()
    return list(chunk_pieces(toks))


def cmd_profile(args) -> int:
    if args.model is not None:
        return _profile_model(args)
    import torch

    from .adapters.token2wav import REAL, TEACHING
    from .adapters.token2wav.runtime import build_runtime
    from .bench.common import write_csv
    from .profile.outputs import guard_output
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


def _spec(args):
    """The spec ``--model`` names (a registered name or package.module:function), built on ``--device``."""
    from .adapters import registry

    check_device("--device", args.device)
    try:
        return registry.resolve(args.model, args.device, getattr(args, "arm", None))
    except ValueError as e:
        raise FlagError("--model", str(e)) from None


def _profile_model(args) -> int:
    """``profile --model M``: one pass of M's traffic through one arm under torch.profiler (a warm-up pass first,
    unprofiled); one row per call (its turn, operator and kind), a Chrome trace and the rows' CSV."""
    import re

    import torch

    from .adapters.kit import run_traffic
    from .bench.common import write_csv
    from .profile import export_chrome_trace
    from .profile.capture import profiled
    from .profile.outputs import guard_output

    check_out_dir("--out", args.out)
    torch.manual_seed(args.seed)
    spec = _spec(args)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{spec.name}_{args.arm}")
    guard_output(args.out, "--out", results=(f"{stem}*",), overwrite=args.overwrite)
    rt = spec.runtime(args.arm, "eager" if torch.device(args.device).type == "cpu" else "auto")
    run_traffic(rt, spec.traffic)  # warm-up: captures and first-call costs stay out of the profile
    with profiled(args.device, window="call") as prof:
        calls = run_traffic(rt, spec.traffic)
    rows = prof.windows("call")
    for col in ("kind", "operator", "turn"):
        rows.insert(1, col, list(calls[col])[: len(rows)])
    out = Path(args.out)
    trace_path = export_chrome_trace(prof, out / f"{stem}.pt.trace.json.gz")
    csv_path = out / f"{stem}_calls.csv"
    write_csv(rows, csv_path)
    print(_calls_table(rows, spec.name, args.arm, torch.device(args.device)))
    print(f"\ntrace:   {trace_path}  (open in https://ui.perfetto.dev or chrome://tracing)")
    print(f"summary: {csv_path}")
    return 0


def _calls_table(rows, model: str, arm: str, device) -> str:
    t = rows[["occurrence", "turn", "operator", "kind"]].copy()
    for col in ("wall", "busy"):
        t[f"{col}_ms"] = rows[f"{col}_us"] / 1e3
    for col in ("slack_frac", "cpu_ops", "kernel_launches", "graph_launches"):
        if col in rows:
            t[col] = rows[col]
    kinds = ", ".join(f"{n} {k}" for k, n in t["kind"].value_counts(sort=False).items())
    shown = t.astype(object).where(t.notna(), NOT_APPLICABLE)
    lines = [f"# {model}, arm {arm}, {device}: {len(t)} calls ({kinds})",
             shown.to_string(index=False, float_format=lambda v: f"{v:.3f}")]
    reason = rows.attrs.get("na_reason") or ""
    if reason:
        lines.append(f"{NOT_APPLICABLE}: {reason}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# certify
# ---------------------------------------------------------------------------------------


def cmd_certify(args) -> int:
    """Certify a model: its clause table, then one line; exit 1 when a clause fails."""
    import torch

    torch.manual_seed(args.seed)
    spec = _spec(args)
    cert = spec.certify(args.backend)
    print(cert.table.to_string(index=False))
    n, passed = len(cert.table), int(cert.table["passed"].sum())
    print(f"\n{spec.name}: {'certified' if cert.ok else 'NOT certified'} ({passed} of {n} clauses; "
          f"{len(cert.catalog)} classes in the catalog)")
    return 0 if cert.ok else 1


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


#: what the per-call table shows where a value does not apply (device columns on a CPU)
NOT_APPLICABLE = "n/a"


def _profile_table(chunks, args, device) -> str:
    t = chunks[["occurrence", "kind"]].copy()
    for col in ("wall", "flow", "vocoder", "busy"):
        t[f"{col}_ms"] = chunks[f"{col}_us"] / 1e3
    for col in ("slack_frac", "cpu_ops", "kernel_launches", "graph_launches"):
        t[col] = chunks[col]
    kinds = ", ".join(f"{n} {k}" for k, n in t["kind"].value_counts(sort=False).items())
    head = f"# Token2wav {args.config}, arm {args.arm}, {device}: {len(t)} stream calls ({kinds})"
    shown = t.astype(object).where(t.notna(), NOT_APPLICABLE)
    lines = [head, shown.to_string(index=False, float_format=lambda v: f"{v:.2f}")]
    reason = chunks.attrs.get("na_reason") or ""
    if reason:
        lines.append(f"{NOT_APPLICABLE}: {reason}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# lab / tour
# ---------------------------------------------------------------------------------------


def cmd_lab(args) -> int:
    from .course import lab
    from .course.sources import notebooks_dir

    port = f"port {args.port}" if args.port else "the first free port JupyterLab finds"
    print(f"cadencelab lab: starting JupyterLab on {notebooks_dir()} ({port}); it prints its address "
          f"(http://localhost:{args.port or 'PORT'}/lab?token=...) when it is up; Ctrl-C stops it", flush=True)
    kw = {} if args.browser else {"open_browser": False}
    try:
        rc = lab.launch_lab(port=args.port, **kw)
    except RuntimeError as e:  # e.g. JupyterLab missing
        print(f"cadencelab lab: {e}", file=sys.stderr)
        return 2
    return int(rc or 0)


def _only(text: str | None) -> dict:
    """``--only 0,9,10``: those course notebooks (by their number), in course order; a number with no notebook is
    a flag error naming the numbers there are."""
    if not text:
        return {}
    from .course.sources import course

    by_number = {int(p.name.split("_", 1)[0]): p for p in course()}
    try:
        wanted = {int(t) for t in text.split(",") if t.strip()}
    except ValueError:
        raise FlagError("--only", f"notebook numbers separated by commas, got {text!r}") from None
    missing = sorted(wanted - set(by_number))
    if missing or not wanted:
        named = ", ".join(map(str, missing)) or repr(text)
        raise FlagError("--only", f"no course notebook numbered {named}; "
                                  f"there are {', '.join(map(str, sorted(by_number)))}")
    return dict(notebooks=[by_number[n] for n in sorted(wanted)])


def cmd_tour(args) -> int:
    from .course import tour

    try:
        tour.check_tour_dir(args.out_dir)
    except ValueError as e:  # TourRefused: would overwrite files the tour did not write
        raise FlagError("OUT_DIR", str(e)) from None
    try:
        report = tour.run_tour(args.out_dir, progress=not args.quiet, **_only(args.only))
    except tour.TourFailed as e:
        print(f"cadencelab tour: {e}", file=sys.stderr)
        return 1
    print(f"report: {report}")
    return 0


# ---------------------------------------------------------------------------------------
# parser and entry point
# ---------------------------------------------------------------------------------------


def _check_model(text: str) -> str:
    """``--model``: a registered name or package.module:function (what it names is loaded when the command runs)."""
    from .adapters import registry

    if text not in registry.names() and (":" not in text or not all(text.split(":", 1))):
        raise argparse.ArgumentTypeError(f"{text!r}: a registered model ({', '.join(registry.names())}) or "
                                         f"package.module:function")
    return text


def _catalog_options(c: argparse.ArgumentParser) -> None:
    from .adapters.token2wav.clocks import T2W_CLOCKS as t2w
    from .contract import K_MAX

    c.add_argument("--model", type=_check_model, default="token2wav",
                   help="a registered declaration (cadencelab.adapters.registry) or package.module:function "
                        "returning a Declaration or a KitModel")
    c.add_argument("--f-prompt", dest="f_prompt", type=int_range(0),
                   help=f"token2wav: prompt frames (default: {t2w.prompt_frames}, the declaration's)")
    c.add_argument("--f-retained", dest="f_retained", type=int_range(1),
                   help=f"token2wav: retained frames (default: {t2w.retained_frames}, the declaration's)")
    c.add_argument("--f-chunk", dest="f_chunk", type=int_range(1),
                   help=f"token2wav: frames per chunk, a whole number of tokens (default: {t2w.chunk_frames}, the "
                        f"declaration's)")
    c.add_argument("--steps", dest="n_steps", type=int_range(1),
                   help=f"token2wav: solver steps (default: {t2w.n_steps}, the declaration's)")
    c.add_argument("--k-max", type=int_range(1), default=K_MAX, help="affordable catalog width")
    c.add_argument("--json", metavar="FILE",
                   help="also write region_table / catalog / checks / verdict there as JSON (default: none)")
    c.add_argument("--overwrite", action="store_true", help="replace an existing --json file (never in data/)")


def _profile_options(pr: argparse.ArgumentParser) -> None:
    from .adapters.arms import FACTORIAL
    from .adapters.token2wav.clocks import T2W_CLOCKS

    pr.add_argument("--model", type=_check_model, default=None,
                    help="a registered model or package.module:function of the device returning a KitModel: "
                         "profiles its traffic (one warm-up pass, then one profiled), one row per call "
                         "(default: Token2wav at --config, one row per stream call)")
    pr.add_argument("--config", choices=MODEL_CONFIGS, default="teaching",
                    help="Token2wav model sizes: real (the released model) or teaching (small, CPU)")
    pr.add_argument("--device", default="cpu", help="torch device: cpu, cuda or cuda:N")
    pr.add_argument("--arm", default=FACTORIAL[0], choices=FACTORIAL,
                    help="runtime arm: B0 stock; S state rule; R / Rc replay per solver step / per chunk; SR, SRc both")
    pr.add_argument("--chunks", type=int_range(1, MAX_PROFILE_CHUNKS), default=2, metavar="N",
                    help="chunk calls before the flush: the first and N-1 steady ones, so the table has N+1 rows "
                         "(first, steady..., flush)")
    pr.add_argument("--steps", type=int, default=T2W_CLOCKS.n_steps,
                    help="solver steps (1 .. the solver's cache slots)")
    pr.add_argument("--seed", type=int_range(0, MAX_SEED), default=0, help="seed of the weights, prompt and tokens")
    pr.add_argument("--out", default=os.path.join("out", "profile"), help="output folder (trace and CSV)")
    pr.add_argument("--overwrite", action="store_true", help="replace this config and arm's files in --out")


def _certify_options(c: argparse.ArgumentParser) -> None:
    c.add_argument("--model", type=_check_model, required=True,
                   help="a registered model or package.module:function of the device returning a KitModel "
                        "(required: no default)")
    c.add_argument("--device", default="cpu", help="torch device: cpu, cuda or cuda:N (default: cpu)")
    c.add_argument("--backend", choices=("auto", "eager", "cuda"), default="auto",
                   help="replay backend (auto: CUDA graphs on a GPU, the eager backend elsewhere)")
    c.add_argument("--seed", type=int_range(0, MAX_SEED), default=0, help="torch's seed before the model is built")


def _lab_options(lab: argparse.ArgumentParser) -> None:
    lab.add_argument("--port", type=int_range(1, 65535), default=None,
                     help="TCP port, 1..65535 (default: the first free one JupyterLab finds)")
    lab.add_argument("--no-browser", dest="browser", action="store_false", help="do not open a web browser")


def _tour_options(t: argparse.ArgumentParser) -> None:
    t.add_argument("out_dir", metavar="OUT_DIR", help="the report's folder: a new or empty one, or an earlier tour's")
    t.add_argument("--quiet", action="store_true", help="no progress lines")
    t.add_argument("--only", metavar="N,N,...", default=None,
                   help="run only these notebooks, by number (e.g. 0,3,9,10: the ones graded on a GPU; default: all)")


#: the subcommands: (name, one-line help, what it prints, its options or None, its function)
_COMMANDS = {
    "catalog": ("derive regions, catalogs and verdicts from a declaration",
                "Prints the derivation report of a shipped declaration (regions, envelopes and rho, shape catalogs, "
                "checks C1-C3, per-operator verdicts), then a catalog summary; no torch work.",
                _catalog_options, "cmd_catalog"),
    "certify": ("certify a model against its own stock step (clause table)",
                "Prints the certificate of a registered model or a user's package.module:function (a KitModel) "
                "against its own stock step: the clause table, then one line; exit 1 when a clause fails.",
                _certify_options, "cmd_certify"),
    "bench": ("benchmark studies (python -m cadencelab.bench ...)", "", None, "cmd_bench"),
    "profile": ("profile a short Token2wav stream (trace + per-call table)",
                "Profiles one short Token2wav turn under torch.profiler: prints one row per stream call (first, "
                "steady..., flush: wall, flow, vocoder and device-busy ms, slack, host ops, launches; n/a where a "
                "value does not apply, e.g. device columns on a CPU), then the paths of the Chrome trace "
                "(.pt.trace.json.gz, opens in Perfetto) and of the rows' CSV it wrote.",
                _profile_options, "cmd_profile"),
    "lab": ("open the notebooks in JupyterLab (lab --no-browser: do not open a browser)",
            "Opens the course notebooks in JupyterLab: prints where it starts at once, then JupyterLab's own lines "
            "with the address to open; Ctrl-C stops the server.", _lab_options, "cmd_lab"),
    "tour": ("run the notebooks and write an HTML report",
             "Runs every course notebook headless and writes OUT_DIR/index.html, the executed notebooks and "
             "summary.json; prints one line per notebook (ok or FAILED, seconds, figures) and the report's path. "
             "Exit 1 if a notebook fails.", _tour_options, "cmd_tour"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser. Only ``command`` gets its options (the others are listed by name and
    help), so the top-level help and a usage error import nothing of the models: no torch before a
    command runs."""
    import textwrap

    p = OneLineParser(prog="cadencelab", description=__doc__, formatter_class=HelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (short, prints, options, fn) in _COMMANDS.items():
        if options is None or name != command:
            sub.add_parser(name, help=short, add_help=options is not None)
            continue
        c = sub.add_parser(name, help=short, description=textwrap.fill(prints, 100), formatter_class=HelpFormatter)
        options(c)
        c.set_defaults(fn=globals()[fn])
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _PASSTHROUGH:
        return cmd_bench(argv[1:])
    command = next((a for a in argv if not a.startswith("-")), None)

    def run(a):
        args = build_parser(command).parse_args(a)
        return args.fn(args)

    return run_main(f"cadencelab {command}" if command in _COMMANDS else "cadencelab", run, argv)


if __name__ == "__main__":
    sys.exit(main())
