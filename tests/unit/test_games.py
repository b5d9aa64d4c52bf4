"""Every game through the real loop: returns equal OpenSpiel's, legal strings round-trip,
invalid replies end the game with the right penalties, rewards land on the right turns."""
import random

import pytest

from mars_core.config import RewardsConfig
from mars_core.engines.scripted import ScriptedEngine, legal_actions_in
from mars_core.games.base import (INVALID_ACTION as ILLEGAL_ACTION, PARSING_FAILURE as PARSE_ERROR,
                                  format_answer, parse_reply)
from mars_core.games.catalog import (COOPERATIVE_GAMES, GAMES, HIDDEN_INFORMATION_GAMES, MARS_GAMES,
                                     MINDGAMES, NASH_GAMES)
from mars_core.games.registry import make_game
from mars_core.postprocess.rewards import mars_turn_rewards
from mars_core.rollout.play import EpisodeSpec, PromptBuilder, play_episodes
from mars_core.types import SamplingParams

PARAMS = SamplingParams(max_new_tokens=48, stop=("</answer>",))
ALL = list(MARS_GAMES)  # the OpenSpiel games (TextArena ones: test_<game>.py)


def random_reply(seed=0, bad_after=None, bad="nonsense"):
    """Random legal actions (after the `<answer>` prefill); from call `bad_after` on, `bad`."""
    rng, calls = random.Random(seed), [0]

    def reply(prompt):
        calls[0] += 1
        if bad_after is not None and calls[0] > bad_after:
            return bad
        return f"{rng.choice(legal_actions_in(prompt))}</answer>"
    return reply


def replay(game, ep):
    """The adapter state after the episode's valid moves, from the same seed (same deals)."""
    a = make_game(game)
    state = a.new_state(ep.seed)
    for t in ep.turns:
        if t.valid:
            a.apply(state, a.legal_actions(state)[t.action])
    return a, state


@pytest.mark.parametrize("game", ALL)
def test_random_play_returns_equal_openspiel(game, tokenizer):
    n = make_game(game).num_players
    specs = [EpisodeSpec(f"e{i}", game, i, ("policy",) * n) for i in range(6)]
    specs += [EpisodeSpec(f"b{i}", game, 100 + i, ("bot:random",) * n) for i in range(6)]
    episodes = play_episodes(specs, ScriptedEngine(tokenizer, random_reply(1)),
                             PromptBuilder(tokenizer, "answer", keep_history=False), PARAMS,
                             progress=False)
    for ep in episodes:
        assert not ep.error and all(t.valid for t in ep.turns)
        a, state = replay(game, ep)
        assert state.s.is_terminal()
        fresh = a.game.new_initial_state()  # an independent pyspiel replay of the history
        for action in state.s.history():
            fresh.apply_action(action)
        assert list(ep.returns) == pytest.approx(fresh.returns())
        for p in range(n):  # every step reward was credited to one of p's turns
            credited = sum(t.game_reward for t in ep.turns if t.player == p)
            assert credited == pytest.approx(ep.returns[p])


@pytest.mark.parametrize("game", ALL)
def test_every_legal_action_string_round_trips(game):
    a, rng = make_game(game), random.Random(3)
    for seed in range(4):
        state = a.new_state(seed)
        while not a.is_terminal(state):
            p = a.current_player(state)
            legal = a.legal_actions(state)
            assert len(legal) == len(state.s.legal_actions(p))  # one string per action id
            assert legal_actions_in(a.observation(state, p, [])) == list(legal)
            for action in legal:
                assert action.startswith("<") and action.endswith(">")
                assert parse_reply(f"thinking... {format_answer(action)}\n", set(legal)).action == action
            a.apply(state, legal[rng.choice(list(legal))])


@pytest.mark.parametrize("game", ALL)
@pytest.mark.parametrize("bad,error", [("nonsense", PARSE_ERROR),
                                       ("<NOT A MOVE></answer>", ILLEGAL_ACTION),
                                       ("</answer> and more</answer>", PARSE_ERROR)])
def test_invalid_reply_ends_game_with_penalties(game, bad, error, tokenizer):
    n = make_game(game).num_players
    cfg = RewardsConfig()
    for seat in range(n):
        agents = tuple("policy" if p == seat else "bot:random" for p in range(n))
        ep = play_episodes([EpisodeSpec("e", game, 7, agents)],
                           ScriptedEngine(tokenizer, random_reply(2, bad_after=1, bad=bad)),
                           PromptBuilder(tokenizer, "answer", keep_history=False), PARAMS,
                           progress=False)[0]
        if ep.error == "":  # the game ended before the policy's second turn
            continue
        assert (ep.error, ep.error_player) == (error, seat)
        assert ep.outcomes[seat] == "invalid"
        assert all(o == "other_invalid" for p, o in enumerate(ep.outcomes) if p != seat)
        a, state = replay(game, ep)
        assert ep.returns[seat] == pytest.approx(a.forfeit_return(state, seat))
        for p in range(n):
            if p != seat:  # the others keep what they had: no win handed out
                assert ep.returns[p] == pytest.approx(state.s.returns()[p])
        rewarded = mars_turn_rewards(ep, cfg)
        last = rewarded.turns[-1]
        assert (last.player, last.valid, last.format_reward) == (seat, False, cfg.invalid_action)
        mine = [t for t in rewarded.turns if t.player == seat]
        assert sum(t.game_reward for t in mine) == pytest.approx(ep.returns[seat])
        assert all(t.valid for t in rewarded.turns[:-1])


