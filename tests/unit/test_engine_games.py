"""Every game by name (issue 62): an engine's own games, `openspiel:<name>` and
`textarena:<EnvId>`, through the real rollout loop: the embedded model against `bot:random`
for a few turns, a hostile reply in every turn, refusals by name, and the generic OpenSpiel
adapter against the hand-written ones on the same states and legal actions."""
from __future__ import annotations

import os
import random

import pytest

from mars_core.engines.scripted import ScriptedEngine, legal_actions_in
from mars_core.games.base import INVALID_ACTION, PARSING_FAILURE
from mars_core.games.catalog import check_game, order_key, record
from mars_core.games.opponents import check_opponent, default_opponents
from mars_core.games.registry import make_game
from mars_core.rollout.play import EpisodeSpec, PromptBuilder, play_episodes
from mars_core.types import Completion, FinishReason, SamplingParams
from tests.unit.test_textarena_generic import PLAYABLE_SAMPLE

# OpenSpiel games played here by name (`mars games` lists all it can play); the longest
# prompts (Battleship, Go, Gomoku, ...) and the ones that outgrow the embedded model's context
# (Backgammon's doubles, Kriegspiel's history) are left to the listing.
OPENSPIEL_SAMPLE = tuple(f"openspiel:{n}" for n in (
    "amazons", "antichess", "banqi", "breakthrough", "bridge", "checkers", "chess",
    "chinese_checkers", "clobber", "coin_game", "connect_four", "coordinated_mp", "crazy_eights",
    "crazyhouse", "cribbage", "cursor_go", "dark_chess", "dark_hex", "dark_hex_ir",
    "dots_and_boxes", "dou_dizhu", "einstein_wurfelt_nicht", "euchre", "first_sealed_auction",
    "gin_rummy", "go_fish", "hanabi", "hearts", "kuhn_poker", "latent_ttt",
    "leduc_poker", "lewis_signaling", "liars_dice", "liars_dice(numdice=1)", "lines_of_action",
    "maedn", "mancala", "nim", "nine_mens_morris", "oh_hell", "othello", "oware", "phantom_ttt",
    "pig", "repeated_leduc_poker", "sheriff", "shogi", "skat", "social_deduction", "spades",
    "tarok", "tic_tac_toe", "tiny_bridge_2p", "tiny_bridge_4p", "tiny_hanabi", "trade_comm",
    "ultimate_tic_tac_toe", "universal_poker", "xiangqi", "yacht"))
# TextArena games random play finishes with every action valid (tests/unit/test_textarena_generic.py)
TEXTARENA_SAMPLE = tuple(f"textarena:{n}" for n in PLAYABLE_SAMPLE)
SAMPLE = OPENSPIEL_SAMPLE + TEXTARENA_SAMPLE
# The model's turns cost a forward pass each (about 5 minutes for all 65 games on 2 busy
# cores): `make test-games` plays 40 OpenSpiel games and 25 TextArena ones, `make test` a slice.
ALL_GAMES = os.environ.get("MARS_ALL_GAMES") == "1"
EMBEDDED = (OPENSPIEL_SAMPLE[:40] + TEXTARENA_SAMPLE[:25] if ALL_GAMES
            else OPENSPIEL_SAMPLE[::8] + TEXTARENA_SAMPLE[::8])
PARAMS = SamplingParams(max_new_tokens=8, stop=("</answer>",), temperature=1.0, seed=3)
SCRIPTED = SamplingParams(max_new_tokens=64, stop=("</answer>",))  # the longest action strings
HOSTILE = ("", "<answer></answer>", "<answer><>", "<answer>" * 50, "</answer><answer>",
           "<answer><" + "x" * 5000 + "></answer>", "<answer>[[[]]]</answer>",
           "<answer>\x00\u202e\U0001F600</answer>", "<answer><pass>\n</answer>", "\n" * 100)


def specs(games, agents=lambda n: ("policy", *["bot:random"] * (n - 1))):
    out = []
    for i, game in enumerate(games):
        n = make_game(game).num_players
        out.append(EpisodeSpec(f"e{i}", game, 10 + i, agents(n)))
    return out


