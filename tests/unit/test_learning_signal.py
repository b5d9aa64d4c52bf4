"""What reaches the update, and that it moves the policy the right way: the penalties of
replies that have no tokens to train on, the sampling settings each reply was drawn with, the
direction of an update on a move that always wins, and the tokens the loss counts."""
from __future__ import annotations

import random

import polars as pl
import pytest
import torch

from mars_core.batching.bank import trainable_turns
from mars_core.config import AlgorithmConfig, OptimConfig, RewardsConfig
from mars_core.engines.hf import HFEngine
from mars_core.engines.scripted import ScriptedEngine, legal_actions_in
from mars_core.advantages.estimators import compute_advantages
from mars_core.models.weights import load_model
from mars_core.postprocess.rewards import mars_turn_rewards
from mars_core.rollout.play import EpisodeSpec, PromptBuilder, play_episodes
from mars_core.training.trainer import (Forward, Sample, TorchUpdater, make_optimizer, ppo_update,
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
    steps, counts = trainable_turns(turns_frame([ep]))
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
    steps, counts = trainable_turns(frame)
    assert steps.is_empty() and counts == {"carried": 0, "lost": 1}


def test_bots_and_gated_steps_stay_out(tokenizer):
    ep = overflowing_game(tokenizer)
    frame = turns_frame([ep]).with_columns(
        pl.when(pl.col("player") == 1).then(pl.lit("bot:random")).otherwise(pl.col("agent"))
        .alias("agent"),
        (pl.col("turn") != 2).alias("eligible"))
    steps, counts = trainable_turns(frame)
    # seat 1 is a bot, seat 0's overflow is gated: only turn 0 remains, with its own reward
    assert steps["turn"].to_list() == [0] and steps["reward"].to_list() == [pytest.approx(0.05)]
    assert counts == {"carried": 0, "lost": 0}


# ---------------------------------------------------------------------------------------------
# Per-game sampling settings reach the update


def test_update_takes_logprobs_at_each_games_own_temperature(tiny_model_dir, tokenizer):
    """Kuhn is sampled at 1.5 (its `per_game` setting, truncated), Tic-Tac-Toe at the run's
    0.6 (untruncated): each sample's recomputed log-probs are taken at its own temperature, so
    they equal what the sampler recorded where nothing was truncated, and under truncation the
    recorded (renormalised) log-prob is the larger: the importance weight pi_old / pi_behaviour
    is below 1 there, never above."""
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
        recorded = torch.tensor(t.logprobs, dtype=got.dtype)
        if t.game == "tic_tac_toe":
            assert torch.allclose(got, recorded, atol=1e-4), t.game
        else:
            assert bool((got <= recorded + 1e-4).all()), t.game


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
    steps, _ = trainable_turns(turns_frame(episodes))
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


def kuhn_card_samples(tokenizer):
    """Seat 0's opening moves on deals where it holds J and deals where it holds K, against a
    seat 1 that calls every bet and checks after a pass: betting wins 2 with K and loses 2 with
    J, passing wins or loses 1. So the best play bets only with K."""
    def player(first_move: str):
        def reply(prompt: str) -> str:
            betting = prompt.rsplit("Betting: ", 1)[-1].split("\n", 1)[0]
            if betting == "none yet":
                return f"{first_move}</answer>"
            return "<BET></answer>" if betting == "opponent <BET>" else "<PASS></answer>"
        return ScriptedEngine(tokenizer, reply)

    prompts = PromptBuilder(tokenizer, "answer", keep_history=False)
    probe = play_episodes([EpisodeSpec(f"p{s}", "kuhn_poker", s, ("policy", "policy"))
                           for s in range(24)], player("<PASS>"), prompts, PARAMS, progress=False)
    card = {int(ep.episode_id[1:]): ep.turns[0].observation.split("Your private card: ")[1][0]
            for ep in probe}
    seeds = [s for c in "JK" for s in [s for s in sorted(card) if card[s] == c][:2]]
    episodes = [mars_turn_rewards(ep, RewardsConfig()) for move in ("<BET>", "<PASS>")
                for ep in play_episodes([EpisodeSpec(f"{s}-{move}", "kuhn_poker", s,
                                                     ("policy", "policy")) for s in seeds],
                                        player(move), prompts, PARAMS, progress=False)]
    steps, _ = trainable_turns(turns_frame(episodes))
    opening = compute_advantages(steps, "mars").filter(
        (pl.col("player") == 0) & (pl.col("turn") == 0))
    return [(card[int(r["episode_id"].split("-")[0])],
             Sample(tuple(r["prompt_ids"]), tuple(r["completion_ids"]), r["advantage"],
                    r["game"], 0.6)) for r in opening.iter_rows(named=True)]


def test_updates_make_the_bet_depend_on_the_card(tokenizer):
    """A few updates move P(bet | J) down and P(bet | K) up (each against the pass with the
    same card): the policy learns to play its card, not to always bet. (The card is one token
    deep in a 300-token prompt: the session's 32-wide tiny model cannot tell; a 64-wide one
    separates the cards within 10 steps.)"""
    from transformers import LlamaConfig, LlamaForCausalLM

    cards, samples = zip(*kuhn_card_samples(tokenizer))
    samples = list(samples)
    assert sorted(set(cards)) == ["J", "K"] and len(samples) == 8
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        tie_word_embeddings=True))
    moves = ["BET" in tokenizer.decode(s.completion_ids) for s in samples]

    def bet_margin():  # mean log P(bet) - mean log P(pass) per card, from the move tokens
        logps = action_logps(model, samples)
        return {c: float(torch.stack([logps[i] for i in range(8) if cards[i] == c and moves[i]]).mean()
                         - torch.stack([logps[i] for i in range(8) if cards[i] == c and not moves[i]]).mean())
                for c in "JK"}

    before = bet_margin()
    optim = OptimConfig(lr=1e-2, warmup_steps=0, weight_decay=0.0)
    opt, sched = make_optimizer(model, optim, total_steps=100)
    for step in range(12):
        ppo_update(model, None, TorchUpdater(model, opt, sched, 1.0), samples,
                   AlgorithmConfig(kl_coef=0.0), optim, pad_id=0, seed=step, progress=False)
    after = bet_margin()
    assert after["J"] < before["J"] - 0.2 and after["K"] > before["K"] + 0.2
