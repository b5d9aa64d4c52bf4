"""One typed config object, grouped by stage. Unknown keys are errors that name the key.

Presets live in `configs/*.yaml`; `load_config(path, overrides)` reads one and applies
`key.sub=value` overrides (values parsed as YAML, so `rollout.temperature=0.8` is a float).
The sections live beside this file: `base` (the strict frozen base, `ConfigError`), `play`
(`play`, `rollout`), `rewards`, `train` (`algorithm`, `batching`, `optim`, `trainer`),
`engine`, `cluster`; the names most callers need are re-exported here.

May import: advantages, games, privacy, types, vocab.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from mars_core.config.base import (ConfigError, OnOffAuto, _Section,  # noqa: F401  (re-exported)
                                   moved_preset)
from mars_core.config.cluster import ClusterConfig
from mars_core.config.engine import EngineConfig
from mars_core.config.play import (OpponentStage, PlayConfig, RolloutConfig,  # noqa: F401
                                   SamplingOverride)
from mars_core.config.rewards import OUTCOMES, In2AIRewards, RewardsConfig  # noqa: F401
from mars_core.config.train import (TRAJECTORY_ESTIMATORS, VALUE_LABELLED,  # noqa: F401
                                    AlgorithmConfig, BatchingConfig, OptimConfig, TrainerConfig,
                                    WarmupConfig)
from mars_core.games.catalog import NASH_GAMES, check_game, check_prompt
from mars_core.games.opponents import (MARS_OPPONENTS, check_opponent, check_suite,
                                       default_opponents, is_bot)
from mars_core.privacy.redact import redact
from mars_core.vocab import POLICY


class RunConfig(_Section):
    seed: int = 0
    iterations: int = Field(2, ge=1)


class ModelConfig(_Section):
    path: str = "embedded"  # "embedded", a local model folder, or a hub id
    bf16: OnOffAuto = "auto"  # bf16 autocast (auto: whichever this machine runs faster)
    max_context_tokens: int = Field(2048, ge=64)
    # a prompt prefix many rows of a batch share (a game's rules) goes through the model once,
    # in sampling and in the update (mars_core.models.prefix); false: every row in full
    share_prefix: bool = True
    # every reply the in-process engine samples the same bits whatever other games share its
    # batch, shard or engine batch size (mars_core.models.invariant; docs/reliability.md
    # "What reproduces"); auto: on where it samples in bf16 (fp32 replies keep their tokens)
    batch_invariant: OnOffAuto = "auto"


class EvaluationConfig(_Section):
    every: int = Field(1, ge=0)  # evaluate after every k-th iteration; 0 disables
    at_start: bool = True  # evaluate the starting policy (after warm-up) as step 0
    # game -> opponent, or a list of opponents; a game not named here meets its first default
    # opponent (games.opponents.default_opponents: Tic-Tac-Toe bot:mcts-100, Connect Four
    # bot:mcts-10, poker bot:nash, Hanabi self, Blotto bot:random, IPD bot:tit-for-tat,
    # Codenames and Mafia bot:random)
    opponents: dict[str, str | tuple[str, ...]] = Field(default_factory=dict)
    # games evaluated at every evaluation but never trained on (skill carried over, issue 32:
    # the MARS generalist trains on Tic-Tac-Toe, Kuhn and Mini Hanabi and reports Connect Four,
    # Leduc and Simple Hanabi); their opponents come from `opponents` or the defaults
    held_out: tuple[str, ...] = ()
    games_per_seat: int = Field(8, ge=1)
    temperature: float = Field(0.6, ge=0)
    # the policy's exact exploitability beside its games, for the suite's games small enough
    # (Kuhn, Leduc: mars_core.strength.exploitability), read at the rollouts' temperature
    exploitability: bool = True

    @model_validator(mode="after")
    def _fitting_opponents(self):
        for game in self.held_out:
            check_game(game)
        if len(set(self.held_out)) != len(self.held_out):
            raise ValueError("evaluation.held_out names a game twice")
        for game, opponents in self.opponents.items():
            check_game(game)
            if not isinstance(opponents, str) and not opponents:
                raise ValueError(f"evaluation.opponents: no opponent for {game}")
            for opponent in (opponents,) if isinstance(opponents, str) else opponents:
                check_opponent(opponent, game)
        return self

    def opponents_for(self, game: str) -> tuple[str, ...]:
        named = self.opponents.get(game)
        if named is None:
            return default_opponents(game)[:1]
        return (named,) if isinstance(named, str) else tuple(named)

    def suite(self, training_games) -> dict[str, tuple[str, ...]]:
        """What an evaluation plays: game -> opponents, the training games then the held-out."""
        return {game: self.opponents_for(game) for game in (*training_games, *self.held_out)}


class TrackingConfig(_Section):
    experiment: str = "mars"
    registered_model: str = "mars-policy"
    sample_episodes: int = Field(16, ge=0)
    transcripts: int = Field(3, ge=0)
    replays_per_iteration: int = Field(2, ge=0)  # replay pages per iteration (0: none)


class CheckpointConfig(_Section):
    keep_last: int = Field(2, ge=1)  # checkpoints whose weights stay on disk
    keep_every: int = Field(0, ge=0)  # also keep every n-th one (frozen opponents); 0: none


class Config(_Section):
    run: RunConfig = RunConfig()
    model: ModelConfig = ModelConfig()
    rollout: RolloutConfig = RolloutConfig()
    rewards: RewardsConfig = RewardsConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    batching: BatchingConfig = BatchingConfig()
    optim: OptimConfig = OptimConfig()
    trainer: TrainerConfig = TrainerConfig()
    engine: EngineConfig = EngineConfig()
    warmup: WarmupConfig = WarmupConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    tracking: TrackingConfig = TrackingConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    cluster: ClusterConfig = ClusterConfig()

    @model_validator(mode="after")
    def _batch_fits_estimator(self):
        trained = sorted(set(self.evaluation.held_out) & set(self.rollout.games))
        if trained:
            raise ValueError(f"evaluation.held_out: {', '.join(trained)} is also a training game "
                             "(rollout.games); a held-out game is one never trained on")
        # the evaluations play the run's layout too: a held-out game needs one
        check_prompt(self.rollout.prompt, self.evaluation.held_out)
        demonstrator = self.warmup.demonstrator
        if self.warmup.steps and not is_bot(demonstrator):
            raise ValueError(f"warmup.demonstrator: {demonstrator!r} is no bot; the examples "
                             "come from a bot's play (bot:random, or e.g. bot:mcts-100)")
        for game in self.rollout.games if self.warmup.steps else ():
            try:
                check_opponent(demonstrator, game)
            except ValueError as e:
                raise ValueError(f"warmup.demonstrator: {e}") from None
        a, b = self.algorithm, self.batching
        for knob, why in (("overlap", "plays each iteration one update behind"),
                          ("int8", "samples with other weights than the update's")):
            if getattr(self.rollout, knob) and a.is_cap is None:
                raise ValueError(f"rollout.{knob} {why}: it needs the importance correction "
                                 "(set algorithm.is_cap, e.g. 2.0)")
        if self.rollout.int8 and self.engine.backend != "hf":
            raise ValueError("rollout.int8 is the in-process engine's (engine.backend: hf); "
                             "vLLM quantizes with its own options")
        if a.estimator == "monte_carlo" and not self.rollout.mc_rollouts:
            raise ValueError("algorithm.estimator monte_carlo trains on the Monte-Carlo values "
                             "of each turn's state: set rollout.mc_rollouts (e.g. 16)")
        if a.train_actions in VALUE_LABELLED and not self.rollout.mc_rollouts:
            raise ValueError(f"algorithm.train_actions {a.train_actions} trains each turn's best "
                             "move by the Monte-Carlo values of its state: set "
                             "rollout.mc_rollouts (e.g. 16)")
        if a.estimator in TRAJECTORY_ESTIMATORS and b.unit != "trajectory":
            raise ValueError(f"algorithm.estimator {a.estimator!r} needs whole trajectories: "
                             "set batching.unit: trajectory (or use estimator rloo_env)")
        return self

    def flat(self) -> dict[str, Any]:
        """`{"rollout.temperature": 0.6, ...}`: the config as MLflow params, secrets masked
        (mars_core.privacy.redact)."""
        return _flatten(self.public())

    def public(self) -> dict[str, Any]:
        """The config as plain data with its secrets masked: what may be written anywhere."""
        return redact(self.model_dump(mode="json"))

    def has_secrets(self) -> bool:
        """Whether redaction masks anything: then `config.yaml` is not the whole config."""
        return self.public() != self.model_dump(mode="json")


_LEAF_DICTS = ("rewards.game_scale", "evaluation.opponents", "rewards.in2ai.outcome_multiplier",
               "rollout.opponents", "rollout.per_game", "rollout.game_weights",
               "trainer.deepspeed.extra", "engine.vllm.launch.env")


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and key not in _LEAF_DICTS:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _set(tree: dict, dotted: str, value: Any) -> None:
    node = tree
    *parents, leaf = dotted.split(".")
    for p in parents:
        child = node.setdefault(p, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted!r}: {p!r} is not a section")
        node = child
    node[leaf] = value


# YAML 1.1 reads these as booleans; kept as words, a string field (`bf16: on|off|auto`) gets
# them as typed and a bool field still parses them (pydantic takes on/off/yes/no)
_YAML11_WORDS = ("on", "off", "yes", "no", "y", "n")


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict:
    tree: dict = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        if isinstance(value, bool) and raw.strip().lower() in _YAML11_WORDS:
            value = raw.strip()  # `model.bf16=off` means "off"; a bool field still reads it
        _set(tree, key.strip(), value)
    return tree


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def config_from_dict(data: dict, model: type[BaseModel] | None = None):
    """Validate `data` as `model` (default: the training `Config`); errors name the key."""
    try:
        return (model or Config).model_validate(data)
    except ValidationError as e:
        errors = e.errors()  # a union (an opponent or a curriculum) fails once per branch:
        err = next((x for x in errors if "str" not in x["loc"]), errors[0])  # report the richer
        where = ".".join(str(p) for p in err["loc"] if "[" not in str(p)) or "config"
        if err["type"] == "extra_forbidden":
            raise ConfigError(f"unknown config key {where!r}") from None
        msg = err["msg"].removeprefix("Value error, ")
        if not err["loc"]:  # a check across fields (e.g. an opponent that does not fit a game)
            raise ConfigError(msg) from None
        raise ConfigError(f"bad config value for {where!r}: {msg}") from None


def _yaml_error(p: Path, e: yaml.YAMLError) -> str:
    """One line for a YAML error: "config file X, line L, column C: not valid YAML: <problem>
    (<context> at line L2, column C2)" (PyYAML's marks count from 0, an editor's from 1)."""
    def at(mark) -> str:
        return f"line {mark.line + 1}, column {mark.column + 1}"

    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    context, context_mark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if problem is None:  # not a marked error: its first line is all there is
        problem = (str(e).splitlines() or [type(e).__name__])[0]
    if context:
        problem += f" ({context}" + (f" at {at(context_mark)}" if context_mark else "") + ")"
    where = f", {at(mark)}" if mark is not None else ""
    return f"config file {p}{where}: not valid YAML: " + " ".join(problem.split())


