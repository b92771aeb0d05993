"""Generate the seven course notebooks (committed without outputs).

    python notebooks/build.py            # (re)write notebooks/NN_*.ipynb
    python notebooks/build.py --check    # exit 1 when a committed notebook differs from this source

Each notebook teaches one idea with the library (logic lives in cadencelab; cells stay short),
opens with its learning goals, has a papermill-style ``parameters`` cell (``LIVE`` defaults to
``torch.cuda.is_available()``; GPU-only cells are guarded by ``if LIVE:``), and ends with a
``check`` cell that prints ``CHECK OK`` when what it taught holds. Cell ids are deterministic so
that rebuilding is byte-for-byte reproducible.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent

PARAMS = """\
# parameters: the tour and CI may override these (papermill style)
import torch

LIVE = torch.cuda.is_available()  # run the GPU-only cells live
CONDITION = "exact"  # recorded H200 data: "exact" (the exact device condition) or an older recording: pinned, unpinned"""

CHECK_MD = """\
## Check

Run the next cell: it asserts what this notebook taught and prints `CHECK OK` when it holds."""


def md(text: str) -> tuple:
    return ("markdown", textwrap.dedent(text).strip("\n"), ())


def code(text: str, *tags: str) -> tuple:
    return ("code", textwrap.dedent(text).strip("\n"), tuple(tags))


def params(extra: str = "") -> tuple:
    return code(PARAMS + (("\n" + textwrap.dedent(extra).strip("\n")) if extra else ""), "parameters")


# =======================================================================================
# 1. Anatomy of a duplex second
# =======================================================================================

NB1 = [
    md("""
    # 1 · Anatomy of a duplex second

    A full-duplex speech model hears one second of the person and must answer with one second of its own
    speech before the next second arrives: its **cadence** is 1 s. Every second runs the same stages in
    order (the language backbone, the speech-token decoder, then *synthesis*: Token2wav turning 25 speech
    tokens into 1 s of audio), and nothing inside one session can be batched.

    **You will learn**
    - to read a duplex second as a waterfall of stages against the 1 s cadence;
    - where the second overruns: the synthesis tail that starts after the autoregressive stages;
    - how much of that tail the two rules (state + replay) take back, on recorded H200 data, and what stays over.

    Runs on a CPU from recorded data. With a GPU (`LIVE`), the last section also times a live second.
    """),
    params(),
    code("""
    import pandas as pd

    from cadencelab import viz
    from cadencelab.course import data, frames
    """),
    md("""
    ## The paper's second

    The paper measures the stock MiniCPM-o 4.5 runtime: 842 ms of earlier stages, then 327 ms of
    synthesis. The second ends at 1,169 ms, 16.9% past the cadence. `data.paper_duplex_second` holds the
    published figures; `viz.waterfall` draws any frame of `stage, start_ms, dur_ms`.
    """),
    code("""
    paper = data.paper_duplex_second("anatomy")
    paper[["stage", "start_ms", "dur_ms", "where"]]
    """),
    code("""
    viz.waterfall(paper, options=viz.WaterfallOptions(title="The paper's duplex second (stock MiniCPM-o 4.5)"))
    """),
    md("""
    ## A duplex second measured on an H200

    `frames.anatomy_frame` puts recorded H200 numbers into the same picture. The recorded second
    (`python -m cadencelab.bench duplex`) runs stand-in language models with random weights at the declared
    sizes (a backbone and a speech-token decoder in bfloat16, Hugging Face eager decoding; the next cell
    prints their sizes from the recording's provenance) and then the real-size Token2wav under B0 or SRc.
    The `source` column says where each row comes from.
    """),
    code("""
    second = frames.anatomy_frame(CONDITION)
    cfg = data.provenance("duplex_second")["config"]
    print(f"stand-ins: backbone {cfg['backbone']['parameters'] / 1e9:.1f} B, speech-token decoder "
          f"{cfg['speech']['parameters'] / 1e6:.0f} M parameters, {cfg['dtype']}")
    second.groupby("source", sort=False)["origin"].first()
    """),
    code("""
    viz.waterfall(second, options=viz.WaterfallOptions(layout="facets", title="Stage waterfall against the 1 s cadence"))
    """),
    md("""
    Read the spread before the medians. The two language-model stages are identical code in both arms, yet
    their per-second durations vary a lot (min and max below): eager token-by-token decoding launches tens
    of thousands of kernels per second and leaves the GPU idle most of the time (the second table: kernel
    launches and idle share, `slack_frac`, per stage of the profiled second), so host-side jitter shows
    directly. Synthesis is the stage the rules change, and it is tight.
    """),
    code("""
    secs = data.duplex_seconds(CONDITION)
    timed = secs[~secs["warmup"] & (secs["parent"].fillna("") == "")]
    display(timed.groupby(["arm", "stage"], sort=False)["dur_ms"].describe()[["count", "min", "50%", "max"]].round(1))
    data.duplex_summary(CONDITION).filter(regex="_(launches|slack_frac)$").round(2)
    """),
    md("""
    To see only what the rules change, *compose* each arm's second: the paper's earlier stages (842 ms, the
    stock MiniCPM-o 4.5 measurement) followed by the Token2wav synthesis segment recorded for that arm in
    the factorial study.
    """),
    code("""
    composed = frames.anatomy_frame(CONDITION, compose=True)
    viz.waterfall(composed, options=viz.WaterfallOptions(layout="facets", title="Paper's earlier stages + H200 synthesis"))
    """),
    md("""
    ## Where the tail overruns

    `frames.overrun_table` says where each second ends, by how much it misses the cadence (negative:
    headroom) and which stage crosses the line. In the paper's second and in the composed ones the crossing
    stage is synthesis: everything before it is sequential, so its whole duration lands on the deadline. In
    the recorded H200 second the slow stand-in language models already cross it: the lesson of notebook 2
    applies, their catalogs are outside the lossless scope.
    """),
    code("""
    pd.concat([frames.overrun_table(second), frames.overrun_table(composed[composed["origin"] == "composed"])])
    """),
    md("""
    The synthesis numbers come from the factorial study (notebook 5): B0 is the stock runtime, SRc applies
    both rules. Note the tail as well as the median: p95 latency is what a listener hears as a stall.
    """),
    code("""
    data.factorial(CONDITION).set_index("arm").loc[
        ["B0", "SRc"], ["steady_latency_ms_median", "steady_latency_ms_p95", "peak_MiB_median", "exact"]]
    """),
    md("""
    The paper's live measurement (table 5) makes the same point end to end: mean SPEAK time of a one-second
    unit falls from 1,141 ms (14.1% over) to 976 ms (2.4% under). What remains over at p95 comes from the
    autoregressive stages, which notebook 2 shows are outside the lossless scope (their catalogs are too wide).
    """),
    code("""
    data.paper_duplex_second("live_speak")[["stage", "dur_ms", "arm", "note"]]
    """),
    md("""
    ## Live (GPU only)

    With CUDA, `cadencelab.adapters.duplex.run_second` times one second of stand-in models at H200 sizes
    (random weights, declared shapes) under B0 and SRc.
    """),
    code("""
    if LIVE:
        from cadencelab.adapters.duplex import build_models, run_second

        models = build_models("h200", "cuda")
        live = pd.concat([run_second("h200", arm=a, device="cuda", models=models).assign(source=f"live {a}")
                          for a in ("B0", "SRc")])
        top = live[live["parent"].fillna("") == ""]
        display(viz.waterfall(top, options=viz.WaterfallOptions(layout="facets", title="A live duplex second")))
        display(frames.overrun_table(top))
    else:
        print("No CUDA device: the recorded H200 numbers above stand in for a live second.")
    """),
    md(CHECK_MD),
    code("""
    over = frames.overrun_table(second).set_index("source")
    stock = over.loc["paper (stock)"]
    assert stock["crossing_stage"] == "synthesis" and round(stock["over_pct"], 1) == 16.9
    b0, both = (over[over.index.str.contains(f"H200 {arm} ")].iloc[0] for arm in ("B0", "SRc"))
    assert both["end_ms"] < b0["end_ms"], "the two rules should shorten the second"
    comp = frames.overrun_table(composed).set_index("source")
    assert comp.loc["H200 SRc (composed)", "over_ms"] < 0 < comp.loc["H200 B0 (composed)", "over_ms"]
    print(f"CHECK OK: notebook 1: stock second ends at {stock['end_ms']:.0f} ms (synthesis crosses the cadence); "
          f"with H200 synthesis B0 ends at {b0['end_ms']:.0f} ms, SRc at {both['end_ms']:.0f} ms")
    """, "check"),
]


