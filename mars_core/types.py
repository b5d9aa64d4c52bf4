"""The data model: frozen records that every stage reads and writes.

An `Episode` is one game; it holds `Turn`s, one per move of any seat. Roles are an explicit
field (never parsed out of an id). Episodes are stored as Parquet with polars, one row per turn
(`turns_frame`), so a stage's output can be inspected with one line of code.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal

import polars as pl

from mars_core.vocab import ErrorType, FinishReason, GateReason, as_member


@dataclass(frozen=True)
class SamplingParams:
    """How an engine samples one completion per prompt."""

    temperature: float = 0.6
    top_p: float = 0.99
    top_k: int = 100
    min_p: float = 0.0  # keep tokens with probability >= min_p x the most likely one's
    max_new_tokens: int = 64
    stop: tuple[str, ...] = ()
    seed: int = 0
    # one seed per prompt of a call (the rollout loop's per-turn seeds, so a game's sample
    # depends on the game and its turn, never on which other games share the call or shard)
    seeds: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Completion:
    """One sampled reply: its token ids, the log-prob of each sampled token under the sampling
    distribution, the decoded text and why sampling stopped (`FinishReason`: STOP at the end
    of sequence or a stop string, LENGTH cut off at max_new_tokens, CONTEXT_OVERFLOW when the
    prompt left no room)."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: FinishReason

    def __post_init__(self):
        object.__setattr__(self, "finish_reason", FinishReason(self.finish_reason))


@dataclass(frozen=True)
class Turn:
    """One move of one seat. `prompt_ids`/`completion_ids`/`logprobs` are empty for bot turns.
    `reward` is the total per-turn reward after `assign_rewards`; the parts stay visible in
    `game_reward`, `format_reward` and `length_reward`.

    `error`, `gate_reason` and `finish_reason` hold members of their vocabularies
    (`mars_core.vocab`) or "" (none); a word outside them is a ValueError, so a misspelt
    reason never reaches Parquet. Members are `str`s: the files keep the plain words."""

    episode_id: str
    game: str
    turn: int  # index of the move in the episode (all seats)
    player: int  # seat, 0 moves first
    role: str  # explicit role used as the advantage grouping key, e.g. "player_0"
    agent: str  # "policy" or a bot spec such as "bot:mcts-10"
    observation: str
    prompt_ids: tuple[int, ...] = ()
    completion_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    # how the completion was sampled (model turns; 0 for bots): a game may have its own
    # settings (`per_game`), and the update takes log-probs at the turn's own temperature
    temperature: float = 0.0
    top_p: float = 0.0
    top_k: int = 0
    min_p: float = 0.0
    reply: str = ""
    # why the model's sampling stopped ("" on a bot's turn); `finish_reason.cut_off` is the
    # flag for a reply that a length limit ended
    finish_reason: FinishReason | Literal[""] = ""
    action: str = ""  # the extracted action string ("" when invalid)
    valid: bool = True
    error: ErrorType | Literal[""] = ""  # why the reply is not a move ("" when it is one)
    error_detail: str = ""  # what was wrong, one line for people (never parsed)
    info: str = ""  # JSON: the step's game facts (a round's result, a guess's colour, ...)
    # JSON: each legal action's Monte-Carlo value for the seat to move (rollout.mc_rollouts,
    # model turns of training games; mars_core.rollout.mc_values), "" when not measured
    action_values: str = ""
    eligible: bool = True  # set by filter_steps: whether the step may be trained on
    gate_reason: GateReason | Literal[""] = ""  # why it may not ("" when eligible)
    game_reward: float = 0.0
    format_reward: float = 0.0
    length_reward: float = 0.0
    reward: float = 0.0

    def __post_init__(self):
        for name, enum in (("error", ErrorType), ("gate_reason", GateReason),
                           ("finish_reason", FinishReason)):
            object.__setattr__(self, name, as_member(enum, getattr(self, name), f"Turn.{name}"))


