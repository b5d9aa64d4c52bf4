"""The DAG is visible in the code: `flows/train.py` calls the stages by name in the layout's
order, and every read of another stage's output in the tasks (and flows) goes through
`layout.input_dir`, or a declared stage's context (`ctx.inputs[...]`, `ctx.earlier(...)`,
tasks/stage.py), with an edge that `STAGE_INPUTS` / `EARLIER_INPUTS` declare (static AST
scans, no run needed); the docs' picture is drawn from the same declarations."""
from __future__ import annotations

import ast
import runpy
from pathlib import Path

import pytest

from mars_core.run import layout
from mars_core.run.layout import (ASSIGN_REWARDS, BANK_EPISODES, BUILD_BATCH, EVALUATE,
                                  FILTER_STEPS, FINAL, INIT, REPLAYS, SAVE_CHECKPOINT, STRENGTH,
                                  TRAIN_STEP, UndeclaredInput, input_dir)
from tests.conftest import REPO

SCANNED = sorted((REPO / "tasks").glob("*.py")) + sorted((REPO / "flows").glob("*.py"))
LAYOUT = "mars_core.run.layout"
ALL_STAGES = {s for _, stages in layout.STAGES for s in stages}
STAGE_CONSTANTS = {name: value for name, value in vars(layout).items()  # (MODEL_DIR is a file)
                   if isinstance(value, str) and name.isupper() and value in ALL_STAGES
                   and not name.endswith("_DIR")}
GROUP_CONSTANTS = {"INIT": layout.INIT, "FINAL": layout.FINAL}
# layout helpers that reach one stage's folder without saying who reads it
FOLDER_OF = {"checkpoint_dir": layout.SAVE_CHECKPOINT, "start_model_dir": layout.PREPARE_POLICY,
             "final_model_dir": layout.FINAL_MODEL}
UNKNOWN = "?"
STAGE_DECORATOR = ("tasks.stage", "iteration_stage")


