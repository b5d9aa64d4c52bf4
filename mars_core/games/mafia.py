"""Secret Mafia (TextArena `SecretMafia-v0`: mafia_ratio 0.25, 3 discussion rounds), 6 players.

Roles are secret and drawn per episode from the seed: Mafia x round(0.25 n) (2 of 6), one
Doctor, one Detective, Villagers for the rest. The game starts at night and cycles through
phases (`env.phase`, also `game_state["phase"]`):
- Night-Mafia: each living Mafia member votes a victim among the living non-Mafia;
- Night-Doctor: the Doctor protects a living player other than themselves;
- Night-Detective: the Detective investigates a living player other than themselves;
- Day-Discussion: 3 rounds in which every living player says one free-text message;
- Day-Voting: every living player votes to eliminate one living player (themselves included).
Votes are tallied with ties broken at random; the Doctor's protection cancels the night kill.
The Village wins when no Mafia is alive, the Mafia when they are at least half of the living;
the env then gives +1 to every seat of the winning team (dead or alive) and -1 to the others.

Traps of the env this adapter closes or works around:
- its vote parser takes any bracketed number anywhere in the text and only checks that the
  target is alive (a Mafia may vote a teammate, the Doctor may protect themselves): the
  Action Validator accepts only `[X]` / `[Player X]` naming a target the env's own prompts
  list, and the env receives the canonical `[X]`;
- it strips `[Player X]` tags out of broadcast messages, so a vote sent as `[Player 3]` would
  reach the others as an empty message: another reason to send `[X]`;
- `game_state["day_number"]` stays 1 forever: the day in the step facts is our own count
  (`memory["day"]`: night 1, day 1, night 2, ...), advanced when a new night begins;
- when both the Doctor and the Detective are dead, the Mafia's night victim is stored but
  never killed (only the Doctor's or Detective's turn resolves the night): games then end by
  day votes alone.

Step facts: `{"phase", "day", "target", "target_team"}` (target and its team for votes and
night actions, None in discussion). Final facts: `{"roles", "teams", "winner", "alive"}`.
"""
from __future__ import annotations

import random
import re

from mars_core.games.base import INVALID_ACTION, PARSING_FAILURE, Parsed, clip
from mars_core.games.textarena_games import MAX_CHAT, TAState, TextArenaGame, check_chat

NIGHT_MAFIA, NIGHT_DOCTOR, NIGHT_DETECTIVE = "Night-Mafia", "Night-Doctor", "Night-Detective"
DISCUSSION, VOTING = "Day-Discussion", "Day-Voting"
_VOTE = re.compile(r"\[(?:player ?)?([0-9]{1,2})\]", re.IGNORECASE | re.ASCII)
_ASKS = {NIGHT_MAFIA: "vote for tonight's victim", NIGHT_DOCTOR: "choose one player to protect",
         NIGHT_DETECTIVE: "choose one player to investigate",
         VOTING: "vote to eliminate one player"}
_LINES = ("I am on the village's side.", "I have no information yet.",
          "Let's hear everyone before we vote.", "I suspect Player {p}.",
          "Player {p} seems trustworthy to me.", "Why is Player {p} so quiet?")


