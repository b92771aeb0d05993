"""The course's glossary: every term a notebook leans on, as a DataFrame and as markdown / HTML.

Where the code holds a term's definition as data, the glossary reads it (the arms' descriptions in
``adapters.token2wav.runtime.ARMS``, the check table of C1-C3, the exact device condition's
description); every other entry is a sentence written for the course, never a docstring pasted in,
and its ``source`` column names the code that implements the term.

    >>> g = glossary()
    >>> g.set_index("term").loc["B0", "definition"]
    'stock runtime'
"""

from __future__ import annotations

import html
import re

import pandas as pd

__all__ = ["glossary", "term", "to_markdown", "to_html", "GLOSSARY_COLUMNS"]

GLOSSARY_COLUMNS = ["term", "kind", "definition", "notebooks", "source"]


def _arms() -> list[dict]:
    from ..adapters.token2wav.runtime import ARMS

    notebooks = {"B0": (1, 5, 6, 7), "SRc": (1, 5, 6, 7), "B0_repeat": (5, 6)}
    rows = [dict(term=a.name, kind="arm", definition=a.description, notebooks=notebooks.get(a.name, (5,)),
                 source=f"cadencelab.adapters.token2wav.runtime.ARMS[{a.name!r}]")
            for a in ARMS.values() if a.name != "compile"]
    rows.append(dict(term="SRb", kind="arm",
                     definition="experimental: the chunks of several sessions that fall in one shape class batched "
                                "into one SRc call (eager or replayed); batching changes GEMM shapes and the "
                                "vocoder's noise draws, so its chunks are checked against the same batches run "
                                "eagerly, not against each session run alone",
                     notebooks=(6,), source="cadencelab.serving.batched"))
    rows.append(dict(term="SRbi", kind="arm",
                     definition="experimental: SRb with batch-invariant kernels; the ops whose kernel or reduction "
                                "order can follow the row count run once per session at the solo call's shapes, "
                                "and each row draws the vocoder's noise from its own session's seed; every "
                                "chunk is checked against the session run alone through B0; its rows sit at "
                                "the solo call's pointer residue (kernels are chosen on it), and since then its "
                                "CUDA test on the teaching model finds every row equal to the session alone",
                     notebooks=(6,), source="cadencelab.serving.invariant"))
    rows.append(dict(term="SRl", kind="arm",
                     definition="lanes: several SRc graph sets over one set of weights replaying at once, each on "
                                "its own CUDA stream with its own state and device generator; every chunk is "
                                "bit-identical to the session run alone through B0",
                     notebooks=(6,), source="cadencelab.serving.lanes"))
    return rows


def _checks() -> list[dict]:
    """C1-C3 as the derivation names them (its check table on the shipped declaration)."""
    from ..contract import checks
    from ..adapters.token2wav.clocks import token2wav_declaration

    t = checks(token2wav_declaration())
    return [dict(term=r.check, kind="contract",
                 definition=f"property {r.check}, {r.name}: one of the three a model must have for the two rules to be "
                            f"lossless (the derivation checks C1-C3 from a declaration; Token2wav: {r.reason})",
                 notebooks=(2,), source="cadencelab.contract.checks") for r in t.itertuples()]


