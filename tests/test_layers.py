"""The package's folders are its layers: no module imports from a layer above its own nor along a NEVER
arrow, no import cycle, no private member reached from another module, no module over the size limit unless
the allow-list below says why, no retention-policy kind switched on outside the policy module; the notebooks
import existing public names and reach no private member.

Every ``import`` and ``from ... import`` of every module is read with ``ast`` (function-local imports
included), so an import hidden inside a function counts like one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cadencelab"

#: low -> high; a module may import only from its own layer or below
LAYERS = ("support", "contract", "state", "replay", "adapters", "serving", "profile", "viz", "course", "bench", "cli")
#: layers that may never need an exception to the rules below
CORE = ("support", "contract", "state", "replay", "profile", "viz")

#: arrows that never hold, whatever LAYERS allows: analysis and pictures never know the producer
NEVER = {"profile": ("adapters", "serving"), "viz": ("adapters", "serving")}

NOTEBOOKS = PACKAGE.parent / "notebooks"

#: module cycles inside one layer, each with the reason it is still there; an entry that no longer
#: holds fails the test, so the list only shrinks
KNOWN_CYCLES: dict = {}

#: private names still imported across modules, with the reason; an entry that no longer holds fails
KNOWN_PRIVATE: dict[str, str] = {}

LINE_LIMIT = 500
#: no module past this, listed or not
HARD_LIMIT = 600
#: modules allowed past LINE_LIMIT, each with the reason; an entry under the limit fails the test
LONG_MODULES = {
    "cadencelab/bench/soak.py": "one study: its protocol, arm processes, per-chunk checks and analysis",
    "cadencelab/replay/hazards.py": "one pass over a captured call's effects; its checks share one walker",
    "cadencelab/replay/engine.py": "ExactShapeReplay: keying, admission, probe, capture and replay of one class "
                                   "life cycle",
    "cadencelab/adapters/mimi.py": "one adapter: Mimi's declaration, state audit, kit runtime and eager reference",
    "cadencelab/profile/trace.py": "one reader of the Kineto trace format, event kinds and their columns together",
    "cadencelab/profile/metrics.py": "the window metrics (busy, slack, idle split, stages) over one trace model",
    "cadencelab/profile/compare.py": "kernel streams, their alignment and the cadence diff share the op-kind model",
    "cadencelab/adapters/kit/runtime.py": "the kit's runtime: one call's path (checks, step, write, counters, audits) "
                                          "and the session verbs in one class",
    "cadencelab/cli.py": "the command line: each command's options and its run (catalog, certify, profile of Token2wav "
                         "or of any registered model), one place",
}


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def imports(name: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """The package modules ``name`` imports, as (module, line); ``from X import y`` counts X.y when that
    is a module, X otherwise."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                found.append((sub if sub in known else mod, node.lineno))
    return [(m, line) for m, line in found if m == "cadencelab" or m.startswith("cadencelab.")]


def layer_of(module: str) -> str | None:
    """The layer a module belongs to: its first name under the package (None for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def graph() -> dict[str, list[tuple[str, int]]]:
    mods = modules()
    known = set(mods)
    return {name: imports(name, path, known) for name, path in mods.items()}


def upward_imports(g: dict) -> list[str]:
    """Every import from a layer above the importer's, as 'module:line imports target (layer a < b)'."""
    bad = []
    for name, deps in g.items():
        own = layer_of(name)
        if own is None:
            if deps:
                bad.extend(f"{name}:{line} imports {d} (the package root imports nothing)" for d, line in deps)
            continue
        if own not in LAYERS:
            bad.append(f"{name}: layer {own!r} is not in LAYERS {LAYERS}; give it a place")
            continue
        for d, line in deps:
            other = layer_of(d)
            if other is None:
                bad.append(f"{name}:{line} imports the package root {d}")
            elif other not in LAYERS:
                bad.append(f"{name}:{line} imports {d}, whose layer {other!r} is not in LAYERS")
            elif LAYERS.index(other) > LAYERS.index(own):
                bad.append(f"{name}:{line} imports {d} ({own} may not import from {other}, a higher layer)")
    return bad


