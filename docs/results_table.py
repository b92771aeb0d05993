"""Print the README's results tables from the recorded H200 factorial runs.

    python docs/results_table.py [FILE.json ...]      print the tables (default: the exact-condition factorial,
                                                      then the older pinned and unpinned recordings)
    python docs/results_table.py --write-readme       rewrite README.md between the results and the studies markers
    python docs/results_table.py --write-device-doc   rewrite docs/device.md's commands table between its markers

One Markdown table per file (arm, steady-chunk latency median, peak allocator MiB median, bit-exact
timed blocks against B0, and which of mel / int16 PCM / float32 PCM matched B0 in every timed block),
then the SRc-vs-B0 summary line. Numbers come from the JSON as written by
``python -m cadencelab.bench token2wav``; nothing is typed by hand. The files, and the commands tables
of the README and of docs/device.md, come from the studies table (``cadencelab.course.studies``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from cadencelab.course import data, trust
from cadencelab.course.capacity import goodput_plateau
from cadencelab.course.data import recorded_condition
from cadencelab.course.paper import paper_vs_table, recovered_share
from cadencelab.course.anatomy import served_frame
from cadencelab.course.live_cells import guide as live_guide
from cadencelab.course.studies import DEVICE_TASKS, RECORDINGS, device_task, recording
from cadencelab.replay.determinism import CONDITIONS, EXACT, REFERENCE

ROOT = Path(__file__).resolve().parents[1]


def recorded(dataset: str) -> Path:
    """The file of a recorded dataset (``cadencelab.course.studies.RECORDINGS``) in the repository."""
    return ROOT / "data" / recording(dataset).path


FACTORIAL = recorded("factorial")
HEADLINE = recorded("headline")
OLDER = [recorded("factorial_pinned"), recorded("factorial_unpinned")]
ON_KIT = recorded("factorial_on_kit")
KIT_T2W = recorded("kit_token2wav")
DEFAULT = [FACTORIAL, *OLDER]
CONDITIONS_FILE = recorded("device_conditions")
SOAK = recorded("soak")
DUPLEX = recorded("duplex_second")
SERVED = recorded("duplex_served")
SESSIONS = recorded("sessions")
SESSIONS_SRB = recorded("sessions_srb_mixed")
SESSIONS_STAGGERED = recorded("sessions_staggered")
SESSIONS_SRB_STAGGERED = recorded("sessions_srb_staggered")
MIMI = recorded("mimi")
FREEZE = recorded("freeze")
H100_BLOCK = recorded("factorial_spec")
H100_KITS = [recorded(f"kit_hf_{m}") for m in ("qwen2_decode", "mimi_encoder", "mimi_decoder")]
H100_COMPILED = recorded("kit_hf_qwen2_decode_compiled")
H100_FUSED = recorded("duplex_fused")
H100_MPS = recorded("sessions_mps")
H100_MIMI_COMPILED = recorded("kit_hf_mimi_encoder_compiled")
H100_MIMI_DECODER_COMPILED = recorded("kit_hf_mimi_decoder_compiled")
H100_FUSED_P = [recorded(n) for n in ("duplex_fused_p1", "duplex_fused_p2", "duplex_fused_p3")]
H100_WARMUP2 = recorded("duplex_fused_warmup2")
H100_WARMUP2_P = [recorded(n) for n in trust.WARMUP2_PROCESSES]
H100_LIMITER_MPS = [recorded(n) for n in ("lanes_limiter_mps4", "lanes_limiter_mps8")]
H200_LOCK_PROBE = [recorded(n) for n in ("lanes_limiter_lock4", "lanes_limiter_lock8")]
H200_MPS8 = recorded("sessions_mps8")
H100_TOUR = ROOT / "data" / device_task("tour_graded").path
LANE_PROCESSES = recorded("sessions_lane_processes")
LIMITER = recorded("lanes_limiter")
SRBI = recorded("sessions_srbi")
TOUR = ROOT / "data" / device_task("tour_live").path
DEVICE_DOC = ROOT / "docs" / "device.md"


def _read(path) -> dict:
    """A recorded JSON file, through the course's loader (parsed once per file version; not mutated here)."""
    return data.load_json(Path(path))


def _cap(summary: dict, arm: str, workload: str) -> str:
    """Sessions holding the cadence for ``arm`` in ``workload``, ">=" where the sweep ended without a break."""
    bound = summary.get("capacity_bound", {}).get(arm, {}).get(workload)
    n = summary[f'max_sessions_at_cadence_{arm}'][workload]
    # a sweep to the break point records its bracket [holds, breaks]: the capacity lies between them
    hi = (summary.get("capacity_bracket", {}).get(arm, {}).get(workload) or [None, None])[1]
    return f"{'>=' if bound == 'lower_bound' else ''}{n}" + (f" ({hi} broke)" if hi and hi > n + 1 else "")


def _bound(kind: str) -> str:
    """A capacity bound as a reader says it: the sweep broke above it (exact) or never broke (a lower bound)."""
    return {"exact": "exact: the next N in the sweep broke", "lower_bound": "a lower bound: no N in the sweep broke"}.get(kind, kind)


def _arms(summary: dict) -> list[str]:
    """The sessions arms a summary has capacities for, in table order."""
    return [a for a in ("B0", "SRc", "SRl", "SRb") if f"max_sessions_at_cadence_{a}" in summary]


