"""The duplex second: backbone -> speech-token decoder -> Token2wav synthesis, per arm.

    python -m cadencelab.bench duplex --device cuda --preset h200 --arms B0,SRc --seconds 3 --out DIR

Every arm sees the same models, inputs and seeds: the two language models (:mod:`cadencelab.adapters.duplex`,
random weights from the declared preset) are built once and shared; each arm builds its own Token2wav in this
process, one arm after the other. Per arm, ``--seconds`` duplex seconds of one session; the first is a warm-up,
after which the runtime streams synthesis-only chunks until every steady cache extent of a turn has occurred
(replay arms capture there), then the session restarts. Per second and stage (and synthesis' flow / vocoder):
start and duration from CUDA events (perf_counter on a CPU); then one more second under ``torch.profiler``, kept
as ``trace_duplex_<arm>.json.gz`` for device-busy time, slack and launches; and the allocator peak per arm.

``--decode eager,graph,fused`` runs every arm again with the language models decoding as serving stacks do (static
KV cache, the decode step replayed as a CUDA graph: :mod:`cadencelab.adapters.duplex.served`; "fused" also the
prefill, and a second's steps as one graph), labelled ``ARM+graphLM`` / ``ARM+fusedLM``: controls, not exact
paths; PCM is compared with the first arm of the same mode, tokens with the same arm's eager run (and fused's
with its graph run). Writes ``duplex_second.json`` and ``duplex_second_rows.csv`` under
``--out`` and prints a short table last; PCM digests per second let arms be compared (same tokens in, same bytes
out when the arms are bit-exact).
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..adapters.duplex.models import PRESETS
from ..profile.provenance import run_provenance
from ..replay.determinism import CONDITIONS
from . import options
from .common import check_out, write_csv, write_json
from .flags import MAX_CHUNKS, add_study_parser, config_from_args, exit_code, int_range, names_in, opt

# ---------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------


@dataclass
class DuplexStudyConfig:
    preset: str = opt("h200", choices=tuple(PRESETS), help="duplex model sizes (cadencelab.adapters.duplex.models.PRESETS)")
    device: str = options.device()
    arms: tuple = opt(("B0", "SRc"), parse=names_in(lambda: _arms()), help="comma-separated Token2wav arms")
    seconds: int = opt(3, type=int_range(2, MAX_CHUNKS), help="duplex seconds per arm, the first a warm-up (>= 2)")
    # a one-second warm-up runs the language models' first second only: their first continuation (second 2)
    # then pays first-use costs inside a timed second
    warmup_seconds: int = opt(1, type=int_range(1, MAX_CHUNKS),
                              help="the first seconds of each arm that are warm-up, not timed (fewer than --seconds)")
    seed: int = options.seed()
    profile: bool = opt(True, help="one profiled second per arm, its trimmed trace kept")
    condition: str = options.condition()
    backend: str = opt("auto", choices=("auto", "cuda", "eager"), help="replay backend of the Token2wav runtime")
    decode: tuple = opt(("eager",), parse=names_in(lambda: _decode_modes()),
                        help="comma-separated language-model decode modes: eager (the stock HF path), graph "
                             "(static KV cache, decode step replayed as a CUDA graph: a non-exact serving control) "
                             "and/or fused (graph's arithmetic, the prefill captured too and a second's steps one "
                             "graph); every arm runs in each, labelled ARM+graphLM / ARM+fusedLM")
    input_tokens: int | None = opt(None, type=int_range(1),
                                   help="backbone prefill tokens per second (default: the preset's)")
    text_tokens: int | None = opt(None, type=int_range(1),
                                  help="backbone decoded tokens per second (default: the preset's)")
    threads: int | None = opt(None, type=int_range(1),
                              help="torch intra-op threads (default: torch's; 1 for --device cpu --preset tiny)")
    trace_cpu_depth: int | None = opt(None, type=int_range(0), help="keep host ops only up to this nesting depth in "
                                      "the kept traces (smaller files; default: all)")
    out: str = options.out("duplex")
    overwrite: bool = options.overwrite()


def _arms() -> tuple:
    from ..adapters.token2wav.runtime import ARMS

    return tuple(ARMS)


def _decode_modes() -> tuple:
    from ..adapters.duplex.served import DECODE_MODES  # the served decoders import torch: not for --help

    return DECODE_MODES


def runs(cfg: DuplexStudyConfig) -> list[tuple[str, str, str]]:
    """(label, Token2wav arm, decode mode) in run order: every arm per decode mode, modes in the given order."""
    from ..adapters.duplex.served import run_label

    return [(run_label(a, d), a, d) for d in cfg.decode for a in cfg.arms]


def study_preset(cfg: DuplexStudyConfig):
    from ..adapters.duplex import preset

    p = preset(cfg.preset)
    changes = {k: v for k, v in (("input_tokens", cfg.input_tokens), ("text_tokens", cfg.text_tokens)) if v is not None}
    return p.replace(**changes) if changes else p


# ---------------------------------------------------------------------------------------
# provenance
# ---------------------------------------------------------------------------------------


def provenance(cfg: DuplexStudyConfig, models=None) -> dict:
    import torch

    return dict(
        git_commit_source="CADENCELAB_COMMIT" if os.environ.get("CADENCELAB_COMMIT") else "git rev-parse",
        **run_provenance(cfg.device, packages=("transformers", "minicpmo")),
        threads=torch.get_num_threads(),
        determinism=dict(condition=cfg.condition, CUBLAS_WORKSPACE_CONFIG=os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
                         cudnn_deterministic=bool(torch.backends.cudnn.deterministic)),
        condition=f"{cfg.condition}: {CONDITIONS[cfg.condition].description}",
        study=dataclasses.asdict(cfg),
        config=study_preset(cfg).to_dict(),
        models=models.describe() if models is not None else None,
    )


# ---------------------------------------------------------------------------------------
# the study
# ---------------------------------------------------------------------------------------


def run_study(cfg: DuplexStudyConfig, progress=print) -> dict:
    """Run every arm; write ``duplex_second.json`` (+ rows CSV, traces) under ``cfg.out``; return the result."""
    import torch

    from ..adapters.duplex import SECOND_RANGE, DuplexSecond, build_models
    from ..profile.trim import profile_window
    from ..replay.determinism import apply_condition

    out = check_out(cfg, ("duplex_second*", "trace_duplex_*"))
    device = torch.device(cfg.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise RuntimeError(f"--device {cfg.device}: torch.cuda is not available (use --device cpu --preset tiny)")
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    apply_condition(cfg.condition)  # before the first CUDA call
    if cfg.seconds <= cfg.warmup_seconds:
        raise ValueError(f"--seconds ({cfg.seconds}) must exceed --warmup-seconds ({cfg.warmup_seconds}): "
                         f"an arm needs a timed second")
    dcfg = study_preset(cfg)
    t_start = time.perf_counter()
    models = build_models(dcfg, device, cfg.seed)
    progress(f"language models built ({dcfg.name}: backbone {dcfg.backbone.parameters() / 1e6:.1f} M, "
             f"speech decoder {dcfg.speech.parameters() / 1e6:.1f} M parameters, {dcfg.dtype}) in {models.build_s:.1f} s")
    rows, seconds, profiles, arms_info, failures = [], [], {}, {}, {}
    for arm, t2w_arm, decode in runs(cfg):
        t_arm = time.perf_counter()
        h = None
        try:
            if cuda:
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            h = DuplexSecond(dcfg, t2w_arm, device, cfg.seed, models=models, backend=cfg.backend, decode=decode)
            df = h.run(cfg.seconds, warmup=cfg.warmup_seconds, progress=True)
            rows.append(df)
            seconds.append(h.seconds_frame().assign(warmup=lambda d: d["second"] < cfg.warmup_seconds))
            info = dict(token2wav_arm=t2w_arm, decode=decode, token2wav_build_s=h.token2wav_build_s,
                        substages_timed=h.substages_timed)
            if cfg.profile:  # after the timed seconds: the profiler's overhead stays out of them
                path = out / f"trace_duplex_{arm}.json.gz"
                prof = profile_window(h.run_second, device, SECOND_RANGE, trace_path=str(path),
                                      max_cpu_depth=cfg.trace_cpu_depth, open_range=False)
                pdf = prof.result
                profiles[arm] = _profile_rows(prof, arm, path)
                profiles[arm]["rows"] = pdf.to_dict("records")
            info["peak_MiB"] = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else None
            if h.rt.engines:
                info["replay"] = h.rt.summaries()
            if h.decoders:
                info["decoders"] = {k: d.describe() for k, d in h.decoders.items()}
            info["wall_s"] = time.perf_counter() - t_arm
            arms_info[arm] = info
            progress(f"arm {arm}: {cfg.seconds} seconds{' + 1 profiled' if cfg.profile else ''} "
                     f"in {info['wall_s']:.1f} s")
        except Exception as e:  # one arm failing keeps the others
            import traceback

            failures[arm] = traceback.format_exc()[-2000:]
            progress(f"arm {arm} failed: {type(e).__name__}: {e}")
        finally:
            if h is not None:
                h.close()
            del h
    result = analyse(cfg, rows, seconds, profiles, arms_info, failures)
    result["provenance"] = provenance(cfg, models)
    result["provenance"]["wall_s"] = time.perf_counter() - t_start
    write_results(result, out)
    return result


def _profile_rows(prof, arm: str, path: Path) -> dict:
    """Per-stage device attribution of the profiled second (busy, slack, launches), and its trace file."""
    from ..adapters.duplex import STAGES, SUBSTAGES

    names = [n for n in (*STAGES, *SUBSTAGES) if n in set(prof.ranges["name"])]
    st = prof.stages(names, by_name=True)
    st.insert(0, "arm", arm)
    return dict(trace=path.name, trace_bytes=path.stat().st_size if path.exists() else None,
                stages=st.to_dict("records"), events=dict(kernels=len(prof.kernels), cpu_ops=len(prof.cpu_ops),
                                                          launches=len(prof.launches)))


# ---------------------------------------------------------------------------------------
# analysis
# ---------------------------------------------------------------------------------------


def medians(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (arm, stage): medians of start_ms and dur_ms over the timed (non-warm-up) seconds."""
    timed = rows[~rows["warmup"].astype(bool)]
    g = timed.groupby(["arm", "stage", "parent"], sort=False)
    m = g.agg(start_ms=("start_ms", "median"), dur_ms=("dur_ms", "median"), dur_ms_min=("dur_ms", "min"),
              dur_ms_max=("dur_ms", "max"), n=("dur_ms", "size")).reset_index()
    m["source"] = "measured"
    cols = ["stage", "start_ms", "dur_ms", "source", "arm", "parent", "n", "dur_ms_min", "dur_ms_max"]
    return m.sort_values(["arm", "start_ms"], kind="stable")[cols].reset_index(drop=True)


