"""The advantage estimators by name, as records (SPEC section 3), in one registry.

Every record is called the same way, `estimate(batch, options, state) -> (frame, state)`
(verl's habit), and carries its own facts: whether a batch must hold whole trajectories,
whether it keeps state from batch to batch (saved with the checkpoint under its name), which
options it takes from the config, what metrics its state gives, and its plain-loop twin. The
task that runs an estimator never branches on its name; `compute_advantages` runs an
estimator's pure function by name. The tests and the bench read the twins from here.

A leaf: config validation reads the records without importing polars. The estimators
themselves are the pure functions of `mars_core.advantages.vectorised` and their twins those of
`mars_core.advantages.reference`, referred to here (go to definition follows each) and imported
on the first call. Adding one: docs/algorithms/adding-an-estimator.md.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass

GROUP_KEYS = (("group_keys", "group_keys"),)
NORMALIZE = (*GROUP_KEYS, ("normalize_std", "normalize_std"))


def _vectorised():
    """The estimators' pure functions (polars), imported on the first call."""
    from mars_core.advantages import vectorised

    return vectorised


def _reference():
    """The estimators' plain-loop twins (polars), imported on the first call."""
    from mars_core.advantages import reference

    return reference


Ref = Callable[[], Callable]  # a function of `vectorised`, as `lambda: _vectorised().name`


@dataclass(frozen=True)
class Estimator:
    """One advantage estimator.

    function: its pure function in `mars_core.advantages.vectorised` (a reference, loaded on
        first use), `fn(df, **options) -> df` with a Float64 `advantage` column (what
        `compute_advantages` runs).
    needs_trajectories: it reads returns or trajectory totals, so a batch must hold whole
        trajectories (`batching.unit: trajectory`); `rloo_env` works on single turns.
    stateful: it carries state from batch to batch (RAE's baselines, JSON-able); then `step`
        refers to the function of `mars_core.advantages.vectorised` that runs it with its
        state, `step(df, options, state) -> (frame, new state)`, and `metrics` to the one that
        turns a state into metrics.
    config: (option, `AlgorithmConfig` field) pairs: the options it takes from the config,
        each set by its flat field (`rae_decay`) or scoped, `algorithm.options: {decay: 0.9}`;
        a field of None: the option is set in `algorithm.options` only.
    twin: its plain-loop twin in `mars_core.advantages.reference` (a reference, like
        `function`), `twin(df, **options) -> list[float]` in row order, taking the options
        `function` takes: the ground truth the tests hold `function` to (a record without
        one fails tests/unit/test_estimators.py, which says so).
    """

    name: str
    function: Ref
    needs_trajectories: bool
    stateful: bool = False
    step: Ref | None = None
    metrics: Ref | None = None
    config: tuple[tuple[str, str | None], ...] = GROUP_KEYS
    twin: Ref | None = None

    def __post_init__(self):
        if self.stateful != (self.step is not None):
            raise ValueError(f"estimator {self.name!r}: a stateful estimator names its step, "
                             "a stateless one none")

    @property
    def fn(self) -> Callable:
        return self.function()

    @property
    def takes(self) -> tuple[str, ...]:
        """The options the config may set for it: the keys `algorithm.options` accepts."""
        return tuple(option for option, _ in self.config)

    def options(self, algorithm) -> dict:
        """The options from the config's `algorithm` section: a scoped one from
        `algorithm.options`, else its flat field (a value left null, such as `group_keys`, is
        not passed: the estimator's own default holds)."""
        scoped = getattr(algorithm, "options", None) or {}
        out = {}
        for option, field in self.config:
            if option in scoped:
                value = scoped[option]
            else:
                value = getattr(algorithm, field) if field is not None else None
            if value is not None:
                out[option] = tuple(value) if option == "group_keys" else value
        return out

    def run(self, df, **options):
        """The pure function on `df` with `options`; an option it does not take is a
        ValueError naming it and the ones it takes."""
        fn = self.fn
        takes = [p for p in inspect.signature(fn).parameters if p != "df"]
        _vectorised().check_options(self.name, takes, options)
        return fn(df, **options)

    def estimate(self, batch, options: Mapping[str, object], state=None):
        """(batch with its `advantage` column, the state after this batch); a stateless
        estimator gives back the state it was given."""
        if self.stateful:
            return self.step()(batch, options, state)
        return self.run(batch, **options), state

    def state_metrics(self, state) -> dict[str, float]:
        """The metrics of a state (none for a stateless estimator)."""
        return self.metrics()(state) if self.metrics else {}


ESTIMATORS: dict[str, Estimator] = {e.name: e for e in (
    Estimator("mars", lambda: _vectorised().mars_turn_level, needs_trajectories=True,
              config=NORMALIZE, twin=lambda: _reference().mars_turn_level_reference),
    Estimator("mars_code", lambda: _vectorised().mars_code, needs_trajectories=True,
              twin=lambda: _reference().mars_code_reference),
    Estimator("grpo_trajectory", lambda: _vectorised().grpo_trajectory, needs_trajectories=True,
              twin=lambda: _reference().grpo_trajectory_reference),
    # the config refuses group_keys for mars_shared; passed anyway, they are refused here too
    Estimator("mars_shared", lambda: _vectorised().mars_shared, needs_trajectories=True,
              config=NORMALIZE, twin=lambda: _reference().mars_shared_reference),
    Estimator("rae", lambda: _vectorised().rae, needs_trajectories=True, stateful=True,
              step=lambda: _vectorised().rae_estimate, metrics=lambda: _vectorised().rae_metrics,
              config=(*GROUP_KEYS, ("decay", "rae_decay")),
              twin=lambda: _reference().rae_reference),
    Estimator("rloo_env", lambda: _vectorised().rloo_env, needs_trajectories=False,
              twin=lambda: _reference().rloo_env_reference),
    # each turn against the other moves of its own state (rollout.mc_rollouts' values)
    Estimator("monte_carlo", lambda: _vectorised().monte_carlo, needs_trajectories=False,
              config=(), twin=lambda: _reference().monte_carlo_reference),
)}


def estimator(name: str) -> Estimator:
    """The record registered under `name`, or a ValueError listing the choices."""
    if name not in ESTIMATORS:
        choices = ", ".join(ESTIMATORS)
        raise ValueError(f"unknown advantage estimator '{name}'; choose one of: {choices}")
    return ESTIMATORS[name]


def compute_advantages(df, name: str, **options):
    """Run the pure function of the estimator registered under `name` with `options` (see
    `Estimator.run`): `df` with its Float64 `advantage` column."""
    return estimator(name).run(df, **options)
