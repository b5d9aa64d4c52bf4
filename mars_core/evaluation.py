"""Strength against fixed opponents (the MARS strategic-ability protocol): a policy against fixed opponents, every game x opponent x
seat, all games played concurrently through one rollout call so model turns are batched.

One record per (game, opponent, seat):
`game, policy, opponent, seat, n, mean_return, ci95, win_rate, draw_rate, loss_rate,
invalid_rate, normalized_return` (plus `normalized_ci95`).

`normalized_return` (0 to 100) is the mean game return rescaled linearly from the worst to the
best total return a seat can get in that game (OpenSpiel's min/max utility):
`100 * (mean_return - lo) / (hi - lo)`. Board games (lo -1, hi +1): 0 = always loses, 50 =
even (all draws, or as many wins as losses), 100 = always wins. Poker: Kuhn lo -2, hi +2, Leduc
lo -13, hi +13, so 50 is break-even in chips (Kuhn's Nash value -1/18 for the first seat is
48.6). Hanabi: lo 0, hi = the maximum score, so it is the percentage of a perfect score. A game
lost on an invalid reply counts with its forfeit return (board -1, poker minus the chips put
in, Hanabi 0). Returns are the game's own (no format bonus, no draw bonus, no x2 scaling).

An opponent `self` means the policy takes every seat: one set of n games, reported per seat.
In a cooperative game (Hanabi) a seat's return is the team's score, which is 0 when a rule
error ended the game (the rollout keeps the partner's points for its training reward).
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from mars_core.games.bots import SELF, check_bot_spec, check_opponent, is_bot
from mars_core.games.registry import GAMES, check_game, make_game
from mars_core.rollout import EpisodeSpec, PromptBuilder, RolloutStats, play_episodes
from mars_core.types import Episode, SamplingParams

# The MARS paper's suite (SPEC section 6): the opponents per game.
MARS_OPPONENTS: dict[str, tuple[str, ...]] = {
    "tic_tac_toe": ("bot:mcts-100", "bot:mcts-1000"),
    "kuhn_poker": ("bot:nash",),
    "mini_hanabi": (SELF,),
    "connect_four": ("bot:mcts-10", "bot:mcts-100"),
    "leduc_poker": ("bot:nash",),
    "simple_hanabi": (SELF,),
}
# The MindGames games' fixed opponents (ours: the arena's reference agents are not public).
MINDGAMES_OPPONENTS: dict[str, tuple[str, ...]] = {
    "colonel_blotto": ("bot:random", "bot:blotto-focus"),
    "three_player_ipd": ("bot:tit-for-tat", "bot:always-defect"),
    "codenames": ("bot:random",),
    "secret_mafia": ("bot:random",),
}
DEFAULT_OPPONENTS = MARS_OPPONENTS | MINDGAMES_OPPONENTS
RECORD_KEYS = ("game", "policy", "opponent", "seat", "n", "mean_return", "ci95", "win_rate",
               "draw_rate", "loss_rate", "invalid_rate", "normalized_return")


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


def check_suite(suite: dict[str, list[str] | tuple[str, ...]], policy: str) -> None:
    """Refuse, before anything runs, unknown games, unknown opponents and opponents that do
    not fit their game (ValueError naming the valid choices)."""
    if not suite:
        raise ValueError("no games to evaluate")
    if is_bot(policy):
        check_bot_spec(policy)
    for game, opponents in suite.items():
        check_game(game)
        if not opponents:
            raise ValueError(f"no opponents for {game}")
        for opp in opponents:
            check_opponent(opp, game)
        if is_bot(policy):  # a bot policy must fit the game too (no MCTS on poker)
            check_opponent(policy, game)


def normalized_return(game: str, mean_return: float) -> float:
    lo, hi = make_game(game).utility_range()
    return 100.0 * (mean_return - lo) / (hi - lo)


@dataclass(frozen=True)
class _Cell:
    game: str
    opponent: str
    seats: tuple[int, ...]  # the seats reported from these games (all seats for `self`)


def suite_specs(suite: dict[str, list[str] | tuple[str, ...]], policy: str, n: int,
                seed: int) -> tuple[list[EpisodeSpec], list[_Cell]]:
    """Episode specs for the whole suite, and for each spec the cell it reports to.
    `policy` is "policy" for the model being evaluated, or a bot spec."""
    specs, cells = [], []
    for game, opponents in suite.items():
        players = make_game(game).num_players
        gi = list(GAMES).index(game)
        for oi, opp in enumerate(opponents):
            rounds = [(None, (policy,) * players)] if opp == SELF else [
                (s, tuple(policy if p == s else opp for p in range(players))) for s in range(players)]
            for seat, agents in rounds:
                cell = _Cell(game, opp, tuple(range(players)) if seat is None else (seat,))
                tag = "self" if seat is None else f"s{seat}"
                for i in range(n):
                    base = seed + 1_000_003 * gi + 10_007 * oi + i  # same deals in every seat
                    specs.append(EpisodeSpec(f"eval-{game}-{opp}-{tag}-{i:05d}", game, base, agents))
                    cells.append(cell)
    return specs, cells


def seat_record(game: str, policy: str, opponent: str, seat: int,
                episodes: list[Episode]) -> dict:
    """The record of one seat over its games (rates are fractions; CI is the 95% half-width)."""
    n, adapter = len(episodes), make_game(game)
    # cooperative: one shared score, and a game lost on a rule error scores 0
    returns = [min(ep.returns) if adapter.cooperative else ep.returns[seat] for ep in episodes]
    mean, ci = mean_ci95(returns)
    rate = {k: sum(ep.outcomes[seat] == k for ep in episodes) / n if n else 0.0
            for k in ("win", "draw", "loss", "invalid")}
    lo, hi = adapter.utility_range()
    return {"game": game, "policy": policy, "opponent": opponent, "seat": seat, "n": n,
            "mean_return": mean, "ci95": ci, "win_rate": rate["win"], "draw_rate": rate["draw"],
            "loss_rate": rate["loss"], "invalid_rate": rate["invalid"],
            "normalized_return": normalized_return(game, mean),
            "normalized_ci95": 100.0 * ci / (hi - lo)}


def run_suite(suite: dict[str, list[str] | tuple[str, ...]], policy_label: str, engine,
              prompts: PromptBuilder | None, sampling: SamplingParams, n: int, seed: int,
              bot_policy: str | None = None, progress: bool = True,
              stats: RolloutStats | None = None,
              per_game: dict[str, SamplingParams] | None = None) -> tuple[list[dict], list[Episode]]:
    """Play the suite and return (records, episodes). The model behind `engine` plays the
    policy seats, or `bot_policy` (a bot spec) does when given (then no engine is needed)."""
    agent = bot_policy or "policy"
    check_suite(suite, agent)
    specs, cells = suite_specs(suite, agent, n, seed)
    episodes = play_episodes(specs, engine, prompts, sampling, progress=progress, stats=stats,
                             per_game=per_game)
    grouped: dict[_Cell, list[Episode]] = defaultdict(list)
    for cell, ep in zip(cells, episodes):
        grouped[cell].append(ep)
    records = [seat_record(c.game, policy_label, c.opponent, seat, eps)
               for c, eps in grouped.items() for seat in c.seats]
    return records, episodes


def per_game_normalized(records: list[dict]) -> dict[str, float]:
    """Each game's normalized return, averaged over its opponents and seats (the radar axes)."""
    acc: dict[str, list[float]] = defaultdict(list)
    for r in records:
        acc[r["game"]].append(r["normalized_return"])
    return {g: sum(v) / len(v) for g, v in acc.items()}


