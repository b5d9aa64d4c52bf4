"""Codenames (TextArena `Codenames-v0`, `CodenamesEnv(hardcore=False)`, max_turns 80).

Four seats in two teams: Red is seat 0 (spymaster) and seat 1 (operative), Blue is seats 2
and 3. The board has 25 words: 9 red, 8 blue, 7 neutral and 1 assassin; spymasters see every
word's colour, operatives only the colours of revealed words. Red's spymaster moves first.

- A spymaster gives a clue `[word N]`; its operative may then guess up to N+1 words, one per
  move, `[word]`, or stop with `[pass]`. A guess of the team's own word lets it go on (while
  guesses remain); a neutral or opponent word ends the team's turn.
- The assassin loses the game for the guessing team; revealing all of a team's words wins it
  for that team (even when the opponent revealed the last one). At the move limit (checked
  before each move's turn count: the game is resolved on move 81) the team with more revealed
  words wins, equal counts draw. Returns: +1 for both seats of the winning
  team, -1 for the losers, 0 for all on a draw.

Env traps this adapter closes:
- importing the env module calls `nltk.download(...)` (network) and its word list needs nltk
  corpora: we import it with `nltk.download` stubbed and draw the board from our own list,
  `data/codenames_words.txt` (387 concrete nouns of 3-7 letters a-z; no word contains
  another, and none relates to the env's own example clue "wind");
- the env rejects moves without `set_invalid_move`: a malformed clue or guess silently skips
  the team's turn, and a clue that equals, contains or is part of a board word (checked
  case-sensitively) hands the other team the win. Our Action Validator checks the same rules
  case-insensitively and passes the env only lowercase canonical actions, so those branches
  are unreachable; `step_facts` raises if the env still rejected a move.

Action Validator: spymasters `[word N]` (letters only, N one digit 0-9), the word neither a
board word nor containing nor contained in one; operatives `[word]` naming an unrevealed board
word, or `[pass]`; all case-insensitive. Canonical forms: `[word N]`, `[word]`, `[pass]`,
lowercase.

Step facts: `{"kind": "clue", "team", "word", "number"}`, `{"kind": "guess", "team", "word",
"label"}` with label "own" / "opponent" / "neutral" / "assassin", `{"kind": "pass", "team"}`.
Final facts: `{"teams", "team_words", "found"}` (words revealed per team).
"""
from __future__ import annotations

import random
import re
from functools import lru_cache
from importlib import resources

from mars_core.games.base import INVALID_ACTION, PARSING_FAILURE, Parsed, clip
from mars_core.games.textarena_games import TAState, TextArenaGame, env_class

ENV_PATH = "textarena.envs.Codenames.env:CodenamesEnv"
TEAMS = ("red", "red", "blue", "blue")
ROLES = ("red_spymaster", "red_operative", "blue_spymaster", "blue_operative")
SPYMASTERS = (0, 2)
TEAM_CODE = {"red": "R", "blue": "B"}
TEAM_WORDS = {"red": 9, "blue": 8}
PASS = "[pass]"
EXAMPLE_CLUES = ("wind", "music", "summer", "travel")

_CLUE = re.compile(r"\[[ \t]*([A-Za-z]{1,40})[ \t]+([0-9])[ \t]*\]")
_GUESS = re.compile(r"\[[ \t]*([A-Za-z]{1,40})[ \t]*\]")


@lru_cache(maxsize=1)
def word_list() -> tuple[str, ...]:
    """Our board words (package data), in file order."""
    text = (resources.files("mars_core.games") / "data" / "codenames_words.txt").read_text("utf-8")
    return tuple(w.strip() for w in text.splitlines() if w.strip())


def clue_problem(clue: str, board) -> str:
    """Why `clue` may not be given on a board of these words ("" when it may)."""
    clue = clue.lower()
    for word in board:
        word = word.lower()
        if clue == word:
            return f"the clue {clue!r} is a board word"
        if word in clue:
            return f"the clue {clue!r} contains the board word {word!r}"
        if clue in word:
            return f"the clue {clue!r} is part of the board word {word!r}"
    return ""


def _base_env_class():
    """Import the env module with `nltk.download` stubbed (it downloads at import time).
    Importing nltk draws from the global random generator: its state is restored too."""
    outer = random.getstate()
    try:
        import nltk
    finally:
        random.setstate(outer)
    saved = nltk.download
    nltk.download = lambda *args, **kwargs: True
    try:
        return env_class(ENV_PATH)
    finally:
        nltk.download = saved


@lru_cache(maxsize=1)
def offline_env_class() -> type:
    """`CodenamesEnv` drawing its board from our word list (no nltk data, no network)."""

    def _load_word_list(self, hardcore: bool = False) -> None:
        self.word_list = list(word_list())

    return type("OfflineCodenamesEnv", (_base_env_class(),),
                {"_load_word_list": _load_word_list, "__module__": __name__})


def __getattr__(name: str):
    if name == "OfflineCodenamesEnv":  # lets pickle find the class built on first use
        return offline_env_class()
    raise AttributeError(name)


