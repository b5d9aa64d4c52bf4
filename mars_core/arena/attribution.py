"""Why every finished game was won or lost (MindGames' loss attribution).

In error-heavy games an agent can climb by surviving its opponents' rule errors rather than by
playing well, so every finished game is attributed to one of four causes, from each seat's
side:

- `strategy`: the game was played to its end under the rules; the better play won;
- `own_rule_error`: this seat's side broke the rules (a reply without the answer template, or
  an action the rules forbid: `games.base`'s parsing failure / invalid action), which ended
  the game and lost it for that side;
- `opponent_rule_error`: another side broke the rules, which handed this seat the game;
- `timeout`: the game was decided by a length limit: a reply cut off at the token limit or a
  prompt that left no room to reply (the rollout's `truncated` / `context overflow`), or a
  game scored as it stood at its move limit (Codenames' 80 moves).

Results (win / draw / loss) come from the teams' places: the side that made the error loses
and every other side wins (they tie first for TrueSkill); otherwise sides are ranked by their
game return (a team's mean return), a side alone at the top wins, sides tied at the top draw,
the rest lose.
"""
from __future__ import annotations

import json

from mars_core.games.base import GameAdapter
from mars_core.types import Episode
from mars_core.vocab import Outcome

CAUSES = ("strategy", "own_rule_error", "opponent_rule_error", "timeout")
# how the game ended: played out, a rule error, a cut-off reply, the game's move limit
DECIDED_BY = ("play", "rule_error", "length", "move_limit")
ERROR_DECIDED = ("rule_error", "length")  # decided by a side's failure, not by its play
_LENGTH_ERRORS = ("truncated", "context overflow")


def seat_teams(episode: Episode, adapter: GameAdapter) -> list[str]:
    """The team of every seat: the game's fixed teams (Codenames), the camps the game drew
    (Secret Mafia's `teams` final fact), else each seat alone (free-for-all)."""
    n = adapter.num_players
    if adapter.cooperative:
        raise ValueError(f"{adapter.name} is cooperative: all seats share one score, so there "
                         "is nobody to rank; the arena plays competitive games only")
    if adapter.fixed_teams is not None:
        return [str(t) for t in adapter.fixed_teams]
    info = json.loads(episode.info) if episode.info else {}
    teams = info.get("teams")
    if isinstance(teams, list) and len(teams) == n:
        return [str(t) for t in teams]
    return [f"seat{p}" for p in range(n)]


def _error_kind(episode: Episode) -> str:
    """`length` when the game-ending reply was cut off or overflowed, else `rule_error`."""
    last = [t for t in episode.turns if t.player == episode.error_player and t.error]
    detail = last[-1].error_detail if last else ""
    return "length" if detail.startswith(_LENGTH_ERRORS) else "rule_error"


def _places(scores: dict[str, float]) -> dict[str, int]:
    """Rank teams by score, best first; equal scores share a place (0 = best)."""
    ordered = sorted(set(round(s, 9) for s in scores.values()), reverse=True)
    return {t: ordered.index(round(s, 9)) for t, s in scores.items()}


def attribute(episode: Episode, adapter: GameAdapter) -> dict:
    """The finished game's verdict: `teams` (per seat), `team_order` (the teams, first-seen
    order), `ranks` (per team, for TrueSkill), `result` and `cause` (per seat),
    `decided_by` (one of `DECIDED_BY`) and `error_seat` (-1 when none)."""
    teams = seat_teams(episode, adapter)
    order = list(dict.fromkeys(teams))
    if episode.error_player >= 0:
        bad = teams[episode.error_player]
        decided = _error_kind(episode)
        places = {t: (1 if t == bad else 0) for t in order}
        cause = ["timeout" if decided == "length" else
                 ("own_rule_error" if teams[p] == bad else "opponent_rule_error")
                 for p in range(len(teams))]
    else:
        scores = {t: _mean([episode.returns[p] for p in range(len(teams)) if teams[p] == t])
                  for t in order}
        places = _places(scores)
        at_limit = adapter.move_limit is not None and len(episode.turns) >= adapter.move_limit
        decided = "move_limit" if at_limit else "play"
        cause = ["timeout" if at_limit else "strategy"] * len(teams)
    top = [t for t in order if places[t] == 0]
    result = [Outcome.LOSS if places[teams[p]] else (Outcome.WIN if len(top) == 1 else Outcome.DRAW)
              for p in range(len(teams))]
    if episode.error_player >= 0:  # the side that broke the rules forfeits to all others
        result = [Outcome.LOSS if places[teams[p]] else Outcome.WIN for p in range(len(teams))]
    elif len(top) == len(order):  # everyone tied: a draw all round
        result = [Outcome.DRAW] * len(teams)
    return {"teams": teams, "team_order": order, "ranks": [places[t] for t in order],
            "result": result, "cause": cause, "decided_by": decided,
            "error_seat": episode.error_player}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