class Code:
    """The scanned modules' top-level functions, what each name refers to, who calls whom."""

    def __init__(self, files: list[Path], root: Path = REPO):
        self.functions: dict[tuple[str, str], ast.FunctionDef] = {}
        self.names: dict[str, dict[str, tuple[str, str]]] = {}  # module -> local name -> target
        self.whole_layout: list[str] = []  # modules that import the layout module itself
        for path in files:
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            tree = ast.parse(path.read_text(), str(path))
            names = self.names.setdefault(module, {})
            for node in ast.walk(tree):  # imports anywhere, deferred ones too
                if isinstance(node, ast.ImportFrom) and node.module:
                    names |= {a.asname or a.name: (node.module, a.name) for a in node.names}
                    whole = any(f"{node.module}.{a.name}" == LAYOUT for a in node.names)
                else:
                    whole = isinstance(node, ast.Import) and LAYOUT in {a.name for a in node.names}
                if whole:
                    self.whole_layout.append(module)
            for node in tree.body:
                if isinstance(node, ast.FunctionDef):
                    self.functions[(module, node.name)] = node
                    names[node.name] = (module, node.name)
        self.calls: dict[tuple[str, str], list[tuple[tuple[str, str], ast.Call]]] = {}
        for key, fn in self.functions.items():
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and self.target(key, node.func) in self.functions:
                    self.calls.setdefault(self.target(key, node.func), []).append((key, node))
        self.owners = self._owners()

    def target(self, key, expr) -> tuple[str, str] | None:
        return self.names[key[0]].get(expr.id) if isinstance(expr, ast.Name) else None

    def calls_of(self, key, module: str, name: str):
        return [n for n in ast.walk(self.functions[key]) if isinstance(n, ast.Call)
                and self.target(key, n.func) == (module, name)]

    def _owners(self) -> dict[tuple[str, str], set[str]]:
        """The stages each function works for: a task's own (the stage its `run_stage` call
        names), passed on to every function it refers to, transitively."""
        owners: dict[tuple[str, str], set[str]] = {}
        seeds = set()
        for key in self.functions:
            for call in self.calls_of(key, "tasks.stage_runner", "run_stage"):
                stage = self.constant(key, _arg(call, 2, "stage"))
                if stage in STAGE_CONSTANTS.values():
                    owners[key] = {stage}
                    seeds.add(key)
            if self.declared_stage(key):
                owners[key] = {self.declared_stage(key)}
                seeds.add(key)
        changed = True
        while changed:
            changed = False
            for key in list(owners):
                for node in ast.walk(self.functions[key]):
                    ref = self.target(key, node) if isinstance(node, ast.Name) else None
                    if ref not in self.functions or ref in seeds:
                        continue
                    if not owners[key] <= owners.get(ref, set()):
                        owners[ref] = owners.get(ref, set()) | owners[key]
                        changed = True
        return owners

    def declared_stage(self, key) -> str | None:
        """The stage a body declared with `@iteration_stage(NAME, ...)` (tasks/stage.py) runs."""
        for d in self.functions[key].decorator_list:
            if isinstance(d, ast.Call) and self.target(key, d.func) == STAGE_DECORATOR:
                return self.constant(key, _arg(d, 0, "name"))
        return None

    def constant(self, key, expr) -> str | None:
        if isinstance(expr, ast.Name):
            module, name = self.names[key[0]].get(expr.id, ("", ""))
            if module == LAYOUT:
                return STAGE_CONSTANTS.get(name) or GROUP_CONSTANTS.get(name)
        return None

    def resolve(self, key, exprs: dict, depth: int = 0):
        """Each way the expressions `exprs` (name -> AST, or a value already known) come to
        constants: (the function where they did, name -> value), following a parameter of
        `key` to every call of `key`."""
        values, pending = {}, {}
        args = self.functions[key].args
        params = [a.arg for a in args.args + args.kwonlyargs]
        for name, expr in exprs.items():
            value = expr if isinstance(expr, str) else self.constant(key, expr)
            if value is not None:
                values[name] = value
            elif isinstance(expr, ast.Name) and expr.id in params:
                pending[name] = expr.id
            else:
                values[name] = UNKNOWN
        if not pending:
            yield key, values
            return
        sites = self.calls.get(key, [])
        if not sites or depth > 8:
            yield key, values | dict.fromkeys(pending, UNKNOWN)
            return
        for caller, call in sites:
            bound = _bind(self.functions[key], call)
            yield from self.resolve(caller, values | {n: bound.get(p, UNKNOWN)
                                                      for n, p in pending.items()}, depth + 1)


def _arg(call: ast.Call, index: int, name: str):
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return call.args[index] if len(call.args) > index else None


def _bind(fn: ast.FunctionDef, call: ast.Call) -> dict:
    """Parameter -> the argument expression a call passes (or the default)."""
    args = fn.args.args
    bound = {a.arg: d for a, d in zip(args[len(args) - len(fn.args.defaults):], fn.args.defaults)}
    bound |= {a.arg: d for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None}
    bound |= {a.arg: v for a, v in zip(args, call.args)}
    return bound | {kw.arg: kw.value for kw in call.keywords if kw.arg}


@pytest.fixture(scope="module")
def code() -> Code:
    return Code(SCANNED)


def _where(key, node) -> str:
    return f"{key[0]}.{key[1]} (line {node.lineno})"


DECLARED = {(r, s) for table in (layout.STAGE_INPUTS, layout.EARLIER_INPUTS)
            for r, inputs in table.items() for s in inputs}
SAME_GROUP = {(r, s) for r, inputs in layout.STAGE_INPUTS.items() for s in inputs}