class Codenames(TextArenaGame):
    name = "codenames"
    num_players = 4
    fixed_teams = TEAMS
    move_limit = 80
    title = "Codenames"
    env_class = ENV_PATH
    env_kwargs = {"hardcore": False}
    action_help = ("Spymasters give a clue as <answer>[word N]</answer>: one word of letters "
                   "that is not a board word, does not contain one and is not part of one, "
                   "and a number N from 0 to 9. Operatives guess one unrevealed board word as "
                   "<answer>[word]</answer> (up to N+1 guesses per clue) or stop with "
                   "<answer>[pass]</answer>.")

    def make_env(self):
        return offline_env_class()(**self.env_kwargs)

    def role(self, player: int) -> str:
        return ROLES[player]

    # -- Action Validator ------------------------------------------------------------------
    def check_action(self, state: TAState, text: str) -> Parsed:
        if not isinstance(text, str):
            return Parsed(None, PARSING_FAILURE, "the action is not text")
        text = text.strip()
        if self.current_player(state) in SPYMASTERS:
            return self._check_clue(state, text)
        return self._check_guess(state, text)

    def _check_clue(self, state: TAState, text: str) -> Parsed:
        m = _CLUE.fullmatch(text)
        if not m:
            return Parsed(None, PARSING_FAILURE, f"{clip(text)!r} is not a clue like [wind 2] "
                          "(one word of letters a-z and a number 0-9)")
        word, number = m.group(1).lower(), m.group(2)
        problem = clue_problem(word, state.env.board)
        if problem:
            return Parsed(None, INVALID_ACTION, problem)
        return Parsed(f"[{word} {number}]")

    def _check_guess(self, state: TAState, text: str) -> Parsed:
        m = _GUESS.fullmatch(text)
        if not m:
            return Parsed(None, PARSING_FAILURE,
                          f"{clip(text)!r} is not a guess like [word] or [pass]")
        word = m.group(1).lower()
        if word == "pass":
            return Parsed(PASS)
        if word not in state.env.board:
            return Parsed(None, INVALID_ACTION, f"{word!r} is not on the board")
        if word in self._revealed(state):
            return Parsed(None, INVALID_ACTION, f"{word!r} is already revealed")
        return Parsed(f"[{word}]")

    def random_action(self, state: TAState, rng: random.Random) -> str:
        board = state.env.board
        if self.current_player(state) in SPYMASTERS:
            clues = [w for w in word_list() if not clue_problem(w, board)]
            return f"[{rng.choice(clues)} 1]"
        if rng.random() < 0.1:
            return PASS
        revealed = self._revealed(state)
        return f"[{rng.choice([w for w in board if w not in revealed])}]"

    # -- prompts ---------------------------------------------------------------------------
    def instruction(self, state: TAState, player: int) -> str:
        team = TEAMS[player]
        if player in SPYMASTERS:
            example = next((w for w in EXAMPLE_CLUES + word_list()
                            if not clue_problem(w, state.env.board)), "wind")
            return (f"You are the {team} spymaster. Give one clue: a single word (letters a-z) "
                    "that is not a board word, does not contain one and is not part of one, "
                    f"and how many of your team's words it points to (0-9), e.g. "
                    f"<answer>[{example} 2]</answer>.")
        gs = self.ta(state).game_state
        return (f"You are the {team} operative. Your spymaster's clue: "
                f"[{gs['last_clue']} {gs['last_number']}]; guesses left this turn: "
                f"{gs.get('remaining_guesses', 0)}. Guess one unrevealed board word as "
                "<answer>[word]</answer>, or stop guessing with <answer>[pass]</answer>.")

    # -- facts -----------------------------------------------------------------------------
    def snapshot(self, state: TAState):
        return len(self.ta(state).logs), frozenset(self._revealed(state))

    def step_facts(self, state: TAState, player: int, action: str, before) -> dict:
        n_logs, revealed_before = before
        team = TEAMS[player]
        if player in SPYMASTERS:
            word, number = _CLUE.fullmatch(action).groups()
            new_logs = [str(msg) for _, msg in self.ta(state).logs[n_logs:]]
            if not any(f"submitted [{word} {number}]" in msg for msg in new_logs):
                self._rejected(action)
            return {"kind": "clue", "team": team, "word": word, "number": int(number)}
        if action == PASS:
            return {"kind": "pass", "team": team}
        word = _GUESS.fullmatch(action).group(1)
        if word in revealed_before or word not in self._revealed(state):
            self._rejected(action)
        return {"kind": "guess", "team": team, "word": word,
                "label": label(state.env.board[word], team)}

    def final_info(self, state: TAState) -> dict:
        revealed = self._revealed(state)
        found = {team: sum(1 for w, c in state.env.board.items()
                           if c == TEAM_CODE[team] and w in revealed) for team in TEAM_WORDS}
        return {"teams": list(TEAMS), "team_words": dict(TEAM_WORDS), "found": found}

    def _revealed(self, state: TAState) -> set:
        return self.ta(state).game_state["guessed_words"]

    def _rejected(self, action: str) -> None:
        raise RuntimeError(f"{self.name}: the env rejected {action!r}, which passed the "
                           "Action Validator (a validator bug)")


def label(colour: str, team: str) -> str:
    """A board colour ("R", "B", "N", "A") as seen by the guessing team."""
    if colour == "A":
        return "assassin"
    if colour == "N":
        return "neutral"
    return "own" if colour == TEAM_CODE[team] else "opponent"