class SecretMafia(TextArenaGame):
    name = "secret_mafia"
    num_players = 6
    title = "Secret Mafia"
    env_class = "textarena.envs.SecretMafia.env:SecretMafiaEnv"
    env_kwargs = {"mafia_ratio": 0.25, "discussion_rounds": 3}
    action_help = ("At night the Mafia vote a victim, the Doctor protects a player and the "
                   "Detective investigates one, each naming one player number, e.g. "
                   "<answer>[3]</answer>. By day, everyone speaks in turn (the answer is your "
                   "message, e.g. <answer>I suspect Player 2.</answer>), then votes to "
                   "eliminate one living player, e.g. <answer>[2]</answer>.")

    def __init__(self, num_players: int = 6) -> None:
        if not 6 <= num_players <= 15:
            raise ValueError(f"secret_mafia takes 6 to 15 players, got {num_players}")
        self.num_players = num_players

    # -- facts of the episode ---------------------------------------------------------------
    def phase(self, state: TAState) -> str:
        return state.env.phase.value

    def alive(self, state: TAState) -> list[int]:
        return sorted(self.ta(state).game_state["alive_players"])

    def team(self, state: TAState, player: int) -> str:
        return state.env.roles[player].team

    def day(self, state: TAState) -> int:
        return state.memory.get("day", 1)

    def seat_role(self, state: TAState, player: int) -> str:
        return state.env.player_roles[player].lower()

    def valid_targets(self, state: TAState, player: int) -> list[int]:
        """The players `player` may name in the current phase (empty in discussion)."""
        phase, alive = self.phase(state), self.alive(state)
        if phase == NIGHT_MAFIA:
            return [p for p in alive if self.team(state, p) != "Mafia"]
        if phase in (NIGHT_DOCTOR, NIGHT_DETECTIVE):
            return [p for p in alive if p != player]
        return alive if phase == VOTING else []

    # -- Action Validator ---------------------------------------------------------------------
    def check_action(self, state: TAState, text: str) -> Parsed:
        if not isinstance(text, str):
            return Parsed(None, PARSING_FAILURE, "the action is not text")
        if state.done:
            return Parsed(None, INVALID_ACTION, "the game is over")
        if self.phase(state) == DISCUSSION:
            return check_chat(text)
        return self._check_target(state, text.strip())

    def _check_target(self, state: TAState, text: str) -> Parsed:
        match = _VOTE.fullmatch(text)
        if not match:
            return Parsed(None, PARSING_FAILURE,
                          f"{clip(text)!r} is not one player number like [3] or [Player 3]")
        player, target = self.current_player(state), int(match.group(1))
        if target in self.valid_targets(state, player):
            return Parsed(f"[{target}]")
        return Parsed(None, INVALID_ACTION, self._why_not(state, player, target))

    def _why_not(self, state: TAState, player: int, target: int) -> str:
        if target >= self.num_players:
            return f"there is no Player {target} (players 0 to {self.num_players - 1})"
        if target not in self.alive(state):
            return f"Player {target} is dead"
        if target == player:
            return "you may not choose yourself at night"
        return f"Player {target} is your Mafia teammate"

    def random_action(self, state: TAState, rng: random.Random) -> str:
        player = self.current_player(state)
        if self.phase(state) != DISCUSSION:
            return f"[{rng.choice(self.valid_targets(state, player))}]"
        others = [p for p in self.alive(state) if p != player]
        return rng.choice(_LINES).format(p=rng.choice(others))

    # -- prompts --------------------------------------------------------------------------------
    def instruction(self, state: TAState, player: int) -> str:
        phase, day = self.phase(state), self.day(state)
        # the role again: with `keep_history: false` the game's first message is not repeated
        when = (f"You are Player {player} ({self.seat_role(state, player)}). "
                f"{'Night' if phase.startswith('Night') else 'Day'} {day}")
        if phase == DISCUSSION:
            other = next(p for p in self.alive(state) if p != player)
            return (f"{when}, discussion: say one message to everyone (at most {MAX_CHAT} "
                    f"characters), e.g. <answer>I suspect Player {other}.</answer>")
        targets = self.valid_targets(state, player)
        example = targets[self.ta(state).turn % len(targets)]
        return (f"{when}: {_ASKS[phase]}. Valid targets: "
                f"{', '.join(f'[{t}]' for t in targets)}. Answer with exactly one, e.g. "
                f"<answer>[{example}]</answer>.")

    # -- facts for the post-episode stages ---------------------------------------------------
    def snapshot(self, state: TAState) -> dict:
        return {"phase": self.phase(state), "day": self.day(state)}

    def step_facts(self, state: TAState, player: int, action: str, before: dict) -> dict:
        night_falls = before["phase"] != NIGHT_MAFIA and self.phase(state) == NIGHT_MAFIA
        if night_falls and not self.ta(state).done:
            state.memory["day"] = before["day"] + 1
        target = None if before["phase"] == DISCUSSION else int(action[1:-1])
        return {**before, "target": target,
                "target_team": None if target is None else self.team(state, target)}

    def final_info(self, state: TAState) -> dict:
        n = self.num_players
        teams = [self.team(state, p) for p in range(n)]
        rewards = self.ta(state).rewards
        winner = next((teams[p] for p in range(n) if rewards[p] > 0), None) if rewards else None
        return {"roles": [state.env.player_roles[p] for p in range(n)], "teams": teams,
                "winner": winner, "alive": self.alive(state)}

