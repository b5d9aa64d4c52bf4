"""The TextArena plumbing every MindGames adapter shares (textarena 0.7.4, fully offline).

Traps of textarena 0.7.4 this layer closes (SPEC section 1):
- seeding calls `random.seed` and the games draw from Python's global `random` while they
  play (Mafia's vote ties and speaking order): every env call here runs inside the episode's
  own random state (`_private_random`), so concurrent episodes are reproducible and the
  caller's global random state is never touched;
- a reused env keeps old history: every episode builds a fresh env object;
- the games handle invalid moves inconsistently and their parsers take the first bracketed
  match: only an action that passed the Action Validator (`check_action`), stripped of all
  reasoning, is ever passed to `env.step`; an action the env still rejects is a validator
  bug and raises (tests play thousands of bot and random actions to keep it that way);
- stepping after the end is not blocked: `is_terminal` is ours.

We drive the raw env classes (no TextArena wrappers) with the registered `-v0` arguments, and
render the messages each seat receives ourselves: the game's own prompt on a seat's first turn,
then what happened since its last turn, then what to answer now.
"""
from __future__ import annotations

import copy
import importlib
import random
from contextlib import contextmanager
from typing import Any

from mars_core.games.base import INVALID_ACTION, PARSING_FAILURE, GameAdapter, Parsed

GAME_ID = -1  # TextArena's sender id for game messages
MAX_CHAT = 1000  # characters in one free-chat message (IPD chat, Mafia discussion)


def check_chat(text: str, what: str = "chat message") -> Parsed:
    """A free-chat message (or any text `what`): non-empty once stripped, at most MAX_CHAT
    characters."""
    message = text.strip()
    if not message:
        return Parsed(None, PARSING_FAILURE, f"the {what} is empty")
    if len(message) > MAX_CHAT:
        return Parsed(None, INVALID_ACTION,
                      f"the {what} has {len(message)} characters, more than {MAX_CHAT}")
    return Parsed(message)


def env_class(path: str):
    """Import a TextArena env class ("module:Class"). Importing textarena draws from the global
    random generator, so the caller's random state is saved and restored around it."""
    module, cls = path.split(":")
    outer = random.getstate()
    try:
        return getattr(importlib.import_module(module), cls)
    finally:
        random.setstate(outer)


class TAState:
    """One episode: a fresh env, the episode's private random state and our bookkeeping."""

    def __init__(self, env, seed: int) -> None:
        self.env = env
        self.seed = seed
        self.random_state = random.Random(seed).getstate()
        self.done = False
        self.rewards: list[float] | None = None
        self.memory: dict = {}  # adapter-specific facts kept across steps (e.g. IPD decisions)


class _InvalidMoveSpy:
    """Counts the env's own `set_invalid_move` calls (its step info is always empty)."""

    def __init__(self, inner) -> None:
        self.inner, self.reasons = inner, []

    def __call__(self, *args, **kwargs):
        self.reasons.append(str(kwargs.get("reason", args[0] if args else "")))
        return self.inner(*args, **kwargs)


@contextmanager
def _private_random(state: TAState):
    """Run TextArena code on the episode's own random state, restoring the caller's after."""
    outer = random.getstate()
    random.setstate(state.random_state)
    try:
        yield
    finally:
        state.random_state = random.getstate()
        random.setstate(outer)


