"""Any registered TextArena `-v0` game, played without an adapter of its own (textarena 0.7.4).

`adapter("TicTacToe-v0")` builds a `TextArenaGame` subclass named `textarena:TicTacToe-v0`
from the registration alone (its env class and `-v0` arguments); `describe` says what a check
needs without playing; `playable()` lists every id with the reason it cannot be played, if any.

The game is its own rulebook: `check_action` steps a copy of the episode (env and private
random state) with the stripped text, and refuses it when the env calls `set_invalid_move`
(the spy of `textarena_games` counts those) or raises. Most TextArena parsers take the first
bracketed match, so a refused text without any `[...]` is a parsing failure, one with a
bracketed part an invalid action with the env's own reason. Free-chat turns (negotiation,
IPD's talk) accept any text: there, text without brackets is valid too.

A random action (`bot:random`) is drawn from candidates: first the bracketed tokens of the
messages the seat has received (prompts spell moves such as `[take 2]` or list them) and the
move lists the env state exposes (`game_state` keys naming valid/legal moves, a
`get_valid_moves`-like method); if none is valid, templates filled with small numbers
(`[play X]` -> `[play 2]`) and variants of the seen tokens with other digits and board letters
(`[a4]` -> `[c2]`). `observation` consumes the env's messages (each is handed out once), so
the tokens a seat has seen are kept in `state.memory`; messages not yet handed out are read in
place. The first valid candidate of a shuffled tier wins: a uniform draw among its valid ones.
When none is valid the bot answers the first candidate and forfeits: so do board games whose
prompt shows one example move (Alquerque, Breakthrough, Lines of Action), games whose moves
follow no template we fill (Colonel Blotto, Chopsticks, Tak, Two Dollar, New Recruit) and
Character Conclave, whose discussion step always raises in 0.7.4.

Seats are `player_0`, ...; no step facts. An env without a turn limit of its own
(`state.max_turns`) gets `move_limit` = 100 moves (Othello's 60 placements and passes fit),
after which the game is scored as a draw (every return 0). Returns are the env's rewards (win
1, loss -1, draw 0). Perfect information is claimed only for the games in `PERFECT_INFORMATION`.

Refused ids (`ValueError`, one line naming the id): unknown ones, single-player games, and
games that need an LLM judge over the network (OpenRouter), nltk data (its download, at import
or construction, is stubbed: the missing corpus then fails the reset), data files the package
does not ship, a missing package (gym), or whose module does not compile on this Python (0.7.4
uses Python 3.12 f-strings). `describe` builds and resets one env per id, once (cached).
"""
from __future__ import annotations

import contextlib
import copy
import io
import itertools
import random
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from mars_core.games.base import INVALID_ACTION, PARSING_FAILURE, GameAdapter, Parsed, clip
from mars_core.games.textarena_games import (MAX_CHAT, TAState, TextArenaGame, _private_random,
                                             check_chat, env_class)

PREFIX = "textarena:"
MAX_SEATS = 15  # the most seats a TextArena game takes (Character Conclave, Secret Mafia)
DEFAULT_MOVE_LIMIT = 100
MAX_TRIES = 200  # candidates checked per random action (each check copies the env)
CHAT = "I have nothing more to say."  # the random bot's line when no candidate is valid
# board games whose seats see the whole state (any other game may hide something from a seat)
PERFECT_INFORMATION = frozenset({
    "Alquerque-v0", "Breakthrough-v0", "Checkers-v0", "Chess-v0", "Chopsticks-v0",
    "ConnectFour-v0", "Crusade-v0", "LinesOfAction-v0", "Nim-v0", "Othello-v0",
    "ReverseTicTacToe-v0", "SantoriniBaseFixed-v0", "SimpleTak-v0", "Tak-v0",
    "ThreePlayerTicTacToe-v0", "TicTacToe-v0", "UltimateTicTacToe-v0", "WildTicTacToe-v0"})

_TOKEN = re.compile(r"\[[^\[\]\n]{1,80}\]")
# placeholders in the instructions' templates: `[<number>]`, `[play X]`, `[pile quantity]`
_SLOT = re.compile(r"<[^<>\[\]]{1,30}>|\b[XYN]\b")
_WORD_SLOT = re.compile(r"\b(?:amount|number|quantity|pile|row|col|column|macro|micro|index)\b")
_DIGITS = re.compile(r"\d+")
_FILE = re.compile(r"(?<![A-Za-z])[a-jA-J](?=\d)")  # a board file letter before its rank
_FORMAT_TAGS = ("<answer>", "</answer>", "<think>", "</think>")
_LEGAL_WORDS = ("valid", "legal", "available", "possible")
_LEGAL_METHODS = ("get_valid_moves", "_get_valid_moves", "get_legal_moves", "_get_legal_moves",
                  "_legal_moves_for_player")
