"""The estimator records: one call signature, their own facts, options from the config; the
RAE step that carries the state; the registry read without polars."""
from __future__ import annotations

import subprocess
import sys

import pytest

from mars_core.advantages.vectorised import (grpo_trajectory, mars_code, mars_shared,
                                             mars_turn_level, rae, rae_update, rloo_env)
from mars_core.config.train import TRAJECTORY_ESTIMATORS, AlgorithmConfig
from mars_core.advantages.estimators import ESTIMATORS, compute_advantages, estimator
from tests.unit.test_advantages import P0, rae_batch_two, random_turns, tic_tac_toe

FUNCTIONS = {"mars": mars_turn_level, "mars_code": mars_code,
             "grpo_trajectory": grpo_trajectory, "mars_shared": mars_shared, "rae": rae,
             "rloo_env": rloo_env}


def test_records_name_their_functions_and_facts():
    assert list(ESTIMATORS) == list(FUNCTIONS)
    for name, est in ESTIMATORS.items():
        assert est.name == name and est.fn is FUNCTIONS[name]
    assert TRAJECTORY_ESTIMATORS == ("mars", "mars_code", "grpo_trajectory", "mars_shared",
                                     "rae")
    assert [n for n, e in ESTIMATORS.items() if e.stateful] == ["rae"]


@pytest.mark.parametrize("name", ["mars", "mars_code", "grpo_trajectory", "mars_shared",
                                  "rloo_env"])
def test_stateless_estimate_is_the_function_and_keeps_the_state(name):
    df = random_turns(4)
    options = {"normalize_std": True} if name in ("mars", "mars_shared") else {}
    frame, state = estimator(name).estimate(df, options, {"x": 1.0})
    assert frame.equals(FUNCTIONS[name](df, **options)) and state == {"x": 1.0}
    assert estimator(name).state_metrics(state) == {}


def test_rae_estimate_reads_then_updates_the_state():
    est = estimator("rae")
    state = {P0: 0.5}
    frame, new = est.estimate(rae_batch_two(), {"decay": 0.9}, state)
    assert frame.equals(rae(rae_batch_two(), state))
    assert new == rae_update(state, rae_batch_two(), decay=0.9)
    assert state == {P0: 0.5}  # not mutated
    keys = ("game",)
    frame, new = est.estimate(tic_tac_toe(), {"group_keys": keys}, None)
    assert frame.equals(rae(tic_tac_toe(), {}, group_keys=keys))
    assert new == rae_update({}, tic_tac_toe(), group_keys=keys)
    assert est.state_metrics({"tic_tac_toe|player_0": 0.25}) == {
        "rae/baseline/tic_tac_toe/player_0": 0.25}


def test_estimate_refuses_options_it_does_not_take():
    with pytest.raises(ValueError) as err:
        estimator("mars_shared").estimate(tic_tac_toe(), {"group_keys": ("game", "role")}, None)
    assert str(err.value) == ("advantage estimator 'mars_shared' takes no option 'group_keys'; "
                              "it takes: normalize_std, eps")
    with pytest.raises(ValueError, match="'baselines'"):
        estimator("rae").estimate(tic_tac_toe(), {"baselines": {}}, None)
    with pytest.raises(ValueError, match="unknown advantage estimator 'grpo'"):
        estimator("grpo")


@pytest.mark.parametrize(("name", "fields", "expected"), [
    ("mars", {}, {"normalize_std": False}),
    ("mars", {"group_keys": ["game"], "normalize_std": True},
     {"group_keys": ("game",), "normalize_std": True}),
    ("mars_shared", {"normalize_std": True}, {"normalize_std": True}),
    ("mars_code", {"normalize_std": True}, {}),
    ("grpo_trajectory", {"group_keys": ["game", "role"]}, {"group_keys": ("game", "role")}),
    ("rae", {"rae_decay": 0.5}, {"decay": 0.5}),
    ("rae", {"group_keys": ["game"]}, {"group_keys": ("game",), "decay": 0.95}),
    ("rloo_env", {"normalize_std": True, "rae_decay": 0.5}, {}),
])
def test_options_from_the_config(name, fields, expected):
    algo = AlgorithmConfig(estimator=name, **fields)
    assert estimator(name).options(algo) == expected


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_config_options_run(name):
    """Options drawn from a config are ones the estimator takes."""
    algo = AlgorithmConfig(estimator=name, normalize_std=True, rae_decay=0.5)
    est = estimator(name)
    frame, _ = est.estimate(random_turns(2), est.options(algo), None)
    assert frame["advantage"].is_finite().all()


def test_compute_advantages_runs_the_record():
    df = random_turns(5)
    assert compute_advantages(df, "mars", normalize_std=True).equals(
        estimator("mars").run(df, normalize_std=True))


def test_the_config_reads_the_records_without_polars():
    code = ("import sys, mars_core.config.train, mars_core.advantages.estimators; "
            "assert 'polars' not in sys.modules, 'polars imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
