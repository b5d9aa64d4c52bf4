"""The compact prompt layout carries the same state and legal actions as the papers' layout
(read back by a parser from both), and a config asks for it only where a game has one."""
from __future__ import annotations

import random
import re

import pytest

from mars_core.config import config_from_dict
from mars_core.config.base import ConfigError
from mars_core.games.base import PROMPT_STYLES
from mars_core.games.catalog import COMPACT_PROMPT_GAMES, GAMES
from mars_core.games.registry import make_game
from mars_core.lab import kuhn
from mars_core.rollout.play import EpisodeSpec, PromptBuilder, play_episodes
from mars_core.types import SamplingParams


def test_catalog_names_the_games_with_a_compact_layout():
    assert {g for g in GAMES if "compact" in make_game(g).prompt_styles()} == \
        set(COMPACT_PROMPT_GAMES)
    assert all(make_game(g).prompt_styles()[0] == "paper" for g in GAMES)


@pytest.mark.parametrize("info", kuhn.info_states(), ids=lambda i: i.key)
def test_kuhn_layouts_carry_the_same_state(info):
    adapter = make_game("kuhn_poker")
    paper = kuhn.read_decision(kuhn.prompt_texts(adapter, info, "paper")[1])
    rules, compact_obs = kuhn.prompt_texts(adapter, info, "compact")
    compact = kuhn.read_decision(compact_obs)
    assert paper == compact == (kuhn.RANKS[info.card], info.history, ("<PASS>", "<BET>"))
    assert compact_obs.splitlines()[-1] == f"Your card: {kuhn.RANKS[info.card]}"  # card last
    assert f"player {info.player}" in rules and len(rules) < 400


_BOARD_ROW = re.compile(r"^[XO_]( [XO_])+$")


def _read_board(observation: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(board rows, legal actions) of a board game's observation, in either layout."""
    rows = tuple(line for line in observation.splitlines() if _BOARD_ROW.match(line))
    legal = re.search(r"Legal(?: actions)?: (.*)$", observation, re.M)[1]
    return rows, tuple(re.findall(r"<[^<>]+>", legal))


@pytest.mark.parametrize("game", ["tic_tac_toe", "connect_four"])
def test_board_layouts_carry_the_same_state(game):
    adapter, rng = make_game(game), random.Random(0)
    state, seen = adapter.new_state(0), 0
    while not adapter.is_terminal(state):
        p = adapter.current_player(state)
        paper = adapter.observation_for(state, p, [], "paper")
        compact = adapter.observation_for(state, p, [], "compact")
        assert _read_board(paper) == _read_board(compact)
        assert _read_board(compact)[1] == tuple(adapter.legal_actions(state))
        assert compact.splitlines()[-1] == adapter.board(state).splitlines()[-1]  # board last
        assert adapter.MARKS[p] in adapter.rules_for(p, "compact")
        adapter.apply(state, rng.choice(sorted(adapter.legal_actions(state).values())))
        seen += 1
    assert seen >= 5


def test_leduc_compact_layout_reads_its_card_and_public_card():
    adapter = make_game("leduc_poker")
    state = adapter.new_state(5)
    adapter.apply(state, 1)  # seat 0 checks
    adapter.apply(state, 1)  # seat 1 checks: round 2, the public card is dealt
    obs = adapter.observation_for(state, adapter.current_player(state), [], "compact")
    view = adapter._view(state, adapter.current_player(state))
    assert f"Public card: {view['public']}" in obs and obs.endswith(f"Your card: {view['card']}")
    assert "Round 1: you <CALL>, opp <CALL>" in obs or "Round 1: opp <CALL>, you <CALL>" in obs


def test_prompt_layout_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown prompt layout 'tiny'"):
        PromptBuilder(None, style="tiny")
    with pytest.raises(ConfigError, match="no compact layout for mini_hanabi"):
        config_from_dict({"rollout": {"games": ["tic_tac_toe", "mini_hanabi"],
                                      "prompt": "compact"}})
    with pytest.raises(ConfigError, match="no compact layout for simple_hanabi"):
        config_from_dict({"rollout": {"games": ["kuhn_poker"], "prompt": "compact"},
                          "evaluation": {"held_out": ["leduc_poker", "simple_hanabi"]}})
    cfg = config_from_dict({"rollout": {"games": ["kuhn_poker"], "prompt": "compact"}})
    assert cfg.rollout.prompt == "compact" and PROMPT_STYLES == ("paper", "compact")


def test_games_are_played_and_recorded_in_the_compact_layout(tokenizer):
    from mars_core.engines.scripted import ScriptedEngine

    specs = [EpisodeSpec(f"e{i}", "kuhn_poker", i, ("policy", "bot:random")) for i in range(4)]
    engine = ScriptedEngine(tokenizer, lambda prompt: "<BET></answer>")
    builder = PromptBuilder(tokenizer, "answer", keep_history=False, style="compact")
    episodes = play_episodes(specs, engine, builder,
                             SamplingParams(temperature=0.0, max_new_tokens=8), progress=False)
    turns = [t for ep in episodes for t in ep.turns if t.agent == "policy"]
    assert turns and all(t.valid for t in turns)
    for t in turns:
        text = tokenizer.decode(t.prompt_ids)
        assert "Kuhn poker, you are player" in text and t.observation in text
        assert kuhn.read_decision(t.observation) is not None
        assert "Your private card" not in text
    from mars_core.viewer.replay import replay_data

    shown = replay_data(episodes[0], prompt="compact")["steps"][0]["rules"]
    assert shown.startswith("Kuhn poker, you are player")  # the rules it was played with
    assert replay_data(episodes[0])["steps"][0]["rules"].startswith("You are playing Kuhn")
