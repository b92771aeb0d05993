"""Docstrings say what a reader needs and why, briefly: none in the package runs over DOCSTRING_LIMIT lines
unless the allow-list below says why. Measured figures, dates and machines belong in data/ and the README.

A docstring's length is ``ast.get_docstring(node, clean=False).splitlines()`` over every module, class and
function (a class's or function's closing indentation counts as a line).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cadencelab"

DOCSTRING_LIMIT = 20
#: "path under cadencelab/:object" -> why it may run longer; an entry no longer over the limit fails the test
LONG_DOCSTRINGS: dict[str, str] = {}


def docstring_lengths(package: Path = PACKAGE) -> dict[str, int]:
    """``"path:object" -> lines`` for every docstring under ``package``; nested objects by qualified name."""
    out = {}

    def visit(node, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                doc = ast.get_docstring(child, clean=False)
                if doc is not None:
                    out[f"{path}:{name}"] = len(doc.splitlines())
                visit(child, path, f"{name}.")
            else:
                visit(child, path, prefix)

    for p in sorted(package.rglob("*.py")):
        path = p.relative_to(package).as_posix()
        tree = ast.parse(p.read_text(encoding="utf-8"), str(p))
        doc = ast.get_docstring(tree, clean=False)
        if doc is not None:
            out[f"{path}:module"] = len(doc.splitlines())
        visit(tree, path, "")
    return out


def test_no_docstring_runs_over_the_limit():
    lengths = docstring_lengths()
    assert lengths, f"no docstrings found under {PACKAGE}"
    over = sorted(f"cadencelab/{key} ({n} lines)" for key, n in lengths.items()
                  if n > DOCSTRING_LIMIT and key not in LONG_DOCSTRINGS)
    assert not over, (f"docstrings over {DOCSTRING_LIMIT} lines: keep what a reader needs and why (measured "
                      f"figures go to data/ and the README), or list them in LONG_DOCSTRINGS with a reason: {over}")
    stale = sorted(key for key in LONG_DOCSTRINGS if lengths.get(key, 0) <= DOCSTRING_LIMIT)
    assert not stale, f"LONG_DOCSTRINGS entries no longer over {DOCSTRING_LIMIT} lines (or gone): remove them: {stale}"
    assert all(reason.strip() for reason in LONG_DOCSTRINGS.values())