# =======================================================================================
# 2. Native clocks and regions
# =======================================================================================

NB2 = [
    md("""
    # 2 · Native clocks and regions

    A model in this class advances on several **native clocks** whose rates are fixed by configuration
    (C1), and keeps persistent state under a **declared retention policy** (C2). Write those down once, as a
    `Declaration`, and every extent, byte count and shape class follows by arithmetic, before any traffic.

    **You will learn**
    - to write the Token2wav declaration: clocks, regions with retention policies, an operator, admission;
    - to derive the extent trajectory a_r(t), the envelope A_r, the over-reservation ρ_r and the catalog width K_r;
    - how f_retained, f_chunk and n_steps move those numbers (sliders that re-derive them instantly).
    """),
    params(),
    code("""
    from cadencelab import viz
    from cadencelab.course import frames, panels
    from cadencelab.contract import (T2W_CLOCKS, Admission, Clock, Declaration, Operator, PromptRetained, Region,
                                     backbone_declaration, catalog_width, clocks_table, derive, region_table,
                                     token2wav_declaration, trajectory)
    """),
    md("""
    ## 1. Clocks

    One stream call (a *chunk*) carries 25 speech tokens plus 3 lookahead tokens; each token is 2 mel frames;
    the flow-matching solver runs 10 Euler steps per chunk. Rates are ratios to a parent clock.
    """),
    code("""
    clocks = (
        Clock("chunks", "stream call (one second of speech)", rate_hz=1.0),
        Clock("tokens", "speech token", parent="chunks", ratio=25, offset=3),
        Clock("frames", "mel frame", parent="tokens", ratio=2),
        Clock("steps", "Euler solver step", parent="chunks", ratio=10),
        Clock("turns", "conversation turn"),
    )
    clocks_table(clocks)
    """),
    md("""
    ## 2. Regions

    The DiT's attention cache keeps a 302-frame prompt plus 100 frames of history, newest frames first
    (`PromptRetained(302, 100, layout="newest_first")`). The stock code reserves it for 16 solver slots, and
    its solver workspace for 16 slots x 1000 frames: implementation constants, declared as `stock`.
    """),
    code("""
    cache = PromptRetained(prompt=302, retained=100, layout="newest_first")
    kv = ("n_steps", 16, 2, 8, "frames", 128)  # (solver steps, DiT blocks, CFG pair, heads, frames, K|V)
    regions = (
        Region("estimator_att_cache", clock="frames", shape=kv, policy=cache, growth=50, max_call=56, initial=302,
               lifetime="turn", stock={"n_steps": 16}, address_stable=True),
        Region("solver_workspace", clock="frames", shape=kv, policy=cache, growth=50, max_call=56, initial=302,
               role="workspace", envelope="attended", stock={"n_steps": 16, "frames": 1000}, address_stable=True),
    )
    """),
    md("""
    ## 3. An operator and the admission predicate

    The flow chunk reads the cache; a steady call advances 50 frames; a final flush carries 6 to 54 frames.
    Admission: a call of f frames is admitted when f ≤ f_chunk = 50.
    """),
    code("""
    flow_chunk = Operator("flow_chunk", reads=("estimator_att_cache",), clock="frames", call=50, flush=(6, 54, 2))
    mine = Declaration("my-token2wav", clocks, regions, (flow_chunk,), admission=Admission("frames", 50),
                       dims={"n_steps": 10})
    derive(mine).checks
    """),
    md("""
    ## Derived: extents, envelope, ρ_r, K_r

    The cached extent walks 302 → 352 → 402 and stays: the retention bound caps it. That trajectory is
    the set of shapes the operator can ever see.
    """),
    code("""
    trajectory(mine, "estimator_att_cache", calls=6)
    """),
    code("""
    region_table(mine)[["region", "A_minus", "A", "A_attended", "demand_shape", "stock_shape", "rho", "K"]]
    """),
    md("""
    The 16 x 1000 envelope collapses to 10 x 458 (10 steps; 402 retained + 56 of one call): ρ = 3.49.
    K_r = ⌈W_r / s_r⌉ + 1 with the retention window W_r = A_r − A_r⁻ and the stride s_r:
    """),
    code("""
    catalog_width(mine, "estimator_att_cache")
    """),
    md("""
    ## The shipped declaration

    `token2wav_declaration()` declares every region of the adapter (conformer, vocoder caches, the solver
    noise table, ...). Same arithmetic, whole model:
    """),
    code("""
    shipped = token2wav_declaration()
    frames.derive_clock_table(shipped)
    """),
    code("""
    viz.catalog_grid(frames.catalog_grid_frame(shipped, "flow_chunk"))
    """),
    md("""
    Not every stage qualifies. The same arithmetic on a language backbone decoding one token per call over
    a 2,000-token window gives K = 2,001 shape classes, and a speech-token decoder whose query length
    follows the traffic has no clock-determined signature at all: both stay outside the lossless scope.
    """),
    code("""
    derive(backbone_declaration()).verdict[["operator", "K", "affordable", "reason"]]
    """),
    md("""
    ## Sliders: change the configuration, re-derive instantly

    Move f_retained, f_chunk or n_steps. With f_retained = 150 the trajectory needs one more step
    (302, 352, 402, 452: K = 4); with f_chunk = 40 the stride no longer divides the window and truncation
    adds a class (302, 342, 382, 402). n_steps scales the per-step regions.
    """),
    code("""
    sliders = panels.clock_sliders()
    sliders
    """),
    code("""
    sliders.figure()
    """),
    code("""
    sliders.update(f_retained=150)
    print(sliders.summary)
    sliders.update(f_retained=T2W_CLOCKS.retained_frames, f_chunk=40)
    print(sliders.summary)
    sliders.update(f_chunk=T2W_CLOCKS.chunk_frames)  # back to the shipped clocks
    """),
    md(CHECK_MD),
    code("""
    t = region_table(mine).set_index("region")
    assert sorted(trajectory(mine, "estimator_att_cache")["shape_extent"].unique()) == [302, 352, 402]
    assert t.loc["solver_workspace", "demand_shape"] == (10, 16, 2, 8, 458, 128)
    assert round(t.loc["solver_workspace", "rho"], 2) == 3.49 and t.loc["estimator_att_cache", "K"] == 3
    assert sliders.update(f_retained=150).set_index("region").loc["estimator_att_cache", "K"] == 4
    sliders.update(f_retained=100)
    print("CHECK OK: notebook 2: L = {302, 352, 402}, K = 3, 16x1000 -> 10x458 (rho 3.49); f_retained=150 gives K = 4")
    """, "check"),
]