class FewTurns:
    """The real engine for the first `rounds` rounds of engine calls, then a reply that ends
    every game still running (a few model turns per game, whatever the game's length)."""

    def __init__(self, engine, tokenizer, rounds: int) -> None:
        self.engine, self.tokenizer, self.left = engine, tokenizer, rounds

    def generate(self, prompts, params):
        self.left -= 1
        if self.left >= 0:
            return self.engine.generate(prompts, params)
        ids = tuple(self.tokenizer.encode("quit</answer>", add_special_tokens=False))
        return [Completion(ids, (), "quit</answer>", FinishReason.STOP) for _ in prompts]


@pytest.mark.slow  # `make test` runs it; `make test-unit` leaves it out (it runs long)
def test_the_embedded_model_plays_every_sample_game_against_random(embedded_dir, tokenizer):
    """One real turn of the model in every game (one batched round of engine calls), then
    the games end on a bad reply: every model turn is recorded, valid or a typed error."""
    from mars_core.engines.hf import HFEngine
    from mars_core.models.weights import load_model

    engine = FewTurns(HFEngine(load_model(embedded_dir), tokenizer, batch_size=16), tokenizer, 1)
    episodes = play_episodes(specs(EMBEDDED), engine,
                             PromptBuilder(tokenizer, "answer", keep_history=False), PARAMS,
                             progress=False)
    assert [ep.game for ep in episodes] == list(EMBEDDED)
    for ep in episodes:
        mine = [t for t in ep.turns if t.player == 0]
        assert mine, ep.game  # the model moved in every game
        for t in mine:
            assert t.completion_ids and (t.valid or t.error in (PARSING_FAILURE, INVALID_ACTION))


@pytest.mark.parametrize("reply", HOSTILE)
def test_a_hostile_reply_is_a_typed_error_in_every_game(reply, tokenizer):
    engine = ScriptedEngine(tokenizer, lambda prompt: reply)
    for ep in play_episodes(specs(SAMPLE), engine,
                            PromptBuilder(tokenizer, "answer", keep_history=False), SCRIPTED,
                            progress=False):
        bad = [t for t in ep.turns if not t.valid]
        assert len(bad) == 1 and bad[0].error in (PARSING_FAILURE, INVALID_ACTION), ep.game
        assert ep.error and "\n" not in bad[0].error_detail


def test_random_self_play_of_every_sample_game_ends(tokenizer):
    """Legal actions read from the prompts are played to the end (or the move limit); the
    TextArena games list none (their random play: tests/unit/test_textarena_generic.py)."""
    rng = random.Random(0)
    engine = ScriptedEngine(tokenizer, lambda p: f"{rng.choice(legal_actions_in(p))}</answer>")
    for ep in play_episodes(specs(OPENSPIEL_SAMPLE, lambda n: ("policy",) * n), engine,
                            PromptBuilder(tokenizer, "answer", keep_history=False), SCRIPTED,
                            progress=False):
        assert not ep.error and all(t.valid for t in ep.turns), ep.game
        adapter = make_game(ep.game)
        assert adapter.move_limit is None or len(ep.turns) <= adapter.move_limit


@pytest.mark.parametrize("name, why", [
    ("openspiel:no_such_game", "unknown OpenSpiel game"),
    ("openspiel:goofspiel", "simultaneous-move game"),
    ("openspiel:blackjack", "single-player game"),
    ("openspiel:liars_dice(numdice=x)", "parameter numdice"),
    ("openspiel:liars_dice(dice=2)", "no parameter 'dice'"),
    ("openspiel:liars_dice(numdice=1", "not a game name"),
    ("openspiel:misere(game=tic_tac_toe())", "games as parameters are not supported"),
    ("openspiel:efg_game", "OpenSpiel cannot load it"),
    ("chess", "unknown game 'chess'"),
])
def test_a_game_that_cannot_be_played_is_refused_by_name(name, why):
    with pytest.raises(ValueError, match=why) as e:
        check_game(name)
    assert "\n" not in str(e.value)


