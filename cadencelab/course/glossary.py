"""The course's glossary: every term a notebook leans on, as a DataFrame and as markdown / HTML.

Where the code defines a term, the definition is read from it (the arms' descriptions in
``adapters.token2wav.runtime.ARMS``, docstrings of the derivations, the exact device condition's
description), so the glossary says what the code does. A term the code does not define yet says so
in its ``source`` column.

    >>> g = glossary()
    >>> g.set_index("term").loc["B0", "definition"]
    'stock runtime'
"""

from __future__ import annotations

import html
import inspect
import re

import pandas as pd

__all__ = ["glossary", "term", "to_markdown", "to_html", "GLOSSARY_COLUMNS"]

GLOSSARY_COLUMNS = ["term", "kind", "definition", "notebooks", "source"]


def _doc(obj, paragraph: int = 0) -> str:
    """One paragraph of ``obj``'s docstring, joined into a line."""
    paras = [p for p in inspect.cleandoc(obj.__doc__ or "").split("\n\n") if p.strip()]
    return " ".join(line.strip() for line in paras[paragraph].splitlines()) if paras else ""


def _arms() -> list[dict]:
    from ..adapters.token2wav import batched, lanes
    from ..adapters.token2wav.runtime import ARMS

    notebooks = {"B0": (1, 5, 6), "S": (5,), "R": (5,), "Rc": (5,), "SR": (5,), "SRc": (1, 5, 6)}
    rows = [dict(term=a.name, kind="arm", definition=a.description, notebooks=notebooks.get(a.name, (5,)),
                 source=f"cadencelab.adapters.token2wav.runtime.ARMS[{a.name!r}]")
            for a in ARMS.values() if a.name != "compile"]
    rows.append(dict(term="SRb", kind="arm", definition=_doc(batched).split(". ")[0].replace("EXPERIMENTAL: ", "")
                     + " (experimental; gated on the batched eager path, not on a session run alone)",
                     notebooks=(5,), source="cadencelab.adapters.token2wav.batched"))
    rows.append(dict(term="SRl", kind="arm", definition=_doc(lanes).rstrip("."),
                     notebooks=(5,), source="cadencelab.adapters.token2wav.lanes"))
    return rows


def _terms() -> list[dict]:
    from ..contract import PRIMING, Token2wavClocks, catalog_counts, envelope, rho_table
    from ..contract.policies import PromptRetained
    from ..profile import summary
    from ..replay import engine
    from ..replay.determinism import CONDITIONS, EXACT
    from ..state import Carry, ShadowAuditor

    chunk = Token2wavClocks.chunk_frames.__doc__.split(": ", 1)[-1]
    call = Token2wavClocks.call_frames.__doc__.split(": ", 1)[-1]
    rows = [
        dict(term="probe", kind="replay",
             definition="the first call of a shape class, run eagerly while the engine watches the host and device "
                        "random generators; host draws reject the class for good, otherwise it is captured and the "
                        "probe's result stands",
             notebooks=(4, 7), source="cadencelab.replay.engine (module docstring, step 3)"),
        dict(term="priming", kind="replay",
             definition=f"the cache-free prompt pass at a turn's start: eager by construction, counted as "
                        f"'{PRIMING}'", notebooks=(4, 7), source="cadencelab.contract.PRIMING"),
        dict(term="f_chunk vs f_call", kind="clocks", definition=f"f_chunk: {chunk} f_call: {call}",
             notebooks=(2, 4), source="cadencelab.contract.Token2wavClocks.chunk_frames / call_frames"),
        dict(term="envelope", kind="state", definition=_doc(envelope) + " (the extent the state rule allocates: A "
             "for a retained region, A + f_call for an attended workspace)",
             notebooks=(2,), source="cadencelab.contract.envelope"),
        dict(term="retention bound", kind="state", definition=_doc(PromptRetained),
             notebooks=(2, 3), source="cadencelab.contract.PromptRetained"),
        dict(term="K vs catalog size", kind="replay",
             definition="K: steady shape classes, one per cached extent a region passes through, K = ceil(W / s) + 1. "
                        "The catalog adds the flush classes; " + _doc(catalog_counts, 1),
             notebooks=(2, 4), source="cadencelab.contract.catalog_counts"),
        dict(term="rho_r", kind="state", definition=_doc(rho_table), notebooks=(2, 5),
             source="cadencelab.contract.rho_table"),
        dict(term="slack", kind="profile",
             definition="orchestration slack: the idle share of a window's wall time, (wall - busy) / wall; "
                        + _doc(summary, 0), notebooks=(1, 6), source="cadencelab.profile.summary"),
        dict(term="carry", kind="state", definition=_doc(Carry) + " Retention is written in place, at one address, "
             "elementwise identical to the stock cut.", notebooks=(3, 7), source="cadencelab.state.Carry"),
        dict(term="shadow audit", kind="state",
             definition="the stock concatenation and cut run beside every retention, compared with the carry "
                        "elementwise; " + _doc(ShadowAuditor), notebooks=(3, 7), source="cadencelab.state.ShadowAuditor"),
        dict(term="exact-shape replay", kind="replay", definition=_doc(engine).split("\n")[0],
             notebooks=(4,), source="cadencelab.replay.engine"),
        dict(term="exact condition", kind="device",
             definition=f"the least kernel-selection pinning under which every arm is bit-exact across processes: "
                        f"'{EXACT}' ({CONDITIONS[EXACT].description})",
             notebooks=(5,), source="cadencelab.replay.determinism.EXACT"),
    ]
    return rows


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
