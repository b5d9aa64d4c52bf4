"""docs/algorithms/adding-an-estimator.md, followed: a toy estimator (each turn's reward minus
its game's mean, times a `scale` option) is added the way the page says, its vectorised
function, its loop twin and its record, registered at run time, and then the config takes its
name and its scoped option, the task-side call runs it, and the twin check and the bench
cover it, with no other list edited."""
from __future__ import annotations

import runpy
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import polars as pl
import pytest

from mars_core.advantages import estimators, reference, vectorised
from mars_core.advantages.estimators import (ESTIMATORS, GROUP_KEYS, Estimator, _reference,
                                             _vectorised, estimator)
from mars_core.config import ConfigError, load_config
from mars_core.config.train import AlgorithmConfig
from tests.conftest import REPO
from tests.unit.advantage_tables import random_turns
from tests.unit.test_estimators import twin_problem, twin_problems

PAGE = REPO / "docs" / "algorithms" / "adding-an-estimator.md"
NAME = "toy_centred"


# 1. the vectorised function (it would go in mars_core/advantages/vectorised.py)
def toy_centred(df: pl.DataFrame, group_keys: Sequence[str] = ("game",),
                scale: float = 1.0) -> pl.DataFrame:
    """`A = scale * (r - mean(r))` over the turns sharing `group_keys`."""
    keys = vectorised._check_columns(df, group_keys)
    r = pl.col("reward").cast(pl.Float64)
    return vectorised._restore(vectorised._sorted_by_trajectory(df),
                               scale * (r - r.mean().over(keys)))


# 2. its loop twin (it would go in mars_core/advantages/reference.py)
def toy_centred_reference(df: pl.DataFrame, group_keys: Sequence[str] = ("game",),
                          scale: float = 1.0) -> list[float]:
    """Loop version of `toy_centred`."""
    rows, keys = reference._rows(df, group_keys)
    by_group: dict[tuple, list[float]] = defaultdict(list)
    for row in rows:
        by_group[tuple(row[k] for k in keys)].append(float(row["reward"]))
    out = []
    for row in rows:
        values = by_group[tuple(row[k] for k in keys)]
        out.append(scale * (row["reward"] - sum(values) / len(values)))
    return out


# 3. its record (it would go in ESTIMATORS, mars_core/advantages/estimators.py); `scale` has no
# flat AlgorithmConfig field: it is set as algorithm.options.scale
RECORD = Estimator(NAME, lambda: _vectorised().toy_centred, needs_trajectories=False,
                   config=(*GROUP_KEYS, ("scale", None)),
                   twin=lambda: _reference().toy_centred_reference)


@pytest.fixture
def toy(monkeypatch):
    """The toy estimator added as the page says: the two functions in their modules (as if
    written there), the record in ESTIMATORS."""
    monkeypatch.setattr(toy_centred, "__module__", vectorised.__name__)
    monkeypatch.setattr(toy_centred_reference, "__module__", reference.__name__)
    monkeypatch.setattr(vectorised, NAME, toy_centred, raising=False)
    monkeypatch.setattr(reference, f"{NAME}_reference", toy_centred_reference, raising=False)
    monkeypatch.setitem(ESTIMATORS, NAME, RECORD)
    return RECORD


def test_before_it_is_added_the_config_refuses_its_name():
    with pytest.raises(ConfigError, match=f"unknown advantage estimator '{NAME}'"):
        load_config(None, [f"algorithm.estimator={NAME}"])


def test_the_config_takes_its_name_and_its_scoped_options(toy):
    cfg = load_config(None, [f"algorithm.estimator={NAME}", "algorithm.options={scale: 2.0}",
                             "algorithm.group_keys=[game, role]", "batching.unit=turn"])
    assert cfg.algorithm.estimator == NAME and cfg.algorithm.options == {"scale": 2.0}
    assert toy.options(cfg.algorithm) == {"group_keys": ("game", "role"), "scale": 2.0}
    # a scoped option without a flat field is kept in the config (and its dump) as given
    assert AlgorithmConfig.model_validate(cfg.algorithm.model_dump()) == cfg.algorithm
    assert toy.options(AlgorithmConfig(estimator=NAME)) == {}  # the function's defaults hold
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"algorithm.estimator={NAME}", "algorithm.options={decay: 0.9}"])
    assert str(err.value).endswith(f"advantage estimator '{NAME}' takes no option 'decay' in "
                                   "algorithm.options; it takes: group_keys, scale")


def test_the_task_side_call_runs_it(toy):
    """tasks/batching.py's compute_advantages runs any record the same way: the record by the
    config's name, its options from the config, `estimate(batch, options, state)`."""
    task = (REPO / "tasks" / "batching.py").read_text()
    assert "estimator(" in task and "est.options(" in task and "est.estimate(" in task
    a = AlgorithmConfig(estimator=NAME, options={"scale": 0.5})
    batch = random_turns(3)
    est = estimator(a.estimator)
    with_adv, new = est.estimate(batch, est.options(a), None)
    assert with_adv.drop("advantage").equals(batch) and new is None and not est.stateful
    np.testing.assert_allclose(with_adv["advantage"].to_numpy(),
                               toy_centred_reference(batch, scale=0.5), rtol=1e-12)
    assert estimators.compute_advantages(batch, NAME, scale=0.5).equals(with_adv)


def test_the_twin_check_covers_it(toy, monkeypatch):
    assert twin_problem(NAME) is None and NAME not in twin_problems()
    bench = runpy.run_path(str(REPO / "bench" / "algorithms_bench.py"), run_name="bench")
    assert bench["twins"]()[NAME] is toy_centred_reference

    def wrong(df, group_keys=("game",), scale=1.0):
        return [0.0] * len(df)

    monkeypatch.setattr(wrong, "__module__", reference.__name__)
    monkeypatch.setitem(ESTIMATORS, NAME, Estimator(NAME, RECORD.function, False,
                                                    config=RECORD.config, twin=lambda: wrong))
    assert "disagrees with its twin" in twin_problems()[NAME]
    monkeypatch.setitem(ESTIMATORS, NAME, Estimator(NAME, RECORD.function, False,
                                                    config=RECORD.config))
    assert twin_problems()[NAME] == (
        f"estimator '{NAME}' has no loop twin: write one in mars_core/advantages/reference.py "
        "and name it in its record (twin=...)")


def test_the_page_names_the_places_this_test_touched():
    text = PAGE.read_text()
    for place in ("mars_core/advantages/vectorised.py", "mars_core/advantages/reference.py",
                  "mars_core/advantages/estimators.py", "tests/unit/test_estimators.py",
                  "tests/unit/test_adding_an_estimator.py", "algorithm.options"):
        assert place in text, place
        assert place == "algorithm.options" or (REPO / place).exists(), place