def radar_chart(scores: dict[str, dict[str, float]], path, title: str = "") -> None:
    """A radar chart of normalized returns per game (the MARS paper's Figure 1), one polygon
    per policy: `scores = {policy: {game: normalized_return}}`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = [g for g in GAMES if any(g in s for s in scores.values())]
    angles = [2 * math.pi * i / len(games) for i in range(len(games))]
    fig, ax = plt.subplots(figsize=(6, 6), subplot_kw={"polar": True})
    for label, per_game in scores.items():
        vals = [per_game.get(g, 0.0) for g in games]
        ax.plot(angles + angles[:1], vals + vals[:1], marker="o", label=label)
        ax.fill(angles + angles[:1], vals + vals[:1], alpha=0.15)
    ax.set_xticks(angles, [g.replace("_", " ") for g in games])
    ax.set_ylim(0, 100)
    ax.set_yticks([25, 50, 75, 100])
    ax.set_title(title or "normalized return (0-100)")
    ax.legend(loc="lower right", bbox_to_anchor=(1.25, -0.1), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def comparison_table(scores: dict[str, dict[str, float]]) -> tuple[list[dict], str]:
    """The ablation table (the MARS paper's Table 4 layout): one row per policy, one column per
    game (normalized return, 0-100, in the suite's game order) and their mean. Returns the rows
    (for JSON / an MLflow table) and the same table as Markdown."""
    games = [g for g in GAMES if any(g in s for s in scores.values())]
    rows = []
    for label, per_game in scores.items():
        row = {"policy": label, **{g: per_game.get(g) for g in games}}
        seen = [v for v in (per_game.get(g) for g in games) if v is not None]
        row["mean"] = sum(seen) / len(seen) if seen else None
        rows.append(row)

    def cell(v):
        return "-" if v is None else f"{v:.1f}"

    header = ["policy", *games, "mean"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join([r["policy"], *(cell(r[c]) for c in header[1:])]) + " |"
              for r in rows]
    return rows, "\n".join(lines) + "\n"