class TextArenaGame(GameAdapter):
    """Shared TextArena plumbing. A game subclass names its env class and arguments and adds
    its rules for the Action Validator (`check_action`), a random valid action, the facts of
    each step (`step_facts`) and of the finished game (`final_info`)."""

    env_class: str = ""  # "module:Class" of the raw env
    env_kwargs: dict = {}  # the arguments textarena registers for the `-v0` id
    title: str = ""
    action_help: str = ""  # how actions look, with examples that are themselves valid
    perfect_information = False
    cooperative = False

    def make_env(self):
        return env_class(self.env_class)(**self.env_kwargs)

    # -- engine plumbing -------------------------------------------------------------------
    def new_state(self, seed: int) -> TAState:
        state = TAState(None, seed)
        with _private_random(state):  # some constructors draw too (Taboo's category)
            state.env = self.make_env()
            state.env.reset(num_players=self.num_players, seed=seed)
        ta_state = self.ta(state)
        ta_state.set_invalid_move = _InvalidMoveSpy(ta_state.set_invalid_move)
        return state

    def ta(self, state: TAState):
        """The env's TextArena state object (game_state, current player, observations)."""
        return state.env.state

    def current_player(self, state: TAState) -> int:
        return int(self.ta(state).current_player_id)

    def is_terminal(self, state: TAState) -> bool:
        return state.done

    def legal_actions(self, state: TAState) -> dict[str, int]:
        return {}  # free text: actions are checked by rule (`check_action`), not listed

    def apply(self, state: TAState, action_id: int) -> list[float]:
        raise TypeError(f"{self.name} takes text actions: use play(state, action)")

    def play(self, state: TAState, action: str) -> tuple[list[float], dict]:
        """Step the env with a validated action. Rewards are 0 until the game ends, then the
        env's final rewards (win +1, loss -1, draw 0; IPD: its ranking in [-1, 1])."""
        if state.done:
            raise RuntimeError(f"{self.name}: the episode is over")
        player = self.current_player(state)
        before = self.snapshot(state)
        spy = self.ta(state).set_invalid_move
        with _private_random(state):
            done, _ = state.env.step(action)
            if spy.reasons:
                raise RuntimeError(f"{self.name}: the env rejected {action!r} ({spy.reasons[-1]}), "
                                   "which passed the Action Validator (a validator bug)")
            info = self.step_facts(state, player, action, before)
            if done:
                rewards, _ = state.env.close()
                state.done = True
                state.rewards = [float(rewards.get(p, 0.0)) for p in range(self.num_players)]
        return (list(state.rewards) if done else [0.0] * self.num_players), info

    def returns(self, state: TAState) -> list[float]:
        return list(state.rewards) if state.rewards is not None else [0.0] * self.num_players

    def forfeit_return(self, state: TAState, player: int) -> float:
        return -1.0  # a rule error loses the game

    def utility_range(self) -> tuple[float, float]:
        return -1.0, 1.0

    def clone(self, state: TAState) -> TAState:
        return copy.deepcopy(state)

    def role(self, player: int) -> str:
        return f"player_{player}"

    def rules(self, player: int) -> str:
        return (f"You are playing {self.title}. The game's own instructions arrive in your first "
                "message; after that you see what happened since your last turn.\n"
                "Think briefly, then give exactly one action as <answer>ACTION</answer>, with "
                f"nothing after it.\n{self.action_help}")

    def observation(self, state: TAState, player: int, moves_since: list[tuple[int, str]]) -> str:
        """The messages this seat received since its last turn (TextArena hands each message
        out once), then what to answer now. Other seats' moves come from the env's messages,
        so `moves_since` is not used."""
        env_player, messages = state.env.get_observation()
        lines = []
        for sender, text, _kind in messages:
            if sender == player:
                continue  # its own action, already in the conversation
            text = str(text).strip()
            if not text:
                continue
            lines.append(text if sender == GAME_ID else f"[Player {sender}] {text}")
        lines.append(self.instruction(state, player))
        return "\n".join(lines)

    # -- per game ---------------------------------------------------------------------------
    def snapshot(self, state: TAState) -> Any:
        """Whatever `step_facts` needs from before the step (default: nothing)."""
        return None

    def step_facts(self, state: TAState, player: int, action: str, before: Any) -> dict:
        """The step's facts for the post-episode stages (default: none)."""
        return {}

    def instruction(self, state: TAState, player: int) -> str:
        """What to answer now (the phase's action format)."""
        return "Your move. " + self.action_help

    def check_action(self, state: TAState, text: str) -> Parsed:  # pragma: no cover - abstract
        raise NotImplementedError

    def random_action(self, state: TAState, rng: random.Random) -> str:  # pragma: no cover
        raise NotImplementedError