# =======================================================================================
# 3. The carry
# =======================================================================================

NB3 = [
    md("""
    # 3 · The carry

    The stock streaming loop applies retention with `torch.cat`: every chunk allocates a new cache tensor.
    The **carry** holds the retained cache in one buffer, at one address, for the stream's life, and writes
    retention in place, elementwise identical to the stock cut. A **shadow auditor** runs the stock
    concatenation beside every retention and compares.

    **You will learn**
    - to see the stock concat move the cache every chunk while the carry stays put, bit for bit equal;
    - to read a shadow audit (applications, agreements, first divergent call);
    - how a carry with the wrong layout is caught at the chunk where it diverges, before any output is wrong.

    The lesson runs on the teaching model shipped in `cadencelab.adapters.teaching` (same cache structure as
    Token2wav at toy sizes: prompt 12 + retained 8 frames, newest first, 4 frames per chunk), then on
    Token2wav itself.
    """),
    params(),
    code("""
    import pandas as pd

    from cadencelab import viz
    from cadencelab.adapters import teaching
    from cadencelab.state import ShadowAuditor

    cfg = teaching.TeachingConfig()
    model = teaching.TinyStreamer(cfg)
    stream = teaching.make_stream(cfg)  # two turns: 5 chunks + a 6-frame flush, then 2 chunks + a 2-frame flush
    """),
    md("""
    ## Stock concat vs carry

    Each row is one call: the cached extent after it and the address of the cache tensor.
    """),
    code("""
    stock = teaching.TeachingRuntime(model, state_rule=False).run(stream)
    stock.table
    """),
    code("""
    carry = teaching.TeachingRuntime(model).run(stream)
    carry.table
    """),
    code("""
    viz.pointer_figure({"stock torch.cat": stock.table, "carry": carry.table})
    """),
    md("""
    Same outputs, bit for bit (`torch.equal`, not a tolerance), under two allocation disciplines:
    """),
    code("""
    teaching.bit_exact(stock, carry)
    """),
    md("""
    ## The shadow audit

    The auditor keeps its own stock cache under the *declared* layout and policy, applies the stock
    `torch.cat` and cut to it at every retention, and compares elementwise with the carry (turn resets
    included).
    """),
    code("""
    auditor = ShadowAuditor()
    teaching.TeachingRuntime(model, auditor=auditor).run(stream)
    auditor.summary()
    """),
    md("""
    ## A wrong layout, caught where it diverges

    A plausible first carry appends new frames at the end (chronological) while the model's cache is newest
    first. An attention layer without positional terms barely notices the order, so the outputs agree to
    about 1e-6 until eviction first reaches the prompt, on the third chunk. Two audits watch it: the
    elementwise one (the product's bar) and an order-insensitive one (what a value check sees).
    """),
    code("""
    strict, lenient = ShadowAuditor(), ShadowAuditor(compare="frames")
    wrong = teaching.TeachingRuntime(model, layout="chronological", auditor=lenient).run(stream)
    teaching.TeachingRuntime(model, layout="chronological", auditor=strict).run(stream)
    print("elementwise audit, first divergence:", strict.first_divergence)
    print("frame-set audit,   first divergence:", lenient.first_divergence)
    """),
    code("""
    viz.audit_figure({"elementwise": pd.DataFrame(strict.records),
                          "frame sets (order-insensitive)": pd.DataFrame(lenient.records)},
                         teaching.bit_exact(stock, wrong))
    """),
    md("""
    The frame-set audit flags call 2 (the third chunk, the first retention that cuts into the prompt), one
    call *before* the first output that a tolerance check would reject (call 3). The elementwise audit flags
    call 0: the frames are in the wrong order from the start. The paper's development story is the same:
    an append-ordered carry matched for two chunks and diverged on chunk three.

    ## The same carry inside Token2wav

    Arm `S` of the Token2wav runtime keeps the DiT cache in the solver's own buffer (an in-buffer carry,
    newest first). Teaching config, three chunks: the extent walks 302 → 352 → 402 at one address.
    (The paper reports the same audit agreeing on all 264 retentions, at a single address, across 312
    applications over four matched blocks, turn boundaries included: a published figure from its
    verification-mode paragraph, DuplexCadence, arXiv:2609.35115v1, not measured here.)
    """),
    code("""
    from cadencelab.adapters.token2wav import TEACHING, build_token2wav, make_prompt
    from cadencelab.adapters.token2wav.runtime import Token2wavRuntime, runtime_envelope

    flow, hift = build_token2wav(TEACHING, 0, envelope=runtime_envelope("S"))
    rt = Token2wavRuntime(flow, hift, "cpu", "S", cfg=TEACHING, backend="eager")
    rt.set_stream_cache(make_prompt(TEACHING, 0))
    base = rt.est.buffer.data_ptr()
    """),
    code("""
    tokens = list(range(100, 200))
    lengths = []
    for i in range(3):
        rt.stream(tokens[25 * i: 25 * i + 28])
        lengths.append((rt.est.length, rt.est.buffer.data_ptr() == base))
    lengths
    """),
    md(CHECK_MD),
    code("""
    assert teaching.bit_exact(stock, carry)["equal"].all()
    assert carry.table["cache_ptr"].nunique() == 1 and stock.table["cache_ptr"].nunique() > 1
    assert auditor.ok and auditor.agreements == len(carry.table)
    assert (strict.first_divergence.call, lenient.first_divergence.call) == (0, 2)
    assert lengths == [(352, True), (402, True), (402, True)]
    print(f"CHECK OK: notebook 3: carry bit-exact at one address ({auditor.agreements} audited retentions); "
          "wrong layout caught at call 0 (elementwise) / call 2 (frame sets)")
    """, "check"),
]


# =======================================================================================
# 4. Exact-shape replay
# =======================================================================================