def analyse(cfg: DuplexStudyConfig, rows: list[pd.DataFrame], seconds: list[pd.DataFrame], profiles: dict,
            arms_info: dict, failures: dict) -> dict:
    from ..adapters.duplex.served import run_label

    r = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(
        columns=["stage", "start_ms", "dur_ms", "source", "arm", "second", "parent", "warmup"])
    s = pd.concat(seconds, ignore_index=True) if seconds else pd.DataFrame(
        columns=["arm", "second", "second_ms", "pcm_sha16", "warmup"])
    med = medians(r) if len(r) else pd.DataFrame()
    summary = {}
    by_second = {a: s[s["arm"] == a].set_index("second") for a in set(s["arm"])} if len(s) else {}
    for arm, t2w_arm, decode in runs(cfg):
        if arm in failures:
            summary[arm] = dict(failed=failures[arm].strip().splitlines()[-1])
            continue
        ref = run_label(cfg.arms[0], decode)  # PCM is compared within a decode mode: same tokens in
        ref_sha = by_second[ref]["pcm_sha16"] if ref in by_second else pd.Series(dtype=object)
        ts = s[(s["arm"] == arm) & (~s["warmup"].astype(bool))]
        stage = med[(med["arm"] == arm)].set_index("stage")["dur_ms"] if len(med) else pd.Series(dtype=float)
        sha = by_second[arm]["pcm_sha16"] if arm in by_second else pd.Series(dtype=object)
        common = sha.index.intersection(ref_sha.index)
        row = dict(token2wav_arm=t2w_arm, decode=decode, lm_exact=decode == "eager", seconds_timed=int(len(ts)),
                   second_ms_median=float(ts["second_ms"].median()) if len(ts) else float("nan"),
                   second_ms_max=float(ts["second_ms"].max()) if len(ts) else float("nan"),
                   **{f"{k}_ms_median": float(stage.get(k, np.nan)) for k in
                      ("backbone", "speech_decoder", "synthesis", "flow", "vocoder")},
                   peak_MiB=arms_info.get(arm, {}).get("peak_MiB"),
                   pcm_equal_to=ref, pcm_equal_seconds=f"{int((sha.loc[common] == ref_sha.loc[common]).sum())}/{len(common)}")
        row["over_cadence"] = row["second_ms_median"] / 1000.0 - 1.0
        eager = run_label(t2w_arm, "eager")
        if decode != "eager" and arm in by_second and eager in by_second:
            row.update(lm_agreement(by_second[eager], by_second[arm]))
        graph = run_label(t2w_arm, "graph")
        if decode == "fused" and arm in by_second and graph in by_second:  # fused runs graph's arithmetic
            row.update({k.replace("lm_", "lm_graph_", 1): v
                        for k, v in lm_agreement(by_second[graph], by_second[arm]).items()})
        prof = profiles.get(arm)
        if prof:
            for st in prof["stages"]:
                if st["range"] in ("backbone", "speech_decoder", "synthesis"):
                    row[f"{st['range']}_slack_frac"] = st.get("slack_frac")
                    row[f"{st['range']}_launches"] = int(st.get("kernel_launches", 0)) + int(st.get("graph_launches", 0))
        summary[arm] = row
    return dict(summary=summary, medians=med.to_dict("records"), rows=r.to_dict("records"),
                seconds=s.to_dict("records"), profiles=profiles, arms=arms_info, failures=failures,
                cadence_ms=1000.0)