def undeclared_reads(code: Code) -> tuple[list[str], set[tuple[str, str]]]:
    """The input_dir calls whose (reader, stage) the layout does not declare (or whose reader
    is not the task they run in), and every (reader, stage) read."""
    used, problems = set(), []
    for key in code.functions:
        for call in code.calls_of(key, LAYOUT, "input_dir"):
            same = _arg(call, 99, "at") is None
            exprs = {"reader": _arg(call, 99, "reader"), "stage": _arg(call, 99, "stage")}
            for where, v in code.resolve(key, exprs):
                pair = (v["reader"], v["stage"])
                ok = pair in ({(r, s) for r, ins in layout.STAGE_INPUTS.items() for s in ins}
                              if same else DECLARED)
                if UNKNOWN in pair or not ok:
                    problems.append(f"{_where(key, call)}: {pair[0]} reads {pair[1]} "
                                    f"({'same group' if same else 'an earlier group'}), "
                                    "not declared in mars_core/run/layout.py")
                elif code.owners.get(where) and pair[0] not in code.owners[where]:
                    problems.append(f"{_where(key, call)}: reads as {pair[0]} inside "
                                    f"{where[1]}, which works for {sorted(code.owners[where])}")
                used.add(pair)
    for key in code.functions:
        for node, same, expr in _context_reads(code.functions[key]):
            for where, v in code.resolve(key, {"stage": expr}):
                for reader in sorted(code.owners.get(where) or {UNKNOWN}):
                    pair = (reader, v["stage"])
                    ok = pair in (SAME_GROUP if same else DECLARED)
                    if UNKNOWN in pair or not ok:
                        problems.append(f"{_where(key, node)}: {pair[0]} reads {pair[1]} "
                                        f"({'same group' if same else 'an earlier group'}) "
                                        "through its context, not declared in "
                                        "mars_core/run/layout.py")
                    used.add(pair)
    return problems, used


def _context_reads(fn: ast.FunctionDef):
    """A declared stage's reads through its context (tasks/stage.py): `<ctx>.inputs[STAGE]`
    (its own iteration) and `<ctx>.earlier(STAGE, at=...)` (an earlier one), as (node, same
    group?, the stage's expression)."""
    for node in ast.walk(fn):
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
                and node.value.attr == "inputs"):
            yield node, True, node.slice
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "earlier"):
            yield node, False, _arg(node, 0, "stage")


def test_every_cross_stage_read_goes_through_input_dir_and_is_declared(code):
    problems, used = undeclared_reads(code)
    assert not problems, "\n".join(problems)
    assert used == DECLARED, f"declared but never read: {sorted(DECLARED - used)}"


def foreign_folders(code: Code) -> list[str]:
    """The places where a task reaches another stage's folder without input_dir (and modules
    importing the layout whole, whose `layout.x(...)` calls the scan would not see)."""
    problems = [f"{m}: import the layout's names, not the module" for m in code.whole_layout]
    for key, owners in code.owners.items():
        for node in ast.walk(code.functions[key]):
            if not isinstance(node, ast.Call) or code.target(key, node.func) is None:
                continue
            module, name = code.target(key, node.func)
            if module != LAYOUT or name not in {"stage_dir", "iter_dir", *FOLDER_OF}:
                continue
            if name == "iter_dir":
                problems.append(f"{_where(key, node)}: a whole iteration folder")
                continue
            expr = FOLDER_OF.get(name) or _arg(node, 2, "stage")
            for where, v in code.resolve(key, {"stage": expr}):
                if code.owners.get(where) and v["stage"] not in code.owners[where]:
                    problems.append(f"{_where(key, node)}: {name} reaches {v['stage']} inside "
                                    f"{where[1]}, a task of {sorted(code.owners[where])}")
    return problems


def test_no_task_reaches_another_stage_folder_but_through_input_dir(code):
    problems = foreign_folders(code)
    assert not problems, ("read another stage's folder through layout.input_dir (declared in "
                          "STAGE_INPUTS / EARLIER_INPUTS):\n" + "\n".join(problems))


