"""Strength against fixed opponents: the policy in every seat against a bot, with 95% CIs."""
from __future__ import annotations

import math
from collections import Counter

from mars_core.rollout import EpisodeSpec, PromptBuilder, RolloutStats, play_episodes
from mars_core.types import Episode, SamplingParams


def mean_ci95(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its normal-approximation 95% confidence interval."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, 1.96 * math.sqrt(var / n)


def seat_summary(episodes: list[Episode], seat: int) -> dict[str, float]:
    """win/draw/loss/invalid rates (each with a CI) and mean return of `seat`."""
    n = len(episodes)
    counts = Counter(ep.outcomes[seat] for ep in episodes)
    out: dict[str, float] = {"n": float(n)}
    for name, keys in (("win", ("win",)), ("draw", ("draw",)),
                       ("loss", ("loss",)), ("invalid", ("invalid",))):
        hits = [1.0 if ep.outcomes[seat] in keys else 0.0 for ep in episodes]
        out[f"{name}_rate"], out[f"{name}_rate_ci95"] = mean_ci95(hits)
    out["mean_return"], out["mean_return_ci95"] = mean_ci95([ep.returns[seat] for ep in episodes])
    out["other_invalid_rate"] = counts.get("other_invalid", 0) / n if n else 0.0
    return out


def eval_specs(game: str, num_players: int, opponent: str, games_per_seat: int,
               seed: int) -> list[EpisodeSpec]:
    """The policy in each seat in turn, every other seat taken by `opponent`."""
    specs = []
    for seat in range(num_players):
        agents = tuple("policy" if p == seat else opponent for p in range(num_players))
        for i in range(games_per_seat):
            specs.append(EpisodeSpec(f"eval-{game}-s{seat}-{i}", game, seed + 7919 * seat + i, agents))
    return specs


def evaluate_vs_bot(engine, prompts: PromptBuilder, game: str, num_players: int, opponent: str,
                    games_per_seat: int, sampling: SamplingParams, seed: int,
                    progress: bool = True) -> tuple[list[dict], list[Episode], RolloutStats]:
    """Play `games_per_seat` games per seat; one record per seat (seat 0 moves first)."""
    specs = eval_specs(game, num_players, opponent, games_per_seat, seed)
    stats = RolloutStats()
    episodes = play_episodes(specs, engine, prompts, sampling, progress=progress, stats=stats)
    records = []
    for seat in range(num_players):
        mine = [ep for ep in episodes if ep.agents[seat] == "policy"]
        records.append({"game": game, "opponent": opponent, "seat": seat, **seat_summary(mine, seat)})
    return records, episodes, stats