def cycles(g: dict) -> list[frozenset]:
    """The strongly connected module groups of more than one module (Tarjan)."""
    edges = {n: sorted({d for d, _ in deps if d in g and d != n}) for n, deps in g.items()}
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(frozenset(group))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def package_edges(g: dict) -> dict[str, set[str]]:
    """Layer -> the layers its modules import (the top-level graph)."""
    out: dict[str, set[str]] = {}
    for name, deps in g.items():
        own = layer_of(name)
        if own is not None:
            out.setdefault(own, set()).update(o for d, _ in deps if (o := layer_of(d)) not in (None, own))
    return out


#: the one module that may ask which kind a retention policy is
POLICY_MODULE = PACKAGE / "contract" / "policies.py"


def policy_classes(path: Path = POLICY_MODULE) -> tuple[set[str], set[str]]:
    """(class names, ``kind`` strings) of the retention policies ``path`` defines (its ``RetentionPolicy``
    subclasses, read with ``ast``)."""
    names, kinds = set(), set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "RetentionPolicy" for b in node.bases):
            names.add(node.name)
            kinds |= {a.value.value for a in node.body if isinstance(a, ast.Assign) and isinstance(a.value, ast.Constant)
                      and any(isinstance(t, ast.Name) and t.id == "kind" for t in a.targets)}
    return names, kinds


def kind_switches(path: Path, names: set[str], kinds: set[str], root: Path = PACKAGE.parent) -> list[str]:
    """Every place ``path`` asks which kind a policy is, as 'file:line what': a comparison, dict key or lookup
    on a policy's ``kind`` (or a ``kind`` against a policy's kind string), ``isinstance``/``type() is`` with a
    policy class, ``getattr(policy, "kind")``."""

    def is_kind(o) -> bool:  # an expression reading some kind
        return (isinstance(o, ast.Attribute) and o.attr == "kind") or (isinstance(o, ast.Name) and o.id == "kind") \
            or (isinstance(o, ast.Call) and ast.unparse(o.func) == "getattr" and len(o.args) > 1
                and isinstance(o.args[1], ast.Constant) and o.args[1].value == "kind")

    def is_policy_kind(o) -> bool:
        return is_kind(o) and "polic" in ast.unparse(o).lower()

    def literals(o) -> set:
        elts = o.elts if isinstance(o, (ast.Tuple, ast.List, ast.Set)) else [o]
        return {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}

    def classes(o) -> set:
        elts = o.elts if isinstance(o, (ast.Tuple, ast.List, ast.Set)) else [o]
        return {ast.unparse(e).split(".")[-1] for e in elts} & names

    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        what = None
        if isinstance(node, ast.Compare):
            ops = [node.left, *node.comparators]
            if any(is_policy_kind(o) for o in ops) or (any(is_kind(o) for o in ops) and set().union(*map(literals, ops)) & kinds):
                what = "compares a policy kind"
            elif any(isinstance(o, ast.Call) and ast.unparse(o.func) == "type" for o in ops) and set().union(*map(classes, ops)):
                what = "compares a policy class"
        elif isinstance(node, ast.Call):
            fn = ast.unparse(node.func)
            if fn in ("isinstance", "issubclass") and len(node.args) == 2 and classes(node.args[1]):
                what = f"{fn} with a policy class"
            elif is_kind(node) and "polic" in ast.unparse(node.args[0]).lower():
                what = "reads a policy kind"
            elif any(is_policy_kind(a) for a in node.args):
                what = "looks up by a policy kind"
        elif isinstance(node, ast.Dict) and kinds >= {k.value for k in node.keys if isinstance(k, ast.Constant)} != set():
            what = "a table keyed by policy kinds"
        elif isinstance(node, ast.Subscript) and is_policy_kind(node.slice):
            what = "looks up by a policy kind"
        if what:
            bad.append(f"{path.relative_to(root)}:{node.lineno} {what}: {ast.unparse(node)[:80]}")
    return bad


# ---------------------------------------------------------------------------------------
# the rules, on the package as it is
# ---------------------------------------------------------------------------------------


def test_every_module_has_a_layer_and_imports_nothing_above_it():
    g = graph()
    assert {layer_of(n) for n in g} - {None} <= set(LAYERS)
    bad = upward_imports(g)
    assert not bad, "imports from a higher layer:\n" + "\n".join(bad)


