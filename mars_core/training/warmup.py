"""The format warm-up's data and its probe (SPEC: a few supervised steps that teach the answer
format, not the strategy, before RL).

`warmup_examples` makes the supervised examples: positions from self-play games of a bot (the
random bot for the format warm-up; a stronger one, e.g. MCTS or Nash, for a warm start from
demonstrations), with the prompts the policy would see, each answered by the bot's action
(`<answer>{action}</answer>` minus the prefill, then end of turn). `invalid_rate` measures how
often a policy's replies are invalid over a few self-play games, before and after.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from mars_core.rollout.reports import rollout_metrics
from mars_core.rollout.play import PromptBuilder, play_episodes
from mars_core.rollout.samplers import plan_episodes
from mars_core.types import SamplingParams

WARMUP_ITERATION = -2  # the plan's iteration for warm-up games (-1: the probes)
PROBE_ITERATION = -1
EXAMPLES_PER_GAME = 4  # games played: one per this many examples asked for (at least one)


def warmup_examples(games: Sequence[str], prompts: PromptBuilder, sampling: SamplingParams,
                    tokenizer, n: int, seed: int, demonstrator: str = "bot:random",
                    ) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, target ids) of every position of `ceil(n / 4)` self-play games of the bot
    `demonstrator` (at least one): about n examples, more or fewer by the games' lengths."""
    specs = plan_episodes(games, max(1, math.ceil(n / EXAMPLES_PER_GAME)), WARMUP_ITERATION,
                          seed, agent=demonstrator)
    episodes = play_episodes(specs, None, prompts, sampling, record_bot_prompts=True,
                             progress=False)
    examples = []
    for t in (t for ep in episodes for t in ep.turns):
        target = t.reply[len(prompts.prefill):] if t.reply.startswith(prompts.prefill) else t.reply
        ids = tokenizer.encode(target, add_special_tokens=False) + [tokenizer.eos_token_id]
        examples.append((list(t.prompt_ids), ids))
    return examples


def invalid_rate(games: Sequence[str], engine, prompts: PromptBuilder, sampling: SamplingParams,
                 n_games: int, seed: int,
                 per_game: dict[str, SamplingParams] | None = None) -> float:
    """Invalid-action rate of the policy `engine` serves over `n_games` self-play games
    (1.0 = never valid, and when the policy played no turn)."""
    specs = plan_episodes(games, n_games, PROBE_ITERATION, seed)
    eps = play_episodes(specs, engine, prompts, sampling, progress=False, per_game=per_game)
    return rollout_metrics(eps).get("invalid_action_rate", 1.0)


def sft_steps(model, examples: list[tuple[list[int], list[int]]], *, steps: int, batch_size: int,
              lr: float, pad_id: int, seed: int, bf16: bool = False, share_prefix: bool = True,
              progress: bool = True, micro_batch_size: int | None = None) -> list[float]:
    """Supervised steps on (prompt ids, target ids): cross-entropy on the target tokens only
    (each example's mean over its target tokens, averaged over the batch). Used for the format
    warm-up. A step's batch goes through the model `micro_batch_size` examples at a time
    (gradient accumulation: the same step, its peak memory that of one micro-batch; all at
    once when None). Returns the loss of each step."""
    import random

    import torch
    from tqdm.auto import tqdm

    from mars_core.run.memory import trim_malloc
    from mars_core.training.trainer import Forward, Sample, _chunks, sequence_logprobs

    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    fwd = Forward(pad_id, bf16, share_prefix)
    model.train()
    losses = []
    for _ in tqdm(range(steps), desc="warm-up", unit="step", disable=not progress, leave=False):
        batch = [Sample(tuple(p), tuple(t), 0.0) for p, t in rng.sample(examples, min(batch_size, len(examples)))]
        batch.sort(key=lambda s: s.prompt_ids)  # neighbours share prompt prefixes (share_prefix)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for chunk in _chunks(batch, micro_batch_size or len(batch)):
            logp, mask = sequence_logprobs(model, chunk, fwd)
            loss = -((logp * mask).sum(-1) / mask.sum(-1)).sum() / len(batch)
            loss.backward()
            trim_malloc()  # what the pass freed, back to the system before the next one
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        trim_malloc()
        losses.append(total)
    model.eval()
    return losses
