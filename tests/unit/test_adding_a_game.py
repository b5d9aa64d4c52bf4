"""docs/games/adding.md, followed step by step: OpenSpiel's Nim (not a game the project ships)
gets an adapter and the page's own record (name, family, traits, opponents, post-episode
pipeline) in the catalog's source, and nothing else; then it plays through the real loop
against `bot:random`, is graded by the MARS post-episode stages, and passes the page's own
`mars check` command. A step the page leaves out (or one the code no longer needs) fails
here."""
from __future__ import annotations

import ast
import random
import re
import shlex
import sys
import types

import pytest

from mars_core.engines.scripted import ScriptedEngine, legal_actions_in
from mars_core.games.openspiel_games import OpenSpielGame
from mars_core.rollout.play import EpisodeSpec, PromptBuilder, play_episodes
from mars_core.types import SamplingParams
from tests.conftest import REPO

PAGE = REPO / "docs" / "games" / "adding.md"


class Nim(OpenSpielGame):
    """Step 1: the adapter. Piles of 1, 2 and 3 sticks; a move takes sticks from one pile; who
    takes the last stick wins."""

    name = "nim"
    pyspiel_name = "nim"
    params = {"pile_sizes": "1;2;3", "is_misere": False}

    def action_string(self, state, player: int, action_id: int) -> str:
        pile, take = re.findall(r"\d+", state.s.action_to_string(player, action_id))
        return f"<take {take} from pile {pile}>"

    def rules(self, player: int) -> str:
        return ("You are playing Nim. There are piles of sticks; on your turn take one or more "
                "sticks from one pile. Whoever takes the last stick wins. Reply with exactly one "
                "legal action inside answer tags, e.g. <answer><take 1 from pile 1></answer>; an "
                "illegal or malformed answer loses the game.")

    def observation(self, state, player: int, moves_since: list[tuple[int, str]]) -> str:
        lines = [f"Opponent played {a}." for _, a in moves_since]
        piles = state.s.observation_string(player).strip()
        return "\n".join(lines + [f"Piles: {piles}", "Legal actions: "
                                  + ", ".join(self.legal_actions(state)),
                                  "Answer with exactly one of them inside <answer></answer> tags."])

    def forfeit_return(self, state, player: int) -> float:
        return -1.0


def _record(page: str) -> str:
    """Step 2's record, as the page writes it."""
    [block] = re.findall(r"```python\n(.*?)```", page, re.S)
    return block.strip()


def _add_to_catalog(monkeypatch, record: str) -> dict:
    """Append `record` to `CATALOG` in catalog.py's source, as the page says to write it, and
    run that source and every module that reads `CATALOG` again (the tables they derive from it
    are rebuilt); a module that imported a derived name (`from ... import GAMES`) sees the new
    one. Returns what `_restore` needs."""
    from mars_core.games import catalog

    source = (REPO / "mars_core" / "games" / "catalog.py").read_text()
    [table] = [n for n in ast.parse(source).body
               if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "CATALOG"]
    lines = source.splitlines(keepends=True)
    close = sum(map(len, lines[:table.end_lineno - 1])) + table.end_col_offset - 1
    source = source[:close].rstrip() + "\n    " + record + "\n" + source[close:]
    readers = [m for m in list(sys.modules.values())
               if isinstance(m, types.ModuleType) and m is not catalog
               and vars(m).get("CATALOG") is catalog.CATALOG]
    saved = {m: dict(vars(m)) for m in (catalog, *readers)}
    exec(compile(source, catalog.__file__, "exec"), vars(catalog))
    for m in readers:  # catalog first, then what reads it
        exec(compile(m.__loader__.get_source(m.__name__), m.__file__, "exec"), vars(m))
    new = {id(old): vars(m)[k] for m, d in saved.items() for k, old in d.items()
           if not k.startswith("__") and vars(m).get(k) is not old}
    for mod in list(sys.modules.values()):
        if isinstance(mod, types.ModuleType) and mod not in saved:
            for k, v in list(vars(mod).items()):
                if id(v) in new and not k.startswith("__"):
                    monkeypatch.setattr(mod, k, new[id(v)])
    return saved


@pytest.fixture
def nim(monkeypatch):
    """Steps 1 and 2 of the page, undone after the test."""
    from mars_core import postprocess  # noqa: F401 (reads the catalog: rebuilt with it)
    from mars_core.games import opponents, registry  # noqa: F401 (idem)

    # 1. the adapter, in its module mars_core/games/nim.py
    module = types.ModuleType("mars_core.games.nim")
    module.Nim = Nim
    monkeypatch.setitem(sys.modules, module.__name__, module)
    # 2. its record, as the page writes it
    saved = _add_to_catalog(monkeypatch, _record(PAGE.read_text()))
    yield "nim"
    for m, d in saved.items():
        vars(m).clear()
        vars(m).update(d)


def _reply(seed: int):
    rng = random.Random(seed)
    return lambda prompt: f"{rng.choice(legal_actions_in(prompt))}</answer>"


def test_the_new_game_plays_against_bot_random_and_is_graded(nim, tokenizer):
    from mars_core.config import RewardsConfig
    from mars_core.games.registry import make_game
    from mars_core.postprocess import assign_rewards, build_players, filter_steps

    adapter = make_game(nim)
    assert isinstance(adapter, Nim) and adapter.num_players == 2 and adapter.perfect_information
    specs = [EpisodeSpec(f"e{seat}", nim, seat, tuple("policy" if p == seat else "bot:random"
                                                      for p in range(2))) for seat in range(2)]
    episodes = play_episodes(specs, ScriptedEngine(tokenizer, _reply(0)),
                             PromptBuilder(tokenizer, "answer", keep_history=True),
                             SamplingParams(max_new_tokens=32, stop=("</answer>",)),
                             progress=False)
    cfg = RewardsConfig()
    for seat, ep in enumerate(episodes):
        assert ep.error == "" and sorted(ep.returns) == [-1.0, 1.0]  # someone took the last
        mine = [t for t in ep.turns if t.player == seat]
        assert mine and all(t.valid for t in mine) and "Piles:" in mine[0].observation
        players = build_players(ep, cfg)
        graded = assign_rewards(filter_steps(ep, players, cfg), players, cfg)
        assert sum(t.game_reward for t in graded.turns if t.player == seat) == ep.returns[seat]


def test_the_page_check_command_passes_once_the_game_is_added(nim, tmp_path, monkeypatch, capsys):
    from cli.main import main

    *_, command = re.findall(r"^mars (check .*)$", PAGE.read_text(), re.M)  # the last: by hand
    assert "nim" in command
    monkeypatch.chdir(REPO)
    assert main([*shlex.split(command), "--runs-dir", str(tmp_path)]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "games: nim" in out and "  nim: bot:random" in out  # step 3's default opponent
    # smoke: 2 evaluation games per seat x 2 seats, after the last of 2 iterations
    assert "evaluations: 1 (after iteration 2), 4 games each" in out
    assert not any(tmp_path.iterdir())


def test_without_the_steps_the_game_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    from cli.main import main

    monkeypatch.chdir(REPO)
    assert main(["check", "configs/smoke.yaml", "--set", "rollout.games=[nim]",
                 "--runs-dir", str(tmp_path)]) == 2
    assert "unknown game 'nim'" in capsys.readouterr().err
