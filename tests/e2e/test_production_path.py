"""The production path, end to end on the embedded model (CPU): a real Prefect server as
`mars services` runs it (its API auth string exported to the CLI and the worker), the work
pool, `prefect deploy --all` from prefect.yaml, a worker, and a run of the smoke deployment
started through the API the way the UI's Run button does (parameters edited: `runs_dir` and
two overrides).
The run tracks to a real `mlflow server` over HTTP; the registered model is then served by
`mlflow models serve` and answers a chat request.

One smoke run for the whole module (the servers, the deployments and the run are module
fixtures); each test checks one side of it."""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from mlflow import MlflowClient

from mars_core.config import load_config
from mars_core.run.layout import (ASSIGN_REWARDS, COMPUTE_ADVANTAGES, CONFIG_FILE,
                                  GENERATE_ROLLOUTS, SAVE_CHECKPOINT, TRAIN_STEP)
from tests.conftest import REPO
from tests.flows.invariants import check_iteration
from tests.servers import POOL, mlflow_in, model_server, prefect_in, started, worker

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

RUN_TIMEOUT_S = 3000  # the smoke preset: ~5-6 minutes on 2 cores, 30+ when they are shared
EXPECTED = [
    "rollout/tokens_per_s", "rollout/invalid_action_rate", "rollout/mean_reply_tokens",
    "rollout/seat0_win_rate", "rollout/seat0_draw_rate", "rollout/seat0_loss_rate",
    "reward/mean", "train/loss", "train/kl", "train/grad_norm", "train/lr",
    f"time/{GENERATE_ROLLOUTS}", f"time/{TRAIN_STEP}", f"time/{ASSIGN_REWARDS}",
    f"time/{COMPUTE_ADVANTAGES}", f"time/{SAVE_CHECKPOINT}", "warmup/invalid_rate_before",
    "eval/tic_tac_toe/seat0_win_rate", "eval/tic_tac_toe/seat1_ci95",
]
# Edited in the run's parameters as a user edits them in the UI: half the smoke preset's games
# and warm-up steps (its update, a full fine-tune in fp32 here, was 123 of its 276 s)
OVERRIDES = ["rollout.episodes_per_iteration=2", "warmup.steps=2"]
# The Prefect artifacts of a smoke run (flows/train.py): key -> type
ARTIFACTS = {"smoke-iterations": "progress", "smoke-evaluation": "table",
             "smoke-learning-curve": "table", "smoke-summary": "markdown"}


def _client(api: str):
    """Prefect's client of the server at `api`, with the auth string it asks for."""
    from prefect.client.orchestration import PrefectClient

    return PrefectClient(api, auth_string=AUTH[api])


AUTH: dict[str, str] = {}  # the auth string of each server's API (filled by `servers`)


def _call(api: str, fn):
    """`await fn(client)` on a client of the server at `api` (not the test harness's)."""
    async def go():
        async with _client(api) as client:
            return await fn(client)

    return asyncio.run(go())


