"""What reaches the update: the penalties of replies that have no tokens to train on."""
from __future__ import annotations

import random

import polars as pl
import pytest

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
