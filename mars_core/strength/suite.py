"""The game evaluation: a policy against fixed opponents (the MARS strategic-ability
protocol), every game x opponent x seat, all games played concurrently through one rollout call
so model turns are batched. (The reasoning-benchmark evaluation is the `eval/` package.)

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

from mars_core.games.catalog import game_index, order_key
from mars_core.games.opponents import check_suite, is_bot
from mars_core.games.registry import make_game
from mars_core.stats.intervals import mean_ci95
from mars_core.rollout.play import EpisodeSpec, PromptBuilder, RolloutStats, play_episodes
from mars_core.types import Episode, SamplingParams
from mars_core.vocab import POLICY, SELF, Outcome

RECORD_KEYS = ("game", "policy", "opponent", "seat", "n", "mean_return", "ci95", "win_rate",
               "draw_rate", "loss_rate", "invalid_rate", "normalized_return")


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
        gi = game_index(game)
        for oi, opp in enumerate(opponents):
            rounds = [(None, (policy,) * players)] if opp == SELF else [
                (s, tuple(policy if p == s else opp for p in range(players))) for s in range(players)]
            for seat, agents in rounds:
                cell = _Cell(game, opp, tuple(range(players)) if seat is None else (seat,))
                tag = SELF if seat is None else f"s{seat}"
                for i in range(n):
                    base = seed + 1_000_003 * gi + 10_007 * oi + i  # same deals in every seat
                    specs.append(EpisodeSpec(f"eval-{game}-{opp}-{tag}-{i:05d}", game, base, agents))
                    cells.append(cell)
    return specs, cells


def seat_record(game: str, policy: str, opponent: str, seat: int,
                episodes: list[Episode]) -> dict:
    """The record of one seat over its games (rates are fractions; CI is the 95% half-width,
    `mean_ci95` bounded by the game's utility range)."""
    n, adapter = len(episodes), make_game(game)
    # cooperative: one shared score, and a game lost on a rule error scores 0
    returns = [min(ep.returns) if adapter.cooperative else ep.returns[seat] for ep in episodes]
    lo, hi = adapter.utility_range()
    mean, ci = mean_ci95(returns, (lo, hi))
    rate = {k: sum(ep.outcomes[seat] == k for ep in episodes) / n if n else 0.0
            for k in (Outcome.WIN, Outcome.DRAW, Outcome.LOSS, Outcome.INVALID)}
    return {"game": game, "policy": policy, "opponent": opponent, "seat": seat, "n": n,
            "mean_return": mean, "ci95": ci, **{f"{k}_rate": v for k, v in rate.items()},
            "normalized_return": normalized_return(game, mean),
            "normalized_ci95": 100.0 * ci / (hi - lo)}


def run_suite(suite: dict[str, list[str] | tuple[str, ...]], policy_label: str, engine,
              prompts: PromptBuilder | None, sampling: SamplingParams, n: int, seed: int,
              bot_policy: str | None = None, progress: bool = True,
              stats: RolloutStats | None = None,
              per_game: dict[str, SamplingParams] | None = None) -> tuple[list[dict], list[Episode]]:
    """Play the suite and return (records, episodes). The model behind `engine` plays the
    policy seats, or `bot_policy` (a bot spec) does when given (then no engine is needed)."""
    agent = bot_policy or POLICY
    check_suite(suite, agent)
    specs, cells = suite_specs(suite, agent, n, seed)
    episodes = play_episodes(specs, engine, prompts, sampling, progress=progress, stats=stats,
                             per_game=per_game)
    return suite_records(cells, episodes, policy_label), episodes


def suite_records(cells: list, episodes: list[Episode], policy_label: str) -> list[dict]:
    """The records of a suite's episodes (in `suite_specs` order, with its `cells`)."""
    grouped: dict[_Cell, list[Episode]] = defaultdict(list)
    for cell, ep in zip(cells, episodes):
        grouped[cell].append(ep)
    return [seat_record(c.game, policy_label, c.opponent, seat, eps)
            for c, eps in grouped.items() for seat in c.seats]


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

    games = sorted({g for s in scores.values() for g in s}, key=order_key)
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
    games = sorted({g for s in scores.values() for g in s}, key=order_key)
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


# ---------------------------------------------------------------------------------------------
# Is a policy stronger than another? Paired comparisons on the same deals


def policy_scores(episodes: list[Episode]) -> dict[tuple[str, str], dict[str, tuple[float, bool]]]:
    """Per (game, opponent): episode id -> (the policy's normalized return in that game,
    whether its own rule error ended it). The opponent is the first non-policy agent (`self`
    when the policy holds every seat); a cooperative game scores its shared result (0 after a
    rule error), a competitive one the policy seat's return (averaged if it holds several)."""
    out: dict[tuple[str, str], dict[str, tuple[float, bool]]] = defaultdict(dict)
    for ep in episodes:
        seats = [p for p, a in enumerate(ep.agents) if not is_bot(a)]
        if not seats:
            continue
        opponent = next((a for a in ep.agents if is_bot(a)), SELF)
        adapter = make_game(ep.game)
        ret = min(ep.returns) if adapter.cooperative else sum(ep.returns[p] for p in seats) / len(seats)
        out[(ep.game, opponent)][ep.episode_id] = (normalized_return(ep.game, ret),
                                                   ep.error_player in seats)
    return dict(out)


def paired_rows(evaluations: dict[str, list[Episode]], baseline: str) -> list[dict]:
    """One row per evaluated policy (label, in the order given) and (game, opponent): games `n`,
    `normalized_return` with its 95% half-width `ci95`, `invalid_rate`, and against the
    `baseline` label's games with the same episode ids (the same deals and seats): `diff`, the
    mean paired difference of normalized returns, with its half-width `diff_ci95` over
    `paired_n` games (the baseline's own row has diff 0). Half-widths are `mean_ci95`'s,
    bounded by 0-100 and, for the differences, by -100 to 100.

    Play apart from format: `valid_diff` and `valid_diff_ci95` are the same paired difference
    over the `valid_n` deals that neither policy lost to its own invalid reply, and `reading`
    says what a difference rests on (`reading_of`): a gain that is only "answers in format
    now" reads `format only`, not `play`."""
    scores = {label: policy_scores(eps) for label, eps in evaluations.items()}
    base = scores.get(baseline, {})
    rows = []
    for label, by_cell in scores.items():
        for (game, opponent), games in sorted(by_cell.items()):
            mean, ci = mean_ci95([v for v, _ in games.values()], (0.0, 100.0))
            theirs = base.get((game, opponent), {})
            common = [e for e in games if e in theirs]
            valid = [e for e in common if not games[e][1] and not theirs[e][1]]
            diff, diff_ci = mean_ci95([games[e][0] - theirs[e][0] for e in common],
                                      (-100.0, 100.0))
            valid_diff, valid_ci = mean_ci95([games[e][0] - theirs[e][0] for e in valid],
                                             (-100.0, 100.0))
            row = {"policy": label, "game": game, "opponent": opponent, "n": len(games),
                   "normalized_return": mean, "ci95": ci,
                   "invalid_rate": sum(bad for _, bad in games.values()) / len(games),
                   "diff": diff, "diff_ci95": diff_ci, "paired_n": len(common),
                   "valid_diff": valid_diff, "valid_diff_ci95": valid_ci, "valid_n": len(valid)}
            moved = (sum(theirs[e][1] - games[e][1] for e in common) / len(common)
                     if common else 0.0)  # the drop in invalid replies on the paired deals
            row["reading"] = "-" if label == baseline else reading_of(row, moved)
            rows.append(row)
    return rows


def clears(diff: float, half_width: float) -> bool:
    """The project's verdict rule: a difference counts when it exceeds twice its 95% half-width."""
    return abs(diff) > 2 * half_width


def reading_of(row: dict, invalid_drop: float) -> str:
    """What a paired difference rests on. `no clear change`: it does not clear (`clears`).
    `play`: it clears and so does the difference over the deals neither policy lost to an
    invalid reply, with the same sign. `format only`: it clears, the valid deals' difference
    does not, and the invalid-reply rate moved the difference's way (fewer invalid replies
    behind a gain, more behind a loss; `invalid_drop`: the baseline's invalid-reply rate minus
    this policy's, on the paired deals). `unclear on valid deals`: any other case."""
    if not clears(row["diff"], row["diff_ci95"]):
        return "no clear change"
    sign = 1 if row["diff"] > 0 else -1
    if row["valid_n"] and clears(row["valid_diff"], row["valid_diff_ci95"]) \
            and row["valid_diff"] * sign > 0:
        return "play"
    if invalid_drop * sign > 0:
        return "format only"
    return "unclear on valid deals"


def paired_markdown(rows: list[dict], baseline: str) -> str:
    """`paired_rows` as a Markdown table (95% intervals; a difference is marked `*` when it
    clears twice its half-width), with the difference over the deals neither policy lost to an
    invalid reply and what the difference rests on (`reading_of`)."""
    lines = [f"| policy | game | opponent | games | normalized return | invalid | vs {baseline} "
             f"(paired) | valid deals only | reading |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["policy"] == baseline:
            vs = valid = "-"
        else:
            mark = " *" if clears(r["diff"], r["diff_ci95"]) else ""
            vs = f"{r['diff']:+.1f} ± {r['diff_ci95']:.1f}{mark}"
            mark = " *" if clears(r["valid_diff"], r["valid_diff_ci95"]) else ""
            valid = (f"{r['valid_diff']:+.1f} ± {r['valid_diff_ci95']:.1f}{mark} "
                     f"(n={r['valid_n']})")
        lines.append(f"| {r['policy']} | {r['game']} | {r['opponent']} | {r['n']} | "
                     f"{r['normalized_return']:.1f} ± {r['ci95']:.1f} | "
                     f"{r['invalid_rate']:.0%} | {vs} | {valid} | {r['reading']} |")
    return "\n".join(lines) + "\n"
