"""Config sections of the training algorithm: advantage estimator and loss (`algorithm`),
the episodes bank and batch builder (`batching`), the optimiser (`optim`), the trainer
(`trainer`) and the supervised warm-up before RL (`warmup`).
SPEC sections 3 to 5; every field is read by `mars_core/advantages/estimators.py` (the estimator's
options), `tasks/batching.py` or `mars_core/training/trainer.py`."""
from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field, field_validator, model_validator

from mars_core.advantages.estimators import ESTIMATORS
from mars_core.config.base import _Section, deprecated

# The loss aggregation modes, defined once (SPEC section 4): how the token losses of a batch
# become one number. Read here (`algorithm.loss_aggregation`) and by
# `mars_core.training.losses.aggregate`, which both trainers (torch, DeepSpeed) call.
# - seq_mean_token_mean: each sequence weighs the same (MARS);
# - token_mean: each token weighs the same;
# - seq_mean_token_sum: sequence sums, averaged over sequences.
Aggregation = Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum"]
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)

# Estimators that need a player's whole trajectory in the batch (returns or trajectory
# totals), as their records say; `rloo_env` works on single turns.
TRAJECTORY_ESTIMATORS = tuple(n for n, e in ESTIMATORS.items() if e.needs_trajectories)

# The `train_actions` that label each turn's best move by its state's Monte-Carlo values
# (they need rollout.mc_rollouts, and take algorithm.label_advantage)
VALUE_LABELLED = ("best_valued", "sampled_and_best")


def _same(value: Any) -> Any:
    """A value compared as YAML gives it (a tuple as the list it was written as)."""
    return list(value) if isinstance(value, tuple) else value


class MirrorConfig(_Section):
    """`train_actions: mirror`: pi_{t+1} proportional to [pi_t rho^(alpha eta) exp(eta q)]^(1 /
    (1 + alpha eta)) at every visited state (SPEC section 7)."""

    alpha: float = Field(0.5, ge=0)  # the magnet's pull (0: no magnet; the iterates cycle)
    eta: float = Field(1.0, gt=0)  # the step, per unit of return
    # how fast the magnet follows the policy: rho <- rho^(1 - e) pi^e (0: a fixed uniform
    # magnet, whose fixed point is the regularized equilibrium, not Nash)
    magnet_rate: float = Field(0.05, ge=0, le=1)
    window: int = Field(64, ge=1)  # measurements of an action's value a state remembers
    max_states: int = Field(65536, ge=1)  # states remembered (least recently visited go)