@dataclass(frozen=True)
class Episode:
    """One finished game. `returns[p]` is seat p's game return as OpenSpiel reports it (plus the
    invalid-action loss where a seat broke the rules); `outcomes[p]` is win/draw/loss/invalid/
    other_invalid."""

    episode_id: str
    game: str
    seed: int
    agents: tuple[str, ...]
    returns: tuple[float, ...]
    outcomes: tuple[str, ...]
    error_player: int = -1  # the seat whose invalid reply ended the game, -1 if none
    error: ErrorType | Literal[""] = ""  # what was wrong with that reply
    info: str = ""  # JSON: the finished game's facts (teams, scores, roles) for post-processing
    turns: tuple[Turn, ...] = field(default=())

    def __post_init__(self):
        object.__setattr__(self, "error", as_member(ErrorType, self.error, "Episode.error"))


# samples.parquet (compute_advantages): True on a row added for an action its turn did not take
# (algorithm.train_actions, mars_core.advantages.all_actions); such rows are not the turn's own
COUNTERFACTUAL = "counterfactual"

# a turn's `action_values` column (rollout.mc_rollouts, mars_core.rollout.mc_values): each
# legal action's Monte-Carlo value as a JSON list of {"action", "value"} objects, in the order
# measured (one shape for every game, which polars decodes as `ACTION_VALUES_DTYPE`); "" where
# none were measured
ACTION_VALUES_DTYPE = pl.List(pl.Struct({"action": pl.Utf8, "value": pl.Float64}))


def encode_action_values(values: dict[str, float]) -> str:
    """A turn's `action_values` column from {action: value}."""
    return json.dumps([{"action": a, "value": v} for a, v in values.items()])


def decode_action_values(text: str | None) -> dict[str, float]:
    """{action: value} from a turn's `action_values` column ({} where none were measured)."""
    return {d["action"]: d["value"] for d in json.loads(text)} if text else {}


TURN_SCHEMA = {
    "episode_id": pl.Utf8, "game": pl.Utf8, "turn": pl.Int64, "player": pl.Int64,
    "role": pl.Utf8, "agent": pl.Utf8, "observation": pl.Utf8,
    "prompt_ids": pl.List(pl.Int64), "completion_ids": pl.List(pl.Int64),
    "logprobs": pl.List(pl.Float64), "temperature": pl.Float64, "top_p": pl.Float64,
    "top_k": pl.Int64, "min_p": pl.Float64, "reply": pl.Utf8, "finish_reason": pl.Utf8,
    "action": pl.Utf8,
    "valid": pl.Boolean, "error": pl.Utf8, "error_detail": pl.Utf8, "info": pl.Utf8,
    "action_values": pl.Utf8, "eligible": pl.Boolean, "gate_reason": pl.Utf8,
    "game_reward": pl.Float64, "format_reward": pl.Float64, "length_reward": pl.Float64, "reward": pl.Float64,
}

EPISODE_SCHEMA = {
    "episode_id": pl.Utf8, "game": pl.Utf8, "seed": pl.Int64, "agents": pl.List(pl.Utf8),
    "returns": pl.List(pl.Float64), "outcomes": pl.List(pl.Utf8),
    "error_player": pl.Int64, "error": pl.Utf8, "info": pl.Utf8,
}


def turns_frame(episodes: list[Episode]) -> pl.DataFrame:
    """One row per turn of every episode, with the columns of `TURN_SCHEMA`."""
    rows = [asdict(t) for ep in episodes for t in ep.turns]
    return pl.DataFrame(rows, schema=TURN_SCHEMA)


def episodes_frame(episodes: list[Episode]) -> pl.DataFrame:
    """One row per episode (turns excluded), with the columns of `EPISODE_SCHEMA`."""
    rows = [{k: v for k, v in asdict(ep).items() if k != "turns"} for ep in episodes]
    return pl.DataFrame(rows, schema=EPISODE_SCHEMA)


def episodes_from_frames(episodes: pl.DataFrame, turns: pl.DataFrame) -> list[Episode]:
    """Inverse of `episodes_frame` + `turns_frame`."""
    by_episode: dict[str, list[Turn]] = {}
    for row in turns.iter_rows(named=True):
        row = {k: tuple(v) if isinstance(v, list) else v for k, v in row.items()}
        by_episode.setdefault(row["episode_id"], []).append(Turn(**row))
    out = []
    for row in episodes.iter_rows(named=True):
        row = {k: tuple(v) if isinstance(v, list) else v for k, v in row.items()}
        out.append(Episode(**row, turns=tuple(by_episode.get(row["episode_id"], []))))
    return out
