"""The run folder's layout lives in `mars_core.run.layout` alone: no other module of the project (tests
and benches included) spells a stage's folder name, so renaming a stage there needs no other
edit. And the layout's facts: stage order, folder helpers, the episode codec."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from mars_core.run import layout
from mars_core.types import Episode, Turn

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("mars_core", "tasks", "flows", "cli", "eval", "bench", "tests")
STAGE_NAMES = {s for _, stages in layout.STAGES for s in stages}
# names that are also ordinary words (a metric namespace, an MLflow artifact, a dict key): they
# count only beside another piece of a run path
COMMON_WORDS = {layout.EVALUATE, layout.FINAL_MODEL, layout.STRENGTH, layout.REPLAYS}
DISTINCT = STAGE_NAMES - COMMON_WORDS
GROUPS = {layout.INIT, layout.FINAL}
_SPLIT = re.compile(r"[/:\s]+")
_ITER = re.compile(r"^iter_(\d{4}|\{.*|)$")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _exported(tree: ast.AST) -> set[int]:
    """String constants in `__all__` (function names, not folders)."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                for t in node.targets):
            ids |= {id(c) for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
    return ids


def spells_a_stage(text: str) -> bool:
    """A stage's folder name written out: the name itself (for the distinct ones), or a run path
    with a stage in it (`init/evaluate`, `iter_0001/train_step/metrics.json`, `mid:train_step:1`)."""
    if text in DISTINCT:
        return True
    parts = [p for p in _SPLIT.split(text) if p]
    if len(parts) < 2:
        return False
    if any(p in DISTINCT for p in parts):
        return True
    where = [p in GROUPS or bool(_ITER.match(p)) for p in parts]  # init, final, iter_XXXX
    stage = [p in STAGE_NAMES for p in parts]
    return any((where[i] and stage[i + 1]) or (stage[i] and where[i + 1])
               for i in range(len(parts) - 1))


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    skip = _docstrings(tree) | _exported(tree)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
                and spells_a_stage(node.value)):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    return found


def test_no_module_but_the_layout_spells_a_stage_folder():
    files = [f for pkg in SCANNED for f in sorted((REPO / pkg).rglob("*.py"))
             if f != REPO / "mars_core" / "run" / "layout.py" and f != Path(__file__).resolve()]
    offences = [o for f in files for o in _offences(f)]
    assert not offences, ("stage names spelled outside mars_core/run/layout.py (ask the layout "
                          "module):\n" + "\n".join(offences))


@pytest.mark.parametrize("text, spelled", [
    ("train_step", True), ("iter_0001/train_step/metrics.json", True),
    ("init/evaluate", True), ("final/model", True), ("mid:save_checkpoint:1", True),
    ("/prepare_policy/model", True), ("evaluate", False), ("model", False),
    ("strength/tic_tac_toe/bot_random/diff", False), ("eval/kuhn_poker/", False),
    ("replays/pages", False), ("replays/iter_", True),
    ("strength/tic_tac_toe/bot_mcts-5/final", False), ("final/strength/strength.json", True),
])
def test_the_scan_tells_a_stage_path_from_a_word(text, spelled):
    assert spells_a_stage(text) is spelled


def test_stage_order_is_the_folders_order(tmp_path):
    assert layout.ITERATION_STAGES[0] == layout.GENERATE_ROLLOUTS
    assert layout.ITERATION_STAGES.index(layout.COMPUTE_ADVANTAGES) < layout.ITERATION_STAGES.index(
        layout.TRAIN_STEP) < layout.ITERATION_STAGES.index(layout.SAVE_CHECKPOINT)
    assert len(set(layout.ITERATION_STAGES)) == len(layout.ITERATION_STAGES)
    assert [g for g, _ in layout.STAGES] == [layout.INIT, "iter", layout.FINAL]
    assert layout.stage_dir(tmp_path, 3, layout.TRAIN_STEP) == tmp_path / "iter_0003" / layout.TRAIN_STEP
    assert layout.checkpoint_dir(tmp_path, 0) == layout.iter_dir(tmp_path, 0) / layout.SAVE_CHECKPOINT
    assert layout.iteration_of(layout.iter_name(12)) == 12 and layout.iteration_of("init") is None
    stage = layout.stage_dir(tmp_path, 0, layout.GENERATE_ROLLOUTS)
    assert layout.shard_folder(stage, 2).parent == layout.shards_dir(stage) != stage


def test_finished_stages_come_in_run_order(tmp_path):
    from mars_core.run.commit import MARKER

    done = [layout.stage_dir(tmp_path, layout.FINAL, layout.FINAL_MODEL),
            layout.stage_dir(tmp_path, 1, layout.GENERATE_ROLLOUTS),
            layout.stage_dir(tmp_path, 0, layout.TRAIN_STEP),
            layout.stage_dir(tmp_path, 0, layout.GENERATE_ROLLOUTS),
            layout.stage_dir(tmp_path, layout.INIT, layout.PREPARE_POLICY)]
    for folder in done:
        folder.mkdir(parents=True)
        (folder / MARKER).write_text("{}")
    layout.stage_dir(tmp_path, 1, layout.BUILD_PLAYERS).mkdir()  # unfinished: not listed
    assert layout.finished_stages(tmp_path) == done[::-1]


def test_the_episode_codec_round_trips(tmp_path):
    turn = Turn(episode_id="e1", game="tic_tac_toe", turn=0, player=0, role="player_0",
                agent="policy", observation="board", prompt_ids=(1, 2), completion_ids=(3,),
                logprobs=(-0.5,), action="1")
    ep = Episode(episode_id="e1", game="tic_tac_toe", seed=7, agents=("policy", "bot:random"),
                 returns=(1.0, -1.0), outcomes=("win", "loss"), turns=(turn,))
    layout.write_episodes(tmp_path, [ep])
    assert sorted(p.name for p in tmp_path.iterdir()) == [layout.EPISODES_FILE, layout.TURNS_FILE]
    assert layout.read_episodes(tmp_path) == [ep]


def test_prefect_task_names_are_their_functions():
    """A task run in the Prefect UI is named after the function that ran it."""
    import importlib

    from prefect import Task

    tasks = []
    for f in sorted((REPO / "tasks").glob("*.py")):
        module = importlib.import_module(f"tasks.{f.stem}")
        tasks += [t for t in vars(module).values() if isinstance(t, Task)]
    assert len(tasks) >= 20
    assert [t.name for t in tasks if t.name != t.fn.__name__] == []


def test_the_architecture_page_shows_the_stage_order_as_the_folders_do():
    text = (REPO / "docs" / "architecture.md").read_text()
    start = text.index("iter_k: ")
    block = text[start:text.index("final/model", start)]
    shown = [s for s in re.findall(r"\b[a-z]+(?:_[a-z]+)*\b", block) if s in STAGE_NAMES]
    assert shown == list(layout.ITERATION_STAGES)
