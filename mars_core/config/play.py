"""How a policy plays: prompting and sampling in games (`play`), and the training rollouts
(`rollout`: games, opponents, the samplers' settings)."""
from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import Field, model_validator

from mars_core.config.base import _Section
from mars_core.games.catalog import check_game, check_prompt, record
from mars_core.games.opponents import check_opponents
from mars_core.vocab import SELF


class SamplingOverride(_Section):
    """Per-game sampling (e.g. In2AI's per-game evaluation settings); unset values fall back
    to the section's own."""

    RENAMED = {"max_tokens": "max_new_tokens"}  # the token limit has one name
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)  # 0: no top-k
    min_p: float | None = Field(None, ge=0, lt=1)
    max_new_tokens: int | None = Field(None, ge=1)


class PlayConfig(_Section):
    """How a policy model is prompted and sampled in games (training and evaluation)."""

    RENAMED = {"max_tokens": "max_new_tokens"}  # the token limit has one name
    temperature: float = Field(0.6, ge=0)
    top_p: float = Field(0.99, gt=0, le=1)
    top_k: int = Field(100, ge=0)
    max_new_tokens: int = Field(64, ge=1)
    prefill: Literal["answer", "think", "none"] = "answer"
    # the games' prompt layout: "paper" (the papers' rules and observations, the fidelity
    # preset) or "compact" (a few lines of rules, the state in short form, the seat's private
    # information last; mars_core/games/catalog.py COMPACT_PROMPT_GAMES have one)
    prompt: Literal["paper", "compact"] = "paper"
    keep_history: bool = True  # MARS keeps the whole conversation; False shows only the state
    engine_batch_size: int = Field(32, ge=1)
    min_p: float = Field(0.0, ge=0, lt=1)
    per_game: dict[str, SamplingOverride] = Field(default_factory=dict)  # game -> overrides

    @model_validator(mode="after")
    def _known_per_game(self):
        for g in self.per_game:
            check_game(g)
        return self

    def sampling(self, seed: int, temperature: float | None = None) -> SamplingParams:
        from mars_core.types import SamplingParams  # (here: config validation loads no polars)

        return SamplingParams(
            temperature=self.temperature if temperature is None else temperature,
            top_p=self.top_p, top_k=self.top_k, min_p=self.min_p,
            max_new_tokens=self.max_new_tokens, stop=("</answer>",), seed=seed)

    def per_game_sampling(self, seed: int, temperature: float | None = None) -> dict:
        """game -> SamplingParams for the games with overrides (a forced `temperature`, as in
        greedy evaluation, wins over a game's own)."""
        base = self.sampling(seed, temperature)
        out = {}
        for game, o in self.per_game.items():
            changes = {k: v for k, v in o.model_dump().items() if v is not None}
            if temperature is not None:
                changes.pop("temperature", None)
            out[game] = replace(base, **changes)
        return out


class OpponentStage(_Section):
    """One entry of an opponent curriculum: `opponent` joins the pool at iteration
    `unlock_at` and stays; each episode's opponent is drawn in proportion to `weight`."""

    opponent: str  # "self", a bot spec, or "frozen" (an earlier checkpoint of this run)
    unlock_at: int = Field(0, ge=0)
    weight: float = Field(1.0, gt=0)


class RolloutConfig(PlayConfig):
    games: tuple[str, ...] = ("tic_tac_toe",)
    episodes_per_iteration: int = Field(8, ge=1)
    # environment sampler: empty = round-robin over `games` (equal shares); else game -> weight,
    # each iteration's episodes apportioned in proportion (games not named weigh 1)
    game_weights: dict[str, float] = Field(default_factory=dict)
    # game -> who fills the other seats: "self" (self-play, the default), a bot, "frozen" (an
    # earlier checkpoint of this run), or a curriculum: a list of {opponent, unlock_at, weight}.
    # Against an opponent the policy holds one seat and only its turns are trained on
    opponents: dict[str, str | tuple[OpponentStage, ...]] = Field(default_factory=dict)
    # position sampler: the policy's seat against an opponent: "rotate" (every seat in turn)
    # or "random" (uniform); roles follow seats, secret roles are drawn by the game
    position: Literal["rotate", "random"] = "rotate"
    # rollouts overlapping the update (asynchronous RL, one update behind): iteration k+1's
    # games are played while iteration k trains, so they come from the policy before k's
    # update (the checkpoint of k-1) and the update's importance weight (algorithm.is_cap)
    # corrects the lag. It pays on a cluster (cluster.ray.address: the games run on other
    # nodes); in one process the two share the cores
    overlap: bool = False
    # the training games sampled by an int8 copy of the policy (torch's dynamic int8 linear
    # layers, in process, CPU only), rebuilt from each iteration's checkpoint; its log-probs
    # feed the update's importance weight (algorithm.is_cap), which corrects the difference.
    # Evaluations always play the exact policy
    int8: bool = False
    # Monte-Carlo action values (issue 45): at each policy turn of a training game, every legal
    # action is played out this many times from a clone of the state, every seat then moving
    # at random; the mean final return of the seat to move is the action's value, kept in the
    # turn's `action_values` (algorithm.estimator: monte_carlo trains on them). 0: off.
    # OpenSpiel games only; milliseconds a turn (Tic-Tac-Toe, 16: docs/lab.md)
    mc_rollouts: int = Field(0, ge=0, le=4096)

    @property
    def policy_lag(self) -> int:
        """How many updates behind the newest policy this run's games are played: 0 or 1."""
        return int(self.overlap)

    @model_validator(mode="after")
    def _known_games(self):
        for g in self.games:
            check_game(g)
        check_prompt(self.prompt, self.games)
        if not self.games:
            raise ValueError("rollout.games is empty")
        if len(set(self.games)) != len(self.games):
            raise ValueError("rollout.games names a game twice")
        for game, w in self.game_weights.items():
            if game not in self.games:
                raise ValueError(f"rollout.game_weights names {game}, which is not in rollout.games")
            if w < 0:
                raise ValueError(f"rollout.game_weights: the weight of {game} is negative")
        if self.game_weights and not sum(self.game_weights.get(g, 1.0) for g in self.games):
            raise ValueError("rollout.game_weights: every weight is 0")
        for game, opponents in self.opponents.items():
            if game not in self.games:
                raise ValueError(f"rollout.opponents names {game}, which is not in rollout.games")
            check_opponents(game, opponents)
        cloneless = [g for g in self.games if record(g).family != "openspiel"]
        if self.mc_rollouts and cloneless:
            raise ValueError(f"rollout.mc_rollouts: Monte-Carlo values need OpenSpiel games "
                             f"(cloned states); {', '.join(cloneless)} is not one")
        if not self.game_weights and self.episodes_per_iteration % len(self.games):
            raise ValueError(f"rollout.episodes_per_iteration ({self.episodes_per_iteration}) "
                             f"must be a multiple of the number of games ({len(self.games)}), "
                             "so that batches split evenly by game (or set rollout.game_weights)")
        return self

    def opponent_pool(self, game: str, k: int) -> list[tuple[str, float]]:
        """The (opponent, weight) pairs unlocked for `game` at iteration k."""
        spec = self.opponents.get(game, SELF)
        if isinstance(spec, str):
            return [(spec, 1.0)]
        return [(s.opponent, s.weight) for s in spec if s.unlock_at <= k]