_FILLS = (*range(11), 20, 50, 100)  # what a placeholder is filled with
MAX_FILLS = 256  # filled texts per template (all combinations up to this many, else a sample)
MAX_VARIANTS = 400  # variants of the seen tokens per random action


@lru_cache(maxsize=1)
def _registry() -> dict:
    """textarena's registry (importing textarena draws from the global random generator)."""
    outer = random.getstate()
    try:
        from textarena.envs.registration import ENV_REGISTRY
    finally:
        random.setstate(outer)
    return ENV_REGISTRY


def env_ids() -> tuple[str, ...]:
    """Every registered TextArena id ending in `-v0`, sorted."""
    return tuple(sorted(i for i in _registry() if i.endswith("-v0")))


def _bare(env_id: str) -> str:
    """The registered id of `env_id` (with or without the `textarena:` prefix)."""
    bare = str(env_id).removeprefix(PREFIX)
    if bare not in env_ids():
        raise ValueError(f"{PREFIX}{bare}: unknown TextArena environment; see `mars games`")
    return bare


@contextlib.contextmanager
def _no_downloads():
    """`nltk.download` stubbed: some envs call it at import or construction (a network fetch);
    a game that then lacks nltk's data fails at reset, offline or not."""
    outer = random.getstate()
    try:
        import nltk  # a textarena dependency; importing it draws from the global random
    finally:
        random.setstate(outer)
    saved, nltk.download = nltk.download, lambda *args, **kwargs: True
    try:
        yield
    finally:
        nltk.download = saved


@dataclass(frozen=True)
class _Probe:
    """What one reset of the env told (`refusal` says why it cannot be played, if so)."""

    num_players: int = 0
    move_limit: int | None = None
    refusal: str = ""


def _calls_an_llm(env: Any, kwargs: dict) -> bool:
    """Whether the env holds a TextArena agent or an LLM jury (they call OpenRouter)."""
    from textarena.core import Agent

    values = [*vars(env).values(), *kwargs.values()]
    values += [v for x in list(values) if isinstance(x, (list, tuple)) for v in x]
    return any(isinstance(v, Agent) or "Jury" in getattr(v, "__name__", type(v).__name__)
               for v in values)


def _reason(exc: BaseException) -> str:
    """Why an env could not be built or reset, in one line."""
    text = clip(re.sub(r"[^\s']*/(?=textarena/)", "", f"{type(exc).__name__}: {exc}"), 100)
    if isinstance(exc, SyntaxError):
        return f"its module does not compile on Python {sys.version.split()[0]} ({text})"
    if isinstance(exc, ModuleNotFoundError):
        return f"needs the package {exc.name!r}, which is not installed"
    if "openrouter" in str(exc).lower():
        return "needs an LLM judge over the network (OpenRouter)"
    if isinstance(exc, LookupError) and "nltk" in str(exc).lower():
        corpus = re.search(r"Resource\W+(\w+)|$", str(exc)).group(1) or "a corpus"
        return f"needs nltk data ({corpus!r}), downloaded from the network"
    if isinstance(exc, FileNotFoundError):
        return f"needs data files textarena does not ship ({text})"
    return f"fails to start ({text})"


def _seat_count(cls: type, kwargs: dict) -> tuple[int, Any]:
    """The seats we use (2 when the env takes 2, else its minimum) and an env reset with them.
    An AssertionError is the env refusing the count; any other error is raised."""
    first = None
    for n in (2, *range(3, MAX_SEATS + 1), 1):
        env = cls(**copy.deepcopy(kwargs))
        try:
            env.reset(num_players=n, seed=0)
        except AssertionError as exc:
            first = first or exc
        else:
            return n, env
    raise ValueError(f"takes no number of seats from 1 to {MAX_SEATS} ({clip(str(first))})")


@lru_cache(maxsize=None)
def _probe(bare: str) -> _Probe:
    """Build and reset the env once (global random state and stdout restored after)."""
    spec = _registry()[bare]
    outer = random.getstate()
    try:
        with contextlib.redirect_stdout(io.StringIO()), _no_downloads():
            n, env = _seat_count(env_class(spec.entry_point), spec.kwargs)
            copy.deepcopy(env)  # the Action Validator steps copies
    except Exception as exc:  # noqa: BLE001 - any failure is a refusal with its reason
        return _Probe(refusal=_reason(exc))
    finally:
        random.setstate(outer)
    if n == 1:
        return _Probe(refusal="a single-player game: self-play has no meaning")
    if _calls_an_llm(env, spec.kwargs):
        return _Probe(refusal="needs an LLM judge over the network (OpenRouter)")
    limit = None if getattr(env.state, "max_turns", None) else DEFAULT_MOVE_LIMIT
    return _Probe(n, limit)


