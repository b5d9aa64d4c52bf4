"""Evaluation runs carry the code they ran, as training runs do: every MLflow run that
`mars eval strategic` and `mars arena` log (nested ones included) has the git commit and the
local-changes flag."""
from __future__ import annotations

from mlflow import MlflowClient

from cli.main import main
from tasks.tracking import git_state


def test_evaluation_runs_carry_the_git_commit(tmp_path, prefect_api, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert main(["eval", "strategic", "--policy", "bot:mcts-5", "--games", "tic_tac_toe",
                 "--opponents", "bot:random", "--n", "1", "--out", str(tmp_path / "s.json"),
                 "--tracking-uri", uri]) == 0, capsys.readouterr().err[-2000:]
    assert main(["arena", "--agents", "bot:random,bot:mcts-5", "--games", "tic_tac_toe",
                 "--n", "1", "--out", str(tmp_path / "a.json"), "--tracking-uri", uri]) == 0, \
        capsys.readouterr().err[-2000:]
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    kinds = {r.data.tags.get("mars.kind") for r in runs}
    assert {"strategic-eval", "arena"} <= kinds
    assert any("mlflow.parentRunId" in r.data.tags for r in runs)  # nested runs too
    commit, dirty = git_state()
    assert len(commit) == 40
    for r in runs:
        assert r.data.tags["mlflow.source.git.commit"] == commit, r.info.run_name
        assert r.data.tags["mars.git.dirty"] == str(dirty).lower(), r.info.run_name
