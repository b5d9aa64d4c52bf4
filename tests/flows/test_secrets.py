"""A planted secret is in no file, table or API answer the pipeline writes (issue 28).

Two training runs (one process, and two in-process shards) with a secret in the launch env
and in `cluster.ray.env`, tracking to an MLflow server through a URI with a password, and
`mars eval mas` against a real OpenAI-compatible server named by a URL with credentials, its
baseline's key given by variable name. Then the bytes of every file the runs, the MLflow
server and the Prefect test server wrote, the Prefect API's answers (flow runs and their
parameters, task runs, logs, artifacts) and the commands' own output are searched for the
secrets; the sharded run played the same games as the single one."""
from __future__ import annotations

import base64
import json
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

import httpx
import polars as pl
import pytest

from mars_core.run.layout import EPISODES_FILE, GENERATE_ROLLOUTS, PRIVATE_CONFIG_FILE, stage_dir
from tests.conftest import REPO
from tests.faults.conftest import run_env, train
from tests.servers import mlflow_in, started
from tests.unit.test_chat_engines import FakeServer

SECRET = "s" + uuid.uuid4().hex  # lower case: an artifact key lowercases what it is made of
KEY = "k" + uuid.uuid4().hex


class KeyedServer(FakeServer):
    """The chat server of the engine tests, noting each request's Authorization header."""

    def __init__(self):
        self.auth: list[str | None] = []
        super().__init__()

    def _handler(self):
        base, server = super()._handler(), self

        class Handler(base):
            def do_GET(self):
                server.auth.append(self.headers.get("Authorization"))
                super().do_GET()

            def do_POST(self):
                server.auth.append(self.headers.get("Authorization"))
                super().do_POST()

        return Handler


def _mars(args: list[str], env: dict) -> str:
    done = train([sys.executable, "-m", "cli.main", *args], env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def _train(runs: Path, name: str, model: Path, env: dict, *extra: str) -> str:
    return _mars(["train", "--config", str(REPO / "configs/smoke.yaml"), "--runs-dir", str(runs),
                  "--run-name", name, "--set", f"model.path={model}", "--set", "run.iterations=1",
                  "--set", "warmup.steps=0", "--set", "warmup.probe_games=0",
                  "--set", "evaluation.every=1", "--set", "evaluation.games_per_seat=1",
                  "--set", "rollout.episodes_per_iteration=2",
                  "--set", f"engine.vllm.launch.env.HF_TOKEN={SECRET}",
                  "--set", f"cluster.ray.env.SHARED_KEY={SECRET}", *extra], env)


def _prefect_answers(api: str, since: str) -> str:
    """Every answer of the Prefect API about the flow runs since `since`: the runs (their
    parameters, names, states), their task runs, logs and artifacts, as text."""
    with httpx.Client(base_url=api.rstrip("/") + "/", timeout=60) as c:
        runs = c.post("flow_runs/filter", json={
            "flow_runs": {"expected_start_time": {"after_": since}}, "limit": 200}).json()
        ids = [r["id"] for r in runs]
        answers = [json.dumps(runs),
                   c.post("task_runs/filter", json={"flow_runs": {"id": {"any_": ids}}}).text,
                   c.post("artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": ids}}}).text]
        offset = 0
        while True:
            page = c.post("logs/filter", json={"logs": {"flow_run_id": {"any_": ids}},
                                               "limit": 200, "offset": offset}).json()
            answers.append(json.dumps(page))
            if len(page) < 200:
                break
            offset += 200
    assert len(ids) >= 3  # the two trainings and the evaluation
    return "\n".join(answers)


def _files_with(root: Path, *needles: str) -> list[str]:
    return sorted(str(p) for p in root.rglob("*") if p.is_file()
                  and any(n.encode() in p.read_bytes() for n in needles))


@pytest.mark.benchmarks("gsm8k")
def test_a_planted_secret_is_in_no_file_table_or_api_answer(tmp_path, tiny_model_dir,
                                                            prefect_api):
    from prefect.settings import PREFECT_SERVER_DATABASE_CONNECTION_URL

    since = datetime.now(timezone.utc).isoformat()
    mlflow = mlflow_in(tmp_path / "mlflow")
    started(mlflow)
    try:
        tracking = mlflow.url.replace("http://", f"http://mars:{SECRET}@")
        env = run_env(prefect_api, MLFLOW_TRACKING_URI=tracking, MARS_TEST_KEY=KEY)
        runs = tmp_path / "runs"
        out = _train(runs, "one", tiny_model_dir, env)
        out += _train(runs, "two", tiny_model_dir, env, "--set", "cluster.shards=2")
        with KeyedServer() as chat:
            out += _mars(["eval", "mas", "--model", chat.url.replace("//", f"//user:{SECRET}@"),
                          "--baseline", chat.url, "--baseline-api-key-env", "MARS_TEST_KEY",
                          "--systems", "single", "--benchmarks", "gsm8k", "--limit", "1",
                          "--max-tokens", "8", "--out", str(runs / "mas.json"),
                          "--tracking-uri", tracking], env)
    finally:
        mlflow.stop()
    # the secrets were used: basic credentials from --model's URL, the bearer key by name
    basic = "Basic " + base64.b64encode(f"user:{SECRET}".encode()).decode()
    assert basic in chat.auth and f"Bearer {KEY}" in chat.auth
    mas = json.loads((runs / "mas.json").read_text())
    assert mas["config"]["model"] == chat.url.replace("//", "//user:***@")
    assert all(r["n"] == 1 for m in mas["models"].values() for r in m["rows"])
    # nothing written holds them: run folders (no private config left), MLflow, Prefect's db
    assert not list(runs.rglob(PRIVATE_CONFIG_FILE))
    assert _files_with(tmp_path, SECRET, KEY) == []
    db = Path(PREFECT_SERVER_DATABASE_CONNECTION_URL.value().split(":///", 1)[1])
    assert _files_with(db.parent, SECRET, KEY) == []
    answers = _prefect_answers(prefect_api, since)
    assert "engine.vllm.launch.env.HF_TOKEN=***" in answers  # the parameter, masked
    assert SECRET not in answers and KEY not in answers
    assert SECRET not in out and KEY not in out
    # the sharded run played the same games as the single one
    one, two = (pl.read_parquet(stage_dir(runs / r, 0, GENERATE_ROLLOUTS) / EPISODES_FILE)
                for r in ("one", "two"))
    assert len(one) == 2 and one.drop("logprobs", strict=False).equals(
        two.drop("logprobs", strict=False))
