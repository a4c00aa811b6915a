"""The shape of the code, checked: layers, no import circles, imports at the top, invariants uncaught.

Why a test: these rules (issue 10, STYLE.md principles 5 and 8) erode one
convenient import or one broad ``except`` at a time; a test over the package's
source keeps them. Everything is read with ``ast`` from ``src/qjournal``: no
module is imported.
"""

from __future__ import annotations

import ast
import collections
import os
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "qjournal"

#: the layers, bottom first: a package may import only packages of a lower layer (and itself)
LAYERS: list[tuple[str, ...]] = [
    ("errors",),
    ("protocol",),
    ("util",),
    ("config",),
    ("transport",),
    ("security",),
    ("journalmanager",),
    ("journalnode",),
    ("client",),
    ("namenode",),
    ("ha",),
    ("localcluster", "pipeline", "deploy", "monitoring"),
    ("sim",),
    ("cli",),
    ("chaos", "hosts"),  # run the shipped programs (the cli's record format, the units) and the sim's checker
    ("__main__", "__init__"),
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}

#: optional heavy dependencies that a light module may import inside the function that needs them
LAZY_ALLOWED = {"pyspark", "aiohttp", "prometheus_client", "matplotlib", "pandas", "pyarrow",
                # development-only: the generator of the shipped monitoring files (qjournal.monitoring.build)
                "grafana_foundation_sdk", "yaml"}


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        name = ".".join(rel.parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        out[name] = ast.parse(path.read_text(), filename=str(path))
    return out


MODULES = _modules()


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _resolve(module: str, node: ast.ImportFrom) -> str | None:
    if node.level == 0:
        return node.module
    base = module.split(".")
    is_pkg = (SRC.parent / pathlib.Path(*base) / "__init__.py").exists()
    base = base if is_pkg else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """Every ``qjournal`` module this module imports, anywhere in it, with the import node."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node) for a in node.names if a.name.split(".")[0] == "qjournal"]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            if target and target.split(".")[0] == "qjournal":
                # `from qjournal.x import y` may import the submodule qjournal.x.y
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    out.append((sub if sub in MODULES else target, node))
    return out


def _graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = collections.defaultdict(set)
    for m, tree in MODULES.items():
        for target, _ in _imports(m, tree):
            if target in MODULES and target != m:
                g[m].add(target)
    return g


def test_every_package_is_in_a_layer():
    missing = sorted({_package(m) for m in MODULES} - set(RANK))
    assert not missing, f"packages without a layer in LAYERS: {missing}"


def test_imports_never_run_back_up_the_layers():
    bad = []
    for m, targets in sorted(_graph().items()):
        for t in sorted(targets):
            if RANK[_package(t)] > RANK[_package(m)]:
                bad.append(f"{m} -> {t}")
    assert not bad, "imports running back up the layers:\n" + "\n".join(bad)


def _name_of_imported(call: ast.Call) -> str | None:
    """The module name an ``importlib.import_module(...)`` / ``__import__(...)`` call asks for: its constant
    text, or the constant prefix of an f-string (``f"qjournal.cli.{name}"`` -> ``qjournal.cli.``); None
    when the name is not spelled in the source (a plugin named by the configuration)."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if name not in ("import_module", "__import__") or not call.args:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value)
    return None


def _imports_by_name() -> list[str]:
    """Every import by name (``importlib``, ``__import__``) of a project module that leaves the importing
    module's own package: such an arrow is invisible to the layer check above."""
    bad = []
    for m, tree in MODULES.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            target = _name_of_imported(node)
            if target is None or target.split(".")[0] != "qjournal":
                continue
            parts = target.split(".")
            pkg = parts[1] if len(parts) > 1 and parts[1] else None
            if pkg != _package(m):
                bad.append(f"{m}:{node.lineno}: imports {target!r} by name")
    return sorted(bad)


def test_no_import_by_name_across_packages():
    bad = _imports_by_name()
    assert not bad, ("imports by name (importlib / __import__) of project modules outside the importing "
                     "package; import them plainly, downward:\n" + "\n".join(bad))


@pytest.mark.parametrize("source,flagged", [
    ("import importlib\nimportlib.import_module('qjournal.client.qjm')\n", True),
    ("__import__('qjournal.client.qjm')\n", True),
    ("import importlib\nimportlib.import_module(f'qjournal.cli.{name}')\n", False),   # own package
    ("import importlib\nimportlib.import_module(spec)\n", False),                     # a configured plugin
])
def test_the_import_by_name_rule_itself(source, flagged, monkeypatch):
    monkeypatch.setitem(MODULES, "qjournal.cli.probe", ast.parse(source))
    assert any(b.startswith("qjournal.cli.probe:") for b in _imports_by_name()) is flagged


def test_no_import_circles():
    g = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(MODULES):
        if v not in index:
            strongconnect(v)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def _function_level_imports() -> list[str]:
    bad = []
    for m, tree in MODULES.items():
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [node.module or "."] if node.level == 0 else ["."]
                else:
                    continue
                if any(n.split(".")[0] not in LAZY_ALLOWED for n in names):
                    bad.append(f"{m}:{node.lineno}: {', '.join(names)} inside {fn.name}()")
    return sorted(set(bad))


def test_imports_sit_at_the_top_of_modules():
    bad = _function_level_imports()
    assert not bad, ("imports inside functions (only heavy optional dependencies "
                     f"{sorted(LAZY_ALLOWED)} may be imported lazily):\n" + "\n".join(bad))


def _is_broad(handler: ast.ExceptHandler) -> bool:
    t = handler.type
    if t is None:
        return True
    names = t.elts if isinstance(t, ast.Tuple) else [t]
    return any(isinstance(n, ast.Name) and n.id in ("BaseException", "InvariantViolation") for n in names)


#: calls that pass an exception on: to a future (its awaiter raises it), to the process's end,
#: or (the simulator's workers, which model processes) to the checker as a ``Failure``
PASSING_CALLS = {"set_exception", "fatal", "Failure"}


def _passes_it_on(handler: ast.ExceptHandler) -> bool:
    """The handler re-raises, or passes the exception on (:data:`PASSING_CALLS`)."""
    for node in ast.walk(handler):
        if isinstance(node, ast.Raise):
            return True
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name in PASSING_CALLS:
                return True
    return False


def test_a_broken_invariant_is_never_swallowed():
    """``InvariantViolation`` is outside the ``Exception`` tree, so ``except Exception`` never
    catches it; every handler that could catch it (bare ``except``, ``BaseException``, or
    ``InvariantViolation`` itself) passes it on."""
    from qjournal.errors import InvariantViolation
    assert not issubclass(InvariantViolation, Exception)
    bad = []
    for m, tree in MODULES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ExceptHandler) and _is_broad(node) and not _passes_it_on(node):
                bad.append(f"{m}:{node.lineno}")
    assert not bad, "handlers that would swallow a broken invariant:\n" + "\n".join(bad)


