"""The game-adapter shape every game reuses, and the strict answer parser.

An adapter turns a game engine's state into text for one seat (rules, observation, legal action
strings) and applies the parsed action. It holds no per-episode state itself: the state object
it creates is passed back in, so one adapter serves any number of concurrent games.
"""
from __future__ import annotations

import random
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from mars_core.vocab import ErrorType, Outcome

# The two error types of a turn that ended the game (SPEC section 5): the reply did not have
# the reasoning template or the action's format (a parsing failure), or it named an action
# the game's rules forbid (an invalid action). `Parsed.detail` says what exactly was wrong.
PARSING_FAILURE, INVALID_ACTION = ErrorType.PARSING_FAILURE, ErrorType.INVALID_ACTION

_OPEN, _CLOSE = "<answer>", "</answer>"
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class Parsed:
    action: str | None  # the action string, or None when the reply is invalid
    error: str = ""  # "", PARSING_FAILURE or INVALID_ACTION
    detail: str = ""  # one line: what was wrong (empty when valid)


def extract_answer(reply: str) -> Parsed:
    """The reasoning template: `free reasoning <answer>ACTION</answer>` with nothing after it.

    Exactly one answer tag pair; an optional `<think>...</think>` block must be closed before
    the answer. Returns the ACTION text (surrounding whitespace stripped) as `action`, or a
    parsing failure naming the problem. Never raises.
    """
    if not isinstance(reply, str):
        return Parsed(None, PARSING_FAILURE, "the reply is not text")
    n_open, n_close = reply.count(_OPEN), reply.count(_CLOSE)
    if n_open != 1 or n_close != 1:
        return Parsed(None, PARSING_FAILURE,
                      f"expected one {_OPEN}...{_CLOSE} pair, found {n_open} open and {n_close} close tags")
    head, _, rest = reply.partition(_OPEN)
    inner, _, tail = rest.partition(_CLOSE)
    if _CLOSE in head:
        return Parsed(None, PARSING_FAILURE, f"{_CLOSE} before {_OPEN}")
    if tail.strip():
        return Parsed(None, PARSING_FAILURE, f"text after {_CLOSE}")
    if head.count(_THINK_OPEN) > 1 or head.count(_THINK_OPEN) != head.count(_THINK_CLOSE) or (
            _THINK_OPEN in head and head.index(_THINK_OPEN) > head.index(_THINK_CLOSE)):
        return Parsed(None, PARSING_FAILURE, "unbalanced <think> block before the answer")
    if _THINK_OPEN in inner or _THINK_CLOSE in inner or _THINK_OPEN in tail:
        return Parsed(None, PARSING_FAILURE, "<think> tag inside or after the answer")
    return Parsed(inner.strip())


def parse_reply(reply: str, legal_actions: list[str] | set[str]) -> Parsed:
    """Strictly parse a reply against a list of legal action strings: the reasoning template
    (`extract_answer`), then ACTION must equal a legal action. A well-formed answer naming an
    action that is not legal is an invalid action. Never raises."""
    got = extract_answer(reply)
    if got.action is None:
        return got
    if got.action in legal_actions:
        return got
    return Parsed(None, INVALID_ACTION, f"{clip(got.action)!r} is not a legal action")