def test_the_scans_catch_an_undeclared_read(tmp_path):
    """A task that reads a stage it does not declare (through input_dir, directly, through a
    helper, under another stage's name) fails the scans."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "stage_runner.py").write_text((REPO / "tasks" / "stage_runner.py").read_text())
    bad = tmp_path / "tasks" / "bad.py"
    bad.write_text(
        "from mars_core.run.layout import (ASSIGN_REWARDS, BANK_EPISODES, FILTER_STEPS, REPLAYS,\n"
        "                              input_dir, stage_dir)\n"
        "from tasks.stage_runner import run_stage\n"
        "def _turns(run_dir, k, reader, stage):\n"
        "    return input_dir(run_dir, k, reader=reader, stage=stage)\n"
        "def bank(run_dir, k):\n"
        "    input_dir(run_dir, k, reader=BANK_EPISODES, stage=FILTER_STEPS)\n"
        "    _turns(run_dir, k, BANK_EPISODES, ASSIGN_REWARDS)\n"
        "    _turns(run_dir, k, REPLAYS, ASSIGN_REWARDS)\n"
        "    stage_dir(run_dir, k, ASSIGN_REWARDS)\n"
        "    return run_stage(run_dir, k, BANK_EPISODES, None, step=k)\n")
    (tmp_path / "tasks" / "whole.py").write_text("from mars_core.run import layout\n")
    (tmp_path / "tasks" / "declared.py").write_text(  # a stage declared once (tasks/stage.py)
        "from mars_core.run.layout import ASSIGN_REWARDS, BUILD_BATCH, FILTER_STEPS\n"
        "from tasks.stage import iteration_stage\n"
        "def _steps(ctx, source):\n"
        "    return ctx.inputs[source]\n"
        "@iteration_stage(BUILD_BATCH)\n"
        "def batch(ctx, out):\n"
        "    _steps(ctx, FILTER_STEPS)\n"
        "    ctx.earlier(ASSIGN_REWARDS, at=ctx.k - 1)\n"
        "    return {}\n")
    code = Code(sorted((tmp_path / "tasks").glob("*.py")), tmp_path)
    problems, used = undeclared_reads(code)
    problems = [p for p in problems if p.startswith("tasks.bad.")]
    assert len(problems) == 2, problems
    text = "\n".join(problems)
    assert f"{BANK_EPISODES} reads {FILTER_STEPS} (same group), not declared" in text
    assert f"reads as {REPLAYS} inside bank, which works for {[BANK_EPISODES]}" in text
    assert (BANK_EPISODES, ASSIGN_REWARDS) in used
    declared = "\n".join(p for p in undeclared_reads(code)[0] if p.startswith("tasks.declared."))
    assert (f"tasks.declared._steps (line 4): {BUILD_BATCH} reads {FILTER_STEPS} (same group) "
            "through its context, not declared") in declared
    assert f"{BUILD_BATCH} reads {ASSIGN_REWARDS} (an earlier group) through its context" in declared
    direct = foreign_folders(code)
    assert len(direct) == 2 and f"stage_dir reaches {ASSIGN_REWARDS} inside bank" in direct[1]
    assert direct[0] == "tasks.whole: import the layout's names, not the module"


def test_input_dir_refuses_an_undeclared_read(tmp_path):
    it = layout.iter_name(2)
    with pytest.raises(UndeclaredInput, match=f"stage {BANK_EPISODES} of {it} reads {FILTER_STEPS} "
                       f"of {it}, which mars_core/run/layout.py does not declare as its input"):
        input_dir(tmp_path, 2, reader=BANK_EPISODES, stage=FILTER_STEPS)
    with pytest.raises(UndeclaredInput, match="EARLIER_INPUTS"):  # declared for the same k only
        input_dir(tmp_path, 2, reader=BANK_EPISODES, stage=ASSIGN_REWARDS, at=1)
    with pytest.raises(UndeclaredInput, match="its own group or an earlier one"):
        input_dir(tmp_path, 2, reader=TRAIN_STEP, stage=SAVE_CHECKPOINT, at=3)
    with pytest.raises(UndeclaredInput, match=f"{INIT} has no stage {SAVE_CHECKPOINT}"):
        input_dir(tmp_path, 2, reader=TRAIN_STEP, stage=SAVE_CHECKPOINT, at=INIT)
    assert (input_dir(tmp_path, 2, reader=TRAIN_STEP, stage=SAVE_CHECKPOINT, at=1)
            == layout.checkpoint_dir(tmp_path, 1))
    assert (input_dir(tmp_path, 2, reader=BUILD_BATCH, stage=BANK_EPISODES)
            == tmp_path / layout.BANK_DIR)
    assert (input_dir(tmp_path, FINAL, reader=STRENGTH, stage=EVALUATE, at=INIT)
            == layout.stage_dir(tmp_path, INIT, EVALUATE))


def test_the_declared_inputs_form_a_dag():
    """Same-group inputs run before their reader; earlier ones are stages of some group."""
    stages = {s for _, group in layout.STAGES for s in group}
    for _, group in layout.STAGES:
        for reader in group:
            for s in layout.STAGE_INPUTS.get(reader, ()):
                assert s not in group or group.index(s) < group.index(reader), (reader, s)
    assert set(layout.STAGE_INPUTS) | set(layout.EARLIER_INPUTS) <= stages
    assert {s for _, s in DECLARED} <= stages


def _stage_calls(code: Code, key, seen=()) -> list[str]:
    """The stages a flow function runs, in source order, following the module's own helpers."""
    tasks = {k: next(iter(v)) for k, v in code.owners.items()
             if k[0].startswith("tasks.") and (code.calls_of(k, "tasks.stage_runner", "run_stage")
                                                or code.declared_stage(k))}
    found: list[str] = []

    def visit(node):
        if isinstance(node, ast.Call):
            target = code.target(key, node.func)
            if target in tasks:
                found.append(tasks[target])
            elif target and target[0] == key[0] and target not in seen:
                found.extend(_stage_calls(code, target, (*seen, key)))
        for child in ast.iter_child_nodes(node):
            visit(child)

    for statement in code.functions[key].body:
        visit(statement)
    return found


