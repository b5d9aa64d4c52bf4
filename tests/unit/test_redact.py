"""The one redaction (mars_core/privacy/redact.py) and how secrets travel without being written:
secret names, env mappings and their allow-list, argument lists, overrides, log records; flow
parameters withheld into a private file (mars_core/privacy/private.py); the run's private config that
shard workers of other processes read; the Ray runtime env of the shard workers."""
from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mars_core.config import ConfigError, load_config
from mars_core.run.layout import CONFIG_FILE, PRIVATE_CONFIG_FILE
from mars_core.privacy.private import SecretParameterError, reveal, withheld
from mars_core.privacy.redact import (MASK, install_log_redaction, is_secret_name, redact,
                                      redact_assignment, redact_text)
from tests.conftest import REPO

S = "s3cr3t-v4lue-0123"


@pytest.mark.parametrize("name", [
    "PREFECT_API_AUTH_STRING", "AZURE_STORAGE_CONNECTION_STRING", "PASSPHRASE",
    "MLFLOW_TRACKING_PASSWORD", "api_keys", "--hf-token", "HF_TOKEN", "CLIENT_SECRET"])
def test_secret_names(name):
    assert is_secret_name(name)
    assert redact({name: S}) == {name: MASK}
    assert S not in redact_text(f"{name}={S} and {name}: {S}")


@pytest.mark.parametrize("name", ["max_new_tokens", "secret_mafia", "author", "api_key_env",
                                  "tracking.experiment", "mars.key"])
def test_names_that_are_not_secrets(name):
    assert not is_secret_name(name)


def test_env_mappings_are_masked_but_for_the_harmless_names():
    cfg = {"engine": {"vllm": {"launch": {"env": {"MY_DB": S, "CUDA_VISIBLE_DEVICES": "1",
                                                  "HF_HOME": f"http://u:{S}@h/x"}}}},
           "cluster": {"ray": {"env": {"SOME_VAR": S, "OMP_NUM_THREADS": "4"}}}}
    out = redact(cfg)
    assert S not in json.dumps(out)
    assert out["engine"]["vllm"]["launch"]["env"] == {
        "MY_DB": MASK, "CUDA_VISIBLE_DEVICES": "1", "HF_HOME": "http://u:***@h/x"}
    assert out["cluster"]["ray"]["env"] == {"SOME_VAR": MASK, "OMP_NUM_THREADS": "4"}


def test_argument_lists_and_text_mask_the_value_after_a_secret_flag():
    args = ["--hf-token", S, "--tensor-parallel-size", "2", f"--api-key={S}"]
    assert redact({"extra_args": args})["extra_args"] == [
        "--hf-token", MASK, "--tensor-parallel-size", "2", "--api-key=***"]
    assert redact_text(f"vllm serve m --hf-token {S} --max-model-len 64") == \
        "vllm serve m --hf-token *** --max-model-len 64"
    text = f"--set engine.vllm.launch.env.HF_TOKEN={S} http://a:{S}@h?api_key={S} Bearer {S}"
    assert S not in redact_text(text) and "http://a:***@h" in redact_text(text)


def test_a_secret_flag_in_the_servers_extra_args_is_refused():
    with pytest.raises(ConfigError, match="--hf-token.*engine.vllm.launch.env"):
        load_config(REPO / "configs/smoke.yaml",
                    [f"engine.vllm.launch.extra_args=[--hf-token, {S}]"])


@pytest.mark.parametrize("item, shown", [
    (f"engine.vllm.launch.env.HF_TOKEN={S}", "engine.vllm.launch.env.HF_TOKEN=***"),
    (f"cluster.ray.env.ANY={S}", "cluster.ray.env.ANY=***"),
    ("cluster.ray.env.HF_HOME=/shared/hf", "cluster.ray.env.HF_HOME=/shared/hf"),
    (f"engine.vllm.url=http://u:{S}@h:8000", "engine.vllm.url=http://u:***@h:8000"),
    ("rollout.temperature=0.8", "rollout.temperature=0.8")])
def test_overrides_are_masked_where_the_config_would_be(item, shown):
    assert redact_assignment(item) == shown


def test_log_records_are_redacted_message_and_traceback(capsys):
    install_log_redaction()
    log = logging.getLogger("mars.test.redact")
    handler = logging.StreamHandler(sys.stderr)
    log.addHandler(handler)
    log.propagate = False  # only our handler: a Prefect API handler left on the root by an
    try:                   # earlier test in this process prints its own "Logging error"
        log.warning("server %s answered", f"http://u:{S}@h")
        try:
            raise ConnectionError(f"no model list at http://u:{S}@h/v1/models")
        except ConnectionError:
            log.exception("failed")
    finally:
        log.removeHandler(handler)
        log.propagate = True
    err = capsys.readouterr().err
    assert "http://u:***@h" in err and "ConnectionError" in err and S not in err