def _terms() -> list[dict]:
    from ..contract import PRIMING
    from ..adapters.token2wav.clocks import Token2wavClocks
    from ..replay.determinism import CONDITIONS, EXACT
    from .frames import CADENCE_MS

    chunk = Token2wavClocks.chunk_frames.__doc__.split(": ", 1)[-1]
    call = Token2wavClocks.call_frames.__doc__.split(": ", 1)[-1]
    rows = [
        dict(term="cadence", kind="clocks",
             definition=f"the interval a full-duplex model must answer within: one second of its speech every "
                        f"{CADENCE_MS / 1e3:g} s of the person's; a second that takes longer overruns it",
             notebooks=(1, 6), source="cadencelab.course.frames.CADENCE_MS"),
        dict(term="declaration", kind="contract",
             definition="what a model states about itself before any traffic: its clocks and their rates, its state "
                        "regions with their retention policies, the operators that read them, and the admission "
                        "predicate; the catalog, envelopes, rho and checks C1-C3 are derived from it alone",
             notebooks=(2, 8, 10), source="cadencelab.contract.Declaration"),
        dict(term="lookahead", kind="clocks",
             definition="frames (or tokens) a call reads beyond the ones it commits: they shape its output but stay "
                        "for the next call; declared as the offset of the clock, so a call reads f_call = f_chunk + "
                        "lookahead", notebooks=(2, 8, 10), source="cadencelab.contract.Clock (offset)"),
        dict(term="flush", kind="clocks",
             definition="a turn's final call: it commits everything it holds, its lookahead included, so its size "
                        "ranges up to f_call; flushes above the admission predicate run eagerly (outside_catalog)",
             notebooks=(2, 4, 8, 10), source="cadencelab.contract.Operator (flush)"),
        dict(term="probe", kind="replay",
             definition="the first call of a shape class, run eagerly while the engine watches the host and device "
                        "random generators; host draws reject the class for good, otherwise it is captured and the "
                        "probe's result stands",
             notebooks=(4, 8), source="cadencelab.replay.engine (module docstring, step 3)"),
        dict(term="priming", kind="replay",
             definition=f"the cache-free prompt pass at a turn's start: eager by construction, counted as "
                        f"'{PRIMING}'", notebooks=(4, 8), source="cadencelab.contract.PRIMING"),
        dict(term="f_chunk vs f_call", kind="clocks", definition=f"f_chunk: {chunk} f_call: {call}",
             notebooks=(2, 4), source="cadencelab.adapters.token2wav.clocks.Token2wavClocks.chunk_frames / call_frames"),
        dict(term="envelope", kind="state",
             definition="the extents a region's size moves between: A- (lowest cached extent), A (highest, the "
                        "retention bound) and A_attended = A + f_call; the state rule allocates A for a retained "
                        "region and A + f_call for an attended workspace",
             notebooks=(2,), source="cadencelab.contract.envelope"),
        dict(term="retention bound", kind="state",
             definition="the most a retained cache ever holds: an immutable prompt plus a fixed number of history "
                        "frames (PromptRetained(prompt, retained)); older history is cut at each call",
             notebooks=(2, 3), source="cadencelab.contract.PromptRetained"),
        dict(term="K vs catalog size", kind="replay",
             definition="K: steady shape classes, one per cached extent a region passes through, K = ceil(W / s) + 1. "
                        "The catalog size adds the admitted flush classes (and priming); each admitted class is one "
                        "captured graph at most",
             notebooks=(2, 4, 10), source="cadencelab.contract.catalog_counts"),
        dict(term="rho_r", kind="state",
             definition="over-reservation of region r: the bytes the stock code reserves over the bytes its declared "
                        "live extent needs (1 when the stock code already allocates to demand)",
             notebooks=(2,), source="cadencelab.contract.rho_table"),
        dict(term="busy time", kind="profile",
             definition="the time the device is executing something in a window: the union of its kernels' and "
                        "copies' intervals (overlaps counted once)",
             notebooks=(0, 1, 5, 7), source="cadencelab.profile.summary (busy_us)"),
        dict(term="slack", kind="profile",
             definition="orchestration slack: the idle share of a window's wall time, (wall - busy) / wall; its idle "
                        "splits into host_wait (the device finished, the next launch not issued yet), kernel_wait "
                        "and other",
             notebooks=(0, 1, 5, 7), source="cadencelab.profile.summary (slack_frac)"),
        dict(term="carry", kind="state",
             definition="the buffer that holds one retained region for a whole turn, owned by the contract: allocated "
                        "once to the declared envelope, retention written in place at one address, elementwise "
                        "identical to the stock concatenate-and-cut",
             notebooks=(0, 3, 8, 10), source="cadencelab.state.Carry"),
        dict(term="shadow audit", kind="state",
             definition="the stock concatenation and cut run beside every retention and compared with the carry "
                        "elementwise; it counts agreements and records the first divergence (call, region, index)",
             notebooks=(3, 8, 10), source="cadencelab.state.ShadowAuditor"),
        dict(term="exact-shape replay", kind="replay",
             definition="one CUDA graph per catalog signature, captured at exact shapes (no padding) and admitted "
                        "call by call (signature, addresses, randomness); anything else runs eagerly",
             notebooks=(4, 9, 10), source="cadencelab.replay.engine"),
        dict(term="CUDA graph", kind="replay",
             definition="a recording of one call's kernels with their arguments, addresses included, replayed with "
                        "one launch: it reads the buffers it was captured on (copy new values into the static input) "
                        "and writes the same output buffer every replay (clone what you keep)",
             notebooks=(4, 9), source="torch.cuda.CUDAGraph; cadencelab.course.graph_lesson.capture"),
        dict(term="ring", kind="state",
             definition="a region that keeps a fixed number of frames, frame i of a turn at slot i % capacity, "
                        "zero-filled at the turn's start: always allocated at its capacity, so its extent never "
                        "changes and it adds no shape class; the write position lives on the device and a step sees "
                        "the ring as a RingView (write, filled, buffer)",
             notebooks=(10,), source="cadencelab.contract.Ring; cadencelab.adapters.kit.RingView"),
        dict(term="TF32", kind="device",
             definition="TensorFloat-32: the GPU's matmul / convolution mode that rounds inputs to a 10-bit mantissa "
                        "for speed; whether it is on changes results, so every arm runs under one device condition",
             notebooks=(5,), source="cadencelab.replay.determinism (conditions)"),
        dict(term="exact condition", kind="device",
             definition=f"the least kernel-selection pinning under which every arm is bit-exact across processes: "
                        f"'{EXACT}' ({CONDITIONS[EXACT].description})",
             notebooks=(5,), source="cadencelab.replay.determinism.EXACT"),
        dict(term="process (as a sample)", kind="statistics",
             definition="one fresh Python process running one arm's timed blocks, the unit a study samples: the "
                        "same code in another process (another memory layout, another moment of the host) runs at "
                        "another speed, so a figure is the mean over processes of each process's block mean and its "
                        "interval resamples processes first",
             notebooks=(5,), source="cadencelab.profile.intervals.point"),
        dict(term="hierarchical bootstrap", kind="statistics",
             definition="the interval the course quotes for a figure measured in several fresh processes: draw the "
                        "processes with replacement, then the timed blocks within each drawn process, take the mean "
                        "over processes of their block means, repeat; for an arm against B0 each arm is resampled on "
                        "its own and the ratio taken per replicate, and the 2.5th and 97.5th percentiles bound the "
                        "95% interval; an interval that includes 0 cannot tell the arms apart",
             notebooks=(5,), source="cadencelab.profile.intervals.hierarchical_bootstrap / ratio_interval"),
        dict(term="paired bootstrap", kind="statistics",
             definition="how the older recordings (one process per arm) were read: the arm's timed blocks and B0's, "
                        "run interleaved, resampled together in pairs with replacement, the ratio of the means taken "
                        "per resample; it sees only the spread within one process, so it is narrower than the "
                        "hierarchical bootstrap of the same arms and says less",
             notebooks=(5,), source="cadencelab.bench.token2wav.bootstrap_ratio"),
        dict(term="A/A check", kind="statistics",
             definition="the stock runtime run again as an arm of its own (B0_repeat, in fresh processes of its own) "
                        "and compared with B0 exactly as any arm is: identical code must show no difference (its 95% "
                        "interval contains 0), else the study claims no direction; its width is how far noise alone "
                        "moves a figure",
             notebooks=(5, 6), source="cadencelab.profile.intervals.a_a_check"),
        dict(term="goodput", kind="capacity",
             definition="seconds of audio served per second of wall time by the sessions that hold the cadence; "
                        "its plateau over the number of sessions is an arm's capacity",
             notebooks=(6,), source="cadencelab.course.capacity.goodput_plateau"),
    ]
    return rows + _checks()


