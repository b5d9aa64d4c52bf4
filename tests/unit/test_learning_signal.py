"""What reaches the update, and that it moves the policy the right way: the penalties of
replies that have no tokens to train on, the sampling settings each reply was drawn with, the
direction of an update on a move that always wins, and the tokens the loss counts."""
from __future__ import annotations

import random

import polars as pl
import pytest
import torch

from mars_core.bank import trainable_steps
from mars_core.config import AlgorithmConfig, OptimConfig, RewardsConfig
from mars_core.engines.hf import HFEngine
from mars_core.engines.scripted import ScriptedEngine, legal_actions_in
from mars_core.estimators import compute_advantages
from mars_core.models import load_model
from mars_core.rewards import mars_turn_rewards
from mars_core.rollout import EpisodeSpec, PromptBuilder, play_episodes
from mars_core.trainer import (Forward, Sample, TorchUpdater, make_optimizer, ppo_update,
                               sequence_logprobs)
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
    return mars_turn_rewards(ep, RewardsConfig())


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


# ---------------------------------------------------------------------------------------------
# The whole signal path moves the policy the right way: play, rewards, advantages, update


def scripted_kuhn(tokenizer, first_move: str, n: int):
    """Kuhn Poker deal 0, seat 0 holds the King. Seat 1 folds to a bet and bets after a pass,
    which seat 0 then folds: `<BET>` always wins a chip, `<PASS>` always loses one."""
    def reply(prompt: str) -> str:
        betting = prompt.rsplit("Betting: ", 1)[-1].split("\n", 1)[0]
        if betting == "none yet":
            return f"{first_move}</answer>"
        if betting == "opponent <PASS>":
            return "<BET></answer>"
        return "<PASS></answer>"  # facing a bet: fold

    specs = [EpisodeSpec(f"{first_move}{i}", "kuhn_poker", 0, ("policy", "policy"))
             for i in range(n)]
    return play_episodes(specs, ScriptedEngine(tokenizer, reply),
                         PromptBuilder(tokenizer, "answer", keep_history=False), PARAMS,
                         progress=False)


def kuhn_samples(tokenizer, sign: float = 1.0):
    """Seat 0's opening moves with their MARS advantages (the real reward and estimator
    path), times `sign`."""
    episodes = [mars_turn_rewards(ep, RewardsConfig()) for move in ("<BET>", "<PASS>")
                for ep in scripted_kuhn(tokenizer, move, 3)]
    assert {ep.returns[0] for ep in episodes} == {1.0, -1.0}
    steps, _ = trainable_steps(turns_frame(episodes))
    opening = compute_advantages(steps, "mars").filter(
        (pl.col("player") == 0) & (pl.col("turn") == 0))
    return [Sample(tuple(r["prompt_ids"]), tuple(r["completion_ids"]), sign * r["advantage"],
                   r["game"], 0.6) for r in opening.iter_rows(named=True)]


def action_logps(model, samples):
    """Each sample's log-prob of its move: the reply tokens the two moves do not share
    (`<BET></answer>` and `<PASS></answer>` share `<` and `></answer>`)."""
    replies = {s.completion_ids for s in samples}
    assert len(replies) == 2
    a, b = replies
    head = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    tail = next(i for i, (x, y) in enumerate(zip(a[::-1], b[::-1])) if x != y)
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, samples, Forward(0))
    width = logp.shape[1]
    out = []
    for row, s in enumerate(samples):
        start = width - len(s.completion_ids)
        out.append(logp[row, start + head:width - tail].sum())
    return torch.stack(out)


def update(model, samples, steps: int = 3):
    optim = OptimConfig(lr=3e-3, warmup_steps=0, weight_decay=0.0)
    opt, sched = make_optimizer(model, optim, total_steps=steps)
    for step in range(steps):
        ppo_update(model, None, TorchUpdater(model, opt, sched, 1.0), samples,
                   AlgorithmConfig(kl_coef=0.0), optim, pad_id=0, seed=step, progress=False)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_updates_move_the_winning_move_up_and_the_losing_one_down(tiny_model_dir, tokenizer,
                                                                  sign):
    """With the advantages as the estimator gives them, a few updates make the winning bet
    more likely and the losing pass less likely; negated, the other way round."""
    samples = kuhn_samples(tokenizer, sign)
    bets = [i for i, s in enumerate(samples) if s.advantage * sign > 0]
    passes = [i for i, s in enumerate(samples) if s.advantage * sign < 0]
    assert len(bets) == len(passes) == 3
    model = load_model(tiny_model_dir)
    before = action_logps(model, samples)
    update(model, samples)
    after = action_logps(model, samples)
    moved = after - before
    assert (sign * moved[bets] > 0.05).all() and (sign * moved[passes] < -0.05).all()


def test_the_loss_counts_completion_tokens_only(tiny_model_dir, tokenizer):
    """The update's gradient is exactly that of -mean_s A_s mean_t log p(completion token t),
    each token scored by one plain forward of its whole sequence: no prompt position enters
    the loss, with or without shared prefixes, however long the prompt."""
    samples = kuhn_samples(tokenizer)
    grads = {}
    for share in (True, False):
        model = load_model(tiny_model_dir)
        optim = OptimConfig(lr=1.0, warmup_steps=0, weight_decay=0.0, grad_clip=1e9,
                            micro_batch_size=4)
        opt, sched = make_optimizer(model, optim, total_steps=1)
        opt.register_step_pre_hook(lambda *_: grads.__setitem__(share, {
            n: p.grad.clone() for n, p in model.named_parameters()}))
        ppo_update(model, None, TorchUpdater(model, opt, sched, optim.grad_clip), samples,
                   AlgorithmConfig(kl_coef=0.0), optim, pad_id=0, seed=0, share_prefix=share,
                   progress=False)
    model = load_model(tiny_model_dir)
    loss = 0.0
    for s in samples:
        ids = torch.tensor([list(s.prompt_ids) + list(s.completion_ids)])
        logits = model(input_ids=ids).logits[0, :-1] / s.temperature
        logp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]
        loss = loss - s.advantage * logp[-len(s.completion_ids):].mean() / len(samples)
    loss.backward()
    for name, p in model.named_parameters():
        for share in (True, False):
            assert torch.allclose(grads[share][name], p.grad, atol=1e-5, rtol=1e-3), (name, share)