def clip(text: str, limit: int = 60) -> str:
    """A short one-line excerpt of untrusted text for error details."""
    text = _WS.sub(" ", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_answer(action: str) -> str:
    return f"{_OPEN}{action}{_CLOSE}"


# The prompt layouts a policy can be shown (`play.prompt`): "paper", the rules and observation
# as the papers word them (the fidelity preset), and "compact", a few lines of rules and the
# state in short form with the seat's private information last, next to the answer. Both carry
# the same state and legal actions (tests/unit/test_compact_prompts.py reads them back); the
# answer format is the same, so the validator, the warm-up and the bots are unchanged.
PROMPT_STYLES = ("paper", "compact")


class GameAdapter(ABC):
    """What the rollout loop needs from a game. `state` is the adapter's own state object."""

    name: str
    num_players: int
    draw_bonus: bool = False  # whether a drawn game earns rewards.draw (board games only)
    cooperative: bool = False  # every seat shares one score (Hanabi): the partner is a policy
    perfect_information: bool = True  # False where seats hold hidden cards (poker, Hanabi)
    fixed_teams: tuple[str, ...] | None = None  # each seat's team where teams are fixed (Codenames)
    move_limit: int | None = None  # moves after which the game is scored as it stands

    @abstractmethod
    def new_state(self, seed: int) -> Any:
        """A fresh game whose chance events are drawn from `seed`."""

    @abstractmethod
    def current_player(self, state: Any) -> int:
        """The seat to move (only called on non-terminal states)."""

    @abstractmethod
    def is_terminal(self, state: Any) -> bool: ...

    @abstractmethod
    def legal_actions(self, state: Any) -> dict[str, int]:
        """Legal action strings of the player to move, mapped to engine action ids."""

    @abstractmethod
    def apply(self, state: Any, action_id: int) -> list[float]:
        """Apply the action (and any chance events after it); return each seat's reward."""

    @abstractmethod
    def returns(self, state: Any) -> list[float]:
        """Each seat's total game return so far."""

    @abstractmethod
    def role(self, player: int) -> str:
        """The explicit role name of a seat (the advantage grouping key)."""

    @abstractmethod
    def rules(self, player: int) -> str:
        """The rules text shown once to `player` (system message)."""

    @abstractmethod
    def observation(self, state: Any, player: int, moves_since: list[tuple[int, str]]) -> str:
        """What `player` sees now: the state, the other seats' moves since its last turn,
        its legal actions and the reply format."""

    # -- the compact prompt layout (games that have one override both) ---------------------
    def compact_rules(self, player: int) -> str:
        """The rules in a few lines (the system message of the compact layout)."""
        raise NotImplementedError(f"{self.name} has no compact prompt layout")

    def compact_observation(self, state: Any, player: int,
                            moves_since: list[tuple[int, str]]) -> str:
        """The state in short form, the legal actions, and the seat's private information
        last (next to the answer)."""
        raise NotImplementedError(f"{self.name} has no compact prompt layout")

    def prompt_styles(self) -> tuple[str, ...]:
        """The layouts this game can be shown in."""
        own = type(self).compact_rules is not GameAdapter.compact_rules
        return PROMPT_STYLES if own else ("paper",)

    def rules_for(self, player: int, style: str = "paper") -> str:
        """The system message of `player` in the layout `style`."""
        return self.compact_rules(player) if style == "compact" else self.rules(player)

    def observation_for(self, state: Any, player: int, moves_since: list[tuple[int, str]],
                        style: str = "paper") -> str:
        """What `player` sees now, in the layout `style`."""
        if style == "compact":
            return self.compact_observation(state, player, moves_since)
        return self.observation(state, player, moves_since)

    @abstractmethod
    def forfeit_return(self, state: Any, player: int) -> float:
        """The total game return of a seat whose invalid reply ended the game: board games -1,
        poker minus the chips it put in, Hanabi 0 (all points scored so far are lost, as on
        the last life token). The other seats keep the returns they had."""

    @abstractmethod
    def utility_range(self) -> tuple[float, float]:
        """The lowest and highest total return a seat can get (normalized return's scale)."""

    @abstractmethod
    def clone(self, state: Any) -> Any: ...

    # -- hooks with OpenSpiel defaults (TextArena adapters override them) -------------------
    def check_action(self, state: Any, text: str) -> Parsed:
        """The action format and the game's rules for the ACTION text of the player to move:
        `Parsed(action)` when it may be played, else a parsing failure (not shaped like an
        action of this game) or an invalid action (shaped right, forbidden by the rules).
        Must never raise, whatever `text` is."""
        if not _ANGLE.fullmatch(text):
            return Parsed(None, PARSING_FAILURE,
                          f"{clip(text)!r} is not an action of the form <...>")
        if text in self.legal_actions(state):
            return Parsed(text)
        return Parsed(None, INVALID_ACTION, f"{clip(text)!r} is not a legal action")

    def play(self, state: Any, action: str) -> tuple[list[float], dict]:
        """Apply a checked action; return each seat's reward and the step's facts (a dict the
        post-episode stages read, e.g. a Blotto round's result; empty for OpenSpiel games)."""
        return self.apply(state, self.legal_actions(state)[action]), {}

    def random_action(self, state: Any, rng: random.Random) -> str:
        """A uniformly random valid action of the player to move (`bot:random`)."""
        legal = self.legal_actions(state)
        by_id = {i: s for s, i in legal.items()}
        return by_id[rng.choice(sorted(by_id))]

    def seat_role(self, state: Any, player: int) -> str:
        """The role of a seat in this episode (secret roles such as Mafia's are drawn per
        episode); the advantage grouping key."""
        return self.role(player)

    def final_info(self, state: Any) -> dict:
        """Facts about the finished game the post-episode stages need (teams, scores)."""
        return {}

    def outcome(self, returns: list[float], player: int) -> str:
        """win / draw / loss for a finished game without rule errors (zero-sum default)."""
        mine, best = returns[player], max(returns)
        others = [r for i, r in enumerate(returns) if i != player]
        if all(abs(r - mine) < 1e-9 for r in others):
            return Outcome.DRAW
        return Outcome.WIN if mine >= best else Outcome.LOSS


_WS = re.compile(r"\s+")
_ANGLE = re.compile(r"<[^<>\n]{1,200}>")