def test_withheld_parameters_go_by_a_private_file_and_come_back():
    params = {"overrides": [f"engine.vllm.launch.env.HF_TOKEN={S}", "run.iterations=1"],
              "tracking_uri": f"http://u:{S}@h:5000", "model": "embedded"}
    with withheld(**params) as shown:
        assert S not in json.dumps(shown)
        assert shown["overrides"] == ["engine.vllm.launch.env.HF_TOKEN=***", "run.iterations=1"]
        path = Path(shown["private"])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        got = reveal(shown.pop("private"), **shown)
        assert got == params
    assert not path.parent.exists()
    with withheld(model="embedded") as shown:
        assert shown == {"model": "embedded", "private": None}


def test_a_secret_override_given_in_clear_to_a_flow_is_refused():
    with pytest.raises(SecretParameterError, match="HF_TOKEN.*environment"):
        reveal(None, overrides=[f"engine.vllm.launch.env.HF_TOKEN={S}"])
    assert reveal(None, overrides=["engine.vllm.launch.env.HF_TOKEN=***"])  # masked: fine


def test_shard_workers_of_other_processes_read_the_whole_config(tmp_path):
    """config.yaml is masked; a sharded run with secrets keeps a private copy (0600) while it
    goes, so a worker in another process plays with the same config."""
    from tasks.paths import prepare_run_dir
    from tasks.shards import share_config, unshare_config

    cfg = load_config(REPO / "configs/smoke.yaml", [f"engine.vllm.launch.env.HF_TOKEN={S}",
                                                    "cluster.shards=2"])
    run = tmp_path / "run"
    prepare_run_dir(run, cfg)
    share_config(run, cfg)
    private = run / PRIVATE_CONFIG_FILE
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and S not in (run / CONFIG_FILE).read_text()
    worker = subprocess.run([sys.executable, "-c", (
        "import sys; from tasks.paths import read_config; "
        "print(read_config(sys.argv[1]).engine.vllm.launch.env['HF_TOKEN'])"), str(run)],
        capture_output=True, text=True, cwd=REPO, timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert worker.returncode == 0, worker.stderr[-2000:]
    assert worker.stdout.strip() == S
    unshare_config(run)
    assert not private.exists()


def test_the_ray_runtime_env_holds_no_secret(monkeypatch):
    """The variables go in Ray's `env_vars` only where redaction leaves them as they are; the
    rest are set by the workers' setup hook (pickled into the cluster's store)."""
    from mars_core.config.cluster import ClusterConfig
    from tasks.shards import runtime_env

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://u:{S}@mlflow:5000")
    monkeypatch.setenv("SOME_VAR", "before")
    cluster = ClusterConfig.model_validate(
        {"ray": {"address": "auto", "env": {"SOME_VAR": S, "HF_HOME": "/shared/hf"}}})
    env = runtime_env(cluster)
    assert S not in json.dumps(env["env_vars"])
    assert env["env_vars"]["HF_HOME"] == "/shared/hf" and "PYTHONPATH" in env["env_vars"]
    hook = env["worker_process_setup_hook"]
    assert S not in hook.__name__
    hook()  # what a worker runs first
    assert os.environ["SOME_VAR"] == S and os.environ["MLFLOW_TRACKING_URI"].endswith("@mlflow:5000")


def test_the_shard_workers_get_the_openmp_wait_policy_before_torch_starts(monkeypatch):
    """A Ray worker is a process of Ray's: it gets OpenMP's wait policy (the one this process
    runs with, `mars_core.run.threads`; a value the user set wins) in Ray's `env_vars`, which
    are set before the worker starts, not by the setup hook (torch may load before it runs)."""
    from mars_core.config.cluster import ClusterConfig
    from tasks.shards import runtime_env

    cluster = ClusterConfig.model_validate({"ray": {"address": "auto"}})
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert runtime_env(cluster)["env_vars"]["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert runtime_env(cluster)["env_vars"]["OMP_WAIT_POLICY"] == "ACTIVE"


def test_artifact_links_and_keys_hold_no_credentials():
    from tasks.artifacts import _without_credentials, artifact_key

    assert _without_credentials(f"http://u:{S}@h:5000/x?token={S}") == "http://h:5000/x"
    assert S not in artifact_key("mas", f"http://u:{S}@h:8000")


def test_a_setting_that_names_the_auth_mode_is_no_secret():
    from mars_core.privacy.redact import is_secret_name, redact_text

    assert not is_secret_name("RAY_AUTH_MODE") and is_secret_name("RAY_AUTH_TOKEN")
    assert redact_text("set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=abc123") == \
        "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=***"


def test_our_own_error_lines_lose_url_passwords_only():
    from mars_core.privacy.redact import redact_urls

    line = ("the MLflow store http://mars:hunter2@db:5000/?token=abc does not answer: add "
            "--mlflow-auth (Prefect always asks)")
    assert redact_urls(line) == ("the MLflow store http://mars:***@db:5000/?token=*** does not "
                                 "answer: add --mlflow-auth (Prefect always asks)")