def _cli(args: list[str], env: dict, cwd: Path = REPO, timeout: float = 600):
    return subprocess.run([sys.executable, "-m", "prefect", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("production")


@pytest.fixture(scope="module")
def servers(root):
    """The Prefect server (with its UI, as users run it) and the MLflow tracking server."""
    prefect, mlflow = prefect_in(root / "prefect", ui=True), mlflow_in(root / "mlflow")
    AUTH[prefect.api_url] = prefect.auth
    started(prefect, mlflow)
    try:
        yield prefect, mlflow
    finally:
        prefect.stop()
        mlflow.stop()


@pytest.fixture(scope="module")
def cli_env(servers) -> dict:
    """What a user's shell has after `mars services`: the lines it prints exported (the URLs,
    the auth string), in the repo."""
    prefect, mlflow = servers
    return {**os.environ, **prefect.client_env(), "MLFLOW_TRACKING_URI": mlflow.url,
            "PREFECT_HOME": str(prefect.env["PREFECT_HOME"]), "PWD": str(REPO)}


@pytest.fixture(scope="module")
def deployed(servers, cli_env) -> dict:
    """`prefect work-pool create` and `prefect deploy --all` as prefect.yaml documents them;
    returns the deployments by name."""
    prefect, _ = servers
    made = _cli(["work-pool", "create", POOL, "--type", "process"], cli_env)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    done = _cli(["deploy", "--all"], cli_env)  # {{ $PWD }} in the pull step: the repo root
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    return {d.name: d for d in _call(prefect.api_url, lambda c: c.read_deployments())}


@pytest.fixture(scope="module")
def smoke_run(root, servers, deployed, embedded_dir):
    """A worker, and one run of `mars-train/smoke` created as the UI's Run button creates it
    (parameters edited: runs_dir in a temporary folder, `OVERRIDES`), waited for until it ends."""
    prefect, mlflow = servers
    runs = root / "runs"
    env = {**os.environ, **prefect.client_env(), "MLFLOW_TRACKING_URI": mlflow.url,
           "PREFECT_HOME": str(prefect.env["PREFECT_HOME"]),
           "MARS_CACHE_DIR": str(embedded_dir.parent)}
    work = worker(root / "worker.log", env, cwd=root)  # the pull step moves runs to the repo
    work.launch()
    run = None
    try:
        async def start(client):
            dep = await client.read_deployment_by_name("mars-train/smoke")
            return await client.create_flow_run_from_deployment(
                dep.id, parameters={"runs_dir": str(runs), "overrides": OVERRIDES})

        run = _call(prefect.api_url, start)
        end = time.time() + RUN_TIMEOUT_S
        while not (run.state and run.state.is_final()):
            assert work.running(), f"the worker exited:\n{work.log_tail()}"
            assert time.time() < end, f"no end in {RUN_TIMEOUT_S} s:\n{work.log_tail()}"
            time.sleep(5)
            run = _call(prefect.api_url, lambda c: c.read_flow_run(run.id))
        if not run.state.is_completed():
            pytest.fail(f"flow run {run.state.type.value}: {run.state.message}\n--- its log:\n"
                        f"{_flow_run_log(prefect.api_url, run.id)[-6000:]}\n--- the worker:\n"
                        f"{work.log_tail(4000)}")
    finally:
        if run is not None:
            _kill_unfinished(prefect.api_url, run.id)
        work.stop()
    return run, runs


def _kill_unfinished(api: str, flow_run_id) -> None:
    """A run the test gave up on: the worker started its process in a session of its own, so
    stopping the worker leaves it running; it goes here (its process group, by its pid)."""
    run = _call(api, lambda c: c.read_flow_run(flow_run_id))
    if run.state.is_final() or not run.infrastructure_pid:
        return
    pid = int(str(run.infrastructure_pid).rsplit(":", 1)[-1])
    try:
        if b"prefect.engine" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.killpg(pid, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        pass


def _flow_run_log(api: str, flow_run_id, until: str | None = None) -> str:
    """The end of the flow run's log as the UI shows it (its newest 200 lines; sent in the
    background: poll a while for `until`)."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort

    flt = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
    text = ""
    for _ in range(120):
        logs = _call(api, lambda c: c.read_logs(flt, limit=200, sort=LogSort.TIMESTAMP_DESC))
        text = "\n".join(entry.message for entry in reversed(logs))
        if until is None or until in text:
            break
        time.sleep(0.5)
    return text


def test_deploy_all_creates_every_deployment_of_prefect_yaml(deployed):
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    assert sorted(deployed) == sorted(d["name"] for d in spec["deployments"])
    for d in spec["deployments"]:
        got = deployed[d["name"]]
        assert got.work_pool_name == POOL
        assert got.parameters == d["parameters"]
        assert got.pull_steps == [{"prefect.deployments.steps.set_working_directory":
                                   {"directory": str(REPO)}}]
        assert got.global_concurrency_limit.limit == d["concurrency_limit"]["limit"]
        assert [s.schedule.cron for s in got.schedules] == [s["cron"] for s in
                                                           d.get("schedules", [])]


def test_the_prefect_ui_is_served(servers):
    got = httpx.get(servers[0].url + "/", timeout=60)  # where users press Run
    assert got.status_code == 200 and "<html" in got.text.lower()
    ui = httpx.get(servers[0].url + "/ui-settings", timeout=60).json()  # it asks for the string
    assert ui["auth"] == "BASIC" and ui["csrf_enabled"] is True


def test_smoke_deployment_run_completes_in_its_runs_dir(smoke_run, servers):
    run, runs = smoke_run
    assert run.parameters == {"config": "configs/smoke.yaml", "run_name": "smoke",
                              "runs_dir": str(runs), "overrides": OVERRIDES}
    assert (runs / "smoke" / "registered.json").is_file()
    done = "complete: model 'mars-smoke' version 1 has the alias 'candidate'"
    log = _flow_run_log(servers[0].api_url, run.id, until=done)  # the last line logged
    assert "iter 1/2: reward" in log and "iter 2/2: reward" in log  # one line per iteration
    assert done in log
    cfg = load_config(runs / "smoke" / CONFIG_FILE)
    for k in range(cfg.run.iterations):  # the values, not only the files
        check_iteration(runs / "smoke", k, cfg.rollout.episodes_per_iteration)


def test_prefect_artifacts_link_the_mlflow_run(smoke_run, servers):
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    run, _ = smoke_run
    flt = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
    arts = _call(servers[0].api_url, lambda c: c.read_artifacts(artifact_filter=flt))
    by_key = {a.key: a for a in arts}
    missing = set(ARTIFACTS) - set(by_key)
    assert not missing, f"artifacts missing: {missing} (have {sorted(by_key)})"
    for key, kind in ARTIFACTS.items():
        assert by_key[key].type == kind, key
    assert float(by_key["smoke-iterations"].data) == 100.0
    mlflow_url = servers[1].url
    summary = by_key["smoke-summary"].data
    assert "has the alias 'candidate'" in summary and f"]({mlflow_url}/#/experiments/" in summary
    assert f"({mlflow_url}/#/experiments/" in by_key["smoke-evaluation"].description


def test_run_is_tracked_over_http_and_its_model_registered(smoke_run, servers):
    _, mlflow = servers
    client = MlflowClient(tracking_uri=mlflow.url)
    exp = client.get_experiment_by_name("mars-smoke")
    assert exp.artifact_location.startswith("mlflow-artifacts:")  # proxied by the server
    run, = [r for r in client.search_runs([exp.experiment_id]) if r.info.run_name == "smoke"]
    assert run.info.status == "FINISHED"
    for key in EXPECTED:
        hist = client.get_metric_history(run.info.run_id, key)
        assert hist, f"metric {key} missing"
        assert len({m.step for m in hist}) == len(hist), f"{key} logged twice at a step"
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/loss"))
    assert steps == [0, 1]
    assert run.data.params["rollout.games"] == "['tic_tac_toe']"
    arts = [a.path for a in client.list_artifacts(run.info.run_id, "iter_0000")]
    assert "iter_0000/transcripts.md" in arts and "iter_0000/episodes_sample.parquet" in arts
    children = client.search_runs([exp.experiment_id],
                                  f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    assert children and children[0].data.metrics
    mv = client.get_model_version_by_alias("mars-smoke", "candidate")
    assert mv.run_id == run.info.run_id
    files = _artifact_tree(client, run.info.run_id, "model")
    assert {"model/MLmodel", "model/model/model.safetensors",
            "model/components/tokenizer/tokenizer.json"} <= files, sorted(files)
    assert not any(f.endswith("trainer_state.pt") for f in files)
    stored = mlflow.log.parent / "artifacts"  # the server wrote them, the run did not
    assert list(stored.rglob("model.safetensors"))


def _artifact_tree(client: MlflowClient, run_id: str, path: str) -> set[str]:
    out = set()
    for a in client.list_artifacts(run_id, path):
        out |= _artifact_tree(client, run_id, a.path) if a.is_dir else {a.path}
    return out


@pytest.fixture
def served(root, servers, smoke_run):
    """`mlflow models serve -m models:/mars-smoke@candidate`, the model from the server."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": servers[1].url}
    server = model_server("models:/mars-smoke@candidate", root / "serve.log", env)
    try:
        started(server, timeout=900)  # downloads and loads the model first
        yield server
    finally:
        server.stop()
        shutil.rmtree(root / "serve-tmp", ignore_errors=True)  # MLflow's copy of the model


def test_registered_model_is_served_and_answers_a_chat_request(served):
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
    got = httpx.post(f"{served.url}/invocations", json=body, timeout=300)
    assert got.status_code == 200, got.text[-2000:]
    reply = got.json()
    reply = reply[0] if isinstance(reply, list) else reply  # one chat completion per request
    assert isinstance(reply["choices"][0]["message"]["content"], str)
    assert 1 <= reply["usage"]["completion_tokens"] <= 8