NB4 = [
    md("""
    # 4 · Exact-shape replay

    Because every hot tensor shape is a function of declared clocks, the reachable signatures form a small
    **catalog** known before traffic. `ExactShapeReplay` captures one CUDA graph per catalog class, at exact
    shapes (no padding), and admits each call only if (i) its full signature is a captured catalog class,
    (ii) the addresses it reads and writes have not moved, and (iii) the class's effects were classified:
    host randomness is rejected for good, device randomness (Philox) is admitted. Anything else runs eagerly.

    **You will learn**
    - to read a catalog derived from a declaration, admitted and rejected classes included;
    - to follow admission call by call: probes, replays, and misses with their reasons;
    - why device randomness can be replayed bit-exactly while host randomness cannot.

    On a CPU the engine's eager backend keeps identical bookkeeping (catalog, admission, guards, counters)
    and says so; with CUDA (`BACKEND="auto"`) it captures real graphs.
    """),
    params("""
    BACKEND = "auto"  # ExactShapeReplay backend: "cuda" on a GPU, "eager" bookkeeping on a CPU"""),
    code("""
    import pandas as pd

    from cadencelab import viz
    from cadencelab.adapters import teaching
    from cadencelab.course import data, frames
    from cadencelab.contract import admitted_labels, catalog, token2wav_declaration
    """),
    md("""
    ## The catalog

    Token2wav's flow chunk: three cached extents (302, 352, 402) and call sizes from the stride and the
    partial flushes; flushes above f_chunk = 50 frames fall outside the admission predicate.
    """),
    code("""
    t2w = token2wav_declaration()
    viz.catalog_grid(frames.catalog_grid_frame(t2w, "flow_chunk"))
    """),
    code("""
    catalog(t2w, "flow_chunk").groupby(["kind", "admitted"]).size()
    """),
    md("""
    The teaching model has the same structure at toy scale: cached extents 12, 16, 20 and calls of 2, 4 or
    6 frames, of which 6 (a flush with its lookahead) is above f_chunk = 4.
    """),
    code("""
    cfg = teaching.TeachingConfig()
    model, decl = teaching.TinyStreamer(cfg), teaching.declaration(cfg)
    stream = teaching.make_stream(cfg)
    catalog(decl, "chunk_step")[["class_id", "kind", "ext_kv_cache", "f", "admitted", "reason"]]
    """),
    md("""
    ## Admission, call by call

    The carry runtime with the chunk step wrapped in the engine. `path` says what happened to each call:
    the first call of a class is its eager *probe* (it watches the random generators, then captures),
    later calls replay, and a signature outside the catalog runs eagerly.
    """),
    code("""
    rt = teaching.TeachingRuntime(model, replay=True, backend=BACKEND)
    run = rt.run(stream)
    print(rt.summary())
    run.table[["turn", "chunk", "f", "extent", "path"]]
    """),
    code("""
    rt.counters()[["label", "status", "reason", "rng", "hits", "replays", "eager", "miss_reasons"]]
    """),
    code("""
    viz.misses_figure(rt.counters())
    """),
    md("""
    Every call, replayed or not, is bit-identical to the stock loop:
    """),
    code("""
    ref = teaching.TeachingRuntime(model, state_rule=False).run(stream)
    teaching.bit_exact(ref, run)["equal"].value_counts()
    """),
    md("""
    ## Randomness: host rejected, device admitted

    A model that draws noise every call (HiFT's harmonic source does, on every chunk). Drawn on the host
    (a CPU tensor), a captured graph would freeze the draw into a constant: the engine sees the host
    generator move during the probe and rejects the class for good. Drawn on the device, the Philox offset
    advances by the graph's increment at each replay, so replay n draws what eager call n would.
    """),
    code("""
    noisy = teaching.TinyStreamer(cfg.replace(noise_std=0.05))
    rt_noisy = teaching.TeachingRuntime(noisy, replay=True, backend=BACKEND)
    run_noisy = rt_noisy.run(stream)
    ref_noisy = teaching.TeachingRuntime(noisy, state_rule=False).run(stream)
    print(rt_noisy.summary())
    rt_noisy.counters()[["label", "status", "reason", "rng"]]
    """),
    code("""
    teaching.bit_exact(ref_noisy, run_noisy)["equal"].value_counts()
    """),
    md("""
    On the H200 the vocoder core (HiFT, which draws device randomness on every call) was replayed in every
    replay arm, and every block stayed bit-exact with the stock runtime:
    """),
    code("""
    fac = data.factorial(CONDITION)
    pd.DataFrame([dict(arm=a, engine=k, summary=v, exact_blocks=f"{e}/{b}")
                  for a, d, e, b in zip(fac["arm"], fac["replay"], fac["exact_blocks"], fac["blocks"])
                  for k, v in (d or {}).items()])
    """),
    code("""
    if LIVE:  # the same noisy model with real CUDA graphs: device RNG admitted, still bit-exact
        cert = teaching.certify(noisy.cuda(), backend="cuda")
        display(cert)
    else:
        print("No CUDA device: device-RNG admission is shown by the recorded H200 replay summaries above.")
    """),
    md("""
    ## The long run: 1,800 chunks

    Admission has to hold for half an hour, not for a demo. The soak streamed 1,800 real-size Token2wav
    chunks (30 minutes of audio, 60 turns of about 30 chunks, each turn ending with a flush of 26 or 54
    frames) through SRc on the H200, and the same turns through the stock runtime. After the first two
    turns (warm-up: one capture per class), the only eager calls are the declared ones: the prompt priming
    and the 54-frame flush, which lies outside the admission predicate f <= f_chunk.
    """),
    code("""
    soak = data.soak_summary()
    pd.Series({k: soak[k] for k in ["chunks", "exact_chunks", "peak_growth_bytes_after_warmup",
                                      "fallbacks_after_warmup", "declared_eager_after_warmup",
                                      "replayed_calls_after_warmup"]})
    """),
    code("""
    viz.soak_panel(data.soak_chunks(), viz.FigureOptions(height=520))
    """),
    md(CHECK_MD),
    code("""
    c = rt.counters()
    assert teaching.bit_exact(ref, run)["equal"].all() and teaching.bit_exact(ref_noisy, run_noisy)["equal"].all()
    assert set(c.loc[c["status"] == "captured", "label"]) <= admitted_labels(decl, "chunk_step")
    assert c["replays"].sum() > 0 and "outside_catalog" in set(c["reason"])
    rng = set(rt_noisy.counters().query("status != 'unclassed'")["rng"]) - {"unknown"}
    assert rng == ({"device"} if rt_noisy.engine.backend == "cuda" else {"host"})
    assert soak["exact_chunks"] == soak["chunks"] and soak["fallbacks_after_warmup"] == 0
    assert (soak["chunks"], soak["turns"], soak["warmup_turns"]) == (1800, 60, 2)  # the soak's prose above
    assert {k.split(":")[1] for k in soak["declared_eager_after_warmup"]} == {"priming", "outside_catalog"}
    print(f"CHECK OK: notebook 4: {rt.summary()}; noisy model ({rt_noisy.engine.backend}): RNG {sorted(rng)}, "
          "bit-exact")
    """, "check"),
]


# =======================================================================================
# 5. Mutual enabling
# =======================================================================================

