"""The shard workers' Ray runtime env holds no secret (issue 28): on a local Ray instance
(one CPU, in a child process), a worker gets a `cluster.ray.env` secret and the tracking
URI's password through its setup hook, while the job's runtime env, as Ray keeps and shows
it, and every file of Ray's session folder (its logs) hold neither."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.timeout(600)

SCRIPT = """
import json, os, sys
import ray
from mars_core.config.cluster import ClusterConfig
from tasks.shards import runtime_env

secret = sys.argv[1]
cluster = ClusterConfig.model_validate(
    {"ray": {"address": "auto", "env": {"SHARED_KEY": secret, "HF_HOME": "/shared/hf"}}})
ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR", _temp_dir=sys.argv[2],
         runtime_env=runtime_env(cluster))

@ray.remote
def seen():
    return [os.environ.get(k) for k in ("SHARED_KEY", "MLFLOW_TRACKING_URI", "HF_HOME")]

print(json.dumps({"worker": ray.get(seen.remote()),
                  "runtime_env": ray.get_runtime_context().runtime_env}))
ray.shutdown()
"""


def test_the_shard_workers_get_secrets_outside_the_runtime_env():
    secret = "s" + uuid.uuid4().hex
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths
    # HOME: a local ray.init saves an auth token in ~/.ray, which would turn on token auth for
    # every later `ray start` on this machine (the two-node cluster tests)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0", "HOME": temp,
           "MLFLOW_TRACKING_URI": f"http://mars:{secret}@mlflow.example:5000"}
    try:
        done = subprocess.run([sys.executable, "-c", SCRIPT, secret, temp], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=500)
        assert done.returncode == 0, done.stderr[-3000:]
        logged = [str(p) for p in Path(temp).rglob("*") if p.is_file() and not p.is_socket()
                  and secret.encode() in p.read_bytes()]
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["worker"] == [secret, f"http://mars:{secret}@mlflow.example:5000", "/shared/hf"]
    assert secret not in json.dumps(got["runtime_env"])
    assert got["runtime_env"]["env_vars"]["HF_HOME"] == "/shared/hf"
    assert logged == []
