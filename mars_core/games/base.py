"""The game-adapter shape every game reuses, and the strict answer parser.

An adapter turns a game engine's state into text for one seat (rules, observation, legal action
strings) and applies the parsed action. It holds no per-episode state itself: the state object
it creates is passed back in, so one adapter serves any number of concurrent games.
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

# Error types recorded on a turn that ended the game.
PARSE_ERROR = "parse_error"
ILLEGAL_ACTION = "illegal_action"
TRUNCATED = "truncated"
CONTEXT_OVERFLOW = "context_overflow"

_OPEN, _CLOSE = "<answer>", "</answer>"
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class Parsed:
    action: str | None  # the legal action string, or None when the reply is invalid
    error: str = ""  # "", PARSE_ERROR or ILLEGAL_ACTION


def parse_reply(reply: str, legal_actions: list[str] | set[str]) -> Parsed:
    """Strictly parse `free reasoning <answer>ACTION</answer>` with nothing after it.

    Exactly one answer tag pair; an optional `<think>...</think>` block must be closed before
    the answer; ACTION (surrounding whitespace ignored) must equal a legal action string. Any
    other shape (empty, several answers, nested or unclosed tags, text after the answer) is a
    parse error; a well-formed answer naming an action that is not legal is an illegal action.
    Never raises.
    """
    if not isinstance(reply, str) or reply.count(_OPEN) != 1 or reply.count(_CLOSE) != 1:
        return Parsed(None, PARSE_ERROR)
    head, _, rest = reply.partition(_OPEN)
    inner, _, tail = rest.partition(_CLOSE)
    if tail.strip() or _CLOSE in head:
        return Parsed(None, PARSE_ERROR)
    if head.count(_THINK_OPEN) > 1 or head.count(_THINK_OPEN) != head.count(_THINK_CLOSE):
        return Parsed(None, PARSE_ERROR)
    if _THINK_OPEN in head and head.index(_THINK_OPEN) > head.index(_THINK_CLOSE):
        return Parsed(None, PARSE_ERROR)
    if _THINK_OPEN in inner or _THINK_CLOSE in inner or _THINK_OPEN in tail:
        return Parsed(None, PARSE_ERROR)
    action = inner.strip()
    if action in legal_actions:
        return Parsed(action, "")
    return Parsed(None, ILLEGAL_ACTION)


def format_answer(action: str) -> str:
    return f"{_OPEN}{action}{_CLOSE}"


class GameAdapter(ABC):
    """What the rollout loop needs from a game. `state` is the adapter's own state object."""

    name: str
    num_players: int
    draw_bonus: bool = False  # whether a drawn game earns rewards.draw (board games only)
    cooperative: bool = False  # every seat shares one score (Hanabi): the partner is a policy
    perfect_information: bool = True  # False where seats hold hidden cards (poker, Hanabi)

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

    def outcome(self, returns: list[float], player: int) -> str:
        """win / draw / loss for a finished game without rule errors (zero-sum default)."""
        mine, best = returns[player], max(returns)
        others = [r for i, r in enumerate(returns) if i != player]
        if all(abs(r - mine) < 1e-9 for r in others):
            return "draw"
        return "win" if mine >= best else "loss"


_WS = re.compile(r"\s+")


def one_line(text: str, limit: int = 120) -> str:
    """A reply squeezed to one short line for transcripts and logs."""
    text = _WS.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."