def read_preset(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict:
    """A YAML preset as a dict. `extends: other.yaml` (relative to the preset's folder) names a
    base preset whose values the file's own values override, key by key (chains allowed)."""
    p = moved_preset(Path(path))
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    if p.resolve() in _seen:
        raise ConfigError(f"config file {p} extends itself (through: "
                          + " -> ".join(str(s.name) for s in _seen) + ")")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(_yaml_error(p, e)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a mapping of sections")
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"config file {p}: 'extends' must name one preset file")
    return _merge(read_preset(p.parent / base, (*_seen, p.resolve())), data)


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = (),
                model: type[BaseModel] | None = None, overlays: list[str] | tuple[str, ...] = ()):
    """Read a YAML preset (or the defaults when `path` is None), merge the `overlays` (partial
    presets, e.g. a scale such as `configs/scales/smoke.yaml`) on top in order, then apply
    the `key=value` overrides."""
    data: dict = read_preset(path) if path is not None else {}
    for overlay in overlays:
        data = _merge(data, read_preset(overlay))
    return config_from_dict(_merge(data, parse_overrides(overrides)), model)


# the games whose exploitability is computed exactly (mars_core.strength.exploitability)
SMALL = NASH_GAMES


class GameEvalConfig(_Section):
    """A game evaluation preset (`configs/eval/*.yaml`; the MARS strategic-ability protocol):
    which opponents each game meets, how many games per game x opponent x seat, and how the
    policy model plays."""

    n: int = Field(1000, ge=1)  # games per game x opponent x seat (x 1 for `self`)
    seed: int = 0
    suite: dict[str, tuple[str, ...]]  # game -> opponents
    play: PlayConfig = PlayConfig()
    max_context_tokens: int = Field(2048, ge=64)
    bf16: OnOffAuto = "auto"
    batch_invariant: OnOffAuto = "auto"  # as model.batch_invariant
    cluster: ClusterConfig = ClusterConfig()  # games split into shards (by game)
    # the games whose exact exploitability is read beside their games (Kuhn, Leduc:
    # mars_core.strength.exploitability) when the suite plays them; null: every such game of
    # the suite; []: none
    exploitability: tuple[str, ...] | None = None
    # Tic-Tac-Toe's worst case (the exact best response to the policy, read at every position
    # it reaches: mars_core.strength.worst_case) when the suite plays it; minutes a reading,
    # and a near-uniform policy is refused by name, so off unless asked
    worst_case: bool = False

    @model_validator(mode="after")
    def _fitting_suite(self):
        check_suite(self.suite, POLICY)
        for game in self.exploitability or ():
            if game not in SMALL:
                raise ValueError(f"exploitability: {game!r} is not a game whose exploitability "
                                 f"can be computed ({', '.join(SMALL)})")
        check_prompt(self.play.prompt, self.suite)
        return self


