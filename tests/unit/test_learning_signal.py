"""What reaches the update: the penalties of replies that have no tokens to train on, and the
sampling settings each reply was drawn with."""
from __future__ import annotations

import random

import polars as pl
import pytest
import torch

from mars_core.batching import trainable_steps
from mars_core.config import RewardsConfig
from mars_core.engines.scripted import ScriptedEngine, legal_actions_in
from mars_core.rewards import assign_rewards
from mars_core.rollout import EpisodeSpec, PromptBuilder, play_episodes
from mars_core.types import SamplingParams, turns_frame

PARAMS = SamplingParams(max_new_tokens=16, stop=("</answer>",))


def legal_replies(seed: int = 0):
    rng = random.Random(seed)
    return lambda prompt: f"{rng.choice(legal_actions_in(prompt))}</answer>"


def overflowing_game(tokenizer):
    """Tic-Tac-Toe with the conversation kept and a context that holds each seat's first
    prompt but not seat 0's second one: X moves, O moves, then X's prompt overflows."""
    spec = EpisodeSpec("e", "tic_tac_toe", 0, ("policy", "policy"))
    roomy = PromptBuilder(tokenizer, "answer", keep_history=True, max_context_tokens=4096)
    first, = play_episodes([spec], ScriptedEngine(tokenizer, legal_replies()), roomy, PARAMS,
                           progress=False)
    fits = max(len(t.prompt_ids) for t in first.turns[:2]) + PARAMS.max_new_tokens
    assert len(first.turns[2].prompt_ids) + PARAMS.max_new_tokens > fits
    tight = PromptBuilder(tokenizer, "answer", keep_history=True, max_context_tokens=fits)
    ep, = play_episodes([spec], ScriptedEngine(tokenizer, legal_replies()), tight, PARAMS,
                        progress=False)
    return assign_rewards(ep, RewardsConfig())


def test_context_overflow_penalty_reaches_the_seats_last_trainable_turn(tokenizer):
    ep = overflowing_game(tokenizer)
    assert [t.valid for t in ep.turns] == [True, True, False]
    overflow = ep.turns[2]
    assert overflow.error_detail.startswith("context overflow") and overflow.completion_ids == ()
    assert overflow.reward == pytest.approx(-10.0 - 1.0)  # the invalid reply and the forfeit
    steps, counts = trainable_steps(turns_frame([ep]))
    assert counts == {"carried": 1, "lost": 0}
    assert steps["turn"].to_list() == [0, 1]  # the tokenless turn itself is not a sample
    x, o = steps.row(0, named=True), steps.row(1, named=True)
    assert x["reward"] == pytest.approx(0.05 - 11.0)
    assert (x["game_reward"], x["format_reward"]) == pytest.approx((-1.0, 0.05 - 10.0))
    assert o["reward"] == pytest.approx(0.05)  # the other seat keeps what it had
    # each seat's return is what it was with the tokenless turn counted
    assert steps.filter(pl.col("player") == 0)["reward"].sum() == pytest.approx(
        sum(t.reward for t in ep.turns if t.player == 0))


def test_an_overflow_on_a_seats_first_turn_has_nowhere_to_go(tokenizer):
    ep = overflowing_game(tokenizer)
    frame = turns_frame([ep]).filter(pl.col("player") == 0).filter(pl.col("turn") == 2)
    steps, counts = trainable_steps(frame)
    assert steps.is_empty() and counts == {"carried": 0, "lost": 1}


def test_bots_and_gated_steps_stay_out(tokenizer):
    ep = overflowing_game(tokenizer)
    frame = turns_frame([ep]).with_columns(
        pl.when(pl.col("player") == 1).then(pl.lit("bot:random")).otherwise(pl.col("agent"))
        .alias("agent"),
        (pl.col("turn") != 2).alias("eligible"))
    steps, counts = trainable_steps(frame)
    # seat 1 is a bot, seat 0's overflow is gated: only turn 0 remains, with its own reward
    assert steps["turn"].to_list() == [0] and steps["reward"].to_list() == [pytest.approx(0.05)]
    assert counts == {"carried": 0, "lost": 0}


# ---------------------------------------------------------------------------------------------
# Per-game sampling settings reach the update


def test_update_takes_logprobs_at_each_games_own_temperature(tiny_model_dir, tokenizer):
    """Kuhn is sampled at 1.5 (its `per_game` setting), Tic-Tac-Toe at the run's 0.6: each
    sample's recomputed log-probs equal what the sampler recorded, so the first PPO ratio is 1
    and the KL is taken against the distribution the reply was drawn from."""
    from mars_core.engines.hf import HFEngine
    from mars_core.trainer import Forward, Sample, sequence_logprobs

    engine = HFEngine.from_path(tiny_model_dir)
    specs = [EpisodeSpec(f"{g}-{i}", g, i, ("policy", "policy"))
             for g in ("tic_tac_toe", "kuhn_poker") for i in range(3)]
    base = SamplingParams(temperature=0.6, top_p=1.0, top_k=0, max_new_tokens=6, seed=1)
    kuhn = SamplingParams(temperature=1.5, top_p=0.9, top_k=20, max_new_tokens=6, seed=1)
    episodes = play_episodes(specs, engine, PromptBuilder(tokenizer, "answer"), base,
                             per_game={"kuhn_poker": kuhn}, progress=False)
    turns = [t for ep in episodes for t in ep.turns]
    assert {(t.game, t.temperature, t.top_p, t.top_k) for t in turns} == {
        ("tic_tac_toe", 0.6, 1.0, 0), ("kuhn_poker", 1.5, 0.9, 20)}
    samples = [Sample(t.prompt_ids, t.completion_ids, 0.0, t.game, t.temperature) for t in turns]
    with torch.no_grad():
        logp, mask = sequence_logprobs(engine.model, samples, Forward(tokenizer.pad_token_id))
    for row, t in enumerate(turns):
        got = logp[row][mask[row].bool()]
        assert torch.allclose(got, torch.tensor(t.logprobs, dtype=got.dtype), atol=1e-4), t.game