class AlgorithmConfig(_Section):
    """Advantage estimator and PPO loss (SPEC sections 3 and 4)."""

    # mars (paper) | mars_code (the published code's five steps) | grpo_trajectory ("w/o
    # turn-level") | mars_shared ("w/o agent-specific") | rae (SPIRAL) | rloo_env (In2AI) |
    # monte_carlo (each turn against the other moves of its state: rollout.mc_rollouts)
    estimator: str = "mars"
    # the baseline's grouping columns; null: the estimator's own ((game, role); rloo_env (game))
    group_keys: tuple[str, ...] | None = None
    normalize_std: bool = False  # mars / mars_shared: divide by the group's std
    rae_decay: float = Field(0.95, gt=0, lt=1)  # rae: EMA decay of the per-(game, role) baseline
    # the estimator's own options, scoped to it (the names its record takes, e.g. rae:
    # {decay: 0.9}; mars: {normalize_std: true}); one with a flat field above (group_keys,
    # normalize_std, rae_decay) is read into that field, so both forms give the same config
    options: dict[str, Any] = Field(default_factory=dict, exclude_if=lambda v: not v)
    # leave turns whose advantage is 0 (within 1e-9: float dust) out of the batch
    drop_zero_advantage: bool = False
    # which actions a visit of a state trains (a state: the same game, role and prompt):
    # sampled: the one it sampled (the policy gradient); all: also each other valid action seen
    # in that state, with the mean advantage of the batch's turns that took it there (the
    # all-action update); greedy: only the action of highest mean return-to-go there, where two
    # or more were seen, with advantage 1; best_valued: only its state's move of highest
    # Monte-Carlo value (rollout.mc_rollouts), with advantage Q(s, best) - V(s);
    # sampled_and_best: the sampled move with its own advantage and that best move beside it
    # (mars_core.advantages.all_actions)
    # mirror: Magnetic Mirror Descent (`mirror` below; mars_core.advantages.mirror): every
    # visited state's known actions, each with its closed-form target probability, fitted by
    # weighted log-likelihood (needs loss_aggregation: seq_mean_token_sum)
    train_actions: Literal["sampled", "all", "greedy", "best_valued",
                           "sampled_and_best", "mirror"] = "sampled"
    # best_valued / sampled_and_best: the advantage of a best-move row; gap: Q(s, best) - V(s);
    # unit: 1 wherever the best move is worth more than its state's mean (a cross-entropy step
    # toward it, as greedy's: the values choose the label, not the step's size)
    label_advantage: Literal["gap", "unit"] = "gap"
    # greedy: how many past measurements of an action's value a state remembers, from batch to
    # batch (saved with the checkpoint), so that an action the policy stopped sampling keeps its
    # value; 0: this batch's only
    action_memory: int = Field(0, ge=0)
    # greedy with action_memory: the most states remembered (the least recently measured are
    # forgotten first), so that a game of many positions cannot grow the checkpoint's state
    action_memory_states: int = Field(65536, ge=1)
    mirror: MirrorConfig = Field(default_factory=lambda: MirrorConfig())
    # the trust region's bound: the update stops its remaining optimizer steps once the KL to
    # the old policy (the k3 estimate over the minibatch's tokens, logged as approx_kl_old)
    # exceeds it; null: every step runs
    max_kl: float | None = Field(None, gt=0)
    ppo_epochs: int = Field(1, ge=1)  # passes over the batch per iteration
    clip_eps: float = Field(0.2, gt=0)
    # clip-higher (DAPO; MARS's fixed-opponent recipe 0.28): the ratio's upper bound is
    # 1 + clip_eps_high, so a token may gain more probability than it may lose; null: clip_eps
    clip_eps_high: float | None = Field(None, gt=0)
    # decoupled PPO: each token's loss is weighted by min(pi_old / pi_behaviour, is_cap), the
    # behaviour the log-prob the engine recorded when it sampled (older weights for a bank turn
    # drawn again, vLLM's or bf16's kernels, top-k/top-p truncation); null: no correction
    is_cap: float | None = Field(2.0, ge=1)
    dual_clip: float | None = 1.4  # cap of the loss on negative advantages (c x |A|); null: off
    kl_coef: float = Field(0.2, ge=0)  # 0: no KL term, and no reference model is loaded at all
    entropy_coef: float = Field(0.0, ge=0)  # bonus: loss -= entropy_coef x token entropy
    # how token losses become one number: seq_mean_token_mean (MARS: each sequence weighs the
    # same), token_mean (each token weighs the same), seq_mean_token_sum (sequence sums)
    loss_aggregation: Aggregation = "seq_mean_token_mean"  # AGGREGATIONS above

    @model_validator(mode="before")
    @classmethod
    def _scoped_options(cls, data: Any) -> Any:
        """`options` checked against the chosen estimator's record: an option it does not
        take is one error naming it and the ones it takes; one that has a flat field moves
        there (given in both forms, the values must agree)."""
        if not isinstance(data, dict) or not isinstance(data.get("options"), dict):
            return data
        name = data.get("estimator", cls.model_fields["estimator"].default)
        if not data["options"] or name not in ESTIMATORS:  # the after-check names the estimator
            return data
        fields = dict(ESTIMATORS[name].config)
        out, scoped = dict(data), {}
        for option, value in data["options"].items():
            if option not in fields:
                raise ValueError(f"advantage estimator {name!r} takes no option {option!r} in "
                                 f"algorithm.options; it takes: {', '.join(fields) or 'none'}")
            field = fields[option]
            if field is None:
                scoped[option] = value
                continue
            if field in data and _same(data[field]) != _same(value):
                raise ValueError(f"algorithm.options.{option} and algorithm.{field} set the same "
                                 f"option to different values ({value!r}, {data[field]!r}): "
                                 "give one")
            out[field] = value
        out["options"] = scoped
        return out

    @model_validator(mode="after")
    def _known_estimator(self):
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"unknown advantage estimator {self.estimator!r}; choose one of: "
                             + ", ".join(ESTIMATORS))
        if self.estimator == "mars_shared" and self.group_keys is not None:
            raise ValueError("algorithm.group_keys: mars_shared always groups by game alone "
                             "(use estimator mars to choose the keys)")
        if self.group_keys is not None and not self.group_keys:
            raise ValueError("algorithm.group_keys must name at least one column (or be null)")
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError("algorithm.dual_clip must be greater than 1 (or null)")
        if self.action_memory and self.train_actions != "greedy":
            raise ValueError("algorithm.action_memory applies to train_actions: greedy only")
        if self.train_actions == "mirror" and self.loss_aggregation != "seq_mean_token_sum":
            raise ValueError("algorithm.train_actions: mirror fits each answer's whole "
                             "log-probability: set algorithm.loss_aggregation: "
                             "seq_mean_token_sum")
        if self.label_advantage != "gap" and self.train_actions not in VALUE_LABELLED:
            raise ValueError("algorithm.label_advantage applies to train_actions: best_valued "
                             "or sampled_and_best only")
        return self