def lm_agreement(eager: pd.DataFrame, other: pd.DataFrame) -> dict:
    """How far a non-eager decode mode's tokens part from the eager run's (both indexed by second):
    ``lm_tokens_equal_seconds`` "k/n" (text and speech tokens both equal), ``lm_token_agreement`` (the
    share of token positions equal over all common seconds), ``lm_first_divergence_second`` (None when
    none)."""
    common = eager.index.intersection(other.index)
    equal, same, total, first = 0, 0, 0, None
    for sec in sorted(common):
        a = list(eager.loc[sec, "text_tokens"]) + list(eager.loc[sec, "speech_tokens"])
        b = list(other.loc[sec, "text_tokens"]) + list(other.loc[sec, "speech_tokens"])
        hits = sum(x == y for x, y in zip(a, b))
        same, total = same + hits, total + max(len(a), len(b))
        if hits == len(a) == len(b):
            equal += 1
        elif first is None:
            first = int(sec)
    return dict(lm_tokens_equal_seconds=f"{equal}/{len(common)}",
                lm_token_agreement=same / total if total else float("nan"), lm_first_divergence_second=first)


def write_results(result: dict, out: Path) -> None:
    write_json(result, out / "duplex_second.json")  # NaN -> null: the file stays strict JSON
    write_csv(result["rows"], out / "duplex_second_rows.csv")


