"""`mars eval strategic` through Prefect and MLflow: records, radar chart, nested runs, and
model policies from a folder and from the registry (`models:/NAME@ALIAS`)."""
from __future__ import annotations

import json

import pytest
from mlflow import MlflowClient

from cli.main import main
from mars_core.strength.suite import RECORD_KEYS
from tests.conftest import REPO

QUICK = str(REPO / "configs/eval/mars_strategic_quick.yaml")


def _eval(capsys, *args):
    rc = main(["eval", "strategic", *args])
    return rc, capsys.readouterr()


def test_bot_policy_records_and_mlflow(tmp_path, prefect_api, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    out = tmp_path / "results.json"
    rc, cap = _eval(capsys, "--policy", "bot:mcts-20", "--games", "tic_tac_toe,connect_four",
                    "--opponents", "bot:random", "--n", "3", "--seed", "1", "--out", str(out),
                    "--tracking-uri", uri)
    assert rc == 0, cap.err[-2000:]
    records = json.loads(out.read_text())
    assert [(r["game"], r["seat"]) for r in records] == [
        ("tic_tac_toe", 0), ("tic_tac_toe", 1), ("connect_four", 0), ("connect_four", 1)]
    for r in records:
        assert set(RECORD_KEYS) <= set(r) and r["n"] == 3 and r["policy"] == "bot:mcts-20"
        assert r["opponent"] == "bot:random" and 0 <= r["normalized_return"] <= 100
    assert (tmp_path / "results_radar.png").stat().st_size > 10_000

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("mars-strategic-eval")
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.tags["mars.game"] for r in children) == ["connect_four", "tic_tac_toe"]
    assert {"normalized_return/tic_tac_toe", "normalized_return/mean"} <= set(parent.data.metrics)
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"strategic_results.json", "results.json", "results_radar.png"} <= names
    child = next(r for r in children if r.data.tags["mars.game"] == "tic_tac_toe")
    assert "bot_random/seat1/normalized_return" in child.data.metrics
    assert {a.path for a in client.list_artifacts(child.info.run_id)} == {"tic_tac_toe_results.json"}


def test_model_policy_from_a_folder_and_from_the_registry(tmp_path, prefect_api, tiny_model_dir,
                                                          capsys, monkeypatch):
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "folder.json"
    rc, cap = _eval(capsys, "--policy", str(tiny_model_dir), "--preset", QUICK, "--n", "2",
                    "--out", str(out))
    assert rc == 0, cap.err[-2000:]
    records = json.loads(out.read_text())
    assert {r["game"] for r in records} == {"tic_tac_toe", "kuhn_poker", "mini_hanabi",
                                            "connect_four", "leduc_poker", "simple_hanabi"}
    assert all(r["n"] == 2 for r in records)
    assert len(records) == 12  # six games x two seats (Hanabi: both seats of the self-play games)

    # Register the folder as a model version with an alias, then evaluate it by URI.
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("reg", artifact_location=(tmp_path / "art").as_uri())
    run = client.create_run(exp)
    client.log_artifacts(run.info.run_id, str(tiny_model_dir), "model")
    client.create_registered_model("tiny")
    mv = client.create_model_version("tiny", source=f"{run.info.artifact_uri}/model",
                                     run_id=run.info.run_id)
    client.set_registered_model_alias("tiny", "candidate", mv.version)
    out = tmp_path / "registry.json"
    rc, cap = _eval(capsys, "--policy", "models:/tiny@candidate", "--games", "kuhn_poker",
                    "--n", "2", "--out", str(out), "--tracking-uri", uri)
    assert rc == 0, cap.err[-2000:]
    assert [r["policy"] for r in json.loads(out.read_text())] == ["models:/tiny@candidate"] * 2
    # The download cache is keyed by version and what identifies the weights (store, run, source).
    cached = list((tmp_path / "cache/registry/tiny").glob("v1-*/config.json"))
    assert len(cached) == 1, cached


@pytest.mark.parametrize("args,needle", [
    (["--games", "chess"], "unknown game 'chess'; choose one of: tic_tac_toe, kuhn_poker"),
    (["--games", "connect_four", "--opponents", "bot:nash"],
     "opponent 'bot:nash' does not fit connect_four"),
    (["--games", "kuhn_poker", "--opponents", "bot:alphazero"], "unknown bot 'bot:alphazero'"),
    (["--games", "tic_tac_toe", "--opponents", "stockfish"], "unknown opponent 'stockfish'"),
    (["--games", "leduc_poker", "--policy", "bot:mcts-10"], "does not fit leduc_poker"),
    (["--policy", "models:/name"], "bad model URI 'models:/name'"),
    (["--policy", "/no/such/model"], "model path does not exist"),
    (["--n", "0"], "--n must be at least 1"),
    (["--preset", "/no/such.yaml"], "config file not found"),
    (["--set", "play.temprature=1"], "unknown config key 'play.temprature'"),
    (["--out", "/no/such/dir/r.json"], "--out folder does not exist"),
])
def test_bad_eval_input_is_refused_in_one_line(tmp_path, capsys, args, needle):
    base = {"--policy": "bot:random", "--out": str(tmp_path / "r.json")}
    flags = dict(zip(args[::2], args[1::2]))
    argv = [x for k, v in {**base, **flags}.items() for x in (k, v)]
    rc, cap = _eval(capsys, *argv)
    err = cap.err.strip()
    assert rc == 2 and needle in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "r.json").exists()
