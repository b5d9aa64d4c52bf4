import pytest

from mars_core.config import ConfigError, load_config
from tests.conftest import REPO


def test_presets_load():
    for name in ("smoke", "demo"):
        cfg = load_config(REPO / "configs" / f"{name}.yaml")
        assert cfg.rollout.games == ("tic_tac_toe",)


def test_overrides_are_typed():
    cfg = load_config(None, ["rollout.temperature=0.8", "algorithm.estimator=grpo", "run.iterations=3"])
    assert cfg.rollout.temperature == 0.8 and cfg.algorithm.estimator == "grpo"
    assert cfg.run.iterations == 3


@pytest.mark.parametrize("override,needle", [
    ("rollout.temprature=0.8", "rollout.temprature"),
    ("rollout.temperature=hot", "rollout.temperature"),
    ("run.iterations=0", "run.iterations"),
    ("rollout.games=[chess]", "unknown game 'chess'"),
    ("rollout.games=[tic_tac_toe,kuhn_poker,mini_hanabi]", "must be a multiple of the number of games (3)"),
    ("algorithm.estimator=ppo", "unknown advantage estimator 'ppo'"),
    ("evaluation.opponents.tic_tac_toe=bot:alphazero", "unknown bot 'bot:alphazero'; choose one of"),
    ("evaluation.opponents.connect_four=bot:nash", "does not fit connect_four"),
    ("evaluation.opponents.kuhn_poker=bot:mcts-10", "does not fit kuhn_poker"),
    ("nonsense=1", "nonsense"),
    ("novalue", "key=value"),
])
def test_bad_values_name_the_key(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("run: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