def table(result: dict) -> str:
    """The short table printed last: per arm, stage medians and the second against the cadence."""
    w = max([6, *map(len, result["summary"])])
    lines = [f"{'arm':>{w}}  {'backbone':>9} {'speech':>9} {'synth':>9} {'(flow':>8} {'vocoder)':>9}  "
             f"{'second':>9}  {'vs 1 s':>7}  {'peak MiB':>9}  pcm"]
    for arm, r in result["summary"].items():
        if "failed" in r:
            lines.append(f"{arm:>{w}}  FAILED: {r['failed'][:100]}")
            continue

        def f(k):
            v = r.get(k)
            return float("nan") if v is None else v

        peak = r.get("peak_MiB")
        lines.append(
            f"{arm:>{w}}  {f('backbone_ms_median'):9.1f} {f('speech_decoder_ms_median'):9.1f} "
            f"{f('synthesis_ms_median'):9.1f} {f('flow_ms_median'):8.1f} {f('vocoder_ms_median'):9.1f}  "
            f"{f('second_ms_median'):9.1f}  {100 * f('over_cadence'):+6.1f}%  "
            f"{(f'{peak:9.0f}' if peak is not None else '        -')}  "
            f"={r.get('pcm_equal_to')} {r.get('pcm_equal_seconds')}"
            + (f"; LM tokens = eager {r['lm_tokens_equal_seconds']} (NOT exact)" if "lm_tokens_equal_seconds" in r
               else "")
            + (f", = graph {r['lm_graph_tokens_equal_seconds']}" if "lm_graph_tokens_equal_seconds" in r else ""))
    lines.append("ms, medians over the timed seconds; synthesis = flow + cut + vocoder (the paper's synthesis "
                 "segment); second = end of synthesis")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------


def _cli(args) -> int:
    cfg = config_from_args(DuplexStudyConfig, args)
    if cfg.threads is None and cfg.device == "cpu" and cfg.preset == "tiny":
        cfg.threads = 1  # tiny shapes gain nothing from intra-op threads and suffer when cores are shared
    res = run_study(cfg, progress=lambda m: print(m, flush=True))
    print(table(res), flush=True)
    return exit_code("bench duplex", res["failures"])


def add_parser(sub) -> None:
    add_study_parser(sub, "duplex", DuplexStudyConfig,
                     "one full-duplex second (backbone, speech decoder, Token2wav) per arm", _cli)