def title(bare: str) -> str:
    """The readable name of an id: `IteratedPrisonersDilemma-v0` -> `Iterated Prisoners Dilemma`."""
    name = bare.removesuffix("-v0")
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", " ", name)


def describe(env_id: str) -> dict:
    """What a check needs, without playing: `num_players` (the seats we use), whether seats may
    hold hidden information, `cooperative` (never) and the readable `title`. Raises ValueError
    with a one-line reason for an id that cannot be played."""
    bare = _bare(env_id)
    probe = _probe(bare)
    if probe.refusal:
        raise ValueError(f"{PREFIX}{bare}: {probe.refusal}")
    return {"num_players": probe.num_players,
            "hidden_information": bare not in PERFECT_INFORMATION,
            "cooperative": False, "title": title(bare)}


def playable() -> list[tuple[str, str]]:
    """Every id with "" when it can be played, else the one-line reason it cannot."""
    return [(bare, _probe(bare).refusal) for bare in env_ids()]


def adapter(env_id: str) -> type[GameAdapter]:
    """The adapter class of a playable id (the same class object every time)."""
    return _adapter(_bare(env_id))


@lru_cache(maxsize=None)
def _adapter(bare: str) -> type[GameAdapter]:
    info, spec = describe(bare), _registry()[bare]
    return type("TextArena_" + re.sub(r"\W", "_", bare), (GenericTextArenaGame,), {
        "__module__": __name__, "name": f"{PREFIX}{bare}", "env_id": bare,
        "env_class": spec.entry_point, "env_kwargs": dict(spec.kwargs),
        "num_players": info["num_players"], "title": info["title"],
        "perfect_information": not info["hidden_information"],
        "move_limit": _probe(bare).move_limit})


def _as_actions(value: Any) -> list[str]:
    """Bracketed action texts from a move list the env keeps (strings, [r, c] pairs, dict keys)."""
    if isinstance(value, str):
        return _TOKEN.findall(value) or [f"[{value}]"]
    if isinstance(value, dict):
        value = list(value)
    if not isinstance(value, (list, tuple, set, frozenset)):
        return []
    items = [i for i in list(value)[:500] if isinstance(i, (str, int, float, list, tuple))]
    return [i if isinstance(i, str) and i.startswith("[") else
            "[" + (", ".join(map(str, i)) if isinstance(i, (list, tuple)) else str(i)) + "]"
            for i in items]


def _slot(token: str) -> re.Pattern | None:
    """The placeholder pattern of a template token (`[play X]`, `[row col]`), else None; a
    word such as `col` is a placeholder only in a token without digits (`[col 3]` is a move)."""
    if _SLOT.search(token):
        return _SLOT
    return _WORD_SLOT if _WORD_SLOT.search(token) and not _DIGITS.search(token) else None


def _fills(token: str, rng: random.Random) -> set[str]:
    """A template with its placeholders filled with small numbers: `[play X]` -> `[play 2]`."""
    slot = _slot(token)
    if slot is None:
        return set()
    slots = len(slot.findall(token))
    combos = list(itertools.product(_FILLS, repeat=slots)) if len(_FILLS) ** slots <= MAX_FILLS \
        else [tuple(rng.choice(_FILLS) for _ in range(slots)) for _ in range(MAX_FILLS)]
    return {slot.sub(lambda _, values=iter(c): str(next(values)), token) for c in combos}


def _variant(token: str, rng: random.Random) -> str:
    """`token` with other numbers and board letters: `[a2 a3]` -> `[c4 b3]`."""
    token = _DIGITS.sub(lambda m: str(rng.randint(0, max(9, 2 * int(m.group()[:6])))), token)
    return _FILE.sub(lambda m: chr((ord("a") if m.group().islower() else ord("A"))
                                   + rng.randrange(10)), token)


def _guesses(seen: set[str], plain: set[str], rng: random.Random) -> set[str]:
    """The second tier of candidates: every template filled, variants of the plain tokens."""
    out: set[str] = set()
    for token in sorted(seen - plain):
        out |= _fills(token, rng)
    shaped = sorted(t for t in plain if _DIGITS.search(t) or _FILE.search(t))
    out |= {_variant(shaped[i % len(shaped)], rng) for i in range(MAX_VARIANTS if shaped else 0)}
    return {t for t in out if _usable(t)}


def _usable(text: str) -> bool:
    return 0 < len(text) <= MAX_CHAT and not any(tag in text for tag in _FORMAT_TAGS)