NB5 = [
    md("""
    # 5 · Mutual enabling

    Two rules, four questions: state rule on or off, replay on or off, replay per solver step or per chunk,
    and how many solver steps. The factorial study measured every combination on an H200 (repeated timed
    blocks per arm, paired bootstrap intervals, bit-exactness against the stock runtime per block).

    **You will learn**
    - that each rule alone fails in its own direction: the state rule saves memory without speed, replay
      gains speed and *costs* memory (most at chunk granularity);
    - that only the two together reach the corner of the Pareto plot;
    - that exactness is a precondition of the comparison, and what it costs: the device condition under
      which every arm is bit-exact across processes, chosen by measurement.
    """),
    params(),
    code("""
    import pandas as pd

    from cadencelab import viz
    from cadencelab.course import data, panels
    """),
    md("""
    ## The recorded factorial

    Each point is one arm: median steady-chunk latency vs median peak allocator memory, with the paired
    95% intervals; arms that are not bit-exact are drawn as open crosses.
    """),
    code("""
    viz.pareto(data.pareto_frame(CONDITION), viz.ParetoOptions(title=f"Token2wav on an H200 ({CONDITION} kernels)"))
    """),
    md("""
    ## The rules panel

    Toggle the rules; the ringed point is the arm they name, read from the recorded data (measured live on
    this GPU when `LIVE`). The readout adds what the declaration says about the choice: how many steady graph
    bindings replay captures and how large a solver workspace the state rule allocates.
    """),
    code("""
    panel = panels.rules_panel(condition=CONDITION, live=LIVE)
    panel
    """),
    md("""
    The panel's callbacks are plain methods. Walk the six cells of the factorial:
    """),
    code("""
    walk = [panel.set(state_rule=s, replay=r, granularity=g)
            for s, r, g in [(False, False, "chunk"), (True, False, "chunk"), (False, True, "step"),
                            (False, True, "chunk"), (True, True, "step"), (True, True, "chunk")]]
    pd.DataFrame(walk)[["arm", "lat_ms", "peak_MiB", "exact", "latency_delta", "peak_delta", "steady_bindings",
                        "solver_workspace_MiB"]]
    """),
    md("""
    Read the rows against each other:

    - **S** (state rule only) cuts the peak to a fraction of B0's (`peak_delta`) without a speedup (its
      `latency_delta` is near zero or above): demand sizing is a memory mechanism.
    - **R / Rc** (replay only) are fast, and memory goes *up*: without a contract-owned carry the engine must
      stage a copy of every cache input per captured class, at the stock envelope. At chunk granularity that
      is the whole stacked cache per class: Rc's peak is a multiple of B0's.
    - **SR / SRc**: the carry is aliased by address (no staging), the envelope it freezes is the declared one.
      Both gains survive, neither cost does.
    """),
    code("""
    panel.figure()
    """),
    md("""
    Solver steps: the recorded study ran at 10 steps. Other step counts change what the declaration derives
    (bindings at step granularity, the solver workspace) at once; their latency needs a live GPU run.
    """),
    code("""
    print(panel.set(steps=6)["note"] or "measured live at 6 steps")
    panel.set(steps=10)
    """),
    md("""
    ## Exactness is a precondition, and it has a price

    The bitwise gate compares arms that run in different processes, so each process must pick the same
    kernels. Three knobs decide that (TF32, cuDNN's deterministic algorithms, cuBLAS's workspace), and
    each can slow the stock runtime. The conditions study ran every candidate setting with B0, a second
    B0 process, SRc and the re-bucketed vendor graph, all interleaved in one run: a condition is exact
    when every arm equals its own condition's B0 in every block. The exact condition is the least pinning
    that is exact; every recorded study now runs under it, and the factorial checks that B0 there is no
    slower than B0 with nothing pinned (the fairness gate).
    """),
    code("""
    cond = data.device_conditions()
    s = cond.attrs["summary"]
    fair = data.factorial_summary()["fairness"]
    print(f"exact condition: {s['chosen']} (least pinning that is exact); "
          f"B0 there vs nothing pinned, paired over the factorial's blocks: {100 * fair['B0_slower_by']:+.1f}% "
          f"(95% CI {100 * fair['B0_slower_by_ci'][0]:+.1f}..{100 * fair['B0_slower_by_ci'][1]:+.1f}%)")
    cond[["condition", "pins", "B0_ms", "B0_cost_vs_fastest", "B0_repeat_exact_blocks", "SRc_exact_blocks",
          "vendor_graph_50_exact_blocks", "exact"]].round(3)
    """),
    md("""
    Two readings: where B0 itself is not reproducible across processes (`B0_repeat_exact_blocks` below the
    block count), no comparison with it can be bitwise; and the cuBLAS workspace pin of the older recordings
    is the one knob whose cost stands far above the run's noise. The older unpinned recording shows the
    drift: mel and int16 PCM match, float32 PCM does not, even for `vendor_graph`, which runs B0's kernels.
    """),
    code("""
    viz.pareto(data.pareto_frame("unpinned"), viz.ParetoOptions(title="Older recording, TF32 off only: float32 PCM drifts"))
    """),
    md("""
    ## Many sessions on one GPU

    Stages inside a session cannot be batched, so serving N people means N states resident and N chunks
    served in turn within each second. The session manager keeps one set of weights and one set of captured
    graphs; each session owns only its state snapshot, swapped into the graphs' addresses when its chunk
    comes up (no re-capture). Each session was fed at the 1 s cadence under two workloads (`speak_heavy`:
    every session speaks every second; `mixed`: alternating 2 s turns) and every chunk was checked
    against that session run alone through B0.
    """),
    code("""
    cap = data.sessions_capacity()
    ran = cap[~cap["skipped"].astype(bool) & ~cap["oom"]]
    paper_arms = ran[ran["arm"].isin(["B0", "SRc"])]
    viz.capacity_lines(paper_arms[paper_arms["workload"] == "speak_heavy"], options=viz.CapacityOptions(
        title="speak-heavy: worst per-session p95 chunk latency vs sessions", hline_label="cadence (ms)"))
    """),
    code("""
    sess = data.sessions_summary()
    data.sessions_table()
    """),
    md("""
    The state rule sets what a session costs (its declared state: demand-sized carries instead of stock
    buffers); replay sets how many fit in a second. With p95 taken over each session's own chunks (2-3 per
    session and N here, so p95 is close to the worst chunk), SRc holds the cadence for several times as many
    sessions as B0 in both workloads (the table has the counts). One B0 chunk takes about half the cadence,
    so B0's speak-heavy count sits on the edge between one and two sessions and moves from run to run.

    ## An open question: batching across sessions (experimental)

    The paper leaves one thing open: chunks of *different* sessions that arrive together could share one
    call. Arm `SRb` tries it: the chunks arriving in the same second with the same shape class are stacked
    along the batch dimension and run as one flow call and one vocoder call, through CUDA graphs keyed on the
    batch size (the declared sizes are the bench's `--batch-sizes`; a size outside them runs eagerly and is
    counted). Three things to keep in mind when reading the lines below:

    * its gate is the **batched eager path** (the same batches, seeds and order without graphs), not the
      session run alone: batching changes GEMM shapes and the vocoder's noise draws, so a batched session's
      output differs from its solo output (the mel matches only while a session has never been batched);
    * every arrival in these workloads is at a whole second, the best case for batching: nothing waits for
      a batch to fill;
    * its stacked workspaces and per-class graph inputs are a large fixed cost (the memory panel: SRb's
      peak at one session, against SRc's).
    """),
    code("""
    heavy = ran[ran["workload"] == "speak_heavy"]
    display(viz.capacity_lines(heavy, options=viz.CapacityOptions(
        title="speak-heavy, with the experimental batched arm SRb", hline_label="cadence (ms)")))
    viz.capacity_lines(heavy, metric="peak_MiB", cadence_ms=None, options=viz.CapacityOptions(
        title="peak allocation vs sessions: SRb's fixed cost, then about one state per session"))
    """),
    md("""
    Arrivals at the whole second are the best case for batching. The same study with each second's
    arrivals spread evenly over it (`--stagger`) asks whether batches still form when nobody waits for
    them: the batcher serves whatever has arrived whenever the device is free, so an idle device runs
    single chunks and batches appear only under load. (SRb's share of that run's time budget ran out
    before SRb broke, so the first table gives its counts as lower bounds; a follow-up run of SRb alone,
    the second table, went further.)
    """),
    code("""
    display(data.sessions_table("sessions_staggered"))
    data.sessions_table("sessions_srb_staggered")
    """),
    md(CHECK_MD),
    code("""
    pts = {p["arm"]: p for p in panel.history}
    assert {"B0", "S", "R", "Rc", "SR", "SRc"} <= set(pts)
    assert pts["SRc"]["lat_ms"] < 0.5 * pts["B0"]["lat_ms"] and pts["SRc"]["peak_MiB"] < 0.5 * pts["B0"]["peak_MiB"]
    assert pts["Rc"]["peak_MiB"] > 2 * pts["B0"]["peak_MiB"] and pts["S"]["peak_MiB"] < 0.5 * pts["B0"]["peak_MiB"]
    if panel.live:  # one short live block: too few chunks for a +-15% claim; the state rule alone is still slow
        assert pts["S"]["lat_ms"] > 2 * pts["SRc"]["lat_ms"]
    elif CONDITION != "unpinned":  # in the older unpinned recording S / B0 is 1.19
        assert abs(pts["S"]["lat_ms"] / pts["B0"]["lat_ms"] - 1) < 0.15
    assert CONDITION == "unpinned" or all(p["exact"] for p in pts.values())
    assert sess["target_ratio_3x_met"] and sess["all_checked_chunks_exact"]  # SRb gated on the batched eager path
    print(f"CHECK OK: notebook 5: SRc {pts['SRc']['lat_ms']:.1f} ms / {pts['SRc']['peak_MiB']:.0f} MiB vs "
          f"B0 {pts['B0']['lat_ms']:.1f} ms / {pts['B0']['peak_MiB']:.0f} MiB; Rc peak {pts['Rc']['peak_MiB']:.0f} MiB")
    """, "check"),
]