class BatchingConfig(_Section):
    """The episodes bank and the batch builder (In2AI, SPEC section 5). Every iteration's
    eligible policy turns go to the bank; a batch is drawn from the last `window` iterations'
    turns, round-robin across games, stratified over `reward_bins` reward-quantile bins, at
    most `max_turns_per_episode` turns of one episode. The defaults take every eligible turn
    of the iteration, once: the MARS batch. (In2AI calls a turn a "step"; here a step is an
    optimizer step. The former names `unit: step` and `max_steps_per_episode` still read.)"""

    RENAMED = {"max_steps_per_episode": "max_turns_per_episode"}
    unit: Literal["trajectory", "turn"] = "trajectory"  # what is drawn: a player's whole
    # trajectory (what mars, grpo_trajectory, rae need) or single turns (In2AI, rloo_env)
    size: int | None = Field(None, ge=1)  # units per batch; null: every available unit
    window: int = Field(1, ge=1)  # iterations of the bank a batch may draw from
    max_turns_per_episode: int | None = Field(None, ge=1)  # null: no cap
    reward_bins: int = Field(1, ge=1)  # 3: bad / average / good, drawn in equal shares
    reuse: bool = False  # true: a turn may be drawn again by later batches

    @field_validator("unit", mode="before")
    @classmethod
    def _former_unit(cls, value):
        if value == "step":
            deprecated("step", "turn", "batching.unit")
            return "turn"
        return value