@pytest.mark.parametrize("source,expected", [
    ("try:\n    f()\nexcept BaseException:\n    pass\n", False),
    ("try:\n    f()\nexcept BaseException:\n    cleanup()\n    raise\n", True),
    ("try:\n    f()\nexcept (ValueError, BaseException) as e:\n    fut.set_exception(e)\n", True),
    ("try:\n    f()\nexcept:\n    log()\n", False),
])
def test_the_handler_rule_itself(source, expected):
    handler = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ExceptHandler))
    assert _is_broad(handler) and _passes_it_on(handler) is expected


# --- the picture in docs/architecture.md, drawn from the import graph ----------------------------------------

DOC = SRC.parent.parent / "docs" / "architecture.md"
FLOORS_BEGIN = "<!-- floors (rendered from the import graph by tests/test_architecture.py) -->\n"
FLOORS_END = "<!-- /floors -->"


def package_floors() -> dict[int, list[str]]:
    """Each package's floor in the import graph: 0 for a package importing no other, else one above the
    highest package it imports (so siblings that do not import each other share a floor)."""
    deps: dict[str, set[str]] = collections.defaultdict(set)
    for m, targets in _graph().items():
        for t in targets:
            if _package(t) != _package(m):
                deps[_package(m)].add(_package(t))
    memo: dict[str, int] = {}

    def floor(p: str) -> int:
        if p not in memo:
            memo[p] = 0 if not deps[p] else 1 + max(floor(q) for q in deps[p])
        return memo[p]
    out: dict[int, list[str]] = collections.defaultdict(list)
    for p in sorted({_package(m) for m in MODULES}):
        out[floor(p)].append(p)
    return dict(out)


def render_floors() -> str:
    def name(p: str) -> str:
        return {"__main__": "__main__.py", "__init__": "__init__.py", "errors": "errors.py"}.get(p, f"{p}/")
    lines = ["```"]
    for f, pkgs in sorted(package_floors().items(), reverse=True):
        lines.append(f"floor {f}   " + "  ".join(name(p) for p in pkgs))
    lines.append("```")
    return "\n".join(lines) + "\n"


def test_the_docs_picture_is_the_import_graph():
    """docs/architecture.md's floors are the import graph's (``QJOURNAL_REWRITE_DOCS=1`` rewrites them)."""
    text = DOC.read_text()
    i = text.find(FLOORS_BEGIN)
    j = text.find(FLOORS_END, i)
    assert i >= 0 and j > i, f"{DOC}: no {FLOORS_BEGIN.strip()} ... {FLOORS_END} block"
    want = render_floors()
    got = text[i + len(FLOORS_BEGIN):j]
    if got != want and os.environ.get("QJOURNAL_REWRITE_DOCS"):
        DOC.write_text(text[:i + len(FLOORS_BEGIN)] + want + text[j:])
        return
    assert got == want, (f"{DOC}'s floors differ from the import graph; QJOURNAL_REWRITE_DOCS=1 pytest "
                         f"tests/test_architecture.py rewrites them:\n{want}")
