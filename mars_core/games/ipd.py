"""Three-Player Iterated Prisoner's Dilemma (TextArena `ThreePlayerIPD-v0`).

The env (`num_rounds=5, communication_turns=1`): 3 players, 5 rounds. Each round has a chat
phase (`game_state["phase"] == "conversation"`: one free-text turn per player, 0, 1, 2), then a
decision phase (one turn per player, 0, 1, 2) where a player names each opponent:
`[1 cooperate] [2 defect]`. After the third decision the env scores every unordered pair
(both cooperate 3 each, both defect 1 each, a defector against a cooperator 5, the cooperator
0), adds the gains to `game_state["scores"]`, advances `game_state["round"]` and resets
`game_state["decisions"]`. The final rewards rank the scores: evenly spaced in [-1, 1] from
the worst group to the best, all 0 when every score is equal.

Traps of the env this adapter closes: its parser ignores self-targets, unknown ids and any
other text, and silently turns a missing decision into "cooperate"; its own prompt's example
`[1 defect] [2 cooperate]` names player 1 itself for player 1. The Action Validator refuses all
of these. Chat: any non-empty text (stripped) of at most 1000 characters; longer is an invalid
action. Decision: only `[<id> cooperate]` / `[<id> defect]` tokens (any case, whitespace or
commas between), else a parsing failure; each of the two opponents named exactly once, else an
invalid action. The env receives `[a cooperate] [b defect]` sorted by id, lowercase.

Step facts: every step `{"round": r, "phase": "chat" | "decision"}`; the decision that resolved
the round adds `"round_gain": [gain of seat 0, 1, 2]` and the round's full decisions
`{"0": {"1": "cooperate", "2": "defect"}, "1": {...}, "2": {...}}` (also kept, one dict per
resolved round, in `state.memory["decisions"]` for the bots). Final facts: scores per seat,
number of rounds, the temptation payoff T and the rounds played.
"""
from __future__ import annotations

import copy
import random
import re

from mars_core.games.base import INVALID_ACTION, PARSING_FAILURE, Parsed, clip
from mars_core.games.textarena_games import TAState, TextArenaGame, check_chat
from mars_core.vocab import Outcome

PLAYERS = 3
ROUNDS = 5
TEMPTATION = 5
CHOICES = ("cooperate", "defect")
_TOKEN = r"\[\s*([0-9]{1,4})\s+(cooperate|defect)\s*\]"
_SHAPE = re.compile(rf"(?:{_TOKEN}[\s,]*)+", re.IGNORECASE)
_TOKENS = re.compile(_TOKEN, re.IGNORECASE)
_CHAT_LINES = ("I will cooperate if you do.", "Let's all cooperate this round.",
               "I am watching what you do.", "Trust has to be earned.", "Hello everyone.")
_ENV_EXAMPLE = "(i.e. '[1 defect] [2 cooperate]'; the default is 'cooperate')"


def opponents(player: int) -> tuple[int, int]:
    a, b = (q for q in range(PLAYERS) if q != player)
    return a, b


def format_decision(choices: dict[int, str]) -> str:
    """`{2: "defect", 1: "cooperate"}` -> `[1 cooperate] [2 defect]`."""
    return " ".join(f"[{q} {choices[q]}]" for q in sorted(choices))


def parse_decision(text: str, player: int) -> Parsed:
    """`Parsed("[a cooperate] [b defect]")` for a valid decision of `player`, else a typed
    error with its reason."""
    text = text.strip()
    if not _SHAPE.fullmatch(text):
        return Parsed(None, PARSING_FAILURE, f"{clip(text)!r} is not a decision like "
                      "[1 cooperate] [2 defect]")
    opps, choices = opponents(player), {}
    for digits, word in _TOKENS.findall(text):
        target = int(digits)
        if target == player:
            return Parsed(None, INVALID_ACTION, f"you are player {player}: name only your "
                          f"opponents {opps[0]} and {opps[1]}")
        if target not in opps:
            return Parsed(None, INVALID_ACTION, f"there is no opponent {target}; your "
                          f"opponents are {opps[0]} and {opps[1]}")
        if target in choices:
            return Parsed(None, INVALID_ACTION, f"player {target} is named more than once")
        choices[target] = word.lower()
    missing = [q for q in opps if q not in choices]
    if missing:
        return Parsed(None, INVALID_ACTION, f"no decision for player {missing[0]}: name both "
                      f"opponents {opps[0]} and {opps[1]}")
    return Parsed(format_decision(choices))