class GenericTextArenaGame(TextArenaGame):
    """A TextArena game played from its registration alone (built by `adapter`)."""

    env_id: str = ""
    action_help = ("Write your action in square brackets exactly as the game's instructions "
                   "describe, e.g. <answer>[your move]</answer>; the game reads the first "
                   "bracketed part.")

    def make_env(self):
        # a copy: some envs keep (and change) the lists they are given, e.g. Nim's piles
        with _no_downloads():
            return env_class(self.env_class)(**copy.deepcopy(self.env_kwargs))

    def new_state(self, seed: int) -> TAState:
        state = super().new_state(seed)
        state.memory.update(seen={p: set() for p in range(self.num_players)}, moves=0)
        return state

    def observation(self, state: TAState, player: int, moves_since) -> str:
        self._remember(state, player)  # before the env hands the messages out
        return super().observation(state, player, moves_since)

    def play(self, state: TAState, action: str) -> tuple[list[float], dict]:
        rewards, info = super().play(state, action)
        state.memory["moves"] += 1
        if not state.done and self.move_limit and state.memory["moves"] >= self.move_limit:
            state.done, state.rewards = True, [0.0] * self.num_players  # a draw as it stands
            return list(state.rewards), {**info, "move_limit": self.move_limit}
        return rewards, info

    # -- Action Validator ------------------------------------------------------------------
    def check_action(self, state: TAState, text: str) -> Parsed:
        if not isinstance(text, str):
            return Parsed(None, PARSING_FAILURE, "the action is not text")
        shaped = check_chat(text, "action")  # non-empty, at most MAX_CHAT characters
        if shaped.action is None:
            return shaped
        action = shaped.action
        refused = self._refusal(state, action)
        if refused is None:
            return Parsed(action)
        if not _TOKEN.search(action):
            return Parsed(None, PARSING_FAILURE,
                          f"{clip(action, 40)!r} has no bracketed action like [move]")
        return Parsed(None, INVALID_ACTION, f"the game refused it: {clip(refused, 100)}")

    def _refusal(self, state: TAState, action: str) -> str | None:
        """The env's reason for refusing `action` on a copy of the episode, None if accepted."""
        if state.done:
            return "the game is over"
        probe = copy.copy(state)  # the env and random state are the probe's own; memory is shared
        try:
            probe.env = copy.deepcopy(state.env)
            spy = self.ta(probe).set_invalid_move
            before = len(spy.reasons)
            with _private_random(probe), contextlib.redirect_stdout(io.StringIO()):
                probe.env.step(action)
        except Exception as exc:  # noqa: BLE001 - the env failing on a text refuses it
            return f"the game failed on it ({type(exc).__name__}: {exc})"
        return spy.reasons[-1] if len(spy.reasons) > before else None

    # -- random play -----------------------------------------------------------------------
    def random_action(self, state: TAState, rng: random.Random) -> str:
        player = self.current_player(state)
        seen = self._remember(state, player) | set(self._listed(state, player))
        plain = {t for t in seen if _usable(t) and _slot(t) is None}
        found = self._first_valid(state, plain, rng)
        if found is None:  # the second tier: templates filled, variants of the seen tokens
            found = self._first_valid(state, _guesses(seen, plain, rng) - plain, rng)
        if found is None and self.check_action(state, CHAT).action is not None:
            found = CHAT  # a free-chat turn whose messages spell no bracketed token
        return found or min(plain, default=CHAT)  # nothing valid: the bot forfeits

    def _first_valid(self, state: TAState, texts: set[str], rng: random.Random) -> str | None:
        """The first valid text in a shuffled order: a uniform draw among the valid ones."""
        order = sorted(texts)
        rng.shuffle(order)
        return next((t for t in order[:MAX_TRIES] if self.check_action(state, t).action), None)

    def _remember(self, state: TAState, player: int) -> set[str]:
        """The tokens this seat has received, including messages not yet handed out."""
        seen = state.memory.setdefault("seen", {}).setdefault(player, set())
        pending = getattr(self.ta(state), "observations", {}).get(player, [])
        seen |= {t for _sender, text, *_ in pending for t in _TOKEN.findall(str(text))}
        return set(seen)

    def _listed(self, state: TAState, player: int) -> list[str]:
        """Moves the env keeps in its state: game_state entries named for valid/legal moves,
        or what a get_valid_moves-like method returns (called on a copy)."""
        out: list[str] = []
        game_state = getattr(self.ta(state), "game_state", None)
        if isinstance(game_state, dict):
            for key, value in game_state.items():
                if isinstance(key, str) and any(w in key.lower() for w in _LEGAL_WORDS):
                    out += _as_actions(value)
        names = [m for m in _LEGAL_METHODS if callable(getattr(state.env, m, None))]
        if names:
            probe = copy.copy(state)
            probe.env = copy.deepcopy(state.env)
            with _private_random(probe), contextlib.redirect_stdout(io.StringIO()):
                for name in names:
                    with contextlib.suppress(Exception):
                        out += _as_actions(getattr(probe.env, name)(player))
        return out
