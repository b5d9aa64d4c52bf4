"""Monte-Carlo action values from cloned states (issue 45, `rollout.mc_rollouts`) and the
`monte_carlo` estimator that trains on them: the values match Kuhn Poker's exact ones, the live
game is never touched, a played game records them on its model turns only, the estimator is
each turn's value against its state's mean, and a config asks for what it needs in one line."""
from __future__ import annotations

import json
import random

import polars as pl
import pytest

from mars_core.advantages.estimators import compute_advantages, estimator
from mars_core.advantages.reference import monte_carlo_reference
from mars_core.config import ConfigError, load_config
from mars_core.games.openspiel_games import _Seeded
from mars_core.games.registry import make_game
from mars_core.lab import kuhn, tictactoe
from mars_core.rollout import mc_values
from mars_core.rollout.play import EpisodeSpec, PromptBuilder, play_episodes
from mars_core.types import Completion, SamplingParams

PARAMS = SamplingParams(max_new_tokens=8)


def test_values_match_kuhn_pokers_exact_ones():
    """Every seat moving at random after the action: the exact values are those of the uniform
    policy against the uniform policy, each opponent card equally likely (it reaches every
    history with the same probability under a uniform opponent)."""
    adapter = make_game("kuhn_poker")
    exact = kuhn.action_values(kuhn.UNIFORM, kuhn.UNIFORM)
    for info in kuhn.info_states():
        got = {"<PASS>": 0.0, "<BET>": 0.0}
        others = [c for c in range(3) if c != info.card]
        for oc in others:
            cards = (info.card, oc) if info.player == 0 else (oc, info.card)
            state = _Seeded(kuhn.deal(cards, info.history), random.Random(0))
            values = mc_values.action_values(adapter, state, 3000, seed=oc)
            assert set(values) == set(got)
            for a, v in values.items():
                got[a] += v / len(others)
        want = dict(zip(("<PASS>", "<BET>"), exact[info.key]))
        for a in got:  # a return's spread is at most 2 chips: 0.12 is over 4 standard errors
            assert got[a] == pytest.approx(want[a], abs=0.12), (info.key, a, got, want)


def test_a_winning_move_is_worth_one_and_the_state_is_untouched():
    adapter = make_game("tic_tac_toe")
    state = adapter.new_state(0)
    for cell in (0, 3, 1, 4):  # X at (0,0) and (0,1), O at (1,0) and (1,1): X to move
        adapter.apply(state, cell)
    before, rng_before = str(state.s), state.rng.getstate()
    values = mc_values.action_values(adapter, state, 8, seed=1)
    assert values["<X(0,2)>"] == 1.0  # three in the top row
    assert max(values, key=values.get) == "<X(0,2)>"
    assert set(values) == set(adapter.legal_actions(state))
    assert str(state.s) == before and state.rng.getstate() == rng_before
    assert mc_values.action_values(adapter, state, 8, seed=1) == values  # deterministic
    assert mc_values.decode(mc_values.encode(values)) == values and mc_values.decode("") == {}


def test_the_best_value_picks_minimax_optimal_moves_in_tic_tac_toe():
    """What the estimator's signal is worth where it matters (docs/lab.md: 92% of the 3,191
    reachable positions with a losing or drawing move, 16 rollouts)."""
    adapter = make_game("tic_tac_toe")
    positions = tictactoe.decisive_positions(24, seed=0)
    right = 0
    for i, (board, mark) in enumerate(positions):
        state = adapter.new_state(0)
        for m, cell in tictactoe.moves_to(board):
            adapter.apply(state, cell)
        values = mc_values.action_values(adapter, state, 16, seed=i)
        right += tictactoe.move_cell(max(values, key=values.get)) in tictactoe.optimal_moves(
            board, mark)
    assert right >= 18, right  # a random move: about 40% (10 of 24)


def test_only_openspiel_games_have_values():
    adapter = make_game("colonel_blotto")
    with pytest.raises(ValueError, match="colonel_blotto is not one"):
        mc_values.action_values(adapter, adapter.new_state(0), 4, seed=0)


class _Always:
    """A scripted engine that always answers `text`."""

    def __init__(self, text: str) -> None:
        self.text = text

    def generate(self, prompts, params):
        return [Completion((1,), (0.0,), self.text, "stop") for _ in prompts]