def test_every_imported_package_module_exists():
    g = graph()
    missing = [f"{n}:{line} imports {d}" for n, deps in g.items() for d, line in deps if d not in g]
    assert not missing, "imports of modules that do not exist:\n" + "\n".join(missing)


def private_imports() -> list[str]:
    """Every ``from <package module> import _name`` whose name is private to another module."""
    bad = []
    for p in modules().values():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("cadencelab")):
                bad += [f"{p.relative_to(PACKAGE.parent)}:{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    return bad


def test_no_private_name_crosses_a_module():
    found = private_imports()
    stale = sorted(set(KNOWN_PRIVATE) - set(found))
    assert not stale, f"KNOWN_PRIVATE entries that no longer hold (remove them): {stale}"
    bad = [b for b in found if b not in KNOWN_PRIVATE]
    assert not bad, "private names imported from another module (make them public there, or move them):\n" \
        + "\n".join(bad)


def never_imports(g: dict) -> list[str]:
    """Every import along an arrow of NEVER, as 'module:line imports target'."""
    return [f"{name}:{line} imports {d} ({layer_of(name)} never imports from {layer_of(d)})"
            for name, deps in g.items() for d, line in deps if layer_of(d) in NEVER.get(layer_of(name), ())]


def test_profile_and_viz_never_import_the_adapters():
    bad = never_imports(graph())
    assert not bad, "\n".join(bad)


def notebook_imports() -> dict[str, list[tuple[str, int]]]:
    """Each notebook's imports of package modules (the notebooks are percent-format Python files)."""
    known = set(modules())
    return {p.name: imports(f"notebooks.{p.stem}", p, known) for p in sorted(NOTEBOOKS.glob("[0-9]*.py"))}


def test_notebooks_import_existing_public_names_only():
    found = notebook_imports()
    assert len(found) >= 7 and all(found.values())
    missing = [f"{nb}:{line} imports {d}" for nb, deps in found.items() for d, line in deps if d not in modules()]
    assert not missing, "notebooks import modules that do not exist:\n" + "\n".join(missing)
    private = []
    for p in sorted(NOTEBOOKS.glob("[0-9]*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cadencelab"):
                private += [f"{p.name}:{node.lineno} {a.name}" for a in node.names if a.name.startswith("_")]
    assert not private, "notebooks import private names:\n" + "\n".join(private)


def private_members() -> dict[str, set[str]]:
    """Private attribute name -> the package modules that define it (``self._x = ...``, ``def _x`` in a class)."""
    owners: dict[str, set[str]] = {}
    for name, p in modules().items():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ClassDef):
                for f in node.body:
                    if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(f.name):
                        owners.setdefault(f.name, set()).add(name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr) \
                    and isinstance(node.value, ast.Name) and node.value.id == "self":
                owners.setdefault(node.attr, set()).add(name)
    return owners


def _private(attr: str) -> bool:
    return attr.startswith("_") and not attr.startswith("__")


def private_reaches(files: dict[str, Path], owners: dict[str, set[str]]) -> list[str]:
    """Every ``obj._x`` (obj not self/cls) in ``files`` where ``_x`` is a private member another package module defines."""
    bad = []
    for name, p in files.items():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr in owners \
                    and name not in owners[node.attr]:
                v = node.value
                if isinstance(v, ast.Name) and v.id in ("self", "cls"):
                    continue
                bad.append(f"{name}:{node.lineno} {ast.unparse(node)} "
                           f"(private to {sorted(owners[node.attr])})")
    return bad


def test_no_private_member_is_reached_across_modules():
    owners = private_members()
    files = dict(modules())
    files.update({f"notebooks.{p.stem}": p for p in NOTEBOOKS.glob("[0-9]*.py")})
    bad = private_reaches(files, owners)
    assert not bad, "private members reached from another module (give them a public name):\n" + "\n".join(bad)


def test_a_private_member_reach_is_named(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("class R:\n    def __init__(self):\n        self._range = 1\n    def _dit(self):\n        return 2\n")
    b.write_text("def f(rt):\n    rt._range = 3\n    return rt._dit()\n")
    owners = {"_range": {"a"}, "_dit": {"a"}}
    bad = private_reaches({"a": a, "b": b}, owners)
    assert len(bad) == 2 and "rt._range" in bad[0] and "rt._dit" in bad[1]


def test_the_layers_form_no_cycle():
    edges = package_edges(graph())
    for a, targets in edges.items():
        for b in targets:
            assert a not in edges.get(b, set()), f"layers {a} and {b} import each other"


def test_no_module_cycle_beyond_the_known_ones():
    found = set(cycles(graph()))
    unknown = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not unknown, f"import cycles: {unknown}"
    stale = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not stale, f"KNOWN_CYCLES lists cycles that are gone (remove them): {stale}"
    for c in KNOWN_CYCLES:
        assert not {layer_of(m) for m in c} & set(CORE), f"no exception is allowed in the core layers: {sorted(c)}"


def test_long_modules_are_listed_with_a_reason():
    lengths = {str(p.relative_to(PACKAGE.parent)): len(p.read_text().splitlines()) for p in modules().values()}
    over = sorted(f"{p} ({n} lines)" for p, n in lengths.items() if n > LINE_LIMIT and p not in LONG_MODULES)
    assert not over, f"modules over {LINE_LIMIT} lines: split them or list them in LONG_MODULES with a reason: {over}"
    stale = sorted(p for p in LONG_MODULES if lengths.get(p, 0) <= LINE_LIMIT)
    assert not stale, f"LONG_MODULES entries no longer over {LINE_LIMIT} lines (or gone): {stale}"
    assert all(reason.strip() for reason in LONG_MODULES.values())
    too_long = sorted(f"{p} ({n} lines)" for p, n in lengths.items() if n > HARD_LIMIT)
    assert not too_long, f"modules over {HARD_LIMIT} lines, listed or not: split them: {too_long}"


# ---------------------------------------------------------------------------------------
# the checks fail when someone breaks a rule
# ---------------------------------------------------------------------------------------


def _fake_package(tmp_path: Path, files: dict[str, str]) -> dict:
    for rel, text in files.items():
        p = tmp_path / "cadencelab" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    mods = {}
    for p in sorted((tmp_path / "cadencelab").rglob("*.py")):
        parts = p.relative_to(tmp_path).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return {n: imports(n, p, set(mods)) for n, p in mods.items()}


def test_an_upward_import_is_named(tmp_path):
    g = _fake_package(tmp_path, {
        "__init__.py": "",
        "profile/__init__.py": "",
        "profile/metrics.py": "def f():\n    from ..bench.common import x  # hidden in a function\n",
        "bench/__init__.py": "",
        "bench/common.py": "x = 1\n",
    })
    bad = upward_imports(g)
    assert len(bad) == 1 and bad[0].startswith("cadencelab.profile.metrics:2 imports cadencelab.bench.common")
    assert "higher layer" in bad[0]


def test_a_downward_import_passes_and_a_cycle_is_found(tmp_path):
    g = _fake_package(tmp_path, {
        "__init__.py": "",
        "viz/__init__.py": "from . import a\n",
        "viz/a.py": "from .b import y\nfrom ..contract import z\n",
        "viz/b.py": "import cadencelab.viz.a\ny = 1\n",
        "contract/__init__.py": "z = 1\n",
    })
    assert upward_imports(g) == []
    assert cycles(g) == [frozenset({"cadencelab.viz.a", "cadencelab.viz.b"})]


def test_a_never_arrow_is_named(tmp_path):
    g = _fake_package(tmp_path, {
        "__init__.py": "",
        "profile/__init__.py": "",
        "profile/compare.py": "def f():\n    from ..adapters.duplex.models import preset\n",
        "adapters/__init__.py": "",
        "adapters/duplex/__init__.py": "",
        "adapters/duplex/models.py": "preset = 1\n",
    })
    assert upward_imports(g) == []  # adapters is below profile: only the never arrow catches it
    (bad,) = never_imports(g)
    assert bad.startswith("cadencelab.profile.compare:2 imports cadencelab.adapters.duplex.models")


def test_an_unplaced_layer_is_refused(tmp_path):
    g = _fake_package(tmp_path, {"__init__.py": "", "extras.py": "from .contract import z\n",
                                 "contract/__init__.py": "z = 1\n"})
    assert any("'extras' is not in LAYERS" in b for b in upward_imports(g))


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_exists(layer):
    assert (PACKAGE / layer).is_dir() or (PACKAGE / f"{layer}.py").is_file()


# ---------------------------------------------------------------------------------------
# the floors added by the one road in: registry, support, exports
# ---------------------------------------------------------------------------------------


def test_no_module_of_the_package_is_over_the_hard_limit():
    """No module over HARD_LIMIT lines, listed or not (the allow-list above only admits 500..HARD_LIMIT)."""
    lengths = {str(p.relative_to(PACKAGE.parent)): len(p.read_text().splitlines()) for p in modules().values()}
    assert HARD_LIMIT <= 600 and not [p for p, n in lengths.items() if n > HARD_LIMIT]


def test_the_registry_imports_nothing_of_the_package_at_its_top():
    """Listing the models costs nothing: the registry's package imports happen inside its functions, and no
    floor below the adapters knows the registry (what a model is, is the adapters' business)."""
    path = PACKAGE / "adapters" / "registry.py"
    top = [n for n in ast.parse(path.read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [ast.unparse(n) for n in top if isinstance(n, ast.ImportFrom) and (n.level or "cadencelab" in
                                                                                 (n.module or ""))]
    g = graph()
    below = [n for n, deps in g.items() if layer_of(n) in LAYERS[:LAYERS.index("adapters")]
             and any(d == "cadencelab.adapters.registry" for d, _ in deps)]
    assert not below


def test_the_contract_declares_no_model_and_exports_no_module():
    """Model declarations live with their models (the registry names them); the contract's exports are its
    names, not its submodules; no package exports a function under the name of one of its modules."""
    import importlib
    import types

    for p in (PACKAGE / "contract").glob("*.py"):
        calls = [n for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Call)
                 and getattr(n.func, "id", None) == "Declaration"]
        assert not calls, f"{p.name} builds a Declaration: a model's declaration belongs to its adapter"
    import cadencelab.contract as contract

    assert not [n for n in contract.__all__ if isinstance(getattr(contract, n), types.ModuleType)]
    for package in ("replay", "profile"):
        pkg = importlib.import_module(f"cadencelab.{package}")
        shadowed = [n for n in pkg.__all__ if (PACKAGE / package / f"{n}.py").is_file()]
        assert not shadowed, f"cadencelab.{package} exports {shadowed}, the names of its own modules"
    importlib.import_module("cadencelab.replay.binding")
    from cadencelab.replay import bind, preflight, signature

    assert all(callable(f) and not isinstance(f, types.ModuleType) for f in (bind, preflight, signature))
def test_no_policy_kind_is_switched_on_outside_the_policy_module():
    names, kinds = policy_classes()
    assert {"Ring", "Fixed", "SlidingWindow", "PromptRetained", "Unbounded"} <= names and "ring" in kinds
    bad = [b for p in sorted(PACKAGE.rglob("*.py")) if p != POLICY_MODULE for b in kind_switches(p, names, kinds)]
    assert not bad, "ask the policy (cadencelab/contract/policies.py's RetentionPolicy), not its kind:\n" + "\n".join(bad)


def test_a_policy_kind_switch_is_named(tmp_path):
    src = tmp_path / "cadencelab" / "m.py"
    src.parent.mkdir()
    src.write_text("def f(r, p, c, kind):\n"
                   "    if r.policy.kind == 'ring' or kind in ('fixed', 'ring'):\n"
                   "        return isinstance(p, (Fixed, Ring)) or type(p) is Ring\n"
                   "    x = {'ring': 1, 'fixed': 2}.get(r.policy.kind)\n"
                   "    y = getattr(c.policy, 'kind', '') == 'ring'\n"
                   "    return isinstance(p, RetentionPolicy) or r.kind == 'steady' or e.kind == 'host_sync'\n")
    bad = kind_switches(src, *policy_classes(), root=tmp_path)
    assert sorted({b.split(" ", 1)[0] for b in bad}) == [f"cadencelab/m.py:{i}" for i in (2, 3, 4, 5)], bad
    assert {b.split(": ", 1)[0].split(" ", 1)[1] for b in bad} >= {
        "compares a policy kind", "isinstance with a policy class", "compares a policy class",
        "a table keyed by policy kinds", "looks up by a policy kind"}, bad
