"""Any OpenSpiel game by name: `openspiel:<short_name>`, or with OpenSpiel's parameter syntax
`openspiel:<short_name>(key=value,...)` (`openspiel:liars_dice(numdice=1)`).

The ten hand-written adapters keep the papers' prompts; this one writes a prompt for any
sequential OpenSpiel game with a string view of the state, from the engine alone:

- **rules**: the game's long name, the seats, what a seat scores (zero-sum or each its own
  return, the range from `min_utility`/`max_utility`), how actions are written, what a bad
  answer costs;
- **observation**: the other seats' moves since the seat's last turn, the state as the engine
  writes it for that seat (the information-state string in a game with hidden information,
  which holds the seat's private history; the observation string in a perfect-information
  game, which is the board), then the legal actions and the answer format;
- **actions**: the game's own action strings in angle brackets (`<Nc3>`, `<1-6>`); an action
  string that holds `<`, `>` or a line break is rewritten (`->` as ` to `, then `<>` as `[]`),
  one that two legal actions share gets its action id (`<pass #12>`);
- **chance**: drawn from the episode's seeded random source (`OpenSpielGame`);
- **forfeit**: the game's minimum utility; **move limit**: `MOVE_LIMIT` moves where the game
  may run longer (chess, Go, ...): the game is then scored as it stands (OpenSpiel's returns of
  an unfinished game, 0 in most games).

Refused by name, in one line: unknown games, simultaneous-move games, games without a string
view of the state, single-player games (self-play has no meaning there), games whose
parameters are other games, and parameter strings that do not parse or name an unknown
parameter. A game is loaded to check it (`describe`, cached), never at import. OpenSpiel's
games written in Python (`python_kuhn_poker`, ...) are registered here, on import, so every
process sees the same list (otherwise it depends on what else was imported).
"""
from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

import open_spiel.python.games  # noqa: F401 - registers OpenSpiel's Python games
import pyspiel

from mars_core.games.openspiel_games import OpenSpielGame, _Seeded

PREFIX = "openspiel:"
MOVE_LIMIT = 150  # moves after which a longer game is scored as it stands
_SPEC = re.compile(r"([a-z][a-z0-9_]*)(?:\((.*)\))?")
_PARAM = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=([A-Za-z0-9_.\-]+)")
_T = pyspiel.GameType


def _refuse(spec: str, why: str) -> ValueError:
    return ValueError(f"{PREFIX}{spec}: {why}")


def _value(text: str, default):
    """A parameter value typed as its default is (OpenSpiel checks the type)."""
    if isinstance(default, bool):
        if text not in ("true", "false", "True", "False"):
            raise ValueError(f"expects true or false, not {text!r}")
        return text.lower() == "true"
    if isinstance(default, int):
        return int(text)
    if isinstance(default, float):
        return float(text)
    return text


def parse(spec: str) -> tuple[str, dict]:
    """`short_name(key=value,...)` -> (short_name, typed parameters); ValueError in one line
    for a string that does not parse, an unknown game or parameter, a value of the wrong
    type, or a parameter that is itself a game."""
    m = _SPEC.fullmatch(spec.strip())
    if not m:
        raise _refuse(spec, "not a game name: write short_name or short_name(key=value,...), "
                            "e.g. openspiel:liars_dice(numdice=1)")
    short, body = m.group(1), m.group(2)
    if _type(short) is None:
        raise _refuse(spec, "unknown OpenSpiel game; `mars games` lists the playable ones")
    defaults = _type(short).parameter_specification
    params: dict = {}
    for item in filter(None, (body or "").split(",")):
        p = _PARAM.fullmatch(item.strip())
        if not p:
            raise _refuse(spec, f"parameter {item.strip()!r} is not key=value with a plain value "
                                "(a number, true/false or a word; games as parameters are not "
                                "supported)")
        key, text = p.groups()
        if key not in defaults:
            raise _refuse(spec, f"{short} has no parameter {key!r}; its parameters: "
                                f"{', '.join(sorted(defaults)) or 'none'}")
        try:
            params[key] = _value(text, defaults[key])
        except ValueError as e:
            raise _refuse(spec, f"parameter {key}: {e}") from None
    return short, params


def _type(short: str):
    """The registered game type of `short`, or None."""
    return next((t for t in pyspiel.registered_games() if t.short_name == short), None)


@lru_cache(maxsize=None)
def describe(spec: str) -> dict:
    """What a check needs of the game, or ValueError naming why it cannot be played:
    `num_players`, `hidden_information`, `cooperative` (identical payoffs), `zero_sum`,
    `max_length`, `long_name`, `information_state` (the seat's view: that string, else the
    observation string)."""
    short, params = parse(spec)
    gt = _type(short)
    if gt.dynamics != _T.Dynamics.SEQUENTIAL:
        raise _refuse(spec, "a simultaneous-move game: seats act at once, and the rollout loop "
                            "plays one seat at a time")
    if not (gt.provides_information_state_string or gt.provides_observation_string):
        raise _refuse(spec, "no string view of the state to show a language model")
    if gt.max_num_players < 2:
        raise _refuse(spec, "a single-player game: self-play has no meaning there")
    try:
        game = pyspiel.load_game(short, params)
    except pyspiel.SpielError as e:
        raise _refuse(spec, f"OpenSpiel cannot load it ({str(e).strip().splitlines()[0]})") \
            from None
    if game.num_players() < 2:
        raise _refuse(spec, "a single-player game: self-play has no meaning there")
    hidden = gt.information != _T.Information.PERFECT_INFORMATION
    return {"num_players": game.num_players(), "hidden_information": hidden,
            "cooperative": gt.utility == _T.Utility.IDENTICAL,
            "zero_sum": gt.utility == _T.Utility.ZERO_SUM,
            "max_length": game.max_game_length(), "long_name": gt.long_name,
            # the seat's view: the information state where seats hold hidden information
            # (it keeps the seat's private history), else the board
            "information_state": gt.provides_information_state_string
            and (hidden or not gt.provides_observation_string)}


