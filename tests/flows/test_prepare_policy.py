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