def _scripted_episode(game, moves, tokenizer):
    """One self-play game whose k-th reply is `moves[k]`."""
    it = iter(moves)
    n = make_game(game).num_players
    return play_episodes([EpisodeSpec("e", game, 0, ("policy",) * n)],
                         ScriptedEngine(tokenizer, lambda prompt: f"{next(it)}</answer>"),
                         PromptBuilder(tokenizer, "answer", keep_history=False), PARAMS,
                         progress=False)[0]


def test_reward_credit_when_the_other_players_move_ends_the_game(tokenizer):
    ep = _scripted_episode("kuhn_poker", ["<BET>", "<PASS>"], tokenizer)  # p1 folds to a bet
    assert [t.game_reward for t in ep.turns] == [1.0, -1.0]
    # Tic-Tac-Toe: X completes the top row on its move; O's last turn gets the loss.
    ep = _scripted_episode("tic_tac_toe", ["<X(0,0)>", "<O(1,0)>", "<X(0,1)>", "<O(1,1)>",
                                           "<X(0,2)>"], tokenizer)
    assert ep.returns == (1.0, -1.0) and ep.outcomes == ("win", "loss")
    assert [t.game_reward for t in ep.turns] == [0.0, 0.0, 0.0, -1.0, 1.0]


def test_draw_bonus_only_in_board_games():
    assert make_game("tic_tac_toe").draw_bonus and make_game("connect_four").draw_bonus
    assert not any(make_game(g).draw_bonus for g in ("kuhn_poker", "leduc_poker", "mini_hanabi"))


@pytest.mark.parametrize("game,expected", [
    ("mini_hanabi", dict(players=2, colors=2, ranks=2, hand_size=3, max_information_tokens=3,
                         max_life_tokens=3)),
    ("simple_hanabi", dict(players=2, colors=3, ranks=2, hand_size=5, max_information_tokens=8,
                           max_life_tokens=3)),
    ("connect_four", dict(rows=6, columns=7)),
    ("kuhn_poker", dict(players=2)),
])
def test_pyspiel_parameters_follow_the_spec(game, expected):
    params = make_game(game).game.get_parameters()
    assert {k: params.get(k) for k in expected} == expected


@pytest.mark.parametrize("game", list(GAMES))
def test_the_catalog_knows_each_game_as_its_adapter_does(game):
    """Config validation reads the catalog (no game engine loaded); the adapters are the truth."""
    adapter = make_game(game)
    assert adapter.name == game
    assert (game in COOPERATIVE_GAMES) == adapter.cooperative
    assert (game not in HIDDEN_INFORMATION_GAMES) == adapter.perfect_information
    assert (game in NASH_GAMES) == (game in ("kuhn_poker", "leduc_poker"))
    assert set(GAMES) == set(MARS_GAMES) | set(MINDGAMES)


def test_config_validation_loads_no_game_engine():
    import subprocess
    import sys

    code = ("import sys; from mars_core.config import load_config; "
            "load_config(None, ['rollout.games=[kuhn_poker,mini_hanabi]', "
            "'rollout.episodes_per_iteration=2', 'evaluation.opponents.kuhn_poker=bot:nash']); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pyspiel', 'open_spiel', 'textarena', 'torch', 'transformers', 'prefect', 'mlflow') "
            "or m.startswith(('mars_core.games.registry', 'mars_core.games.bots', "
            "'mars_core.strength.suite', 'mars_core.rollout.samplers', 'mars_core.rollout.play'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_play_stops_between_rounds_when_asked(tokenizer):
    """`stop()` (the training flow failing while games are played ahead) ends play at its next
    round of engine calls; asked after the first round here."""
    from mars_core.rollout.play import PlayStopped

    rounds = []
    specs = [EpisodeSpec(f"e{i}", "tic_tac_toe", i, ("policy", "policy")) for i in range(3)]
    with pytest.raises(PlayStopped, match="3 of 3 games unfinished"):
        play_episodes(specs, ScriptedEngine(tokenizer, random_reply(1)),
                      PromptBuilder(tokenizer, "answer", keep_history=False), PARAMS,
                      progress=False, stop=lambda: rounds.append(1) or len(rounds) > 1)
    assert len(rounds) == 2
