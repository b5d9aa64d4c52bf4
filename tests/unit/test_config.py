import pytest

from mars_core.config import ConfigError, load_config
from tests.conftest import REPO


def test_presets_load():
    assert load_config(REPO / "configs/smoke.yaml").rollout.games == ("tic_tac_toe",)
    demo = load_config(REPO / "configs/demo.yaml")  # Kuhn Poker by self-play, LoRA throughout
    assert demo.rollout.games == ("kuhn_poker",)
    assert demo.rollout.opponents == {"kuhn_poker": "self"}
    assert demo.warmup.lora.rank == demo.trainer.lora.rank == 16


def test_overrides_are_typed():
    cfg = load_config(None, ["rollout.temperature=0.8", "algorithm.estimator=grpo_trajectory", "run.iterations=3"])
    assert cfg.rollout.temperature == 0.8 and cfg.algorithm.estimator == "grpo_trajectory"
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


@pytest.mark.parametrize("text,where,problem", [
    ("run:\n  seed: 1\n iterations: 2\n", "line 3, column 2",
     "expected <block end>, but found '<block mapping start>' (while parsing a block mapping "
     "at line 1, column 1)"),
    ("run: {seed: 1\n", "line 2, column 1",
     "(while parsing a flow mapping at line 1, column 6)"),
    ("run:\n\tseed: 1\n", "line 2, column 1", "found character '\\t' that cannot start any token"),
    ("run: seed: 1\n", "line 1, column 10", "mapping values are not allowed here"),
])
def test_a_yaml_error_names_file_line_and_column(tmp_path, text, where, problem):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(bad)
    msg = str(e.value)
    assert msg.startswith(f"config file {bad}, {where}: not valid YAML: ") and problem in msg, msg
    assert "\n" not in msg


def test_extends_and_overlays_merge_in_order(tmp_path):
    (tmp_path / "base.yaml").write_text("run: {iterations: 7, seed: 3}\nrollout: {temperature: 0.9}\n")
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nrun: {iterations: 5}\n")
    (tmp_path / "scale.yaml").write_text("run: {iterations: 1}\nrollout: {max_new_tokens: 9}\n")
    cfg = load_config(tmp_path / "child.yaml")
    assert (cfg.run.iterations, cfg.run.seed, cfg.rollout.temperature) == (5, 3, 0.9)
    cfg = load_config(tmp_path / "child.yaml", ["run.seed=4"], overlays=[tmp_path / "scale.yaml"])
    assert (cfg.run.iterations, cfg.run.seed, cfg.rollout.max_new_tokens) == (1, 4, 9)


