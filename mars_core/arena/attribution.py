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
  prompt that left no room to reply (the error turn's `finish_reason.cut_off` flag, never the
  wording of its `error_detail`), or a game scored as it stood at its move limit (Codenames'
  80 moves).

Results (win / draw / loss) come from the teams' places: the side that made the error loses
and every other side wins (they tie first for TrueSkill); otherwise sides are ranked by their
game return (a team's mean return), a side alone at the top wins, sides tied at the top draw,
the rest lose.
"""
from __future__ import annotations

import json

from mars_core.games.base import GameAdapter
from mars_core.types import Episode
from mars_core.vocab import Cause, DecidedBy, Outcome

CAUSES = tuple(Cause)
DECIDED_BY = tuple(DecidedBy)  # played out, a rule error, a cut-off reply, the move limit
# decided by a side's failure, not by its play
ERROR_DECIDED = (DecidedBy.RULE_ERROR, DecidedBy.LENGTH)


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


def _error_kind(episode: Episode) -> DecidedBy:
    """LENGTH when the game-ending reply was cut off or overflowed (its turn's cut-off flag),
    else RULE_ERROR."""
    last = [t for t in episode.turns if t.player == episode.error_player and t.error]
    cut_off = bool(last) and bool(last[-1].finish_reason) and last[-1].finish_reason.cut_off
    return DecidedBy.LENGTH if cut_off else DecidedBy.RULE_ERROR


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
        cause = [Cause.TIMEOUT if decided == DecidedBy.LENGTH else
                 (Cause.OWN_RULE_ERROR if teams[p] == bad else Cause.OPPONENT_RULE_ERROR)
                 for p in range(len(teams))]
    else:
        scores = {t: _mean([episode.returns[p] for p in range(len(teams)) if teams[p] == t])
                  for t in order}
        places = _places(scores)
        at_limit = adapter.move_limit is not None and len(episode.turns) >= adapter.move_limit
        decided = DecidedBy.MOVE_LIMIT if at_limit else DecidedBy.PLAY
        cause = [Cause.TIMEOUT if at_limit else Cause.STRATEGY] * len(teams)
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