def _defaults(game: str) -> tuple[str, ...]:
    """The game's default opponents, or none for a game that does not exist (the suite's
    check then names the problem in one line)."""
    try:
        return default_opponents(game)
    except ValueError:
        return ()


def load_game_eval_config(path: str | Path | None = None, games: list[str] | None = None,
                          opponents: list[str] | None = None, n: int | None = None,
                          seed: int | None = None,
                          overrides: list[str] | tuple[str, ...] = ()) -> GameEvalConfig:
    """An evaluation preset (the MARS suite when `path` is None) narrowed by the CLI's flags:
    `games` keeps those games (each meets `opponents`, else its preset or MARS opponents);
    `opponents` alone replaces every game's opponents."""
    base = {"suite": {g: list(o) for g, o in MARS_OPPONENTS.items()}}
    data = _merge(read_preset(path) if path else base, parse_overrides(overrides))
    # narrowed before validation: the settings are checked against the games that play (a
    # compact prompt for Leduc alone, where the whole suite's Hanabi has none)
    suite = {g: list(o) for g, o in (data.get("suite") or {}).items()}
    if games:
        suite = {g: list(opponents or suite.get(g) or _defaults(g)) for g in games}
    elif opponents:
        suite = {g: list(opponents) for g in suite}
    data = data | {"suite": suite}
    data |= {k: v for k, v in (("n", n), ("seed", seed)) if v is not None}
    return config_from_dict(data, GameEvalConfig)


def config_diff(a: Config, b: Config) -> list[str]:
    """Dotted keys whose values differ between two configs."""
    fa, fb = a.flat(), b.flat()
    return sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))


def dump_config(cfg: Config) -> str:
    """The config as YAML, secrets masked (the run's process keeps the real values)."""
    return yaml.safe_dump(cfg.public(), sort_keys=False)


def dump_private_config(cfg: Config) -> str:
    """The whole config as YAML, secrets included: only ever for a private (0600) file."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