# =======================================================================================
# 6. Kernel timeline replay
# =======================================================================================

NB6 = [
    md("""
    # 6 · Kernel timeline replay

    A steady Token2wav chunk is thousands of kernels either way (the summary below counts them). Eagerly, the
    host issues them one by
    one and the GPU waits in between (`host_wait`); replayed, one `cudaGraphLaunch` issues them all and the
    gaps shrink to the device's own scheduling (`kernel_wait`). The *orchestration slack* is the idle share
    of the chunk's wall time.

    **You will learn**
    - to read a kernel timeline with its idle gaps classified (host_wait, kernel_wait, other);
    - to watch idle time accumulate kernel by kernel, eager beside replay;
    - that replay runs the same kernels in the same order and removes the time between them.

    Uses the recorded H200 traces of one steady chunk (B0 and SRc). Without them it profiles the teaching
    config live on the CPU (host ops instead of kernels); with a GPU (`LIVE`) it also profiles one live.
    """),
    params(),
    code("""
    from cadencelab.course.live import chunk_timelines
    from cadencelab.course.player import timeline_player
    """),
    code("""
    tl = chunk_timelines("auto")
    print(tl.source)
    print("events:", tl.what, f"({len(tl.eager)} eager, {len(tl.replay)} replayed)")
    """),
    code("""
    tl.summary[["variant", "wall_us", "busy_us", "slack_frac", "host_wait_us", "kernel_wait_us", "other_idle_us",
                "kernel_launches", "graph_launches", "kernels"]]
    """),
    md("""
    ## The player

    Press play (or drag, or step one kernel at a time): both panels show the last 40 kernels up to the
    cursor, with the idle gaps between them; the table accumulates busy and idle time; the lower figure shows
    the whole chunk's accumulation with the cursor.
    """),
    code("""
    player = timeline_player(tl.eager, tl.replay)
    player
    """),
    md("""
    The callbacks are plain methods: `player.show(k)` moves the cursor to kernel k and returns the readout.
    """),
    code("""
    player.show(len(tl.eager) // 2)
    """),
    code("""
    player.figure()
    """),
    code("""
    player.progress_figure()
    """),
    md("""
    Busy time is nearly the same in both: the same kernels run. What replay removes is idle time, and the
    eager idle is almost all `host_wait`: the GPU finished and the next launch had not been issued yet.

    ## Live (GPU only)
    """),
    code("""
    if LIVE:
        live = chunk_timelines("live", config="real", device="cuda")
        display(live.summary[["variant", "wall_us", "busy_us", "slack_frac", "host_wait_us", "graph_launches"]])
        display(timeline_player(live.eager, live.replay))
    else:
        print("No CUDA device: the recorded H200 chunk above stands in for a live profile.")
    """),
    md(CHECK_MD),
    code("""
    end = player.state(player.n).set_index("variant")
    s = tl.summary.set_index("variant")
    if "kernels" in tl.what:  # device traces: the slack story, and the player agrees with the summary
        assert end.loc["eager", "slack_frac"] > 3 * end.loc["replay", "slack_frac"]
        assert end.loc["eager", "host_wait_us"] > 0.5 * end.loc["eager", "idle_us"]
        idle = s.loc["eager", "wall_us"] - s.loc["eager", "busy_us"]
        assert abs(end.loc["eager", "idle_us"] - idle) < 0.05 * s.loc["eager", "wall_us"]
    assert len(tl.eager) > 0 and len(tl.replay) > 0
    print(f"CHECK OK: notebook 6: slack eager {end.loc['eager', 'slack_frac']:.2f} vs replay "
          f"{end.loc['replay', 'slack_frac']:.2f} over {len(tl.eager)} / {len(tl.replay)} events")
    """, "check"),
]


# =======================================================================================
# 7. Write your own adapter
# =======================================================================================

