"""The estimator records: one call signature, their own facts, options from the config (flat
fields or scoped `algorithm.options`); every record's loop twin, read from the record; the RAE
step that carries the state; the registry read without polars."""
from __future__ import annotations

import inspect
import runpy
import subprocess
import sys

import numpy as np
import pytest

from mars_core.advantages import reference, vectorised
from mars_core.advantages.vectorised import (grpo_trajectory, mars_code, mars_shared,
                                             mars_turn_level, rae, rae_update, rloo_env)
from mars_core.config import ConfigError, load_config
from mars_core.config.train import TRAJECTORY_ESTIMATORS, AlgorithmConfig
from mars_core.advantages.estimators import ESTIMATORS, compute_advantages, estimator
from tests.conftest import REPO
from tests.unit.test_advantages import P0, rae_batch_two, random_turns, tic_tac_toe

# the shipped estimators and their functions (a new one needs no line here: the checks below
# that read ESTIMATORS cover it)
FUNCTIONS = {"mars": mars_turn_level, "mars_code": mars_code,
             "grpo_trajectory": grpo_trajectory, "mars_shared": mars_shared, "rae": rae,
             "rloo_env": rloo_env}


def test_records_name_their_functions_and_facts():
    assert list(ESTIMATORS)[:len(FUNCTIONS)] == list(FUNCTIONS)
    for name, est in ESTIMATORS.items():
        assert est.name == name and est.fn is getattr(vectorised, est.fn.__name__)
        assert name not in FUNCTIONS or est.fn is FUNCTIONS[name]
    assert TRAJECTORY_ESTIMATORS == tuple(n for n, e in ESTIMATORS.items() if e.needs_trajectories)
    assert TRAJECTORY_ESTIMATORS[:5] == ("mars", "mars_code", "grpo_trajectory", "mars_shared",
                                         "rae")
    assert [n for n in FUNCTIONS if ESTIMATORS[n].stateful] == ["rae"]


# ------------------------------------------------------------------------------ the loop twins


def twin_problem(name: str) -> str | None:
    """What is wrong with the loop twin of the estimator registered under `name` (None: it is
    there, in `mars_core.advantages.reference`, takes the options its function takes, and
    agrees with the function on random batches with and without ties)."""
    est = ESTIMATORS[name]
    if est.twin is None:
        return (f"estimator {name!r} has no loop twin: write one in "
                "mars_core/advantages/reference.py and name it in its record (twin=...)")
    twin = est.twin()
    if twin.__module__ != reference.__name__:
        return f"estimator {name!r}: its twin {twin.__qualname__} is not in {reference.__name__}"
    takes, twin_takes = inspect.signature(est.fn).parameters, inspect.signature(twin).parameters
    if [(p, takes[p].default) for p in takes] != [(p, twin_takes[p].default)
                                                  for p in twin_takes]:
        return (f"estimator {name!r}: its twin takes ({', '.join(twin_takes)}), "
                f"its function ({', '.join(takes)})")
    for seed in (0, 1, 2):
        for ties in (False, True):
            df = random_turns(seed, ties=ties)
            got = est.run(df)["advantage"].to_numpy()
            want = np.asarray(twin(df), dtype=float)
            if got.shape != want.shape or not np.allclose(got, want, rtol=1e-9, atol=1e-9):
                return f"estimator {name!r} disagrees with its twin (seed {seed}, ties {ties})"
    return None


def twin_problems() -> dict[str, str]:
    """Every registered estimator's twin problem (read from ESTIMATORS when called)."""
    return {n: p for n in ESTIMATORS if (p := twin_problem(n)) is not None}


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_every_estimator_has_a_loop_twin_that_agrees(name):
    assert twin_problem(name) is None, twin_problem(name)


def test_the_twin_list_is_read_from_the_records():
    """bench/algorithms_bench.py times each record's twin; none is missing."""
    assert all(e.twin is not None for e in ESTIMATORS.values()), twin_problems()
    assert ESTIMATORS["mars_shared"].twin() is reference.mars_shared_reference
    bench = runpy.run_path(str(REPO / "bench" / "algorithms_bench.py"), run_name="bench")
    assert bench["twins"]() == {n: e.twin() for n, e in ESTIMATORS.items()}


@pytest.mark.parametrize("name", [n for n, e in ESTIMATORS.items() if not e.stateful])
def test_stateless_estimate_is_the_function_and_keeps_the_state(name):
    df = random_turns(4)
    options = {"normalize_std": True} if "normalize_std" in estimator(name).takes else {}
    frame, state = estimator(name).estimate(df, options, {"x": 1.0})
    assert frame.equals(estimator(name).fn(df, **options)) and state == {"x": 1.0}
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


@pytest.mark.parametrize(("name", "scoped", "flat"), [
    ("rae", {"decay": 0.5}, {"rae_decay": 0.5}),
    ("mars", {"normalize_std": True, "group_keys": ["game"]},
     {"normalize_std": True, "group_keys": ["game"]}),
    ("mars_shared", {"normalize_std": True}, {"normalize_std": True}),
    ("rloo_env", {"group_keys": ["game", "role"]}, {"group_keys": ["game", "role"]}),
])
def test_scoped_options_give_the_config_the_flat_fields_give(name, scoped, flat):
    a = AlgorithmConfig(estimator=name, options=scoped)
    b = AlgorithmConfig(estimator=name, **flat)
    assert a == b and a.model_dump() == b.model_dump()
    assert "options" not in a.model_dump()  # an existing config's dump is unchanged
    assert estimator(name).options(a) == estimator(name).options(b)
    assert AlgorithmConfig(estimator=name, options=scoped, **flat) == b  # both forms, agreeing


def test_scoped_options_are_checked_against_the_chosen_estimator():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["algorithm.estimator=mars", "algorithm.options={decay: 0.9}"])
    assert str(err.value) == ("bad config value for 'algorithm': advantage estimator 'mars' "
                              "takes no option 'decay' in algorithm.options; it takes: "
                              "group_keys, normalize_std")
    with pytest.raises(ConfigError, match="rae_decay"):  # the flat field's own bounds hold
        load_config(None, ["algorithm.estimator=rae", "algorithm.options={decay: 1.5}"])
    with pytest.raises(ConfigError, match="algorithm.options.decay and algorithm.rae_decay"):
        load_config(None, ["algorithm.estimator=rae", "algorithm.rae_decay=0.5",
                           "algorithm.options={decay: 0.9}"])
    with pytest.raises(ConfigError, match="groups by game alone"):
        load_config(None, ["algorithm.estimator=mars_shared",
                           "algorithm.options={group_keys: [game]}"])
    cfg = load_config(None, ["algorithm.estimator=rae", "algorithm.options={decay: 0.9}"])
    assert cfg.algorithm.rae_decay == 0.9 and estimator("rae").options(cfg.algorithm) == {
        "decay": 0.9}


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
