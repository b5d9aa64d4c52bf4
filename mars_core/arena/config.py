"""The arena's presets (`configs/arena/*.yaml`) and the frozen reference pool files.

An *agent* is `LABEL=SPEC` or a bare `SPEC`: SPEC is `embedded`, a model or checkpoint folder,
`models:/NAME@ALIAS`, or a bot (`bot:random`, `bot:mcts-N`, ...); a bare model SPEC is its own
label, a bot is always labelled by its spec.

A pool file (MG-Ref) fixes everything a newcomer's score depends on: the reference agents with
their frozen ratings, the games, the schedule's `n` and `seed`, TrueSkill's parameters and how
models play. `mars arena --save-pool` writes one from a finished open arena.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, model_validator

from mars_core.arena.ratings import Rating, TrueSkillParams
from mars_core.arena.schedule import check_games, fits, sides
from mars_core.config.cluster import ClusterConfig
from mars_core.config import (PlayConfig, config_from_dict, load_config, parse_overrides,
                              _merge)
from mars_core.config.base import ConfigError, _Section
from mars_core.games.opponents import check_bot_spec, is_bot
from mars_core.vocab import SELF


def parse_agent(text: str) -> tuple[str, str]:
    """`LABEL=SPEC` or `SPEC` -> (label, spec); a bot's label is its spec."""
    label, sep, spec = text.partition("=")
    if not sep or "://" in label or label.startswith("models:"):
        label, spec = text, text
    label, spec = label.strip(), spec.strip()
    if not label or not spec:
        raise ValueError(f"agent {text!r}: give SPEC or LABEL=SPEC")
    if is_bot(spec):
        check_bot_spec(spec)
        if label != spec:
            raise ValueError(f"agent {text!r}: a bot is labelled by its spec ({spec})")
    elif is_bot(label) or label == SELF:
        raise ValueError(f"agent {text!r}: the label {label!r} is reserved for bots")
    return label, spec


class TrueSkillSection(_Section):
    mu: float = 25.0
    sigma: float = Field(25.0 / 3.0, gt=0)
    beta: float = Field(25.0 / 6.0, gt=0)
    tau: float = Field(25.0 / 300.0, ge=0)
    draw_probability: float = Field(0.10, ge=0, lt=1)

    def params(self) -> TrueSkillParams:
        return TrueSkillParams(**self.model_dump())


class _Arena(_Section):
    games: tuple[str, ...]
    n: int = Field(2, ge=1)  # games per combination and rotation (round robin, pool)
    seed: int = 0
    trueskill: TrueSkillSection = TrueSkillSection()
    play: PlayConfig = PlayConfig(max_new_tokens=64, keep_history=False)
    max_context_tokens: int = Field(2048, ge=64)
    bf16: Literal["auto", "on", "off"] = "auto"
    cluster: ClusterConfig = ClusterConfig()  # matches split into shards (same results)
    # each model agent's exact exploitability in the games small enough (Kuhn 2.5 s a model,
    # Leduc about 4 min on 2 CPU cores): a leaderboard column beside the ratings
    exploitability: bool = True

    @model_validator(mode="after")
    def _games(self):
        if not self.games:
            raise ValueError("games is empty")
        check_games(list(self.games))
        return self


class ArenaConfig(_Arena):
    """An open arena: every agent is rated."""

    agents: tuple[str, ...] = ()
    schedule: Literal["round_robin", "sampled"] = "round_robin"
    matches: int = Field(8, ge=1)  # draws per game (sampled)

    def labelled(self) -> dict[str, str]:
        return labelled(self.agents)

    @model_validator(mode="after")
    def _agents(self):
        self.labelled()  # well-formed, unique labels (`check_agents` runs on the final set)
        return self


def check_agents(agents: dict[str, str], games) -> None:
    """An open arena's final agents (preset, flags and a run's checkpoints together): at least
    two, and at least two that can play each game."""
    if len(agents) < 2:
        raise ValueError("an arena needs at least two agents (--agents, a preset's agents, --run)")
    for game in games:
        if sum(fits(s, game) for s in agents.values()) < 2:
            raise ValueError(f"{game}: fewer than two of the agents can play it (bots fit only "
                             "some games)")


class Reference(_Section):
    agent: str  # LABEL=SPEC or SPEC
    mu: float
    sigma: float = Field(gt=0)

    def rating(self) -> Rating:
        return Rating(self.mu, self.sigma)


class PoolConfig(_Arena):
    """A frozen reference pool: its agents' ratings never move."""

    name: str = "pool"
    references: tuple[Reference, ...]

    def labelled(self) -> dict[str, str]:
        return labelled([r.agent for r in self.references])

    def frozen(self) -> dict[str, Rating]:
        return {parse_agent(r.agent)[0]: r.rating() for r in self.references}

    @model_validator(mode="after")
    def _refs(self):
        if not self.references:
            raise ValueError("references is empty")
        refs = self.labelled()
        for game in self.games:
            if not any(fits(s, game) for s in refs.values()):
                raise ValueError(f"{game}: no reference agent can play it")
        return self


def labelled(agents) -> dict[str, str]:
    out: dict[str, str] = {}
    for text in agents:
        label, spec = parse_agent(text)
        if label in out:
            raise ValueError(f"agent label {label!r} appears twice")
        out[label] = spec
    return out


def load_arena_config(path: str | None, overrides: list[str] = (), **flags) -> ArenaConfig:
    """A preset (or the defaults) with the CLI's flags (`agents`, `games`, `schedule`, `n`,
    `matches`, `seed`; None = keep) and `key=value` overrides on top."""
    data = load_config(path, overrides, ArenaConfig).model_dump(mode="json") if path else \
        _merge({"games": ["tic_tac_toe"]}, parse_overrides(overrides))
    data |= {k: list(v) if isinstance(v, (list, tuple)) else v
             for k, v in flags.items() if v is not None}
    return config_from_dict(data, ArenaConfig)


def load_pool(path: str | Path, overrides: list[str] = ()) -> PoolConfig:
    return load_config(path, overrides, PoolConfig)


def pool_yaml(cfg: ArenaConfig, rows: list[dict], name: str) -> str:
    """A pool file freezing the arena's agents at their ratings (`mars arena --save-pool`)."""
    specs = cfg.labelled()
    refs = [{"agent": r["agent"] if specs[r["agent"]] == r["agent"] else
             f"{r['agent']}={specs[r['agent']]}", "mu": round(r["mu"], 4),
             "sigma": round(r["sigma"], 4)} for r in rows if r["agent"] in specs]
    data = {"name": name, "games": list(cfg.games), "n": cfg.n, "seed": cfg.seed,
            "trueskill": cfg.trueskill.model_dump(), "references": refs,
            "play": cfg.play.model_dump(mode="json"),
            "max_context_tokens": cfg.max_context_tokens, "bf16": cfg.bf16}
    return ("# A frozen reference pool (MG-Ref): `mars arena --reference THIS.yaml --agents NEW`\n"
            "# scores NEW against these agents; their ratings never move.\n"
            + yaml.safe_dump(data, sort_keys=False))


__all__ = ["ArenaConfig", "PoolConfig", "ConfigError", "load_arena_config", "load_pool",
           "parse_agent", "pool_yaml", "sides"]