def test_train_flow_calls_its_stages_by_name_in_the_layouts_order(code):
    """init's and final's stages by name; an iteration's in a loop over ITERATION_STAGES (each
    by its declared task: tests/unit/test_stage.py runs the loop), the evaluation by name."""
    calls = _stage_calls(code, ("flows.train", "train_flow"))
    assert calls == [*layout.INIT_STAGES, EVALUATE, *layout.FINAL_STAGES]
    loops = [n for n in ast.walk(code.functions[("flows.train", "_iteration")])
             if isinstance(n, ast.For) and isinstance(n.iter, ast.Name)]
    assert [code.names["flows.train"].get(n.iter.id) for n in loops] == [
        (LAYOUT, "ITERATION_STAGES")]


def test_the_mermaid_picture_names_every_stage_and_edge():
    text = layout.dag_mermaid()
    assert text.startswith("flowchart TD\n")
    for group, stages in layout.STAGES:
        for s in stages:
            assert f'{group}_{s}["{s}"]' in text
        for reader in stages:
            for s in layout.STAGE_INPUTS.get(reader, ()):
                assert (f"  {group}_{s} --> {group}_{reader}" in text) is (s in stages)
    assert f"{layout.INIT}_{layout.PREPARE_POLICY} -.-> iter_{layout.GENERATE_ROLLOUTS}" in text


def test_docs_dag_md_is_the_generated_picture():
    generated = runpy.run_path(str(REPO / "docs" / "dag.py"))["render"]()
    assert (REPO / "docs" / "dag.md").read_text() == generated, \
        "docs/dag.md is stale: run `.venv/bin/python docs/dag.py`"
