"""The project's modules import each other without cycles, and the pure core stays pure.

Every import counts, at module level or deferred inside a function: a deferred import hides a
cycle from Python, not from the design. `from a.b import c` is an edge to the module `a.b.c`
when there is one, else to `a.b`; a package's `__init__` is a module like any other, so a
submodule that imports its own package closes a cycle too.
"""
from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("mars_core", "tasks", "flows", "cli", "eval")
PURE = "mars_core"  # imports neither of these: the core runs without the orchestration
ORCHESTRATION = ("prefect", "mlflow")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules `name` imports, anywhere in the file: `import a.b` names a.b; `from a.b
    import c` names the module a.b.c when there is one, else a.b (c is defined in a.b).
    Names outside the project are kept as they are written."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: from the package this module is in
                here = name.split(".")
                keep = len(here) - node.level + (path.name == "__init__.py")
                module = ".".join(here[:keep] + ([module] if module else []))
            for a in node.names:
                found.add(f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {m for m in _imports(name, path, modules) if m in modules and m != name}
            for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles():
    graph = _graph()
    assert len(graph) > 50 and graph["cli.main"]  # the walk saw the project
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_core_imports_no_orchestration():
    offenders = []
    modules = _modules()
    for name, path in modules.items():
        if name.split(".")[0] != PURE:
            continue
        for imported in _imports(name, path, modules):
            if imported.split(".")[0] in ORCHESTRATION:
                offenders.append(f"{name} imports {imported}")
    assert not offenders, "; ".join(sorted(offenders))


MAX_LINES = 400


def test_no_module_is_over_400_lines():
    """A module a newcomer can read in one sitting (the project's packages, tests and benches)."""
    files = [p for pkg in (*PACKAGES, "tests", "bench") for p in sorted((REPO / pkg).rglob("*.py"))]
    long = {str(p.relative_to(REPO)): n for p in files
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
