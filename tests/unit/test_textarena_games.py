"""What the TextArena plumbing promises every MindGames game: only the extracted action reaches
the game, one fresh env per episode, no leak into Python's global random state, per-game
sampling, and a typed error (never a crash) for any bad reply."""
from __future__ import annotations

import random

import pytest

from mars_core.engines.scripted import ScriptedEngine
from mars_core.games.catalog import MINDGAMES
from mars_core.games.registry import make_game
from mars_core.rollout.play import EpisodeSpec, PromptBuilder, play_episodes
from mars_core.types import Completion, SamplingParams

PARAMS = SamplingParams(max_new_tokens=64)


def test_only_the_action_reaches_the_game(tokenizer):
    """The reasoning (with a decoy allocation) never reaches the env: TextArena's parser would
    take the first bracketed match."""
    reply = "SECRET plan: [A20 B0 C0] looks bad, so <answer>[A7 B7 C6]</answer>"
    engine = ScriptedEngine(tokenizer, lambda _: reply.removeprefix("<answer>"))
    prompts = PromptBuilder(tokenizer, "none", keep_history=False)
    ep, = play_episodes([EpisodeSpec("e", "colonel_blotto", 3, ("policy", "bot:random"))],
                        engine, prompts, PARAMS, progress=False)
    mine = [t for t in ep.turns if t.player == 0]
    assert all(t.valid and t.action == "[A7 B7 C6]" for t in mine)
    assert '"A": 7' in mine[0].info and "SECRET" not in "".join(t.observation for t in ep.turns)


def test_ipd_chat_carries_the_answer_not_the_reasoning(tokenizer):
    def reply(prompt: str) -> str:
        if "decision" in prompt.split("Round")[-1]:
            me = int(prompt.split("You are Player ")[1][0])
            a, b = (q for q in range(3) if q != me)
            return f"SECRET <answer>[{a} cooperate] [{b} cooperate]</answer>"
        return "SECRET thoughts <answer>hello all</answer>"

    prompts = PromptBuilder(tokenizer, "none", keep_history=True, max_context_tokens=8192)
    ep, = play_episodes([EpisodeSpec("e", "three_player_ipd", 0, ("policy",) * 3)],
                        ScriptedEngine(tokenizer, reply), prompts, PARAMS, progress=False)
    assert not ep.error and len(ep.turns) == 30
    assert "[Player 0] hello all" in ep.turns[1].observation
    assert all("SECRET" not in t.observation for t in ep.turns)


@pytest.mark.parametrize("game", MINDGAMES)
def test_fresh_env_and_private_random(game):
    adapter = make_game(game)
    before = random.getstate()
    a, b = adapter.new_state(5), adapter.new_state(5)
    assert a.env is not b.env and a.env.state is not b.env.state
    rng = random.Random(0)
    while not adapter.is_terminal(a):  # play one episode; the other stays at its start
        adapter.play(a, adapter.random_action(a, rng))
    assert random.getstate() == before
    assert adapter.current_player(b) == adapter.current_player(adapter.new_state(5))


@pytest.mark.parametrize("game", MINDGAMES)
def test_interleaving_does_not_change_episodes(game):
    n = make_game(game).num_players
    specs = [EpisodeSpec(f"e{i}", game, 100 + i, ("bot:random",) * n) for i in range(3)]
    together = play_episodes(specs, None, None, PARAMS, progress=False)
    alone = [play_episodes([s], None, None, PARAMS, progress=False)[0] for s in specs]
    for x, y in zip(together, alone):
        assert [t.action for t in x.turns] == [t.action for t in y.turns]
        assert x.returns == y.returns and x.info == y.info


class _Recorder:
    """A scripted engine that records the sampling parameters of every call."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.params = tokenizer, []

    def generate(self, prompts, params):
        self.params.append(params)
        return [Completion((1,), (0.0,), "nonsense</answer>", "stop") for _ in prompts]


def test_per_game_sampling_goes_to_separate_engine_calls(tokenizer):
    engine = _Recorder(tokenizer)
    blotto = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=32)
    specs = [EpisodeSpec("a", "colonel_blotto", 0, ("policy", "policy")),
             EpisodeSpec("b", "tic_tac_toe", 0, ("policy", "policy"))]
    eps = play_episodes(specs, engine, PromptBuilder(tokenizer, "answer", keep_history=False),
                        PARAMS, per_game={"colonel_blotto": blotto}, progress=False)
    assert {(p.temperature, p.top_k) for p in engine.params} == {(1.0, 0), (0.6, 100)}
    assert all(ep.error == "parsing_failure" for ep in eps)
    assert eps[0].turns[0].error_detail.startswith("'nonsense' is not an allocation")


def test_blotto_mix_plays_focus_and_spread_allocations_and_spread_beats_random():
    """`bot:blotto-mix`: every allocation valid, both kinds in about equal shares; a spread
    allocation wins a round against bot:random's more often than it loses one, a focus one
    does not (what RL after a warm start on it can choose between)."""
    from mars_core.games.blotto import SPREAD, parse_allocation
    from mars_core.games.bots import make_bot

    adapter = make_game("colonel_blotto")
    state = adapter.new_state(0)
    bot, rng = make_bot("bot:blotto-mix", adapter, 3), random.Random(0)
    plays = [bot.act(adapter, state) for _ in range(400)]
    units = [[int(u) for u in p[1:-1].replace("A", "").replace("B", "").replace("C", "").split()]
             for p in plays]
    assert all(parse_allocation(p).action == p for p in plays)
    spread = sum(min(u) >= 5 for u in units)
    assert 150 < spread < 250 and all(min(u) == 0 or min(u) >= 5 for u in units)

    def edge(mine):  # mean round result against bot:random's allocations
        out = 0
        for _ in range(2000):
            theirs = [int(u) for u in adapter.random_action(state, rng)[1:-1].replace("A", "")
                      .replace("B", "").replace("C", "").split()]
            won = sum(a > b for a, b in zip(mine, theirs)) - sum(a < b for a, b in zip(mine, theirs))
            out += (won > 0) - (won < 0)
        return out / 2000

    assert min(edge(s) for s in SPREAD[:3]) > 0.15 and abs(edge((10, 10, 0))) < 0.12
