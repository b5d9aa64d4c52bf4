"""The Tic-Tac-Toe adapter and the game loop, driven by scripted replies and bots."""
import random

import pyspiel
import pytest

from mars_core.engines.scripted import ScriptedEngine, legal_actions_in
from mars_core.games.base import parse_reply
from mars_core.games.board_games import TicTacToe
from mars_core.games.registry import make_game
from mars_core.postprocess.rewards import mars_turn_rewards
from mars_core.config import RewardsConfig
from mars_core.rollout.play import EpisodeSpec, PromptBuilder, play_episodes
from mars_core.types import SamplingParams

PARAMS = SamplingParams(max_new_tokens=32, stop=("</answer>",))


def random_reply(seed=0):
    rng = random.Random(seed)
    # The prompt ends with the "<answer>" prefill: reply with the action and the closing tag.
    return lambda prompt: f"{rng.choice(legal_actions_in(prompt))}</answer>"


def test_unknown_game_lists_valid_ones():
    with pytest.raises(ValueError, match="choose one of: tic_tac_toe"):
        make_game("chess")


def test_action_strings_round_trip_through_parser():
    g = TicTacToe()
    s = g.new_state(0)
    legal = g.legal_actions(s)
    assert len(legal) == 9 and "<X(1,1)>" in legal
    for action, aid in legal.items():
        assert parse_reply(f"<answer>{action}</answer>", set(legal)).action == action
    g.apply(s, legal["<X(1,1)>"])
    assert all(a.startswith("<O(") for a in g.legal_actions(s))
    assert "_ _ _\n_ X _\n_ _ _" in g.observation(s, 1, [(0, "<X(1,1)>")])


def test_prompt_examples_are_legal_looking():
    g = TicTacToe()
    for p in (0, 1):
        mark = "XO"[p]
        assert f"<answer><{mark}(0,2)></answer>" in g.rules(p)
        assert "Discard Card" not in g.rules(p)


def test_random_games_match_openspiel_returns(tokenizer):
    prompts = PromptBuilder(tokenizer, "answer")
    specs = [EpisodeSpec(f"e{i}", "tic_tac_toe", i, ("policy", "policy")) for i in range(12)]
    engine = ScriptedEngine(tokenizer, random_reply(1))
    episodes = play_episodes(specs, engine, prompts, PARAMS, progress=False)
    assert len(engine.calls) <= 9 and max(engine.calls) == 12  # all games batched per move
    for ep in episodes:
        assert not ep.error and all(t.valid for t in ep.turns)
        state = pyspiel.load_game("tic_tac_toe").new_initial_state()
        for t in ep.turns:
            row, col = int(t.action[3]), int(t.action[5])
            state.apply_action(row * 3 + col)
        assert state.is_terminal() and tuple(state.returns()) == ep.returns
        # the final reward lands on each player's own last turn
        last = {t.player: t for t in ep.turns}
        assert [last[p].game_reward for p in (0, 1)] == list(ep.returns)


def test_invalid_reply_ends_game_with_penalties(tokenizer):
    prompts = PromptBuilder(tokenizer, "answer")
    replies = iter(["<X(1,1)></answer>", "I will not play", "unused"])
    engine = ScriptedEngine(tokenizer, lambda _: next(replies))
    ep, = play_episodes([EpisodeSpec("e", "tic_tac_toe", 0, ("policy", "policy"))], engine,
                        prompts, PARAMS, progress=False)
    assert ep.error == "parsing_failure" and ep.error_player == 1
    assert ep.outcomes == ("other_invalid", "invalid") and ep.returns == (0.0, -1.0)
    ep = mars_turn_rewards(ep, RewardsConfig())
    assert [t.reward for t in ep.turns] == pytest.approx([0.05, -11.0])


@pytest.mark.parametrize("reply,error,detail", [
    ("<O(0,0)></answer>", "invalid_action", "not a legal action"),
    ("O(0,0)</answer>", "parsing_failure", "not an action of the form"),
    ("</answer></answer>", "parsing_failure", "expected one"),
    ("<X(0,0)></answer><answer>", "parsing_failure", "expected one"), ("", "parsing_failure", ""),
    ("\U0001F600" * 50, "parsing_failure", "truncated"),
])
def test_any_reply_shape_is_an_invalid_action_not_a_crash(tokenizer, reply, error, detail):
    prompts = PromptBuilder(tokenizer, "answer")
    engine = ScriptedEngine(tokenizer, lambda _: reply)
    ep, = play_episodes([EpisodeSpec("e", "tic_tac_toe", 0, ("policy", "policy"))], engine,
                        prompts, PARAMS, progress=False)
    assert ep.error == error and ep.error_player == 0 and len(ep.turns) == 1
    assert detail in ep.turns[0].error_detail and ep.turns[0].error == error


def test_context_overflow_is_invalid(tokenizer):
    prompts = PromptBuilder(tokenizer, "answer", max_context_tokens=100)
    engine = ScriptedEngine(tokenizer, random_reply())
    ep, = play_episodes([EpisodeSpec("e", "tic_tac_toe", 0, ("policy", "policy"))], engine,
                        prompts, PARAMS, progress=False)
    assert ep.error == "parsing_failure" and engine.calls == []
    assert ep.turns[0].error_detail.startswith("context overflow")


def test_other_players_move_ending_the_game_credits_loser(tokenizer):
    """X wins on its move: O's reward arrives on X's move and lands on O's last turn."""
    moves = iter(["<X(0,0)>", "<O(1,0)>", "<X(0,1)>", "<O(1,1)>", "<X(0,2)>"])
    engine = ScriptedEngine(tokenizer, lambda _: next(moves) + "</answer>")
    ep, = play_episodes([EpisodeSpec("e", "tic_tac_toe", 0, ("policy", "policy"))], engine,
                        PromptBuilder(tokenizer, "answer"), PARAMS, progress=False)
    assert ep.outcomes == ("win", "loss")
    assert [t.game_reward for t in ep.turns] == [0, 0, 0, -1.0, 1.0]


def test_history_kept_in_conversation(tokenizer):
    seen = []

    def reply(prompt):
        seen.append(prompt)
        return random_reply()(prompt)

    play_episodes([EpisodeSpec("e", "tic_tac_toe", 0, ("policy", "policy"))],
                  ScriptedEngine(tokenizer, reply), PromptBuilder(tokenizer, "answer"), PARAMS,
                  progress=False)
    assert seen[2].count("Current board:") == 2 and "Opponent (O) played" in seen[2]
    assert seen[2].endswith("<answer>")


def test_mcts_beats_random():
    specs = [EpisodeSpec(f"e{i}", "tic_tac_toe", i, ("bot:mcts-50", "bot:random")) for i in range(20)]
    eps = play_episodes(specs, None, None, PARAMS, progress=False)
    assert sum(e.outcomes[0] == "win" for e in eps) >= 14


def test_mcts_plays_with_the_seeds_of_a_runs_later_iterations():
    """A run's plays seed their bots with (stream seed + game) * 1000 + seat: past 2**32 from
    iteration 5 of a seed-0 run on, which numpy refused (a Tic-Tac-Toe run against bot:mcts-10
    stopped there)."""
    from mars_core.run.seeds import Stream, stream_seed

    seed = stream_seed(0, Stream.ROLLOUTS, 5)
    assert seed * 1000 >= 2**32
    play = [EpisodeSpec(f"m{s}", "tic_tac_toe", s, ("bot:mcts-10", "bot:random"))
            for s in (seed, seed + 1)]
    eps = play_episodes(play, None, None, PARAMS, progress=False)
    assert all(ep.outcomes for ep in eps)
