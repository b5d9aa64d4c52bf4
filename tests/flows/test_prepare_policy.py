"""The start of a run: without a warm-up, a policy that never answers validly is flagged."""
from mars_core.config import load_config
from mars_core.run.layout import INIT, POLICY_FILE, PREPARE_POLICY, stage_dir
from mars_core.run.commit import read_json
from tasks.paths import prepare_run_dir
from tasks.train import prepare_policy
from tests.conftest import REPO


def test_no_warmup_measures_and_warns(tmp_path, tiny_model_dir, capsys):
    run = tmp_path / "nowarm"
    cfg = load_config(REPO / "configs/smoke.yaml",
                      [f"model.path={tiny_model_dir}", "warmup.steps=0", "warmup.probe_games=2"])
    prepare_run_dir(run, cfg)
    metrics = prepare_policy.fn(str(run))
    assert metrics["warmup/invalid_rate_before"] == 1.0
    assert "consider a format warm-up" in capsys.readouterr().out
    policy = read_json(stage_dir(run, INIT, PREPARE_POLICY) / POLICY_FILE)
    assert policy["path"] == str(tiny_model_dir)


def test_a_warm_start_from_demonstrations_trains_on_the_bots_moves(tmp_path, tiny_model_dir,
                                                                   monkeypatch):
    """`warmup.demonstrator`: the warm-up's examples come from that bot's self-play."""
    from mars_core.training import warmup

    seen = {}
    original = warmup.warmup_examples

    def spy(*args, **kwargs):
        seen["demonstrator"] = kwargs.get("demonstrator")
        return original(*args, **kwargs)

    monkeypatch.setattr("tasks.train.warmup_examples", spy)
    run = tmp_path / "warm"
    cfg = load_config(REPO / "configs/smoke.yaml",
                      [f"model.path={tiny_model_dir}", "warmup.steps=2", "warmup.batch_size=2",
                       "warmup.probe_games=0", "warmup.demonstrator=bot:mcts-10"])
    prepare_run_dir(run, cfg)
    metrics = prepare_policy.fn(str(run))
    assert seen == {"demonstrator": "bot:mcts-10"} and metrics["warmup/examples"] >= 4
    policy = read_json(stage_dir(run, INIT, PREPARE_POLICY) / POLICY_FILE)
    assert policy["path"] != str(tiny_model_dir)  # the warmed-up model