#: reST inline code in a docstring: ``literal`` and :role:`target` (a leading ~ shortens the target)
_RST_CODE = re.compile(r"``(.+?)``|:[a-z]+:`~?([^`]+)`")


def _rst_inline(text: str, code: str) -> str:
    """``text`` with reST inline code written as ``code`` formats it ("`{}`" for markdown)."""
    return _RST_CODE.sub(lambda m: code.format(m.group(1) or m.group(2)), text)


def glossary() -> pd.DataFrame:
    """The course's terms: term, kind, definition, notebooks (where it is used), source (where it is defined)."""
    df = pd.DataFrame(_arms() + _terms(), columns=GLOSSARY_COLUMNS)
    return df.reset_index(drop=True)


def term(name: str) -> str:
    """The definition of one term (case-insensitive); a KeyError lists the terms."""
    g = glossary()
    hit = g[g["term"].str.lower() == str(name).lower()]
    if hit.empty:
        raise KeyError(f"no glossary term {name!r}; terms: {', '.join(g['term'])}")
    return hit["definition"].iloc[0]


def to_markdown(df: pd.DataFrame | None = None, notebook: int | None = None) -> str:
    """The glossary as a markdown definition list (only the terms of ``notebook`` when given)."""
    g = glossary() if df is None else df
    if notebook is not None:
        g = g[g["notebooks"].map(lambda n: notebook in n)]
    lines = ["## Glossary", ""]
    for r in g.itertuples():
        lines.append(f"- **{r.term}** ({r.kind}): {_rst_inline(r.definition, '`{}`')}  \n  *source: `{r.source}`*")
    return "\n".join(lines)


def to_html(df: pd.DataFrame | None = None, notebook: int | None = None) -> str:
    """The glossary as an HTML definition list (what a notebook displays)."""
    g = glossary() if df is None else df
    if notebook is not None:
        g = g[g["notebooks"].map(lambda n: notebook in n)]
    code = "<code>{}</code>"
    items = "".join(f"<dt id='glossary-{html.escape(r.term.replace(' ', '-'))}'><b>{html.escape(r.term)}</b> "
                    f"<small>({html.escape(r.kind)})</small></dt><dd>{_rst_inline(html.escape(r.definition), code)} "
                    f"<small><code>{html.escape(r.source)}</code></small></dd>" for r in g.itertuples())
    return f"<h3>Glossary</h3><dl class='cadencelab-glossary'>{items}</dl>"