@pytest.mark.parametrize("game,reply", [("leduc_poker", "<CALL></answer>"),
                                        ("tic_tac_toe", "<X(1,1)></answer>")])
def test_play_records_values_on_model_turns_and_plays_the_same(game, reply, tokenizer):
    """Leduc deals a public card mid-game: the values' playouts must not move the game's own
    random source. Tic-Tac-Toe: the second (1,1) is illegal, and its turn has values too."""
    prompts = PromptBuilder(tokenizer, "answer", keep_history=False)
    specs = [EpisodeSpec(f"e{i}", game, 7 + i, ("policy", "bot:random")[::1 - 2 * (i % 2)])
             for i in range(6)]
    plain = play_episodes(specs, _Always(reply), prompts, PARAMS, progress=False)
    measured = play_episodes(specs, _Always(reply), prompts, PARAMS, progress=False,
                             mc_rollouts=4)
    for a, b in zip(plain, measured):
        assert [t.action for t in a.turns] == [t.action for t in b.turns]
        assert a.returns == b.returns and a.outcomes == b.outcomes
        for t in b.turns:
            if t.agent == "policy":
                values = mc_values.decode(t.action_values)
                assert values and all(-100 < v < 100 for v in values.values())
                assert not t.valid or t.action in values
            else:
                assert t.action_values == ""
        assert all(t.action_values == "" for t in a.turns)


def _batch(rows: list[tuple]) -> pl.DataFrame:
    """(action, valid, game reward, values) rows of one game's turns (reward: MARS's, with its
    format part: +0.05 valid, -10 invalid)."""
    return pl.DataFrame({
        "episode_id": [f"e{i}" for i in range(len(rows))], "game": ["tic_tac_toe"] * len(rows),
        "player": [0] * len(rows), "role": ["player_0"] * len(rows),
        "turn": [0] * len(rows), "action": [r[0] for r in rows], "valid": [r[1] for r in rows],
        "game_reward": [r[2] for r in rows],
        "reward": [r[2] + (0.05 if r[1] else -10.0) for r in rows],
        "action_values": [mc_values.encode(r[3]) if r[3] else "" for r in rows]})


def test_the_estimator_is_the_played_moves_value_against_its_states_mean():
    df = _batch([("<a>", True, 0.0, {"<a>": 1.0, "<b>": 0.0, "<c>": -0.4}),  # 1 - 0.2
                 ("<b>", True, 0.0, {"<a>": 1.0, "<b>": 0.0, "<c>": -0.4}),  # 0 - 0.2
                 ("", False, -1.0, {"<a>": 0.5, "<b>": 0.5}),  # invalid: its forfeit - 0.5
                 ("<a>", True, 1.0, None)])  # nothing measured: no signal
    out = compute_advantages(df, "monte_carlo")
    assert out["advantage"].to_list() == pytest.approx([0.8, -0.2, -1.5, 0.0])
    assert out.drop("advantage").equals(df)
    assert monte_carlo_reference(df) == pytest.approx(out["advantage"].to_list())
    assert not estimator("monte_carlo").needs_trajectories and estimator("monte_carlo").takes == ()
    with pytest.raises(ValueError, match=r"'action_values' in the turns frame \(set "
                                         r"rollout.mc_rollouts\)"):
        compute_advantages(df.drop("action_values"), "monte_carlo")
    assert json.loads(df["action_values"][0])[0] == {"action": "<a>", "value": 1.0}


def test_a_config_asks_for_what_the_values_need():
    with pytest.raises(ConfigError, match="set rollout.mc_rollouts"):
        load_config(None, ["algorithm.estimator=monte_carlo"])
    with pytest.raises(ConfigError, match="colonel_blotto is not one"):
        load_config(None, ["rollout.games=[colonel_blotto]", "rollout.mc_rollouts=8"])
    cfg = load_config(None, ["algorithm.estimator=monte_carlo", "rollout.mc_rollouts=16",
                             "batching.unit=turn"])
    assert cfg.rollout.mc_rollouts == 16
    cfg = load_config(None, ["algorithm.estimator=monte_carlo", "rollout.mc_rollouts=16"])
    assert cfg.batching.unit == "trajectory"  # whole trajectories are fine too