def playable() -> list[tuple[str, str]]:
    """(short name, "" if it plays without parameters, else the one-line reason) for every
    registered OpenSpiel game, in name order (docs/games/)."""
    out = []
    for t in sorted(pyspiel.registered_games(), key=lambda t: t.short_name):
        try:
            describe(t.short_name)
            out.append((t.short_name, ""))
        except ValueError as e:
            out.append((t.short_name, str(e).split(": ", 1)[1]))
    return out


class _Counted(_Seeded):
    """A seeded state that counts the moves played (the move limit)."""

    __slots__ = ("moves",)

    def __init__(self, s, rng, moves: int = 0) -> None:
        super().__init__(s, rng)
        self.moves = moves


class GenericOpenSpiel(OpenSpielGame):
    """The adapter of one `openspiel:` name; `adapter(spec)` sets the class attributes."""

    spec: str = ""
    long_name: str = ""
    zero_sum: bool = False
    state_view: str = "observation"  # or "information_state"

    # -- the move limit --------------------------------------------------------------------
    def new_state(self, seed: int):
        base = super().new_state(seed)
        return _Counted(base.s, base.rng)

    def clone(self, state):
        base = super().clone(state)
        return _Counted(base.s, base.rng, state.moves)

    def apply(self, state, action_id: int) -> list[float]:
        state.moves += 1
        return super().apply(state, action_id)

    def is_terminal(self, state) -> bool:
        return state.s.is_terminal() or (self.move_limit is not None
                                         and state.moves >= self.move_limit)

    # -- text ------------------------------------------------------------------------------
    def action_string(self, state, player: int, action_id: int) -> str:
        return f"<{_clean(state.s.action_to_string(player, action_id))}>"

    def legal_actions(self, state) -> dict[str, int]:
        p = state.s.current_player()
        ids = state.s.legal_actions(p)
        texts = [self.action_string(state, p, a) for a in ids]
        shared = {t for t, n in Counter(texts).items() if n > 1}
        return {(f"{t[:-1]} #{a}>" if t in shared else t): a for t, a in zip(texts, ids)}

    def view(self, state, player: int) -> str:
        if self.state_view == "information_state":
            return state.s.information_state_string(player)
        return state.s.observation_string(player)

    def rules(self, player: int) -> str:
        low, high = self.utility_range()
        if self.cooperative:
            score = f"All players share one score, from {low:g} to {high:g}."
        elif self.zero_sum:
            score = (f"Your score is your return, from {low:g} to {high:g}; what you win the "
                     "others lose.")
        else:
            score = f"Each player scores its own return, from {low:g} to {high:g}."
        limit = (f" If the game has not ended after {self.move_limit} moves, it is scored as "
                 "it stands." if self.move_limit else "")
        return (f"You are playing {self.long_name} (OpenSpiel's {self.spec}) as player "
                f"{player}, one of {self.num_players} players numbered from 0. {score}{limit}\n"
                "Each turn you see the other players' moves since your last turn, the game "
                "state as the game engine writes it for you, and your legal actions, each in "
                "angle brackets.\nReply with your reasoning if you like, then exactly one legal "
                "action copied with its brackets inside answer tags, for example "
                "<answer><ACTION></answer>, and nothing after it. An illegal or malformed answer "
                f"ends the game and scores {self.forfeit_return(None, player):g} for you.")

    def observation(self, state, player: int, moves_since: list[tuple[int, str]]) -> str:
        lines = [f"Player {p} played {a}." for p, a in moves_since]
        lines += [f"You are player {player}. The state:", self.view(state, player).rstrip(),
                  "Legal actions: " + ", ".join(self.legal_actions(state)),
                  "Answer with exactly one of them inside <answer></answer> tags."]
        return "\n".join(lines)

    def forfeit_return(self, state, player: int) -> float:
        return self.game.min_utility()


def _clean(text: str) -> str:
    text = text.replace("->", " to ").replace("<", "[").replace(">", "]")
    return " / ".join(p.strip() for p in text.strip().splitlines() if p.strip()) or "?"


@lru_cache(maxsize=None)
def adapter(spec: str) -> type[GenericOpenSpiel]:
    """The adapter class of `openspiel:<spec>` (one class per name: the registry builds it
    once and shares it)."""
    d = describe(spec)
    short, params = parse(spec)
    limit = MOVE_LIMIT if d["max_length"] > MOVE_LIMIT else None
    return type(f"OpenSpiel_{short}", (GenericOpenSpiel,), {
        "name": PREFIX + spec, "spec": spec, "pyspiel_name": short, "params": params,
        "long_name": d["long_name"], "zero_sum": d["zero_sum"], "cooperative": d["cooperative"],
        "perfect_information": not d["hidden_information"], "move_limit": limit,
        "state_view": "information_state" if d["information_state"] else "observation",
        "__module__": __name__})