class ThreePlayerIPD(TextArenaGame):
    name = "three_player_ipd"
    num_players = PLAYERS
    title = "the Three-Player Iterated Prisoner's Dilemma"
    env_class = "textarena.envs.ThreePlayerIPD.env:ThreePlayerIPDEnv"
    env_kwargs = {"num_rounds": ROUNDS, "communication_turns": 1, "cooperate_reward": 3,
                  "defect_reward": TEMPTATION, "sucker_reward": 0, "mutual_defect_reward": 1}
    action_help = ("Each of the 5 rounds, every player first sends one chat message (at most "
                   "1000 characters), e.g. <answer>I will cooperate if you do.</answer>, then "
                   "decides once for each of the two opponents, naming each exactly once, "
                   "e.g. <answer>[1 cooperate] [2 defect]</answer>.")

    def rules(self, player: int) -> str:
        a, b = opponents(player)
        return super().rules(player).replace("[1 cooperate] [2 defect]",
                                             f"[{a} cooperate] [{b} defect]")

    def observation(self, state: TAState, player: int, moves_since) -> str:
        a, b = opponents(player)
        text = super().observation(state, player, moves_since)
        return text.replace(_ENV_EXAMPLE, f"(e.g. '[{a} defect] [{b} cooperate]'; "
                                          "name both opponents)")

    def outcome(self, returns: list[float], player: int) -> str:
        """The env ranks the final scores into returns spread over [-1, 1]: the top group
        wins, the bottom group loses, a middle player (return 0 of three) draws."""
        mine = returns[player]
        return Outcome.WIN if mine > 0 else Outcome.LOSS if mine < 0 else Outcome.DRAW

    def in_chat(self, state: TAState) -> bool:
        return self.ta(state).game_state["phase"] == "conversation"

    def check_action(self, state: TAState, text: str) -> Parsed:
        if not isinstance(text, str):
            return Parsed(None, PARSING_FAILURE, "the action is not text")
        if self.in_chat(state):
            return check_chat(text)
        return parse_decision(text, self.current_player(state))

    def random_action(self, state: TAState, rng: random.Random) -> str:
        if self.in_chat(state):
            return rng.choice(_CHAT_LINES)
        return format_decision({q: rng.choice(CHOICES)
                                for q in opponents(self.current_player(state))})

    def instruction(self, state: TAState, player: int) -> str:
        r = self.ta(state).game_state["round"]
        if self.in_chat(state):
            return (f"Round {r} of {ROUNDS}, chat turn: say something to the other players, "
                    "e.g. <answer>I will cooperate if you do.</answer>")
        a, b = opponents(player)
        return (f"Round {r} of {ROUNDS}, decision: name each opponent once, cooperate or "
                f"defect, e.g. <answer>[{a} cooperate] [{b} defect]</answer>")

    def snapshot(self, state: TAState):
        gs = self.ta(state).game_state
        return gs["round"], gs["phase"], dict(gs["scores"]), copy.deepcopy(gs["decisions"])

    def step_facts(self, state: TAState, player: int, action: str, before) -> dict:
        rnd, phase, scores, decisions = before
        facts: dict = {"round": rnd, "phase": "chat" if phase == "conversation" else "decision"}
        gs = self.ta(state).game_state
        if gs["round"] > rnd:  # the third decision: the round was resolved
            decisions[player] = {int(q): c.lower() for q, c in _TOKENS.findall(action)}
            full = {str(p): {str(q): c for q, c in row.items()} for p, row in decisions.items()}
            facts["round_gain"] = [gs["scores"][p] - scores[p] for p in range(PLAYERS)]
            facts["decisions"] = full
            state.memory.setdefault("decisions", []).append(copy.deepcopy(full))
        return facts

    def final_info(self, state: TAState) -> dict:
        gs = self.ta(state).game_state
        return {"scores": [gs["scores"][p] for p in range(PLAYERS)], "num_rounds": ROUNDS,
                "T": TEMPTATION, "rounds_played": min(gs["round"] - 1, ROUNDS)}


class TitForTatBot:
    """`bot:tit-for-tat`: cooperates with both opponents in round 1, then does to each
    opponent what that opponent did to it in the previous round."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def act(self, adapter: ThreePlayerIPD, state: TAState) -> str:
        if adapter.in_chat(state):
            return "I cooperate with those who cooperate with me."
        me = adapter.current_player(state)
        rounds = state.memory.get("decisions", [])
        return format_decision({q: rounds[-1][str(q)][str(me)] if rounds else "cooperate"
                                for q in opponents(me)})


class AlwaysDefectBot:
    """`bot:always-defect`: defects against both opponents every round."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def act(self, adapter: ThreePlayerIPD, state: TAState) -> str:
        if adapter.in_chat(state):
            return "I look out for myself."
        return format_decision({q: "defect" for q in opponents(adapter.current_player(state))})