def _timed_blocks(result: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for b in result.get("blocks", []):
        if not b.get("warmup"):
            out.setdefault(b["arm"], []).append(b)
    return out


def _name(path) -> str:
    path = Path(path)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _a_a(aa: dict) -> str:
    """An A/A check as text: the arm against its reference, the change with its interval."""
    return f"{aa['arm']} vs {aa['reference']} {trust.figure_text(aa['ratio'], *aa['ci'], unit='%')}"


def trusted_table(path: Path) -> str:
    """A factorial measured with the process method: per arm its latency (mean over fresh processes), its
    change against B0 with the 95% interval (processes, then blocks), the claim that interval supports,
    the processes and their spread, peak memory and exactness; then the profile's columns."""
    r = _read(path)
    prov, s = r.get("provenance", {}), r["summary"]
    name = next(k for k, (rel, *_) in data.DATASETS.items() if (ROOT / "data" / rel) == path)
    df = trust.arms_frame(name).set_index("arm")
    cond = recorded_condition(r)
    lines = [f"`{_name(path)}`: device condition `{cond}` ({CONDITIONS[cond].description}; {prov.get('gpu')}, "
             f"torch {prov.get('torch')}, {prov.get('study', {}).get('config')} config, {prov.get('date', '')[:10]}, "
             f"commit `{prov.get('git_commit')}`): every arm in {s['processes_per_arm']}+ fresh processes, interleaved, "
             f"pinned to cores {s['method']['cores']}; {prov.get('study', {}).get('blocks')} timed blocks per process",
             "", "| arm | latency ms (mean over processes) | vs B0 [95% CI] | claim | processes (spread) | peak MiB | "
             "bit-exact blocks | device-busy ms | kernel + graph launches |",
             "|---|---:|---:|---|---:|---:|---:|---:|---|"]
    for arm, a in r["arms"].items():
        if "failed" in a:
            lines.append(f"| {arm} | failed: {a['failed'].strip().splitlines()[-1]} | | | | | | | |")
            continue
        d = df.loc[arm]
        own = a.get("reference", "B0") == arm
        vs = "reference" if arm == "B0" else trust.figure_text(d["latency_delta"], d["latency_delta_lo"], d["latency_delta_hi"], "%")
        busy = (f"{a['busy_ms_median']:.1f} | {a['kernel_launches_per_chunk']:.0f} + {a['graph_launches_per_chunk']:.0f}"
                if a.get("busy_ms_median") is not None else "not profiled | -")
        exact = ("reference" if arm == "B0" else "its condition's reference" if own
                 else f"{a['exact_blocks']}/{a['blocks']}")
        spread = "one process: no spread" if d["spread"] != d["spread"] else f"{100 * d['spread']:.0f}%"
        claim = "-" if arm == "B0" else "none: the A/A check failed" if s.get("unstable") else d["claim"]
        lines.append(f"| {arm} | {d['latency_ms']:.1f} | {vs} | {claim} | {d['processes']} "
                     f"({spread}) | {a['peak_MiB_median']:.0f} | {exact} | {busy} |")
    sp = trust.figure_text(s["speedup_SRc_vs_B0"], *s["speedup_SRc_vs_B0_ci"])
    vg = s.get("speedup_SRc_vs_vendor_graph_50_ci")
    vg = (f"SRc vs vendor_graph_50: {trust.figure_text(s['speedup_SRc_vs_vendor_graph_50'], *vg)}; " if vg else "")
    if s.get("unstable"):
        sp += f" (the A/A check, {_a_a(s['a_a'])}, failed: the run is unstable and claims no direction)"
    lines += ["", f"SRc vs B0 in this run: {sp} steady-chunk speedup, {100 * s['peak_reduction_SRc_vs_B0']:.1f}% lower "
                  f"peak; {vg}"
                  f"non-exact arms: {', '.join(s['non_exact_arms']) or 'none'}. Spread: the standard deviation of an "
                  f"arm's process means over their mean (pyperf calls a system unstable above 10%)."]
    return "\n".join(lines)


def table(path: Path) -> str:
    r = _read(path)
    if "processes_per_arm" in r.get("summary", {}):
        return trusted_table(path)
    prov, s = r.get("provenance", {}), r["summary"]
    blocks = _timed_blocks(r)
    profiled = any(a.get("busy_ms_median") is not None for a in r["arms"].values())
    head = "| arm | steady latency ms (median) | peak MiB (median) | bit-exact blocks | mel / int16 / float32 exact blocks |"
    rule = "|---|---:|---:|---:|---|"
    if profiled:
        head += " device-busy ms | wall / busy | kernel + graph launches |"
        rule += "---:|---:|---|"
    cond = recorded_condition(r)
    lines = [f"`{_name(path)}`: device condition `{cond}` ({CONDITIONS[cond].description}; {prov.get('gpu')}, "
             f"torch {prov.get('torch')}, {prov.get('study', {}).get('config')} config, {prov.get('date', '')[:10]})",
             "", head, rule]
    for arm, a in r["arms"].items():
        if "failed" in a:
            lines.append(f"| {arm} | failed: {a['failed']} | | | |" + (" | | |" if profiled else ""))
            continue
        bl = blocks.get(arm, [])
        parts = "/".join(str(sum(bool(b[f"exact_{k}"]) for b in bl)) for k in ("mel", "i16", "f32"))
        own = a.get("reference", "B0") == arm and arm != "B0"  # another condition's reference: nothing to gate
        exact = "its condition's reference" if own else f"{a['exact_blocks']}/{a['blocks']}"
        row = (f"| {arm} | {a['steady_latency_ms_median']:.1f} | {a['peak_MiB_median']:.0f} | "
               f"{exact} | {'-' if own else f'{parts} of {len(bl)}'} |")
        if profiled:
            if a.get("busy_ms_median") is not None:
                row += (f" {a['busy_ms_median']:.1f} | {a['wall_over_busy']:.2f} | "
                        f"{a['kernel_launches_per_chunk']:.0f} + {a['graph_launches_per_chunk']:.0f} |")
            else:
                row += " | | |"
        lines.append(row)
    lines += ["", f"SRc vs B0: {s['speedup_SRc_vs_B0']:.2f}x steady-chunk speedup, "
                  f"{100 * s['peak_reduction_SRc_vs_B0']:.1f}% lower peak; SRc vs vendor_graph_50: "
                  f"{s['speedup_SRc_vs_vendor_graph_50']:.2f}x, {100 * s['peak_reduction_SRc_vs_vendor_graph_50']:.1f}% lower peak; "
                  f"non-exact arms: {', '.join(s['non_exact_arms']) or 'none'}"]
    return "\n".join(lines)


BEGIN, END = "<!-- results:begin (python docs/results_table.py --write-readme) -->", "<!-- results:end -->"


def _cores_note(headline_path: Path) -> str:
    """`` (cores 4, 6, 10: ...)``: the cores the headline pinned to, and where the host survey ranks them."""
    cores = (_read(headline_path)["summary"].get("method") or {}).get("cores") or []
    survey = headline_path.parent / "host_survey.json"
    if not cores:
        return ""
    text = f" (cores {', '.join(map(str, cores))}"
    if survey.exists():
        per_core = _read(survey)["per_core"]
        ranked = [r["core"] for r in sorted(per_core, key=lambda r: r["python_loop_ns"])]
        ranks = sorted(ranked.index(c) + 1 for c in cores if c in ranked)
        moved = [r["python_loop_ns_spread"] for r in per_core]
        text += (f": ranked {', '.join(map(str, ranks))} of {len(ranked)} by median Python loop time in the host "
                 f"survey, `{_name(survey)}`, where every core's time moved by {100 * min(moved):.0f}-"
                 f"{100 * max(moved):.0f}% between sweeps" if ranks else "")
    return text + ")"


def trust_lines(headline_path: Path, factorial_path: Path) -> list[str]:
    """The headline and how far to trust it: SRc vs B0 over the most processes, the A/A check that gates every
    direction, the spread of the host-bound B0, and why the ratio moves with the host (B0's split)."""
    out = []
    if headline_path.exists():
        h = trust.headline("headline")
        prov = _read(headline_path)["provenance"]
        hit = "within" if h["halfwidth"] <= h["target"] else "not within"
        out.append(f"- **Headline** (`{_name(headline_path)}`, {prov.get('date', '')[:10]}, commit "
                   f"`{prov.get('git_commit')}`): SRc vs B0 **{trust.figure_text(h['speedup'], *h['ci'])}** steady-chunk "
                   f"speedup over {h['processes']} fresh processes per arm, run in alternation and pinned to the same "
                   f"cores{_cores_note(headline_path)}. The rounds stopped on the {h['stopped']}: the interval's half-width is "
                   f"{100 * h['halfwidth']:.0f}% of the point, {hit} the {100 * h['target']:.0f}% target. The width "
                   f"is B0's: its process means spread by "
                   f"{100 * trust.arms_frame('headline').set_index('arm').loc['B0', 'spread']:.0f}% while SRc's spread "
                   f"by {100 * trust.arms_frame('headline').set_index('arm').loc['SRc', 'spread']:.1f}%.")
        aa = h["a_a"]
        if aa:
            out.append(f"- **A/A check**: {aa['arm']} (the stock runtime again, in fresh processes of its own) vs "
                       f"{aa['reference']}: {trust.figure_text(aa['ratio'], *aa['ci'], unit='%')}; the interval "
                       + ("contains 0, so the check holds and the study's directions stand." if aa["holds"] else
                          "excludes 0: **the study is unstable** and claims no direction."))
        st = trust.staging_check("headline")
        if st:
            e = st["effect"]
            out.append(f"- **Staging check**: while a round is timed, the next round's processes read the checkpoint "
                       f"and build their modules on the other cores (no device work). {e['blocks_overlapped']} of "
                       f"B0's {e['blocks_overlapped'] + e['blocks_clear']} timed blocks overlapped that staging; "
                       f"against the rest they took {trust.figure_text(e['ratio'], *e['ci'], unit='%')} "
                       f"({e['direction']}). From the blocks no staging overlapped alone, SRc vs B0 is "
                       f"{trust.figure_text(st['clear_speedup'], *st['clear_ci'])}.")
    split = trust.b0_split("factorial") if factorial_path.exists() else None
    if split:
        hh = _read(headline_path)["summary"].get("host") if headline_path.exists() else None
        host = hh or _read(factorial_path)["summary"]["host"]
        out.append(f"- **Why the ratio moves with the host**: B0 is host-bound. Of its {split['latency_ms']:.0f} ms "
                   f"steady chunk in the factorial's profiled round the device is busy {split['device_busy_ms']:.1f} ms; its "
                   f"{split['kernel_launches']:.0f} kernel launches at this host's rate of "
                   f"{split['tiny_ops_per_s'] / 1e3:.0f} k tiny ops/s (a one-element add: dispatch plus launch; "
                   f"{host['cpu_model']}; {host['tiny_ops_per_s_min'] / 1e3:.0f}-{host['tiny_ops_per_s_max'] / 1e3:.0f} k "
                   f"across the headline run's processes, measured before each one's first block) take about {split['dispatch_launch_ms']:.0f} ms, and the other "
                   f"{split['other_host_ms']:.0f} ms is Python and framework work between them. SRc replays graphs and "
                   f"sits at the busy floor, so the ratio is roughly (launches / your rate + other host time) / SRc: "
                   f"`cadencelab.course.trust.predicted_b0_ms(rate)`.")
    return out


def headline(path: Path) -> str:
    """The fair figures of the exact-condition factorial: the headline and its trust, the fairness gate, the busy
    floor, where SRc's remaining wall time goes, and what the profiler costs each arm, all read from the files."""
    r = _read(path)
    s, a = r["summary"], r["arms"]
    out = trust_lines(HEADLINE, path)
    f = s.get("fairness")
    if f:
        verdict = f.get("verdict", "holds" if f["holds"] else "fails")
        meaning = {"holds": "the whole interval is within the tolerance: the exact condition costs B0 no more than it",
                   "fails": "the whole interval is above the tolerance: the exact condition slows B0",
                   "inconclusive": "the interval straddles the tolerance: this run cannot tell whether the exact "
                                   "condition costs B0 more than that"}[verdict]
        out.append(f"- Fairness gate: B0 under the exact condition vs `{f['reference_arm']}` (nothing pinned), over "
                   f"the same run's processes: B0 {trust.figure_text(f['B0_slower_by'], *f['B0_slower_by_ci'], unit='%')} "
                   f"(tolerance {100 * f['tolerance']:.0f}%): **{verdict}**; {meaning}.")
    others = [n for n in a if n.startswith("B0@") and n != f"B0@{REFERENCE}" and "failed" not in a[n]]
    for n in others:
        out.append(f"  `{n}` (not exact across processes, in the conditions study) in the same run: "
                   f"{a[n]['steady_latency_ms_median']:.1f} ms vs B0 {a['B0']['steady_latency_ms_median']:.1f} ms.")
    b = s.get("busy_floor")
    if b:
        out.append(f"- Busy floor: B0 keeps the device busy {b['B0_busy_ms']:.1f} ms per steady chunk, so no exact replay "
                   f"of its kernels can beat B0's latency / {b['B0_busy_ms']:.1f} ms (in this run "
                   f"{trust.figure_text(*trust.ceiling_interval('factorial'))}, as wide as B0's host noise). SRc takes "
                   f"{trust.figure_text(*trust.latency_interval('factorial', 'SRc'), unit='ms')} against B0's "
                   f"{b['B0_busy_ms']:.1f} ms of device work ({b['B0_busy_ms'] / (b['B0_latency_ms'] / b['SRc_speedup']):.0%} of SRc's "
                   f"latency), so its speedup is as large as B0's host overhead allows, on "
                   f"any host.")
    src = a.get("SRc", {})
    if src.get("host_wait_ms_median") is not None:
        out.append(f"- SRc's wall / busy {src['wall_over_busy']:.2f} in the profiled block: the device waits on the host "
                   f"{src['host_wait_ms_median']:.1f} ms per steady chunk (host-side wall / busy "
                   f"{src['host_wall_over_busy']:.3f}), and {src['kernel_wait_ms_median']:.1f} ms are gaps between the "
                   f"kernels inside the chunk's {src['graph_launches_per_chunk']:.0f} graph replays, which the device "
                   f"dispatches itself: no host work removes them. The iSTFT now replays inside the vocoder graph "
                   f"({src['kernel_launches_per_chunk']:.0f} eager kernel launches per chunk remain).")
    prof = s.get("profiler_wall_ratio") or {}
    if prof:
        out.append("- The profiler's own cost (host wall of the one profiled block per arm / the unprofiled median): "
                   + ", ".join(f"{k} {v:.2f}x" for k, v in prof.items() if k in ("B0", "SRc", "vendor_graph_50"))
                   + ". One profiled block is one sample: B0's figure lies within its process spread (above), SRc's "
                     "does not depend on the host. Slack figures from a profiled run overstate the eager arms' host "
                     "time accordingly.")
    return "\n".join(out)


def on_kit_section(path: Path) -> str:
    """The factorial block run after the rule arms moved onto the adapter kit: its commit, then its table."""
    r = _read(path)
    prov, s = r["provenance"], r["summary"]
    lead = (f"The rule arms now run on the adapter kit's `StreamingRuntime` (two declared operators, R and SR through "
            f"its inner operators; B0 is still the vendor's loop). One factorial block after that move "
            f"(`{_name(path)}`, commit {prov.get('git_commit')}, {prov.get('date', '')[:10]}; one fresh process per "
            f"arm, so a check of the new path's exactness, not a second headline: speed over fresh processes is the "
            f"headline's, measured before the move, and the kit's factorial below, of Token2wav as one whole-call "
            f"operator): non-exact arms: {', '.join(s['non_exact_arms']) or 'none'}, failed arms: "
            f"{', '.join(s['failed_arms']) or 'none'}.")
    return lead + "\n\n" + trusted_table(path)


def _exact_cell(arm: dict) -> str:
    """A kit arm's exactness: a control (the compile control) is measured, never gated, and says so."""
    if arm.get("control"):
        return "yes (a control)" if arm["bit_exact"] else "no (a control, not gated)"
    return "yes" if arm["bit_exact"] else "NO"


def kit_section(path: Path) -> str:
    """The kit's own factorial (``bench kit``) of a declared model: its certificate, then per arm the latency per
    call and its change against B0 with their intervals across processes, the state, the peak and exactness."""
    r = _read(path)
    prov, s, cert, aa = r["provenance"], r["summary"], r["certificate"], r["a_a"]
    passed = sum(bool(c["passed"]) for c in cert)
    lines = [f"The kit's own factorial on a declared model (`python -m cadencelab.bench kit`; `{_name(path)}`, "
             f"{s['model']} as one whole-call operator, {prov.get('gpu')}, torch {prov.get('torch')}, commit "
             f"`{prov.get('git_commit')}`, {prov.get('date', '')[:10]}): certified {passed} of {len(cert)} clauses, "
             f"{s['catalog_classes']} catalog classes, {s['rounds']} rounds of fresh processes ({s['stop']}); the "
             f"A/A check ({_a_a(aa)}): {'holds' if aa['holds'] else 'fails'}.", "",
             "| arm | ms per call [95% CI] | vs B0 [95% CI] | claim | processes | state MiB | peak MiB above the "
             "block's start | calls replayed per block | bit-exact |", "|---|---:|---:|---|---:|---:|---:|---:|---|"]
    for a in r["arms"]:
        vs = "reference" if a["arm"] == "B0" else trust.figure_text(a["vs_B0"], *a["vs_B0_ci"], unit="%")
        lines.append(f"| {a['arm']} | {trust.figure_text(a['ms_per_call'], *a['ms_ci'], unit='ms')} | {vs} | "
                     f"{'-' if a['arm'] == 'B0' else a['direction']} | {a['processes']} | {a['state_bytes'] / 2**20:.0f} | "
                     f"{a['peak_mem_bytes'] / 2**20:.0f} | {a['replayed']} of {a['calls']} | {_exact_cell(a)} |")
    lines += ["", f"{s['headline']}: {trust.figure_text(s['headline_change'], *s['headline_ci'], unit='%')} "
                  f"({s['headline_direction']}). State: the most bytes the arm holds between calls (carries, or the "
                  f"stock caches); peak: device memory allocated above a timed block's start (weights, carries and "
                  f"graphs captured in the warm-up block already counted there), the largest over the blocks."]
    return "\n".join(lines)


def conditions_section(path: Path) -> str:
    """The device-conditions study: each condition's knobs, B0's time, and whether every arm was exact."""
    r = _read(path)
    s, prov = r["summary"], r["provenance"]
    rows = ["| condition | pins | B0 steady ms (median) | B0 vs fastest | B0_repeat / SRc / vendor_graph_50 exact "
            "blocks | exact |", "|---|---:|---:|---:|---|---|"]
    for c in r["conditions"]:
        ex = " / ".join(f"{c.get(k + '_exact_blocks')}/{c.get(k + '_blocks')}" for k in ("B0_repeat", "SRc", "vendor_graph_50"))
        rows.append(f"| `{c['condition']}` ({c['description']}) | {c['pins']} | {c['B0_ms']:.1f} | "
                    f"{100 * c['B0_cost_vs_fastest']:+.0f}% | {ex} | {'yes' if c['exact'] else 'no'} |")
    return (f"Device conditions (`{_name(path)}`, {prov.get('gpu')}, torch {prov.get('torch')}, "
            f"{prov.get('date', '')[:10]}; every condition x B0, B0_repeat, SRc, vendor_graph_50 in one run, "
            f"{prov['study']['blocks']} timed blocks each; exact = every arm equals its own condition's B0 in every "
            f"block):\n\n" + "\n".join(rows) + f"\n\nThe exact condition is the least pinning that is exact: "
            f"**`{s['chosen']}`**; every study now runs under it. This older run had one process per arm and "
            f"{prov['study']['blocks']} blocks: read it for exactness. Its B0 times carry no interval over processes, "
            f"and differences of the size shown lie within the spread between fresh processes that the headline "
            f"run measured, so it claims no cost for any pin; the factorial's fairness gate (above) measures the "
            f"exact condition's cost with that interval.")


def findings(pinned_path: Path, unpinned_path: Path) -> str:
    """The comparison of the two conditions, every number read from the files."""
    pin, unp = (_read(p) for p in (pinned_path, unpinned_path))
    pa, ua = pin["arms"], unp["arms"]
    ub = _timed_blocks(unp)

    def n_exact(arm, key):
        return sum(bool(b[f"exact_{key}"]) for b in ub.get(arm, []))

    arms_u = [a for a in ua if "failed" not in ua[a] and a != "B0"]
    mel_i16_all = all(n_exact(a, "mel") == n_exact(a, "i16") == len(ub.get(a, [])) for a in arms_u)
    pin_all = not pin["summary"]["non_exact_arms"] and all(
        a.get("exact") for a in pa.values() if "failed" not in a)
    out = []
    out.append(f"- Pinned: {'every arm, controls included, is bit-exact with B0 on all' if pin_all else 'NOT every arm is bit-exact on'} "
               f"{pin['summary']['total_blocks']} timed blocks (mel, int16 PCM and float32 PCM).")
    f32 = ", ".join(f"{a} {n_exact(a, 'f32')}/{len(ub.get(a, []))}" for a in arms_u)
    out.append(f"- Unpinned: mel and int16 PCM match B0 in {'every' if mel_i16_all else 'not every'} timed block of every arm, "
               f"but float32 PCM drifts across processes (float32-exact blocks: {f32}).")
    vg, b0u = ua.get("vendor_graph", {}), ua.get("B0", {})
    if vg and not vg.get("vendor_graph_fires") and vg.get("kernel_launches_per_chunk") == b0u.get("kernel_launches_per_chunk"):
        out.append(f"  The drift reaches arms that run B0's kernels: vendor_graph's graph branch never fires (its buckets "
                   f"miss the live shapes; {vg['kernel_launches_per_chunk']:.0f} kernel launches per chunk, as B0) and its "
                   f"float32 PCM matches B0 in {n_exact('vendor_graph', 'f32')}/{len(ub.get('vendor_graph', []))} blocks. "
                   f"The bitwise gate on float32 PCM therefore needs pinned kernel selection; the drift is the kernel "
                   f"library's, not the arms'.")
    sp, su = pin["summary"]["speedup_SRc_vs_B0"], unp["summary"]["speedup_SRc_vs_B0"]
    procs = trust.process_frame("headline")
    eager = procs[procs["arm"].isin(["B0", "B0_repeat"])]["mean"]
    spread, pair = eager.max() / eager.min(), (max(pa['B0']['steady_latency_ms_median'], ua['B0']['steady_latency_ms_median'])
                                               / min(pa['B0']['steady_latency_ms_median'], ua['B0']['steady_latency_ms_median']))
    within = (f"their ratio, {pair:.2f}, is within the {spread:.2f} between the slowest and fastest fresh process of the "
              f"same code in the headline run, so these two runs claim no direction" if pair <= spread else
              f"their ratio, {pair:.2f}, exceeds the {spread:.2f} between the slowest and fastest fresh process of the "
              f"same code in the headline run, though one process each gives no interval")
    out.append(f"- B0 pinned {pa['B0']['steady_latency_ms_median']:.1f} ms vs unpinned "
               f"{ua['B0']['steady_latency_ms_median']:.1f} ms, one process each: {within}. The device-busy time is the same "
               f"({pa['B0']['busy_ms_median']:.1f} vs {ua['B0']['busy_ms_median']:.1f} ms), and SRc, which replays captured "
               f"graphs, barely moves ({pa['SRc']['steady_latency_ms_median']:.1f} vs "
               f"{ua['SRc']['steady_latency_ms_median']:.1f} ms): its speedups, {sp:.2f}x pinned and {su:.2f}x unpinned, "
               f"differ by B0's host noise. Peak memory "
               f"does not depend on pinning (SRc {100 * pin['summary']['peak_reduction_SRc_vs_B0']:.1f}% below B0 pinned, "
               f"{100 * unp['summary']['peak_reduction_SRc_vs_B0']:.1f}% unpinned).")
    out.append(f"- Single rules: S cuts peak memory ({pa['S']['peak_MiB_median']:.0f} vs {pa['B0']['peak_MiB_median']:.0f} MiB) "
               f"with no clear latency difference (latency {100 * pa['S']['latency_delta']:+.1f}%, 95% CI over one "
               f"process's blocks [{100 * pa['S']['latency_delta_lo']:+.1f}, {100 * pa['S']['latency_delta_hi']:+.1f}], "
               f"narrower than an interval over processes would be); Rc gets the speed "
               f"({pa['Rc']['steady_latency_ms_median']:.1f} ms) at {pa['Rc']['peak_MiB_median'] / pa['B0']['peak_MiB_median']:.1f}x "
               f"B0's peak ({pa['Rc']['peak_MiB_median']:.0f} MiB); SRc has both "
               f"({pa['SRc']['steady_latency_ms_median']:.1f} ms, {pa['SRc']['peak_MiB_median']:.0f} MiB).")
    return "\n".join(out)


def soak_section(path: Path) -> str:
    """The soak's gates, read from ``soak.json``."""
    r = _read(path)
    s, prov = r["summary"], r["provenance"]
    eager = ", ".join(f"{k} {v}" for k, v in s["declared_eager_after_warmup"].items()) or "none"
    lat = (f"steady-chunk latency median {s['steady_latency_ms_median']:.1f} ms ({s['arm']}) vs "
           f"{s['reference_steady_latency_ms_median']:.1f} ms ({s['reference_arm']})")
    if not s.get("latency_comparable", True):
        lat += f" -- not a like-for-like ratio: {s['latency_note'].split(': the ratio')[0]}"
    return (f"Soak (`{_name(path)}`, {prov.get('gpu')}, torch {prov.get('torch')}, {prov.get('date', '')[:10]}): "
            f"{s['chunks']} chunks ({s['turns']} turns of {s['turn_calls_min']}-{s['turn_calls_max']} calls) through "
            f"{s['arm']}; int16 PCM equal to {s['reference_arm']} on **{s['exact_chunks']}/{s['chunks']}** chunks "
            f"(float32 {s['exact_chunks_f32']}/{s['chunks']}); allocator peak growth after the {s['warmup_chunks']}-chunk "
            f"warm-up **{s['peak_growth_bytes_after_warmup']} bytes** (granule {s['granule_bytes']}); fallbacks after "
            f"warm-up **{s['fallbacks_after_warmup']}** (declared eager calls: {eager}); {lat}. "
            f"{'PASS' if s['passed'] else 'FAIL'}.")


def duplex_section(path: Path) -> str:
    """The measured duplex second per arm, read from ``duplex_second.json``."""
    r = _read(path)
    prov, cfg = r["provenance"], r["provenance"].get("config", {})
    lines = [f"Duplex second (`{_name(path)}`, {prov.get('gpu')}, stand-in language models with random weights: "
             f"backbone {cfg.get('backbone', {}).get('parameters', 0) / 1e9:.1f} B, speech decoder "
             f"{cfg.get('speech', {}).get('parameters', 0) / 1e6:.0f} M parameters, {cfg.get('dtype')}; Token2wav "
             f"{cfg.get('token2wav')} fp32; medians of the timed seconds, min-max in brackets)", "",
             "| arm | seconds | backbone ms | speech decoder ms | synthesis ms | second ms | vs 1 s | synthesis slack | "
             "synthesis launches | PCM equal to B0 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    rng = {(m["arm"], m["stage"]): (m.get("dur_ms_min"), m.get("dur_ms_max")) for m in r["medians"]}

    def cell(arm, stage, v):
        lo, hi = rng.get((arm, stage), (None, None))
        return f"{v:.0f}" + (f" [{lo:.0f}-{hi:.0f}]" if lo is not None and hi is not None else "")

    for arm, a in r["summary"].items():
        lines.append(f"| {arm} | {a['seconds_timed']} | {cell(arm, 'backbone', a['backbone_ms_median'])} | "
                     f"{cell(arm, 'speech_decoder', a['speech_decoder_ms_median'])} | "
                     f"{cell(arm, 'synthesis', a['synthesis_ms_median'])} | {a['second_ms_median']:.0f} | "
                     f"{100 * a['over_cadence']:+.0f}% | {100 * a['synthesis_slack_frac']:.0f}% | "
                     f"{a['synthesis_launches']} | {a['pcm_equal_seconds']} |")
    return "\n".join(lines)


def served_section(path: Path) -> str:
    """The duplex second with its language models also served (``--decode eager,graph``), read from
    ``duplex_second_served.json`` through ``cadencelab.course.anatomy.served_frame``."""
    prov = _read(path)["provenance"]
    df = served_frame()
    lines = [f"The same second with the language models also served (`{_name(path)}`, {prov.get('gpu')}, "
             f"{prov.get('date', '')[:10]}): a static KV cache and one captured decode step per model, replayed per "
             "token (`cadencelab.adapters.duplex.served`). Serving the models is a control, not an exact path: "
             "its tokens are compared with eager decoding, and its PCM with B0 fed the same tokens. Within one second "
             "the stages cannot overlap: the speech decoder is conditioned on all the backbone's hidden states of the "
             "second, and the second's Token2wav chunk is all of its speech tokens plus the lookahead kept from the "
             "second before (`DuplexConfig` holds speech tokens to one chunk), so each stage waits for the whole "
             "output of the one before it.", "",
             "| run | LM decode | backbone ms | speech decoder ms | synthesis ms | second ms (max) | PCM equal to | "
             "LM tokens vs eager |", "|---|---|---:|---:|---:|---:|---|---|"]
    for run, r in df.iterrows():
        lines.append(f"| {run} | {r['lm_decode']} | {r['backbone_ms']:.0f} | {r['speech_decoder_ms']:.0f} | "
                     f"{r['synthesis_ms']:.0f} | {r['second_ms_median']:.0f} ({r['second_ms_max']:.0f}) | "
                     f"{r['pcm_equal']} | {r['lm_vs_eager']} |")
    return "\n".join(lines)


def tour_section(path: Path) -> str:
    """The course run live on the H200, read from ``data/h200/tour/`` (``cadencelab.course.data.tour_live``)."""
    df = data.tour_live()
    prov = df.attrs["provenance"]
    ok = int(df["ok"].sum())
    head = (f"The course, live (`{_name(path.parent)}/`, {prov.get('gpu')}, torch {prov.get('torch')}, commit "
            f"`{prov.get('git_commit')}`, {prov.get('date', '')[:10]}): `cadencelab tour` ran **{ok} of {len(df)}** "
            f"notebooks with the GPU cells live and the solutions on, {df['seconds'].sum():.0f} s in all. Each "
            "notebook's check line:")
    rows = ["| notebook | s | check |", "|---|---:|---|"]
    rows += [f"| {r['title']} | {r['seconds']:.0f} | {r['check'] or r['error']} |" for _, r in df.iterrows()]
    return head + "\n\n" + "\n".join(rows)


def sessions_section(path: Path) -> str:
    """Multi-session capacity, read from ``sessions.json``."""
    r = _read(path)
    s, prov = r["summary"], r["provenance"]
    mib = 2 ** 20
    declared = s["declared_state_bytes_per_session"]
    lines = [f"Sessions (`{_name(path)}`, {prov.get('gpu')}, real config; sessions fed at the 1 s cadence, chunks served "
             f"in turn on one GPU; a session holds the cadence when its p95 chunk latency is <= 1 s; `>=`: the sweep "
             f"stopped on the time budget before a break)", "",
             "| arm | max sessions, speak-heavy | max sessions, mixed | peak MiB per added session | declared state MiB "
             "per session |", "|---|---:|---:|---:|---:|"]
    arms = _arms(s)
    for arm in arms:
        d = declared.get(arm)
        name = f"{arm} (experimental: batched replay)" if arm in s.get("experimental_arms", []) else arm
        lines.append(f"| {name} | {_cap(s, arm, 'speak_heavy')} | {_cap(s, arm, 'mixed')} | "
                     f"{s['peak_bytes_per_added_session'][arm] / mib:.0f} | {f'{d / mib:.0f}' if d else 'n/a (stock)'} |")
    refs = s.get("exactness_reference", {})
    gated = {a: refs.get(a, ["solo_B0"]) for a in arms}
    solo_arms = ", ".join(a for a in arms if gated[a] == ["solo_B0"])
    unchecked = {a: c["chunks"] - c["checked"] for a, c in s.get("checked_chunks_by_arm", {}).items()
                 if c["chunks"] > c["checked"]}
    lines += ["", f"Every checked chunk bit-exact against its reference: {s['chunks_exact']}/{s['chunks_checked']} "
                  f"(reference for {solo_arms}: the session run alone through B0"
              + ("; for SRb: the same batches on the batched eager path" if "SRb" in arms else "")
              + f"). SRc re-captures after warm-up {s['recaptures_after_warmup'].get('SRc')}, "
                f"invalidations {s['invalidations'].get('SRc')}; state swap per session switch "
                f"{s['swap_ms_median_SRc']:.2f} ms median ({s['swap_bytes_median_SRc'] / mib:.0f} MiB copied)."
              + (" Left unchecked when the verification's time ended: "
                 + ", ".join(f"{a} {n} of {s['checked_chunks_by_arm'][a]['chunks']} chunks" for a, n in unchecked.items())
                 + "." if unchecked else "")]
    if "SRb" in arms:
        same = s.get("identical_to_solo_B0", {}).get("SRb", {})
        srb = r["arms"].get("SRb", {})
        fixed = (srb.get("graph_staging_bytes", 0) + sum(srb.get("workspace_bytes", {}).values())) / 2**30
        one = {a: min((c["peak_bytes"] for c in r["capacity"] if c["arm"] == a and c["sessions"] == 1
                       and c.get("peak_bytes")), default=None) for a in ("SRc", "SRb")}
        at_one = (f" (peak with one session: {one['SRb'] / 2**30:.1f} GiB, SRc {one['SRc'] / 2**30:.1f} GiB)"
                  if one["SRb"] and one["SRc"] else "")
        lines += ["", f"SRb serves the chunks that arrive in the same second and share a shape class as one batch "
                      f"(declared sizes {srb.get('batch_sizes')}); every arrival in these workloads is at a whole second, "
                      f"the best case for batching. It is not bit-identical to a session run alone (mel identical in "
                      f"{same.get('mel', 0)} of {same.get('compared', 0)} chunks"
                      + (f" compared, those of its {same['chunks']} whose sessions have a solo reference (the sessions "
                         f"the gated arms used)" if same.get("chunks", 0) > same.get("compared", 0) else "")
                      + (", exactly those of sessions never batched so far" if same.get("mel_iff_never_batched") else "")
                      + f"; mel and PCM in {same.get('mel_and_pcm', 0)}: a batch draws "
                      f"HiFT's noise from its own seed), and it holds about {fixed:.0f} GiB of fixed workspaces and "
                      f"graph staging on top of the sessions{at_one}."]
    if "SRl" in arms:
        lines += ["", lanes_sentence(r)]
    follow = path.parent / SESSIONS_SRB.name
    if "SRb" in arms and follow.exists() and s.get("capacity_bound", {}).get("SRb", {}).get("mixed") == "lower_bound":
        f = _read(follow)  # only where this recording left SRb's mixed capacity at a lower bound
        fs, held = f["summary"], [c for c in f["capacity"] if c["all_hold"]]
        broke = [c for c in f["capacity"] if not c["all_hold"] and not c["skipped"]]
        lines += ["", older_label(follow) + f"A follow-up run of SRb alone in the mixed workload (`{_name(follow)}`, N = "
                      f"{', '.join(str(c['sessions']) for c in f['capacity'])}): it holds the cadence up to "
                      f"**{fs['max_sessions_at_cadence_SRb']['mixed']}** sessions "
                      f"({_bound(fs['capacity_bound']['SRb']['mixed'])}; worst p95 {held[-1]['p95_chunk_ms']:.0f} ms)"
                  + (f", and breaks at {broke[0]['sessions']} (worst p95 {broke[0]['p95_chunk_ms']:.0f} ms)"
                     if broke else "")
                  + f"; {fs['chunks_exact']}/{fs['chunks_checked']} chunks equal the batched eager path."]
    staggered = path.parent / SESSIONS_STAGGERED.name
    if staggered.exists():
        lines += ["", staggered_sentence(staggered, path.parent / SESSIONS_SRB_STAGGERED.name)]
    return "\n".join(lines)


def lanes_sentence(result: dict, dataset: str = "sessions") -> str:
    """What the lanes arm (SRl) measured: capacity against SRc, exactness, memory, the throughput plateau."""
    s, cap = result["summary"], result["capacity"]
    mib = 2 ** 20
    ratio = s.get("sessions_ratio_SRl_over_SRc", {})
    bounds = s.get("capacity_bound", {}).get("SRl", {})
    solo = s.get("identical_to_solo_B0", {}).get("SRl", {})

    plat = goodput_plateau("speak_heavy", dataset).set_index("arm")["plateau_audio_s_per_s"]

    def plateau(arm: str) -> float:
        return float(plat.get(arm, float("nan")))

    lanes = s.get("lanes")
    per_lane = (sum(s["lane_bytes"]) / len(s["lane_bytes"]) / mib) if s.get("lane_bytes") else float("nan")
    def held(w: str) -> str:
        top = max((c for c in cap if c["arm"] == "SRl" and c["workload"] == w and c["all_hold"]),
                  key=lambda c: c["sessions"], default=None)
        if top is None:
            return f"{w.replace('_', '-')}: none"
        if bounds.get(w) != "lower_bound":
            return f"{w.replace('_', '-')}: {ratio.get(w):.2f}x"
        return (f"{w.replace('_', '-')}: >={ratio.get(w):.2f}x (the sweep stopped on the time budget at N = "
                f"{top['sessions']}, worst p95 {top['p95_chunk_ms']:.0f} ms, before any break)")

    parts = [held(w) for w, v in ratio.items() if v is not None]
    # the smallest speak-heavy N at which SRl broke: the break the sentence speaks of
    broke = min((c for c in cap if c["arm"] == "SRl" and c["workload"] == "speak_heavy" and not c["all_hold"]
                 and c.get("host_share") is not None), key=lambda c: c["sessions"], default=None)
    return (f"SRl (lanes): {lanes} SRc graph sets over one set of weights, each on its own CUDA stream and "
            f"generator, served in real time (chunks submitted at their arrival, one thread per lane). Every SRl "
            f"chunk is bit-identical to the session run alone through B0 ({solo.get('mel_and_pcm', 0)} of "
            f"{solo.get('compared', 0)}, mel and int16 PCM), with {s.get('eager_sections_after_warmup_SRl')} eager "
            f"sections and {s['recaptures_after_warmup'].get('SRl')} re-captures after warm-up. Sessions held, "
            f"SRl over SRc: {'; '.join(parts)} (target 2.5x: "
            f"{'met' if s.get('target_lanes_2_5x_met') else 'not met'}). Speak-heavy goodput levels off at {plateau('SRl'):.1f} audio "
            f"seconds per second with lanes against {plateau('SRc'):.1f} for SRc, {plateau('SRl') / plateau('SRc'):.2f}x"
            + (f"; what limits the lanes where they break, the device or their host threads, this study does not "
               f"measure (the threads' CPU time was {broke['host_share']:.1f} cores' worth at N = {broke['sessions']}, "
               f"the device's busy time is not recorded; the H100 recordings at the end measure it)."
               if bounds.get("speak_heavy") == "exact" and broke is not None
               else "; SRl's capacity here is a lower bound (the sweep's time budget ended first), so where lanes "
               "break, and what limits them, this recording does not settle.") + " "
            f"Each lane adds {per_lane:.0f} MiB (its demand-sized buffers and staging) before its graphs; each "
            f"added session {s['peak_bytes_per_added_session']['SRl'] / mib:.0f} MiB, its declared state.")


def staggered_sentence(path: Path, srb_path: Path) -> str:
    """The same study with arrivals spread over each second (``--stagger``)."""
    s = _read(path)["summary"]
    arms = _arms(s)
    text = (f"With arrivals spread over each second instead (`--stagger`: session i of N at t + i/N; "
            f"`{_name(path)}`), sessions holding the cadence, speak-heavy / mixed: "
            + ", ".join(f"{a} {_cap(s, a, 'speak_heavy')} / {_cap(s, a, 'mixed')}" for a in arms))
    if srb_path.exists() and s.get("capacity_bound", {}).get("SRb", {}).get("speak_heavy") == "lower_bound":
        f = _read(srb_path)["summary"]  # only where this recording left SRb at a lower bound
        cond = recorded_condition(_read(srb_path))
        older = "" if cond == EXACT else f", an older recording under `{cond}`"
        text += (f"; a follow-up run of SRb alone (`{_name(srb_path)}`{older}) holds "
                 f"speak-heavy at "
                 f"{_cap(f, 'SRb', 'speak_heavy')} ({f['chunks_exact']}/{f['chunks_checked']} chunks equal the batched "
                 f"eager path)")
    return (text + f". Chunks equal to their reference: {s['chunks_exact']}/{s['chunks_checked']}. SRb's batcher "
            "never waits to fill a batch: a free device serves every waiting chunk of the oldest class, so batches "
            "form only under load.")


def mimi_recovered(s: dict) -> str:
    """The share of the vendor graphs' saving the generic replay recovers, as the paper defines it
    (``course.paper.recovered_share``), beside the paper's figure (``data/paper/figures.csv``); and, apart,
    the ratio of the two speedups."""
    lat = s["latency_ms_median"]
    share = recovered_share(lat["eager"], lat["replay"], lat["vendor_graph"])
    published = data.paper_figures("mimi_recovered_share").loc["mimi_recovered_share", "value"]
    return (f"Share of the vendor graphs' saving recovered by the declaration-driven engine (the paper's "
            f"definition, (eager - replay) / (eager - vendor graph) per-frame time): **{share:.0%}** (the "
            f"paper reports {published:.0%}); the ratio of the two speedups is {s['vendor_speedup_recovered']:.2f}x.")


def crossarch_section(mimi_path: Path, freeze_path: Path) -> str:
    """Mimi (vendor graphs vs generic replay) and the Freeze-style decoder, read from their files."""
    parts = []
    if mimi_path.exists():
        r = _read(mimi_path)
        s = r["summary"]
        rows = ["| Mimi arm | per-frame ms (median) | speedup vs eager | peak MiB | exact blocks |", "|---|---:|---:|---:|---:|"]
        for arm, a in r["arms"].items():
            rows.append(f"| {arm} | {a['latency_ms_median']:.2f} | {a['speedup_vs_eager']:.2f}x | "
                        f"{a['peak_MiB_median']:.0f} | {a['exact_blocks']}/{a['blocks']} |")
        parts.append(f"Mimi (`{_name(mimi_path)}`, moshi {r['provenance'].get('moshi')}, seeded random weights, "
                     f"{r['provenance']['config']['frames']} frames x {r['provenance']['config']['blocks']} blocks per arm, "
                     f"encode + decode per 80 ms frame; exact = SHA-256 of codes and PCM equal to eager):\n\n"
                     + "\n".join(rows) + "\n\n" + mimi_recovered(s))
    if freeze_path.exists():
        r = _read(freeze_path)
        rows = ["| Freeze-style path | steady ms per 20-token chunk | peak MiB | state bytes | exact blocks vs full history |",
                "|---|---:|---:|---:|---|"]
        for name, a in r["paths"].items():
            ex = f"{a['exact_blocks']}/{a['blocks']}" + ("" if a["exact"] else f" (max abs diff {a['max_abs_diff']:.2g})")
            rows.append(f"| {name} | {a['steady_latency_ms_median']:.2f} | {a['peak_MiB_median']:.1f} | "
                        f"{a['state_bytes']} | {ex} |")
        parts.append(f"Freeze-Omni-style decoder (`{_name(freeze_path)}`; written here from published facts, not "
                     f"Freeze-Omni; overlap recompute is the non-exact stock-policy control):\n\n" + "\n".join(rows))
    return "\n\n".join(parts)


def h100_section() -> str:
    """The recordings of the lent H100 (``data/h100/``): a factorial block on the one spec, the kit's factorial of
    the three transformers adapters, what limits the lanes, lanes from two processes, and exact batching."""
    from cadencelab.course import capacity

    prov = _read(H100_BLOCK)["provenance"]
    b = _read(H100_BLOCK)["summary"]
    parts = [f"**On a lent H100** ({prov.get('gpu')}, torch {prov.get('torch')}, commit `{prov.get('git_commit')}`, "
             f"{prov.get('date', '')[:10]}; figures compare within this card only, never with the H200's above). One "
             f"factorial block after every arm moved onto the one spec (`KitModel`; one fresh process per arm, so a "
             f"check of exactness, not a headline): non-exact arms: {', '.join(b['non_exact_arms']) or 'none'}, failed "
             f"arms: {', '.join(b['failed_arms']) or 'none'}.", trusted_table(H100_BLOCK)]
    parts += [kit_section(p) for p in H100_KITS if p.exists()]
    parts.append(h100_compile_paragraph())
    lim = capacity.limiter_reading()
    lp = data.sessions_summary("sessions_lane_processes")
    held = capacity.capacity_bounds("sessions_lane_processes").set_index("arm")
    cap = "; ".join(f"{a} {held.loc[a, 'shown']} (breaks at {held.loc[a, 'breaks_at']})" for a in held.index)
    ratio = lp["sessions_ratio_SRl_over_SRc"]["speak_heavy"]
    parts.append(f"What limits the lanes (`{_name(LIMITER)}`, `{_name(LANE_PROCESSES)}`): {lim['reading']} In the "
                 f"two-process run, speak-heavy sessions held at the cadence: {cap}; SRc over B0 "
                 f"{lp['sessions_ratio_SRc_over_B0']['speak_heavy']:.1f}x (target 3x: "
                 f"{'met' if lp.get('target_ratio_3x_met') else 'not met'}), SRl over SRc {ratio:.1f}x (target 2.5x: "
                 f"{'met' if lp.get('target_lanes_2_5x_met') else 'not met'}); every checked chunk equal to the "
                 f"session run alone through B0: {lp['chunks_exact']} of {lp['chunks_checked']}. Capacities are one "
                 f"sweep each (held, then the next N that broke), with no interval.")
    parts.append(h100_mps_paragraph())
    parts.append(h200_lanes_paragraph())
    eb = capacity.exact_batching()
    rows = "; ".join(f"{a} {r['sessions_held']} (breaks at {r['breaks_at']}; gated on {r['gated_on']}; equal to the "
                     f"session alone in {r['equal_to_solo']} of {r['compared']} chunks compared)" for a, r in eb.iterrows())
    parts.append(f"Batching, exactly (`{_name(SRBI)}`, experimental): speak-heavy sessions held: {rows}. SRbi runs "
                 f"the operations whose kernels could follow the batch size once per session and draws each row's "
                 f"noise from its session's generator; in this run every checked chunk equals its session alone. "
                 f"The CUDA test on the teaching config found rows that differed at commit "
                 f"`{_read(SRBI)['provenance'].get('git_commit')}` (`data/h100/logs/cuda_tests.log`: rows at odd "
                 f"offsets, at another pointer residue than the solo operand's); with each session's rows placed at "
                 f"the batch's residue, the same test passed on the H100 on 2026-12-07 at B = 2 and 4 "
                 f"(`data/h100/logs/2026-12-07_cuda_tests_ws.log`). The capacities above were recorded before that "
                 f"fix; every run stays gated on the solo reference.")
    parts.append(h100_fused_paragraph())
    if H100_TOUR.exists():
        parts.append(h100_tour_paragraph())
    return "\n\n".join(parts)


MIMI_COMPILE_LOG = ROOT / "data" / "h100" / "logs" / "2026-12-07_mimi_encoder.log"


def _logged_timeout(log: Path) -> int:
    """The block timeout a kit run's log reports its arm ran past ("no answer within N s")."""
    import re

    m = re.search(r"no answer within (\d+) s", log.read_text())
    if m is None:
        raise ValueError(f"{log}: no 'no answer within N s' line")
    return int(m.group(1))


def h100_compile_paragraph() -> str:
    """The compile control beside the rules on transformers' Qwen2 step, and what stopped it on Mimi."""
    from cadencelab.course import trust

    text = ("The Mimi runs above carry only B0, SRc and the A/A arm. The compile control (`B0_compiled`: the "
            "model's own stock step under `torch.compile(mode=\"reduce-overhead\")`, its outputs copied out at each "
            "call; a control, measured and never gated) failed on the Qwen2 decoder in that run (its CUDA graphs' "
            "outputs were overwritten by the next call: `data/h100/logs/Q_qwen2.log`).")
    if not H100_COMPILED.exists():
        return text
    name = "kit_hf_qwen2_decode_compiled"
    arms = {a["arm"]: a for a in _read(H100_COMPILED)["arms"]}
    c, v = trust.kit_versus(name, "B0_compiled"), trust.kit_versus(name, "SRc", "B0_compiled")
    fig = lambda r: trust.figure_text(r["change"], r["lo"], r["hi"], unit="%")  # noqa: E731
    exact = "bit-exact with the stock step" if arms["B0_compiled"]["bit_exact"] else "not bit-exact with the stock step"
    return (text + f" With the copies it ran (`{_name(H100_COMPILED)}`, below): the compile control is "
            f"{fig(c)} against B0 ({c['direction']}) and {exact}; SRc against the compile control: {fig(v)} "
            f"({v['direction']}), and SRc is {'bit-exact' if arms['SRc']['bit_exact'] else 'NOT bit-exact'}. On the "
            f"Mimi encoder and decoder the control stopped the run: its first block, where torch.compile works, "
            f"outlasted the {_logged_timeout(MIMI_COMPILE_LOG)} s block timeout "
            f"(`{_name(MIMI_COMPILE_LOG)}`); the kit now gives the control's first block "
            f"`--compile-timeout` more seconds and reports a failed control without stopping the factorial."
            f"\n\n" + kit_section(H100_COMPILED) + _mimi_compiled())


def _mimi_compiled() -> str:
    """The compile control on the Mimi encoder and decoder, re-run with the first block's extra time."""
    from cadencelab.course import trust

    fig = lambda x: trust.figure_text(x["change"], x["lo"], x["hi"], unit="%")  # noqa: E731
    text, sections = [], []
    for part, path in (("encoder", H100_MIMI_COMPILED), ("decoder", H100_MIMI_DECODER_COMPILED)):
        if not path.exists():
            text.append(f"The {part}'s control was not re-run.")
            continue
        name, r = path.name.removesuffix(".json"), _read(path)
        arms = {a["arm"]: a for a in r["arms"]}
        c, v = trust.kit_versus(name, "B0_compiled"), trust.kit_versus(name, "SRc", "B0_compiled")
        exact = ("bit-exact with the stock call" if arms["B0_compiled"]["bit_exact"] else
                 "not bit-exact with the stock call")
        text.append(f"Re-run on the Mimi {part} with that time (`{_name(path)}`, {r['provenance'].get('gpu')}, "
                    f"{r['provenance'].get('date', '')[:10]}, below): the compile control is {fig(c)} against B0 "
                    f"({c['direction']}) and {exact}; SRc against the compile control: {fig(v)} ({v['direction']}), "
                    f"SRc {'bit-exact' if arms['SRc']['bit_exact'] else 'NOT bit-exact'}.")
        sections.append(kit_section(path))
    if not sections:
        return ""
    return "\n\n" + " ".join(text) + "\n\n" + "\n\n".join(sections)


def h100_mps_paragraph() -> str:
    """The lanes from four processes as clients of one MPS daemon (``sessions_mps``), read by
    ``course.capacity.mps_reading``."""
    if not H100_MPS.exists():
        return ""
    from cadencelab.course import capacity

    r = _read(H100_MPS)
    return (f"Lanes under MPS (`{_name(H100_MPS)}`, {r['provenance'].get('gpu')}, "
            f"{r['provenance'].get('date', '')[:10]}; `--mps`: one daemon started for the arm, the lane processes "
            f"its clients, so their kernels share the SMs instead of time-slicing). {capacity.mps_reading()['reading']}"
            f" SRc over B0 in this run: {r['summary']['sessions_ratio_SRc_over_B0']['speak_heavy']:.1f}x.\n\n"
            f"Through the target's count (`{'`, `'.join(_name(recorded(n)) for n in capacity.MPS_SWEEPS[1:])}`): "
            f"{capacity.mps_sweeps_reading()['reading']}\n\n"
            f"What limits them there (`{'`, `'.join(_name(p) for p in H100_LIMITER_MPS)}`, lanes-limiter "
            f"`--lane-processes`): {capacity.mps_limiter_reading()['reading']}")


def h200_lanes_paragraph() -> str:
    """What the lanes wait for and the sweep from 8 processes, on a lent H200 (``course.lanes_limit``)."""
    if not (H200_MPS8.exists() and all(p.exists() for p in H200_LOCK_PROBE)):
        return ""
    from cadencelab.course import lanes_limit

    r = _read(H200_MPS8)
    return (f"What the launches wait for (`{'`, `'.join(_name(p) for p in H200_LOCK_PROBE)}`, lanes-limiter with "
            f"its interpreter-lock probe): {lanes_limit.lock_probe_reading()['reading']}\n\n"
            f"The lanes from 8 processes (`{_name(H200_MPS8)}`, {r['provenance'].get('gpu')}, "
            f"{r['provenance'].get('date', '')[:10]}, commit `{r['provenance'].get('git_commit')}`): "
            f"{lanes_limit.eight_process_reading()['reading']} SRc over B0 in this run: "
            f"{r['summary']['sessions_ratio_SRc_over_B0']['speak_heavy']:.1f}x.")


def h100_fused_paragraph() -> str:
    """The duplex second with the fused decode (``duplex_fused``), beside the graph decode of the same run."""
    from cadencelab.course import trust

    if not H100_FUSED.exists():
        return ""
    r = _read(H100_FUSED)
    summ, secs = r["summary"], pd.DataFrame(r["seconds"])
    rows = ["| run | LM decode | backbone ms | speech decoder ms | synthesis ms | second ms median | timed seconds "
            "(ms) | LM launches in the profiled second | LM tokens |", "|---|---|---:|---:|---:|---:|---|---:|---|"]
    for run, x in summ.items():
        timed = secs[(secs["arm"] == run) & ~secs["warmup"]]["second_ms"]
        tokens = ("exact (the stock path)" if x["lm_exact"] else
                  f"control: {x['lm_tokens_equal_seconds']} seconds equal to eager" +
                  (f", {x['lm_graph_tokens_equal_seconds']} equal to graph" if "lm_graph_tokens_equal_seconds" in x
                   else ""))
        rows.append(f"| {run} | {x['decode']} | {x['backbone_ms_median']:.0f} | {x['speech_decoder_ms_median']:.0f} "
                    f"| {x['synthesis_ms_median']:.0f} | {x['second_ms_median']:.0f} | "
                    f"{', '.join(f'{v:.0f}' for v in timed)} | "
                    f"{x['backbone_launches'] + x['speech_decoder_launches']} | {tokens} |")
    f = secs[(secs["arm"] == "SRc+fusedLM") & ~secs["warmup"]]["second_ms"]
    return (f"The whole duplex second with the language models served by the fused decode (`{_name(H100_FUSED)}`, "
            f"{r['provenance'].get('gpu')}, {r['provenance'].get('date', '')[:10]}, one process, "
            f"{len(f)} timed seconds per run after a warm-up second): per second one prefill graph per declared "
            f"input (the mask built on the device, the first token inside) and one graph of all the decode steps. "
            f"SRc+fusedLM's seconds: {int((f <= trust.SECOND_GOAL_MS).sum())} of {len(f)} at or under the "
            f"{trust.SECOND_GOAL_MS:.0f} ms goal, median "
            f"{f.median():.0f} ms, the slowest {f.max():.0f} ms (which second, below). Too few seconds "
            f"for an interval: a measurement, not a settled claim. The fused and graph decodes are controls: their "
            f"tokens equal each other, not eager decoding's.\n\n" + "\n".join(rows) + _fused_processes())


def _fused_processes() -> str:
    """The fused and graph decodes' second over three fresh processes: intervals and the slow second."""
    from cadencelab.course import trust

    if not all(p.exists() for p in H100_FUSED_P):
        return ""
    d = trust.duplex_processes()
    runs, by = d["runs"], d["seconds"]
    f = runs.loc["SRc+fusedLM"]
    slow = by.loc[by.groupby("arm")["second_ms"].idxmax()].set_index("arm")
    fs = slow.loc["SRc+fusedLM"]
    rest = by[(by["arm"] == "SRc+fusedLM") & (by["second"] != fs["second"])]
    prov = _read(H100_FUSED_P[0])["provenance"]
    return (f"\n\nIn {int(f['processes'])} fresh processes (`{'`, `'.join(_name(p) for p in H100_FUSED_P)}`, "
            f"{prov.get('gpu')}, {prov.get('date', '')[:10]}, {int(f['seconds']) // int(f['processes'])} timed seconds "
            f"each): the mean second of SRc+fusedLM is {_ms(f)} and of SRc+graphLM {_ms(runs.loc['SRc+graphLM'])} "
            f"(95% intervals over processes). {int(f['under_goal'])} of {int(f['seconds'])} fused seconds were at "
            f"or under the {f['goal_ms']:.0f} ms goal; the interval of the mean {_where(f)} it"
            f". The seconds over it are second {int(fs['second'])} of every process (median "
            f"{fs['second_ms']:.0f} ms, backbone {fs['backbone_ms']:.0f} ms against "
            f"{rest['backbone_ms'].min():.0f}-{rest['backbone_ms'].max():.0f} ms in the others), in the graph decode "
            f"too (second {int(slow.loc['SRc+graphLM', 'second'])}): the first second whose language models continue "
            f"a turn (chunk {int(fs['chunk_in_turn'])} of it), a path the one-second warm-up never runs."
            + _warmup2())


def _ms(r) -> str:
    """A mean second with its interval."""
    from cadencelab.course import trust

    return trust.figure_text(r["mean_ms"], r["lo_ms"], r["hi_ms"], unit="ms")


def _where(r) -> str:
    """Where a mean's interval lies against the goal."""
    from cadencelab.course.predict import interval_verdict

    return interval_verdict(r["lo_ms"] - r["goal_ms"], r["hi_ms"] - r["goal_ms"], below="lies under",
                            above="lies over").replace("no clear difference", "straddles")


def _warmup2() -> str:
    from cadencelab.course import trust

    if not H100_WARMUP2.exists():
        return ""
    w = trust.warmup_check()
    return (f" With {w['warmup_seconds']} warm-up seconds, so that the first continuation runs before the clock "
            f"(`{_name(H100_WARMUP2)}`, one process, SRc+fusedLM): {w['under_goal']} of {w['timed']} timed seconds at "
            f"or under {w['goal_ms']:.0f} ms (median {w['median_ms']:.0f} ms, slowest {w['slowest_ms']:.0f} ms), and "
            f"the warm-up's continuation second took {w['warmup_ms'][1]:.0f} ms (backbone "
            f"{w['warmup_backbone_ms'][1]:.0f} ms): the slow second is that path's first run, paid once per process "
            f"before serving. One process: a measurement, no interval." + _warmup2_processes())


def _warmup2_processes() -> str:
    """The two-second warm-up in fresh processes: the second's interval once the first continuation is warm."""
    from cadencelab.course import trust

    if not all(p.exists() for p in H100_WARMUP2_P):
        return ""
    runs = trust.duplex_processes(trust.WARMUP2_PROCESSES)["runs"]
    f, g = runs.loc["SRc+fusedLM"], runs.loc["SRc+graphLM"]
    prov = _read(H100_WARMUP2_P[0])["provenance"]
    return (f" In {int(f['processes'])} fresh processes with the two warm-up seconds "
            f"(`{'`, `'.join(_name(p) for p in H100_WARMUP2_P)}`, {prov.get('gpu')}, a later machine of "
            f"{prov.get('date', '')[:10]}): the mean second of SRc+fusedLM is {_ms(f)}, its interval {_where(f)} the "
            f"{f['goal_ms']:.0f} ms goal, {int(f['under_goal'])} of {int(f['seconds'])} timed seconds at or under it; "
            f"SRc+graphLM {_ms(g)}, {int(g['under_goal'])} of {int(g['seconds'])}. The fused decode stays a labelled "
            f"control: its tokens equal the graph decode's, not eager decoding's.")


def h100_tour_paragraph() -> str:
    """The notebooks graded on the GPU, run by the tour on the H100 (``tour_graded``)."""
    df = data.tour_live("tour_graded")
    prov = df.attrs["provenance"]
    rows = ["| notebook | s | check |", "|---|---:|---|"]
    rows += [f"| {r['title']} | {r['seconds']:.0f} | {str(r['check'] or r['error']).splitlines()[0]} |"
             for _, r in df.iterrows()]
    return (f"The GPU-graded notebooks, live (`{_name(H100_TOUR.parent)}/`, {prov.get('gpu')}, "
            f"{prov.get('date', '')[:10]}; `cadencelab tour --only 9,10`): {int(df['ok'].sum())} of {len(df)} ran "
            f"with the reference solutions typed in from outside the package; each was graded on the GPU for "
            f"exactness and speed. The planted slow and inexact wrappers failing there is the CUDA test "
            f"`tests/test_grading_integrity.py`, passed on the H100 the same day "
            f"(`data/h100/logs/2026-12-07_cuda_tests_ws.log`).\n\n" + "\n".join(rows))


EXTRA_SECTIONS = [(SOAK, soak_section), (DUPLEX, duplex_section), (SERVED, served_section),
                  (SESSIONS, sessions_section), (MIMI, lambda p: crossarch_section(p, FREEZE))]


def older_label(path: Path) -> str:
    """A lead-in for a study file recorded under another device condition than the exact one."""
    cond = recorded_condition(_read(path))
    return "" if cond == EXACT else (f"*Older recording, not yet re-recorded under the exact condition (device "
                                     f"condition `{cond}`):* ")


def paper_section() -> str:
    """The paper's figures (``data/paper/``) beside this recording's, from ``course.paper.paper_vs_table``."""
    df = paper_vs_table("exact")
    rows = ["| " + " | ".join(df.columns) + " |", "|---|---:|---:|---|---|"]
    rows += [f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | `{r[4]}` |" for r in df.itertuples(index=False)]
    return ("The paper's figures beside this recording (`cadencelab.course.paper.paper_vs_table`; the paper's "
            "from `data/paper/`, measured on its GPUs, mostly an A100, with trained weights; ours on the H200 under "
            "the exact condition with seeded random weights, and the duplex second's language models are "
            "stand-ins). Two set-ups measuring the same quantity, not one number twice:\n\n" + "\n".join(rows))


def render(paths=None) -> str:
    paths = paths or DEFAULT
    parts = [table(p) for p in paths[:1]]
    if paths == DEFAULT:
        parts.append(headline(FACTORIAL))
        if ON_KIT.exists():
            parts.append(on_kit_section(ON_KIT))
        if KIT_T2W.exists():
            parts.append(kit_section(KIT_T2W))
        parts.append(paper_section())
        if CONDITIONS_FILE.exists():
            parts.append(conditions_section(CONDITIONS_FILE))
        parts.append("Older recordings, kept because the course compares them (earlier commits, named in their "
                     "provenance): the cuBLAS workspace pin (`pinned`) and TF32 off only (`unpinned`).")
        parts += [table(p) for p in OLDER]
        parts.append("What the two older runs say:\n\n" + findings(*OLDER))
        parts.append("The `torch.compile(mode=\"reduce-overhead\")` control is no longer in the results: its only "
                     "recording never finished a block within its time-out (210 s), so it measured nothing; "
                     "`--arms ...,compile` still runs it.")
        parts += [older_label(p) + fn(p) for p, fn in EXTRA_SECTIONS if p.exists()]
        if H100_BLOCK.exists():
            parts.append(h100_section())
        if TOUR.exists():  # a run of the notebooks, under no device condition of its own
            parts.append(tour_section(TOUR))
    else:
        parts += [table(p) for p in paths[1:]]
    return "\n\n".join(parts)


STUDIES_BEGIN = "<!-- studies:begin (python docs/results_table.py --write-readme) -->"
STUDIES_END = "<!-- studies:end -->"
LIVE_BEGIN = "<!-- live:begin (python docs/results_table.py --write-readme) -->"
LIVE_END = "<!-- live:end -->"
DEVICE_BEGIN = "<!-- commands:begin (python docs/results_table.py --write-device-doc) -->"
DEVICE_END = "<!-- commands:end -->"


def _minutes(m: float | None) -> str:
    return "not timed yet" if m is None else f"{m:g} min"


def _runs() -> list[tuple]:
    """The recordings that are re-run on the device, one per command: (recording, every file it records)."""
    runs: dict[str, list] = {}
    for r in RECORDINGS:
        if r.minutes is not None:  # a command recorded more than once (repeats for a spread): one row, every file
            runs.setdefault(r.command(), []).append(r)
    for r in RECORDINGS:
        if r.minutes is None and r.command() in runs:
            runs[r.command()].append(r)
    return [(rs[0], [Path(x.path).name for x in rs]) for rs in runs.values()]


def device_commands() -> str:
    """docs/device.md's table: every device command (the CUDA tests, each study run that recorded a file
    under ``data/h200/`` or ``data/h100/``, the live course) with the minutes it took."""
    lines = ["| what | command | about |", "|---|---|---|"]
    tasks = [t for t in DEVICE_TASKS if not t.last], [t for t in DEVICE_TASKS if t.last]

    def task(t) -> str:
        minutes, note = t.minutes, t.note
        if t.dataset == "tour_live" and data.is_recorded("tour_live"):  # read from the recording, not typed
            df = data.tour_live()
            minutes = round(float(df["seconds"].sum()) / 60, 1)
            note = (f"{int(df['ok'].sum())} of {len(df)} notebooks ok, "
                    f"{str(df.attrs['provenance'].get('date', ''))[:10]}")
        after = "; ".join(x for x in (note, f"then {t.then}" if t.then else "") if x)
        return f"| {t.label} | `{t.command}` | {_minutes(minutes)}{f' ({after})' if after else ''} |"

    lines += [task(t) for t in tasks[0]]
    lines += [f"| {r.label} | `{r.command(f'$OUT/{r.out}')}` | {_minutes(r.minutes)} |" for r, _ in _runs()]
    lines += [task(t) for t in tasks[1]]
    return "\n".join(lines)


def readme_commands() -> str:
    """The README's table: each study run that recorded a file, its command and the files it recorded."""
    lines = ["| study | command | ran on | recorded in `data/` |", "|---|---|---|---|"]
    folder = lambda r: Path(r.path).parent.name  # noqa: E731 (the card's folder: h200/, h100/)
    lines += [f"| {r.label} | `{r.command()}` | {folder(r).upper()} | "
              f"{', '.join(f'`{folder(r)}/{n}`' for n in names)} |" for r, names in _runs()]
    return "\n".join(lines)


def _block(text: str, begin: str, end: str, what: str) -> str:
    """The text between ``begin`` and ``end`` in ``text`` (stripped)."""
    head, sep, rest = text.partition(begin)
    body, sep2, _ = rest.partition(end)
    if not (sep and sep2):
        raise ValueError(f"{what} has no {begin.split()[1]} markers")
    return body.strip()


def _replace(text: str, begin: str, end: str, body: str, what: str) -> str:
    _block(text, begin, end, what)  # both markers present
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def readme_block(readme: str) -> str:
    """The text between the results markers of ``readme`` (stripped)."""
    return _block(readme, BEGIN, END, "README.md")


def readme_live_block(readme: str) -> str:
    """The text between the live markers of ``readme`` (stripped): the running-live guide."""
    return _block(readme, LIVE_BEGIN, LIVE_END, "README.md")


def readme_studies_block(readme: str) -> str:
    """The text between the studies markers of ``readme`` (stripped)."""
    return _block(readme, STUDIES_BEGIN, STUDIES_END, "README.md")


def device_doc_block(doc: str) -> str:
    """The text between the commands markers of docs/device.md (stripped)."""
    return _block(doc, DEVICE_BEGIN, DEVICE_END, "docs/device.md")


def write_readme(path: Path = ROOT / "README.md") -> None:
    text = _replace(path.read_text(), BEGIN, END, render(), "README.md")
    text = _replace(text, LIVE_BEGIN, LIVE_END, live_guide(), "README.md")
    path.write_text(_replace(text, STUDIES_BEGIN, STUDIES_END, readme_commands(), "README.md"))


def write_device_doc(path: Path = DEVICE_DOC) -> None:
    path.write_text(_replace(path.read_text(), DEVICE_BEGIN, DEVICE_END, device_commands(), "docs/device.md"))


def main(argv: list[str]) -> int:
    if argv == ["--write-readme"]:
        write_readme()
        return 0
    if argv == ["--write-device-doc"]:
        write_device_doc()
        return 0
    print(render([Path(p).resolve() for p in argv] or None))
    return 0


if __name__ == "__main__":
    from cadencelab.bench.flags import run_main  # the one error wrapper: one line, no traceback (--debug for it)

    sys.exit(run_main("docs/results_table.py", main, sys.argv[1:]))
