"""`mars replay` end to end: on a run-like folder of bot-played episodes, on an MLflow artifact
URI, and the training flow's replays stage (pages written, logged, replayable from MLflow)."""
from __future__ import annotations

import json
import re

import pytest
from mlflow import MlflowClient

from cli.main import main
from mars_core.config import load_config
from mars_core.run.layout import (ASSIGN_REWARDS, COMPUTE_ADVANTAGES, GENERATE_ROLLOUTS, REPLAYS,
                                  RUN_FILE, iter_name, stage_dir)
from tasks.paths import prepare_run_dir
from tests.conftest import REPO
from tests.unit.test_replay import bot_games, gated, page_payload, samples, write_flat

SMOKE = str(REPO / "configs/smoke.yaml")


@pytest.fixture
def run(tmp_path):
    """A run directory (smoke config) whose iteration 0 went through rollouts, rewards (one gated
    step) and advantages, played by bots."""
    def make(replays: int = 2):
        run = tmp_path / "runs" / "smoke"
        prepare_run_dir(run, load_config(SMOKE, [f"tracking.replays_per_iteration={replays}"]))
        eps = bot_games(4, prefix="it0-")
        write_flat(stage_dir(run, 0, GENERATE_ROLLOUTS), eps)
        write_flat(stage_dir(run, 0, ASSIGN_REWARDS), [gated(eps[0], 1), *eps[1:]])
        samples(stage_dir(run, 0, COMPUTE_ADVANTAGES), [("it0-0", 0, 0.75), ("it0-1", 1, -0.25)])
        return run
    return make


def _replay(capsys, *args):
    rc = main(["replay", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out.strip(), out.err.strip()


def test_replay_a_run_dir(run, tmp_path, capsys, monkeypatch):
    folder = run()
    monkeypatch.chdir(tmp_path)
    rc, out, err = _replay(capsys, folder)
    assert rc == 0, err
    assert "episode it0-0 (1 of 4); others: it0-1, it0-2, it0-3" in out
    assert out.splitlines()[-1] == "mars: done: replay-it0-0.html"
    data = page_payload((tmp_path / "replay-it0-0.html").read_text())[0]
    assert data["steps"][0]["advantage"] == 0.75 and data["steps"][1]["gate_reason"]
    rc, out, err = _replay(capsys, folder, "--episode", "it0-2", "--out", tmp_path / "two.html")
    assert rc == 0 and out.endswith(f"done: {tmp_path / 'two.html'}")
    assert page_payload((tmp_path / "two.html").read_text())[0]["episode_id"] == "it0-2"


@pytest.mark.parametrize("args, needle", [
    (["--episode", "nope"], "--episode: no episode 'nope' in RUN; 4 there, e.g. it0-0, it0-1"),
    (["--iteration", "5"], "has no iteration 5 with episodes (it has 0)"),
    (["--iteration", "-1"], "--iteration must be at least 0"),
    (["--out", "/no/such/dir/x.html"], "--out folder does not exist"),
])
def test_bad_replay_input_is_one_line(run, capsys, args, needle):
    folder = run()
    rc, out, err = _replay(capsys, folder, *args)
    assert rc == 2 and needle.replace("RUN", str(folder)) in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_bad_run_argument_is_one_line(tmp_path, capsys):
    for arg, needle in ((tmp_path / "nope", "RUN: no such folder"),
                        ("models:/mars@candidate", "models:/ URIs hold models, not episodes"),
                        (tmp_path, "no episodes found")):
        rc, _, err = _replay(capsys, arg)
        assert rc == 2 and needle in err and len(err.splitlines()) == 1


def test_replay_an_mlflow_artifact_uri(tmp_path, capsys):
    flat = write_flat(tmp_path / "arena", bot_games(2, prefix="a-"))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("replays", artifact_location=(tmp_path / "art").as_uri())
    run_id = client.create_run(exp).info.run_id
    client.log_artifacts(run_id, str(flat), "arena/games")
    out = tmp_path / "from-mlflow.html"
    rc, stdout, err = _replay(capsys, f"runs:/{run_id}/arena/games", "--tracking-uri", uri,
                              "--episode", "a-1", "--out", out)
    assert rc == 0, err
    assert page_payload(out.read_text())[0]["episode_id"] == "a-1"
    rc, _, err = _replay(capsys, f"runs:/{'0' * 32}/x", "--tracking-uri", uri)
    assert rc == 2 and "cannot download" in err and len(err.splitlines()) == 1


def test_training_stage_writes_logs_and_replays_from_mlflow(run, tmp_path, capsys, prefect_api):
    from tasks.replay import write_iteration_replays

    folder = run()
    metrics = write_iteration_replays.fn(str(folder), 0)
    pages = sorted(p.name for p in stage_dir(folder, 0, REPLAYS).glob("*.html"))
    assert metrics["replays/pages"] == 2.0 and len(pages) == 3 and "index.html" in pages
    assert write_iteration_replays.fn(str(folder), 0) == metrics  # resumed: not redone
    run_id = json.loads((folder / RUN_FILE).read_text())["run_id"]
    uri = f"sqlite:///{folder.parent.resolve()}/mlflow.db"
    logged = {f.path for f in MlflowClient(uri).list_artifacts(run_id, f"{REPLAYS}/{iter_name(0)}")}
    assert {f"{REPLAYS}/{iter_name(0)}/{p}" for p in pages} <= logged
    out = tmp_path / "logged.html"
    rc, stdout, err = _replay(capsys, f"runs:/{run_id}/{REPLAYS}/{iter_name(0)}", "--runs-dir",
                              folder.parent, "--out", out)
    assert rc == 0, err
    data = page_payload(out.read_text())[0]
    assert re.match(r"it0-\d", data["episode_id"]) and data["has_advantages"]


def test_zero_replays_writes_nothing(run, prefect_api):
    from tasks.replay import write_iteration_replays

    folder = run(replays=0)
    assert write_iteration_replays.fn(str(folder), 0) == {}
    assert not stage_dir(folder, 0, REPLAYS).exists()