def test_an_engine_games_record_and_opponents():
    kuhn = record("openspiel:kuhn_poker")
    assert kuhn.hidden_information and not kuhn.nash and kuhn.family == "openspiel"
    assert default_opponents("openspiel:chess") == ("bot:random",)
    check_opponent("bot:mcts-10", "openspiel:chess")  # perfect information: MCTS fits
    with pytest.raises(ValueError, match="hidden information"):
        check_opponent("bot:mcts-10", "openspiel:kuhn_poker")
    with pytest.raises(ValueError, match="Nash policies exist"):
        check_opponent("bot:nash", "openspiel:kuhn_poker")
    with pytest.raises(ValueError, match="cooperative"):
        check_opponent("bot:mcts-10", "openspiel:tiny_hanabi")
    assert sorted(["openspiel:nim", "kuhn_poker", "tic_tac_toe"], key=order_key) == [
        "tic_tac_toe", "kuhn_poker", "openspiel:nim"]


@pytest.mark.parametrize("hand, generic", [("tic_tac_toe", "openspiel:tic_tac_toe"),
                                           ("kuhn_poker", "openspiel:kuhn_poker")])
def test_the_generic_adapter_reaches_the_hand_written_ones_states(hand, generic):
    """Same seeds, same engine actions: the same states, and the legal actions read back from
    each prompt are the same engine actions."""
    a, b = make_game(hand), make_game(generic)
    for seed in range(20):
        rng = random.Random(seed)
        sa, sb = a.new_state(seed), b.new_state(seed)
        while not a.is_terminal(sa):
            assert not b.is_terminal(sb)
            p = a.current_player(sa)
            assert b.current_player(sb) == p
            ids_a = {a.legal_actions(sa)[s] for s in legal_actions_in(a.observation(sa, p, []))}
            ids_b = {b.legal_actions(sb)[s] for s in legal_actions_in(b.observation(sb, p, []))}
            assert ids_a == ids_b == set(sa.s.legal_actions())
            action = rng.choice(sorted(ids_a))
            assert a.apply(sa, action) == b.apply(sb, action)
            assert sa.s.history() == sb.s.history()
        assert b.is_terminal(sb) and a.returns(sa) == b.returns(sb)


def test_the_pages_check_command_says_what_it_will_do(tmp_path, monkeypatch, capsys):
    """docs/games/adding.md's "Bring your own game": `mars check` on the Liar's Dice recipe
    names the generic adapter and the bots that fit, and writes nothing."""
    import re
    import shlex
    from pathlib import Path

    from cli.main import main

    repo = Path(__file__).resolve().parents[2]
    command = re.findall(r"^mars (check .*)$", (repo / "docs/games/adding.md").read_text(),
                         re.M)[0]
    monkeypatch.chdir(repo)
    assert main([*shlex.split(command), "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "openspiel:liars_dice(numdice=1): the generic openspiel adapter" in out
    assert "2 seats, bots that fit: bot:random" in out and not any(tmp_path.iterdir())


def test_a_game_list_keeps_an_openspiel_games_parameters_together():
    from cli.options import csv

    assert csv("openspiel:liars_dice(numdice=1,dice_sides=4), tic_tac_toe,,") == [
        "openspiel:liars_dice(numdice=1,dice_sides=4)", "tic_tac_toe"]
    assert csv("openspiel:chess(,kuhn_poker") == ["openspiel:chess(,kuhn_poker"]  # refused later


def test_an_engine_games_name_reaches_mlflow_as_a_valid_key():
    """A suite's params and metrics carry game names: `(`, `=` and `,` are not in MLflow's
    alphabet (a real `mars eval games` on Liar's Dice failed there once)."""
    import re

    from tasks.tracking import _metric_key, as_params

    name = "openspiel:liars_dice(numdice=1,dice_sides=4)"
    valid = re.compile(r"^[/\w.\- :]*$")
    assert all(valid.match(p.key) for p in as_params({f"suite.{name}": ["bot:random"]}))
    assert valid.match(_metric_key("exploitability", name))