NB7 = [
    md("""
    # 7 · Write your own adapter

    The package ships four adapters (Token2wav, Mimi, a Freeze-Omni-style decoder, the teaching toy). Here you
    adapt a fifth that it does not ship: a small streaming encoder defined in this notebook, as its author
    would write it, with its own caches and its own cut. The adapter kit (`cadencelab.adapters.kit`) turns a
    declaration and a step into a streaming runtime: carries at one address, retention in place, two audits,
    and replay through the one seam from a declared operator to an engine.

    **You will learn**
    - to write an adapter in under 40 lines: a declaration (clocks with lookahead, regions, the operator)
      and a step;
    - to run the capture-safety preflight on a step before any capture, and to read its hazards table;
    - to certify the adapter with one call: the derived catalog against the shapes the stock model was
      observed to see, both audits, bit-exactness per call, replay counters, carry addresses;
    - to see a wrong declaration pass the declared audit and get caught by the differential audit at a
      named (call, region, index) before the output diverges;
    - to replay it (eager backend on CPU, CUDA graphs when `LIVE`).
    """),
    params("""
    BACKEND = "cuda" if LIVE else "eager"  # the replay engine's backend
    DEVICE = "cuda" if LIVE else "cpu\""""),
    code("""
    import math
    from dataclasses import dataclass

    from cadencelab import viz
    from cadencelab.course import data
    from cadencelab.course.frames import catalog_grid_frame
    from cadencelab.adapters.kit import StreamingRuntime, Traffic, adapter_lines, certify, exact_table, run_stock
    from cadencelab.contract import (Admission, Clock, Declaration, Fixed, Operator, PromptRetained, Region,
                                     SlidingWindow, catalog)
    from cadencelab.replay import At
    from cadencelab.replay.preflight import preflight
    """),
    md("""
    ## The model (not shipped)

    A streaming encoder over raw audio samples. A strided conv frontend turns every 4 samples into one frame
    (kernel 8, so each call needs the previous 4 samples as left context); one attention layer attends over
    its K|V cache plus the whole call: an **attention sink** (the turn's first 2 frames, kept forever) and a
    **sliding window** (the newest 10). Each call commits 6 frames and reads 2 **lookahead** frames beyond
    them; the turn's final call commits everything it carries. All sizes live in one place:
    """),
    code("""
    @dataclass(frozen=True)
    class Sizes:
        hop: int = 4  # samples per frame (the frontend's stride)
        kernel: int = 8  # frontend kernel: kernel - hop samples of left context
        dim: int = 8
        heads: int = 2
        sink: int = 2  # attention sink: the turn's first frames
        window: int = 10  # sliding window: the newest frames
        chunk: int = 6  # frames a call commits
        lookahead: int = 2  # frames a call reads beyond them
    """),
    code("""
    class SampleEncoder(torch.nn.Module):
        def __init__(self, s: Sizes, seed: int = 0):
            super().__init__()
            self.s = s
            self.front = torch.nn.Conv1d(1, s.dim, s.kernel, stride=s.hop)  # no padding: the cache is the context
            self.qkv, self.out = torch.nn.Linear(s.dim, 3 * s.dim), torch.nn.Linear(s.dim, s.dim)
            g = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for p in self.parameters():
                    p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    """),
    md("""
    Its code, as the author wrote it: `encode` computes one call and returns the frames it commits to each
    cache; `stock_step` is the model's own streaming step (concatenate, then its own cut).
    """),
    code("""
    def encode(m, x, kv, ctx, last):
        s, hd = m.s, m.s.dim // m.s.heads
        y = m.front(torch.cat([ctx, x], dim=1)[:, None]).transpose(1, 2)[0]  # (n, dim): n frames
        n = y.shape[0]
        c = n if last else n - s.lookahead  # committed frames
        q, k, v = (t.reshape(n, s.heads, hd).transpose(0, 1) for t in m.qkv(y).chunk(3, dim=-1))
        keys, vals = torch.cat([kv[0], k], dim=1), torch.cat([kv[1], v], dim=1)
        a = torch.softmax(q @ keys.transpose(1, 2) / math.sqrt(hd), dim=-1) @ vals  # (heads, n, hd)
        out = y + m.out(a.transpose(0, 1).reshape(n, s.dim))
        return out[None, :c], torch.stack([k, v])[:, :, :c], x[:, :c * s.hop]
    """),
    code("""
    def stock_step(m, x, kv, ctx, last):
        s = m.s
        out, kv_new, x_new = encode(m, x, kv, ctx, last)
        kv = torch.cat([kv, kv_new], dim=2)
        if kv.shape[2] > s.sink + s.window:
            kv = torch.cat([kv[:, :, :s.sink], kv[:, :, kv.shape[2] - s.window:]], dim=2)
        ctx = torch.cat([ctx, x_new], dim=1)
        return out, kv, ctx[:, ctx.shape[1] - (s.kernel - s.hop):]
    """),
    md("""
    ## Your adapter, part 1: the declaration

    Three clocks: one tick of `calls` commits `chunk` frames and reads `lookahead` more (the clock's
    `offset`); `samples` run `hop` per frame. The K|V cache keeps the sink plus the window
    (`PromptRetained`), chronological; the conv context is a fixed `kernel - hop` samples. The operator reads
    the K|V cache; its flush is derived from the lookahead.
    """),
    code("""
    def declaration(s: Sizes, kv_policy=None) -> Declaration:
        clocks = (Clock("calls", "encoder call"),
                  Clock("frames", "encoder frame", parent="calls", ratio=s.chunk, offset=s.lookahead),
                  Clock("samples", "audio sample", parent="frames", ratio=s.hop))
        kv = Region("kv", clock="frames", shape=(2, s.heads, "frames", s.dim // s.heads),
                    policy=kv_policy or PromptRetained(s.sink, s.window), lifetime="turn", address_stable=True)
        ctx = Region("ctx", clock="samples", shape=(1, "samples"), policy=Fixed(s.kernel - s.hop), lifetime="turn",
                     address_stable=True)
        op = Operator("encode", reads=("kv",), clock="frames", flush="lookahead")
        return Declaration("sample-encoder", clocks, (kv, ctx), (op,), admission=Admission("frames"),
                           call_clock="calls")
    """),
    md("""
    ## Your adapter, part 2: the step

    The kit's `views` form: the step reads each region's cached frames (a view of its carry) and returns
    the frames this call adds; the runtime appends and retains them in place. `stock` is the model's own
    step, which the certification and the differential audit run beside it. The last line says where a
    call's frames are: dim 1 of `x`, counted in samples.
    """),
    code("""
    def steps(m):
        def step(x, caches, last):  # region views -> (output, the frames this call adds to each region)
            out, kv, ctx = encode(m, x, caches["kv"], caches["ctx"], last)
            return out, {"kv": kv, "ctx": ctx}

        def stock(x, caches, last):  # the model's own step: its caches after its own cut
            out, kv, ctx = stock_step(m, x, caches["kv"], caches["ctx"], last)
            return out, {"kv": kv, "ctx": ctx}

        return step, stock, At(0, dim=1, clock="samples")
    """),
    code("""
    s = Sizes()
    model = SampleEncoder(s).to(DEVICE)
    decl = declaration(s)
    step, stock, frames = steps(model)
    print("adapter lines (declaration + step):", adapter_lines(declaration, steps))
    """),
    md("""
    ## What the declaration derives, before anything runs

    Steady classes: one per cached extent the K|V cache passes through (0, 6, then the sink + window of 12)
    at 6 frames per call; flush classes for every final call from the lookahead (2 frames) up. Final calls
    above the 6-frame chunk are not admitted (eager by the admission predicate).
    """),
    code("""
    catalog(decl, "encode")[["class_id", "kind", "ext_kv", "f", "admitted", "reason"]]
    """),
    code("""
    viz.catalog_grid(catalog_grid_frame(decl, "encode"))
    """),
    md("""
    ## The traffic

    Three turns of audio (whole frames). `Traffic.stream` cuts each into the calls a streaming client makes,
    sized from the declaration: 32 samples per call (6 + 2 frames), advancing 24; the rest is the final call.
    """),
    code("""
    g = torch.Generator().manual_seed(1)
    signals = [torch.randn(1, s.hop * n, generator=g).to(DEVICE) for n in (50, 37, 23)]
    traffic = Traffic.stream(decl, signals, clock="samples")
    [[x.shape[1] for x in turn] for turn in traffic.turns]
    """),
    md("""
    ## Preflight: is the step safe to capture?

    Before any capture, `preflight` runs the step eagerly (twice) under detectors and lists what would break
    a CUDA graph: host copies and syncs, host RNG, data-dependent shapes, allocations kept in state, rebound
    tensors; on a CPU the GPU target is emulated. First a tempting draft that normalizes each call by its peak:
    """),
    code("""
    caches = StreamingRuntime(decl, step, frames=frames, device=DEVICE).reset()  # a turn's empty caches
    x = traffic.turns[0][0]


    def peak_normalized(x, caches, last):  # a first draft: normalize by the chunk's peak
        return step(x / float(x.abs().max()), caches, last)


    draft = preflight(peak_normalized, x, caches, False, device="cuda", modules=[model])
    print(draft.summary())
    draft[["kind", "op", "where", "source", "fix"]]
    """),
    md("""
    `float(x.abs().max())` reads a device value on the host: a graph would freeze the value of the capture
    call. The step itself has no hazard:
    """),
    code("""
    pf = preflight(step, x, caches, False, device="cuda", modules=[model])
    print(pf.summary())
    pf
    """),
    md("""
    ## Certify

    One call runs the traffic through the model's own stock step and through the runtime (replay, both
    audits) and checks each clause.
    """),
    code("""
    cert = certify(decl, step, stock, traffic, frames=frames, modules=[model], backend=BACKEND, device=DEVICE)
    cert
    """),
    md("""
    The derived catalog against the labels (cached extent, committed frames) the stock model was *observed*
    to see: the steady classes must be equal, the flushes among the derived ones.
    """),
    code("""
    cert.catalog[(cert.catalog["observed"] > 0) | (cert.catalog["kind"] == "steady")]
    """),
    code("""
    viz.misses_figure(cert.runtime.engine.counters())
    """),
    md("""
    ## A wrong declaration: the forgotten attention sink

    Declare the K|V cache as a plain sliding window of 10: the author forgot the 2 sink frames. The declared
    audit checks the carry against the cut *you declared*, so it agrees on every retention. The differential
    audit runs the model's own stock step in shadow and compares its actual caches with the carries: it
    names the first (call, region, index) that differs, at the retention that drops the sink. The outputs
    of that call are still equal; they diverge on the next call, which reads the shortened cache. (The
    catalog clause fails too: the stock model was observed at extents the wrong declaration does not derive.)
    """),
    code("""
    forgot_sink = declaration(s, kv_policy=SlidingWindow(s.window))
    bad = certify(forgot_sink, step, stock, traffic, frames=frames, modules=[model], backend=BACKEND, device=DEVICE)
    bad.table
    """),
    code("""
    first, declared = bad.runtime.differential.first_divergence, bad.runtime.declared
    diverged = int(bad.exact.loc[~bad.exact["equal"], "call"].min())
    print(f"declared audit: {declared.agreements} of {declared.applications} retentions agree")
    print(f"differential audit: first divergence at call {first.call}, region '{first.region}', "
          f"index {first.index} ({first.detail})")
    print(f"outputs: equal through call {diverged - 1}, first unequal at call {diverged}")
    bad.exact.head(diverged + 1)
    """),
    md("""
    ## Replay

    The certified adapter as a runtime: every admitted call goes through the engine (`BACKEND`: the eager
    backend on a CPU, which walks the admission path without graphs; CUDA graphs on a GPU), every call
    compared with the stock step.
    """),
    code("""
    rt = StreamingRuntime(decl, step, frames=frames, replay=True, backend=BACKEND, modules=[model], device=DEVICE)
    run = rt.run(traffic)
    want, _ = run_stock(decl, stock, traffic, frames=frames, device=DEVICE)
    print(rt.engine.summary())
    print("bit-exact with the stock step:", exact_table(want, run.outputs)["equal"].all())
    run.table
    """),
    md("""
    ## The same contract on the shipped architectures

    The kit is what the shipped adapters use by hand. Two of them, certified on an H200 against their own eager
    paths (`python -m cadencelab.bench crossarch`): **Moshi's Mimi codec** (ring K|V caches and conv
    buffers: catalog width 1; one state tensor rebound by `torch.where` every frame, which the preflight
    names and the adapter pins) and a **Freeze-Omni-*style* decoder** (written here from published facts;
    it is not Freeze-Omni), whose carry keeps a compact left context where the stock policy recomputes
    overlaps.
    """),
    code("""
    cross = data.mimi_arms()[["arm", "latency_ms_median", "speedup_vs_eager", "exact_blocks", "blocks", "rebinding"]]
    cross
    """),
    md(CHECK_MD),
    code("""
    n_lines = adapter_lines(declaration, steps)
    assert n_lines <= 40, n_lines
    assert cert.ok, cert.table
    assert "host_sync" in set(draft.hazards()["kind"]) and pf.hazards().empty
    assert declared.ok and not bad.runtime.differential.ok and first.region == "kv"
    assert bad.exact["equal"].iloc[:first.call + 1].all() and first.call < diverged  # caught before it diverged
    assert exact_table(want, run.outputs)["equal"].all() and run.table["path"].str.startswith("replay").any()
    assert (cross["exact_blocks"] == cross["blocks"]).all()
    print(f"CHECK OK: notebook 7: a {n_lines}-line adapter certified ({BACKEND} backend); the forgotten sink "
          f"caught at call {first.call}, region '{first.region}', before the output diverged at call {diverged}")
    """, "check"),
]


