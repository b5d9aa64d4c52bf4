"""The project's modules import each other without cycles, and the pure core stays pure.

Every import counts, at module level or deferred inside a function: a deferred import hides a
cycle from Python, not from the design. `from a.b import c` is an edge to the module `a.b.c`
when there is one, else to `a.b`; a package's `__init__` is a module like any other, so a
submodule that imports its own package closes a cycle too.
"""
from __future__ import annotations

import ast
import re
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


# The core's own rules: every package of mars_core/ says in its `__init__` docstring what it may
# import (`May import: a, b.` or `May import: nothing of ours`); beside the packages, two modules
# every stage reads: the vocabularies (a leaf) and the data model (which speaks them).
CORE_LEAVES = {"types": {"vocab"}, "vocab": set()}
_MAY_IMPORT = re.compile(r"^May import: (.*?)[.(]", re.M)


def _unit(module: str) -> str | None:
    """The core package (or leaf) a module belongs to: `mars_core.run.layout` -> `run`."""
    parts = module.split(".")
    return parts[1] if parts[0] == PURE and len(parts) > 1 else None


def _may_import(init: Path) -> set[str]:
    found = _MAY_IMPORT.search(ast.get_docstring(ast.parse(init.read_text())) or "")
    assert found, f"{init.relative_to(REPO)}: its docstring says no 'May import: ...'"
    words = found.group(1).strip()
    return set() if words.startswith("nothing") else {w.strip() for w in words.split(",")}


def _core_rules() -> dict[str, set[str]]:
    rules = {leaf: set(allowed) for leaf, allowed in CORE_LEAVES.items()}
    for init in sorted((REPO / PURE).glob("*/__init__.py")):
        rules[init.parent.name] = _may_import(init)
    return rules


def _rule_breaks(graph: dict[str, set[str]], rules: dict[str, set[str]]) -> list[str]:
    """Each import of one core unit by another that the importer's rules do not allow; a
    module of the core outside every package and leaf; a core module importing the layers
    above it (tasks, flows, cli, eval)."""
    out = []
    for name, imported in sorted(graph.items()):
        here = _unit(name)
        if name.split(".")[0] != PURE or name == PURE:
            continue
        if here not in rules:
            out.append(f"{name} is in no package of {PURE}/ (nor {' or '.join(CORE_LEAVES)})")
            continue
        for other in sorted(imported):
            there = _unit(other)
            if other.split(".")[0] in PACKAGES and other.split(".")[0] != PURE:
                out.append(f"{name} imports {other}, a layer above the core")
            elif there is not None and there != here and there not in rules[here]:
                out.append(f"{name} imports {other}: {here} may import "
                           f"{', '.join(sorted(rules[here])) or 'nothing of ours'}")
    return out


def test_the_rule_check_finds_breaks():
    graph = {"mars_core.run.layout": {"mars_core.types"},
             "mars_core.run.checkpoint": {"mars_core.training.trainer", "tasks.stage_runner"},
             "mars_core.stray": set(), "mars_core.training.trainer": {"mars_core.run.layout"}}
    rules = {"run": {"types"}, "types": set(), "training": {"run"}}
    assert _rule_breaks(graph, rules) == [
        "mars_core.run.checkpoint imports mars_core.training.trainer: run may import types",
        "mars_core.run.checkpoint imports tasks.stage_runner, a layer above the core",
        "mars_core.stray is in no package of mars_core/ (nor types or vocab)"]


def test_each_core_package_imports_only_what_its_docstring_allows():
    rules = _core_rules()
    assert {"config", "rollout", "training", "run"} <= set(rules)  # the walk saw the packages
    for unit, allowed in rules.items():
        assert allowed <= set(rules), f"{unit} may import {allowed - set(rules)}: no such package"
    breaks = _rule_breaks(_graph(), rules)
    assert not breaks, "\n".join(breaks)


def test_the_core_packages_rules_have_no_cycle():
    """The rules themselves form layers: no two packages may import each other, even through
    a third."""
    rules = _core_rules()
    cycles = _cycles({unit: set(allowed) for unit, allowed in rules.items()})
    assert not cycles, "packages allowed to import each other: " + "; ".join(
        " <-> ".join(c) for c in cycles)


VAGUE_NAMES = {"common", "utils", "util", "helpers", "misc"}


def test_the_layers_above_the_core_name_their_modules_by_concern():
    """tasks/, flows/, cli/, eval/: a module says what it holds (the stage runner, the policy
    paths, the engine factory, the vLLM launcher), never `common` or `utils`."""
    vague = [str(p.relative_to(REPO)) for pkg in PACKAGES if pkg != PURE
             for p in sorted((REPO / pkg).rglob("*.py")) if p.stem in VAGUE_NAMES]
    assert not vague, f"modules named for no concern: {vague}"


MAX_LINES = 400


def test_no_module_is_over_400_lines():
    """A module a newcomer can read in one sitting (the project's packages, tests and benches)."""
    files = [p for pkg in (*PACKAGES, "tests", "bench") for p in sorted((REPO / pkg).rglob("*.py"))]
    long = {str(p.relative_to(REPO)): n for p in files
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_wheel_ships_every_package():
    """pyproject.toml's package discovery ([tool.setuptools.packages.find], namespaces on by
    default) finds every package of the layers above: a top-level package renamed without its
    `include` pattern would install without it."""
    import tomllib

    from setuptools import find_namespace_packages

    find = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = set(find_namespace_packages(str(REPO), include=find["find"]["include"]))
    wanted = {".".join(p.parent.relative_to(REPO).parts) for pkg in PACKAGES
              for p in sorted((REPO / pkg).rglob("__init__.py"))}
    assert set(PACKAGES) <= wanted  # the walk saw the packages
    assert not wanted - found, f"not in the wheel: {sorted(wanted - found)}"


def test_no_flow_module_is_named_like_a_top_level_package():
    """Prefect loads a deployment's entrypoint (`flows/<module>.py:<flow>`) with flows/ first on
    sys.path: a module there named like a top-level package (flows/reasoning.py) would hide
    that package from every import of it while the flow loads."""
    tops = {*PACKAGES, "tests", "bench"}
    clash = sorted(p.name for p in (REPO / "flows").glob("*.py") if p.stem in tops)
    assert not clash, f"flows/ modules named like a top-level package: {clash}"
