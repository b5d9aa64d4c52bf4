"""Game records -> ratings -> the leaderboard (JSON rows and Markdown).

A game record is one finished match: its agents per seat plus the attribution verdict
(`attribution.attribute`). Ratings are replayed over the records in schedule order twice:
with every game, and *clean*, without the games a side's failure decided (`ERROR_DECIDED`: a
rule error or a cut-off reply), so an agent that climbs on its opponents' errors shows it as
a gap between the two ratings.

Per agent: `rating` (mu - 3 sigma, the sort key), `mu`, `sigma`, `games`, `wins`, `draws`,
`losses`, `win_rate`, `error_rate` (games where one of its seats made the game-ending rule
error), `timeout_rate` (games it lost on a cut-off reply), `wins_by_opponent_error`, and the
clean `clean_rating`, `clean_mu`, `clean_sigma`, `clean_games`. An agent holding seats with
different results in one game (both Mafia camps) scores a draw there.
"""
from __future__ import annotations

from collections import Counter, defaultdict

from mars_core.arena.attribution import ERROR_DECIDED, attribute
from mars_core.arena.ratings import Rating, Ratings, TrueSkillParams
from mars_core.arena.schedule import Match
from mars_core.games.registry import make_game
from mars_core.types import Episode
from mars_core.vocab import DecidedBy, Outcome


_PLURAL = {"win": "wins", "draw": "draws", "loss": "losses"}


def game_record(match: Match, episode: Episode) -> dict:
    """The JSON-able record of one finished match."""
    verdict = attribute(episode, make_game(match.game))
    return {"match_id": match.match_id, "episode_id": episode.episode_id, "game": match.game,
            "seed": match.seed, "agents": list(match.agents), "returns": list(episode.returns),
            "turns": len(episode.turns), **verdict}


def team_agents(record: dict) -> list[list[str]]:
    """The agents of every team's seats, in `team_order`."""
    return [[a for a, t in zip(record["agents"], record["teams"]) if t == team]
            for team in record["team_order"]]


def rate(records: list[dict], params: TrueSkillParams | None = None,
         frozen: dict[str, Rating] | None = None, clean: bool = False) -> Ratings:
    """Replay the records (in order) into TrueSkill ratings; `clean` skips error-decided games."""
    ratings = Ratings(params, frozen)
    for r in records:
        if clean and r["decided_by"] in ERROR_DECIDED:
            continue
        ratings.rate(team_agents(r), r["ranks"])
    return ratings


def agent_result(record: dict, agent: str) -> str:
    got = {res for a, res in zip(record["agents"], record["result"]) if a == agent}
    return got.pop() if len(got) == 1 else Outcome.DRAW


def leaderboard(records: list[dict], params: TrueSkillParams | None = None,
                frozen: dict[str, Rating] | None = None,
                agents: list[str] | None = None) -> list[dict]:
    """One row per agent (those in `agents`, else every agent seen), best rating first."""
    full, clean = rate(records, params, frozen), rate(records, params, frozen, clean=True)
    stats: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        err_agent = r["agents"][r["error_seat"]] if r["error_seat"] >= 0 else None
        for agent in dict.fromkeys(r["agents"]):
            s = stats[agent]
            s["games"] += 1
            res = agent_result(r, agent)
            s[_PLURAL[res]] += 1
            s["own_errors"] += r["decided_by"] == DecidedBy.RULE_ERROR and err_agent == agent
            s["own_timeouts"] += r["decided_by"] == DecidedBy.LENGTH and err_agent == agent
            s["wins_by_opponent_error"] += (res == Outcome.WIN and r["decided_by"] in ERROR_DECIDED)
            s["clean_games"] += r["decided_by"] not in ERROR_DECIDED
    rows = []
    for agent in agents or list(stats):
        s, a, c = stats[agent], full.get(agent), clean.get(agent)
        g = s["games"]
        rows.append({
            "agent": agent, "rating": a.conservative, "mu": a.mu, "sigma": a.sigma,
            "games": g, "wins": s["wins"], "draws": s["draws"], "losses": s["losses"],
            "win_rate": s["wins"] / g if g else 0.0,
            "error_rate": s["own_errors"] / g if g else 0.0,
            "timeout_rate": s["own_timeouts"] / g if g else 0.0,
            "wins_by_opponent_error": s["wins_by_opponent_error"],
            "clean_rating": c.conservative, "clean_mu": c.mu, "clean_sigma": c.sigma,
            "clean_games": s["clean_games"], "frozen": agent in (frozen or {})})
    rows.sort(key=lambda r: (-r["rating"], r["agent"]))
    return rows


def per_game(records: list[dict], params: TrueSkillParams | None = None,
             frozen: dict[str, Rating] | None = None) -> dict[str, list[dict]]:
    """A leaderboard per game (frozen ratings, when given, are the pool's overall ones)."""
    games = list(dict.fromkeys(r["game"] for r in records))
    return {g: leaderboard([r for r in records if r["game"] == g], params, frozen)
            for g in games}


def causes(records: list[dict]) -> dict[str, dict[str, int]]:
    """How each agent's games were decided from its side: agent -> cause -> seat-games."""
    out: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        for a, c in zip(r["agents"], r["cause"]):
            out[a][c] += 1
    return {a: dict(c) for a, c in out.items()}


def markdown(rows: list[dict]) -> str:
    """The leaderboard as Markdown; the model agents' exploitability (`exploitability/<game>`
    keys, Kuhn and Leduc) as a column per game where any agent has it."""
    extra = sorted({k for r in rows for k in r if k.startswith("exploitability/")})
    head = ("| # | agent | rating (mu-3σ) | mu ± sigma | games | win | error | timeout | "
            "wins on opp. error or cut-off | clean rating | clean games |"
            + "".join(f" exploitability ({k.split('/', 1)[1]}) |" for k in extra))
    lines = [head, "|---" * (11 + len(extra)) + "|"]
    for i, r in enumerate(rows, 1):
        frozen = " (frozen)" if r["frozen"] else ""
        lines.append(
            f"| {i} | {r['agent']}{frozen} | {r['rating']:.2f} | {r['mu']:.2f} ± {r['sigma']:.2f} "
            f"| {r['games']} | {r['win_rate']:.2f} | {r['error_rate']:.2f} | "
            f"{r['timeout_rate']:.2f} | {r['wins_by_opponent_error']} | "
            f"{r['clean_rating']:.2f} | {r['clean_games']} |"
            + "".join(f" {r[k]:.4f} |" if k in r else " - |" for k in extra))
    return "\n".join(lines) + "\n"
