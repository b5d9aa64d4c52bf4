"""Colonel Blotto (TextArena `ColonelBlotto-v0`): 2 commanders, 20 units over fields A, B, C
each round, the majority of fields wins the round, the first to 5 of 9 rounds wins the match.
Commanders allocate one after the other, but neither sees the other's allocation before the
round is resolved.

Action: `[A7 B7 C6]` (fields in any order, `A:7`, commas allowed; omitted fields get 0).
Rules (Action Validator): only the fields A, B, C, each at most once, non-negative integers
summing to exactly 20. The game receives the canonical form `[A7 B7 C6]`.

Step facts: `{"round": r, "allocation": {"A": a, "B": b, "C": c}}`, plus on the allocation
that resolved the round `"round_result": [result of seat 0, result of seat 1]` with results
"win", "loss" or "tie". Final facts: rounds won per seat, rounds played, rounds needed.
"""
from __future__ import annotations

import random
import re

from mars_core.games.base import INVALID_ACTION, PARSING_FAILURE, Parsed, clip
from mars_core.games.textarena_games import TAState, TextArenaGame

FIELDS = ("A", "B", "C")
UNITS = 20
_SHAPE = re.compile(r"\[\s*(?:[A-Za-z]\s*:?\s*\d{1,4}[\s,]*)+\]")
_TOKEN = re.compile(r"([A-Za-z])\s*:?\s*(\d{1,4})")


def parse_allocation(text: str) -> Parsed:
    """`Parsed("[A7 B7 C6]")` for a valid allocation, else a typed error with its reason."""
    if not _SHAPE.fullmatch(text):
        return Parsed(None, PARSING_FAILURE,
                      f"{clip(text)!r} is not an allocation like [A7 B7 C6]")
    alloc: dict[str, int] = {}
    for letter, units in _TOKEN.findall(text):
        field = letter.upper()
        if field not in FIELDS:
            return Parsed(None, INVALID_ACTION, f"unknown field {field}; the fields are A, B, C")
        if field in alloc:
            return Parsed(None, INVALID_ACTION, f"field {field} is allocated twice")
        alloc[field] = int(units)
    total = sum(alloc.values())
    if total != UNITS:
        return Parsed(None, INVALID_ACTION, f"the allocation sums to {total}, not {UNITS}")
    return Parsed(format_allocation([alloc.get(f, 0) for f in FIELDS]))


def format_allocation(units: list[int]) -> str:
    return "[" + " ".join(f"{f}{u}" for f, u in zip(FIELDS, units)) + "]"


class ColonelBlotto(TextArenaGame):
    name = "colonel_blotto"
    num_players = 2
    title = "Colonel Blotto"
    env_class = "textarena.envs.ColonelBlotto.env:ColonelBlottoEnv"
    env_kwargs = {"num_fields": 3, "num_total_units": UNITS, "num_rounds": 9}
    action_help = ("Each round, allocate exactly 20 units over the fields A, B and C, e.g. "
                   "<answer>[A7 B7 C6]</answer>. Win a field with more units than your "
                   "opponent there; win the round with more fields; win the match with 5 "
                   "of 9 rounds.")

    def role(self, player: int) -> str:
        return ("alpha", "beta")[player]

    def observation(self, state: TAState, player: int, moves_since) -> str:
        # the env's own format hint `[A4 B2 C2]` sums to 8: show a valid example instead
        return super().observation(state, player, moves_since).replace("[A4 B2 C2]", "[A7 B7 C6]")

    def check_action(self, state: TAState, text: str) -> Parsed:
        return parse_allocation(text)

    def random_action(self, state: TAState, rng: random.Random) -> str:
        a, b = sorted(rng.randint(0, UNITS) for _ in range(2))
        return format_allocation([a, b - a, UNITS - b])

    def instruction(self, state: TAState, player: int) -> str:
        gs = self.ta(state).game_state
        won = gs["scores"]
        return (f"Round {gs['current_round']} of 9 (rounds won: you {won[player]}, opponent "
                f"{won[1 - player]}). Allocate exactly 20 units over A, B and C, e.g. "
                "<answer>[A7 B7 C6]</answer>.")

    def snapshot(self, state: TAState):
        gs = self.ta(state).game_state
        return gs["current_round"], dict(gs["scores"])

    def step_facts(self, state: TAState, player: int, action: str, before) -> dict:
        round_before, scores_before = before
        units = [int(u) for _, u in _TOKEN.findall(action)]
        facts: dict = {"round": round_before, "allocation": dict(zip(FIELDS, units))}
        gs = self.ta(state).game_state
        if gs["current_round"] > round_before:  # both allocated: the round was resolved
            gained = [gs["scores"][p] - scores_before[p] for p in (0, 1)]
            facts["round_result"] = (["win", "loss"] if gained[0] else
                                     ["loss", "win"] if gained[1] else ["tie", "tie"])
        return facts

    def final_info(self, state: TAState) -> dict:
        gs = self.ta(state).game_state
        rounds = self.env_kwargs["num_rounds"]
        return {"rounds_won": [gs["scores"][0], gs["scores"][1]],
                "rounds_played": gs["current_round"] - 1, "rounds_needed": rounds // 2 + 1,
                "num_rounds": rounds}


class FocusBot:
    """`bot:blotto-focus`: a simple allocator that concentrates on two random fields
    (7 to 13 units on one, the rest on the other), conceding the third."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def act(self, adapter, state) -> str:
        first, second = self.rng.sample(range(3), 2)
        units = [0, 0, 0]
        units[first] = self.rng.randint(7, 13)
        units[second] = UNITS - units[first]
        return format_allocation(units)


# the allocations `bot:blotto-mix` spreads over: every field 5 to 8 units (e.g. [A7 B7 C6]),
# each of which wins a round against a uniformly random allocation 0.31-0.33 more often than it
# loses one (all 231 counted); a focus allocation (two fields, one conceded) is about even
SPREAD = tuple((a, b, UNITS - a - b) for a in range(5, 9) for b in range(5, 9)
               if 5 <= UNITS - a - b <= 8)


class MixBot:
    """`bot:blotto-mix`: each round, half the time `bot:blotto-focus`'s allocation, else a
    spread one (every field 5 to 8 units, uniformly among them): demonstrations of two kinds
    of play, one better against a random allocator, for a warm start that leaves RL the choice
    (docs/lab.md)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.focus = FocusBot(self.rng.getrandbits(64))

    def act(self, adapter, state) -> str:
        if self.rng.random() < 0.5:
            return self.focus.act(adapter, state)
        return format_allocation(list(self.rng.choice(SPREAD)))
