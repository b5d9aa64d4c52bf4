"""A local Ray cluster of two nodes on this machine, for the tests that scale out
(tests/cluster, and the vLLM replicas placed as Ray actors in tests/vllm)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from mars_core.procgroup import free_port, start_group, stop_group
from tests.conftest import REPO

RAY = str(Path(sys.executable).with_name("ray"))


def _nodes(address: str) -> int:
    done = subprocess.run([sys.executable, "-c", (
        "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
        "print(sum(n['Alive'] for n in ray.nodes()))"), address],
        capture_output=True, text=True, timeout=120)
    return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else 0


@contextmanager
def two_node_cluster():
    """`ray start --head` plus `ray start --address=...` (one CPU each), each under our
    process-group keeper, so stopping them stops only their own processes; yields the head's
    address."""
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths
    port = free_port()
    address = f"127.0.0.1:{port}"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO)}
    common = ["--block", "--num-cpus=1", "--disable-usage-stats"]
    log_path = Path(temp) / "nodes.log"
    log = open(log_path, "w")
    head = start_group([RAY, "start", "--head", f"--port={port}", f"--temp-dir={temp}",
                        "--include-dashboard=false", "--node-ip-address=127.0.0.1", *common],
                       Path(temp) / "head.pid", env=env, stdout=log)
    groups = [(head, Path(temp) / "head.pid")]
    try:
        end = time.time() + 180
        while _nodes(address) < 1:
            assert head.poll() is None and time.time() < end, log_path.read_text()
            time.sleep(1)
        worker = start_group([RAY, "start", f"--address={address}",
                              "--node-ip-address=127.0.0.1", *common],
                             Path(temp) / "worker.pid", env=env, stdout=log)
        groups.append((worker, Path(temp) / "worker.pid"))
        while _nodes(address) < 2:
            assert worker.poll() is None and time.time() < end, log_path.read_text()
            time.sleep(1)
        yield address
    finally:
        for proc, pid_file in reversed(groups):
            stop_group(proc, pid_file, grace_s=20)
        log.close()