class OptimConfig(_Section):
    lr: float = Field(1e-6, gt=0)
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.05
    warmup_steps: int = Field(10, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    # gradient accumulation: distinct sequences per forward pass (samples with the same
    # prompt, completion and temperature share one row)
    micro_batch_size: int = Field(8, ge=1)
    # at most this many token positions per forward pass (rows x the longest; None: no
    # bound): the update's memory bound, whatever the batch size
    micro_batch_tokens: int | None = Field(None, ge=1)
    minibatches: int = Field(1, ge=1)  # optimizer steps per epoch over the batch


class DeepSpeedConfig(_Section):
    """The DeepSpeed backend (`trainer.backend: deepspeed`): ZeRO stage, CPU offload and how
    the training processes are launched. bf16 follows `model.bf16`."""

    zero_stage: Literal[2, 3] = 2
    offload_optimizer: bool = False  # optimizer states (and the step) on the CPU
    offload_params: bool = False  # parameters on the CPU too (ZeRO-3 only)
    launcher: Literal["deepspeed", "torchrun"] = "deepspeed"  # how the processes start
    num_processes: int = Field(1, ge=1)  # processes (GPUs) per node
    hostfile: str | None = None  # multi-node: DeepSpeed's hostfile ("host slots=N" lines)
    extra: dict = Field(default_factory=dict)  # merged into the generated DeepSpeed config

    @model_validator(mode="after")
    def _coherent(self):
        if self.offload_params and self.zero_stage != 3:
            raise ValueError("trainer.deepspeed.offload_params needs zero_stage: 3 "
                             "(ZeRO-2 partitions optimizer states and gradients, not parameters)")
        if self.hostfile is not None and self.launcher != "deepspeed":
            raise ValueError("trainer.deepspeed.hostfile needs launcher: deepspeed")
        return self


class LoraConfig(_Section):
    """`trainer.lora`: train low-rank adapters (peft) on the start policy instead of every
    weight (`mars_core.training.lora`): checkpoints hold the merged weights and the adapter; the KL
    reference is the start policy with the adapters off (no second copy of the weights)."""

    rank: int = Field(0, ge=0)  # 0: off, every weight is trained
    alpha: float = Field(32.0, gt=0)  # the adapter's output is scaled by alpha / rank
    dropout: float = Field(0.0, ge=0, lt=1)
    # the attention projections (Llama/Qwen names): the MLPs then need no weight gradients
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")

    @model_validator(mode="after")
    def _targets(self):
        if self.rank and not self.target_modules:
            raise ValueError("trainer.lora.target_modules names no module")
        return self


class TrainerConfig(_Section):
    """Which backend runs the policy update. Both take the same batches and the same loss
    (`mars_core.training.trainer.ppo_update`); `deepspeed` runs it in launched worker processes."""

    backend: Literal["torch", "deepspeed"] = "torch"
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory
    deepspeed: DeepSpeedConfig = DeepSpeedConfig()
    lora: LoraConfig = LoraConfig()

    @model_validator(mode="after")
    def _lora_backend(self):
        if self.lora.rank and self.backend != "torch":
            raise ValueError("trainer.lora needs trainer.backend: torch (the DeepSpeed backend "
                             "trains every weight)")
        return self


class WarmupConfig(_Section):
    """Supervised warm-up on `<answer>{a bot's action}</answer>` replies: the format warm-up
    (the random bot), or a warm start from demonstrations (a stronger bot)."""

    steps: int = Field(0, ge=0)  # 0 disables it
    # whose play the examples answer with, both seats of its self-play games: bot:random (the
    # format warm-up: any legal action) or a bot that plays well, e.g. bot:mcts-100 in
    # Tic-Tac-Toe or bot:nash in Kuhn Poker (a warm start from demonstrations: it teaches
    # strategy, so report its runs apart from RL alone; the evaluation at the start measures it)
    demonstrator: str = "bot:random"
    batch_size: int = Field(8, ge=1)
    # examples per forward pass (gradient accumulation: the same step, the peak memory of one
    # micro-batch; a full fine-tune on 900-token prompts holds ~2 GB of activations per example)
    micro_batch_size: int = Field(2, ge=1)
    # recompute the activations in backward (the same step, one more forward per micro-batch;
    # for a full fine-tune on long prompts, the generalist's: docs/performance.md)
    gradient_checkpointing: bool = False
    lr: float = Field(3e-5, gt=0)
    probe_games: int = Field(8, ge=0)  # self-play games to measure the invalid rate before/after
    # rank > 0: train a LoRA adapter and merge it into the saved start policy, instead of every
    # weight: no gradients or optimizer state for the model's 135M weights (the demo's warm-up
    # peak 3.7 -> 2.3 GiB, docs/performance.md); it takes a larger lr (the demo: 1e-3)
    lora: LoraConfig = LoraConfig()