NOTEBOOKS = {
    "01_anatomy_of_a_duplex_second": NB1,
    "02_native_clocks_and_regions": NB2,
    "03_the_carry": NB3,
    "04_exact_shape_replay": NB4,
    "05_mutual_enabling": NB5,
    "06_kernel_timeline_replay": NB6,
    "07_write_your_own_adapter": NB7,
}


def build(name: str, cells: list) -> nbformat.NotebookNode:
    """A notebook with deterministic cell ids, no outputs and ``execution_count: None``."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    prefix = name.split("_")[0]
    for i, (kind, src, tags) in enumerate(cells):
        meta = {"tags": list(tags)} if tags else {}
        if kind == "markdown":
            cell = nbformat.v4.new_markdown_cell(src, metadata=meta)
        else:
            cell = nbformat.v4.new_code_cell(src, metadata=meta)
            cell.execution_count = None
            cell.outputs = []
        cell.id = f"nb{prefix}-{i:02d}"
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def render(name: str) -> str:
    return nbformat.writes(build(name, NOTEBOOKS[name])) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    check = "--check" in argv
    stale = []
    for name in NOTEBOOKS:
        path = HERE / f"{name}.ipynb"
        text = render(name)
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(HERE.parent)}")
    if stale:
        print("out of date (run python notebooks/build.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