def test_extends_refuses_cycles_and_missing_bases(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError, match="extends itself"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("extends: nowhere.yaml\n")
    with pytest.raises(ConfigError, match="config file not found: .*nowhere.yaml"):
        load_config(tmp_path / "c.yaml")


@pytest.mark.parametrize("items, message", [
    (["algorithm.estimator=mars", "batching.unit=turn"], "needs whole trajectories"),
    (["algorithm.estimator=mars_shared", "algorithm.group_keys=[game, role]"], "groups by game alone"),
    (["algorithm.loss_aggregation=token_sum"], "loss_aggregation"),
    (["batching.size=0"], "batching.size"),
])
def test_algorithm_and_batching_checks(items, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, items)


def test_every_ablation_preset_loads_at_the_smoke_scale():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "configs"
    estimators = {}
    for preset in sorted((root / "ablations").glob("*.yaml")):
        cfg = load_config(preset, overlays=[root / "scales/smoke.yaml"])
        assert cfg.run.iterations == 2 and cfg.rollout.games == ("tic_tac_toe", "kuhn_poker", "mini_hanabi")
        estimators[preset.stem] = (cfg.algorithm.estimator, bool(cfg.rollout.opponents))
    assert estimators == {"mars": ("mars", False), "wo_turn_level": ("grpo_trajectory", False),
                          "wo_agent_specific": ("mars_shared", False),
                          "grpo": ("grpo_trajectory", False), "rae": ("rae", False),
                          "fixed_opponent": ("mars", True)}


def test_ablation_variants_change_only_the_estimator_of_any_base():
    """`mars compare --seeds`: each variant overlay laid over a learning recipe changes the
    advantage estimator and nothing else (equal compute), and it is the same change as the
    GPU-scale preset of the same name in configs/ablations/."""
    from pathlib import Path

    from flows.compare import ABLATE_BASES, LEARNING_BASES, VARIANTS

    root = Path(__file__).resolve().parents[2]
    seen = set()
    for base in ABLATE_BASES + LEARNING_BASES:
        plain = load_config(root / base).flat()
        for variant in VARIANTS:
            cfg = load_config(root / base, overlays=[root / variant])
            changed = {k for k, v in cfg.flat().items() if plain.get(k) != v}
            assert changed <= {"algorithm.estimator", "algorithm.group_keys", "algorithm.rae_decay"}
            preset = load_config(root / "configs/ablations" / Path(variant).name)
            assert (cfg.algorithm.estimator, cfg.algorithm.group_keys) == (
                preset.algorithm.estimator, preset.algorithm.group_keys)
            seen.add((cfg.algorithm.estimator, cfg.algorithm.group_keys))
    assert len(seen) == len(VARIANTS)  # five different advantage designs


def test_learning_recipes_load_as_the_readme_describes_them():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "configs/learning"
    kuhn = load_config(root / "kuhn_vs_random.yaml")
    assert kuhn.rollout.opponents == {"kuhn_poker": "bot:random"}
    assert kuhn.evaluation.at_start and kuhn.trainer.lora.rank == 16
    ttt = load_config(root / "tic_tac_toe.yaml")
    assert not ttt.rollout.opponents and ttt.algorithm.estimator == "mars"  # self-play, MARS
    assert ttt.evaluation.opponents_for("tic_tac_toe") == ("bot:random", "bot:mcts-10")
    assert ttt.evaluation.at_start and ttt.evaluation.games_per_seat >= 400
    ppo = load_config(root.parent / "lab/kuhn_ppo.yaml")  # the method's update: a trust region
    assert ppo.optim.minibatches * ppo.algorithm.ppo_epochs > 1
    assert ppo.algorithm.clip_eps_high > ppo.algorithm.clip_eps and ppo.algorithm.entropy_coef > 0
    assert ppo.evaluation.opponents_for("kuhn_poker") == ("bot:random", "bot:nash")
    with pytest.warns(FutureWarning, match="configs/lab/kuhn_ppo.yaml"):  # the path before the move
        assert load_config(root / "kuhn_ppo.yaml") == ppo


@pytest.mark.parametrize("former, now, read", [
    ("rollout.max_tokens=12", "rollout.max_new_tokens=12", lambda c: c.rollout.max_new_tokens),
    ("rollout.per_game.codenames.max_tokens=7", "rollout.per_game.codenames.max_new_tokens=7",
     lambda c: c.rollout.per_game["codenames"].max_new_tokens),
    ("batching.max_steps_per_episode=4", "batching.max_turns_per_episode=4",
     lambda c: c.batching.max_turns_per_episode),
    ("batching.unit=step", "batching.unit=turn", lambda c: c.batching.unit),
])
def test_former_names_read_as_the_one_word_with_a_deprecation_note(former, now, read):
    with pytest.warns(FutureWarning, match="deprecated: it is now"):
        old = load_config(None, [former, "algorithm.estimator=rloo_env"])
    new = load_config(None, [now, "algorithm.estimator=rloo_env"])
    assert read(old) == read(new) and old == new
    assert "max_tokens" not in str(new.flat()) and "max_steps" not in str(new.flat())


def test_a_former_name_beside_its_new_one_is_refused():
    with pytest.raises(ConfigError, match="'max_tokens' is the former name of 'max_new_tokens'"):
        load_config(None, ["rollout.max_tokens=12", "rollout.max_new_tokens=3"])


def test_a_renamed_flow_parameter_reads_its_former_name_with_a_note():
    from mars_core.config.base import former

    assert former(None, "max_tokens", 1024, "max_new_tokens") == 1024  # not given: no note
    with pytest.warns(FutureWarning, match="parameter 'strategic_preset' is deprecated"):
        assert former("q.yaml", "strategic_preset", "d.yaml", "game_eval_preset") == "q.yaml"
