"""A local Ray cluster of two nodes on this machine, for the tests that scale out
(tests/cluster, and the vLLM replicas placed as Ray actors in tests/vllm): on loopback, or on
this machine's network address, as nodes on separate machines would be."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from mars_core.run.procgroup import free_port, start_group, stop_group

REPO = Path(__file__).resolve().parents[1]  # not from tests.conftest: bench/ imports this too

RAY = str(Path(sys.executable).with_name("ray"))


def _nodes(address: str, env: dict) -> int:
    done = subprocess.run([sys.executable, "-c", (
        "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
        "print(sum(n['Alive'] for n in ray.nodes()))"), address],
        capture_output=True, text=True, timeout=120, env=env)
    return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else 0


def network_address() -> str | None:
    """This machine's address on its network (what Ray gives a node by default: the source
    address of a route outwards, e.g. eth0's), None when it has only loopback."""
    import socket

    from mars_core.config.engine import is_loopback

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
            ip = s.getsockname()[0]
        except OSError:
            return None
    return None if is_loopback(ip) or ip == "0.0.0.0" else ip


@contextmanager
def two_node_cluster(node_ip: str = "127.0.0.1", nodes: int = 2, token: str | None = None,
                     cpus: tuple[int, ...] | None = None, pins: tuple[str, ...] | None = None):
    """`ray start --head` plus `ray start --address=...` (one CPU each, `nodes` in all, all at
    `node_ip`; with Ray's token authentication when `token` is given), each under our
    process-group keeper, so stopping them stops only their own processes; yields the head's
    address. `cpus`: the CPUs each node offers Ray (head first); `pins`: the cores each node's
    processes, its workers included, run on (`taskset -c`), as if the nodes were machines."""
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths
    port = free_port(node_ip)
    address = f"{node_ip}:{port}"
    # no token auth unless asked for, whatever ~/.ray holds (Ray turns it on for `ray start`
    # once a token is there, which any local `ray.init()` leaves behind): the tests' clients
    # need none
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token} if token else {
        "RAY_AUTH_MODE": "disabled"}
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO), **auth}
    client = {**os.environ, **auth} if token else dict(os.environ)
    common = ["--block", "--disable-usage-stats"]
    cpus = cpus or (1,) * nodes

    def node(i: int, *args: str) -> list[str]:
        pin = ["taskset", "-c", pins[i]] if pins else []
        return [*pin, RAY, "start", *args, f"--num-cpus={cpus[i]}", *common]

    log_path = Path(temp) / "nodes.log"
    log = open(log_path, "w")
    head = start_group(node(0, "--head", f"--port={port}", f"--temp-dir={temp}",
                            "--include-dashboard=false", f"--node-ip-address={node_ip}"),
                       Path(temp) / "head.pid", env=env, stdout=log)
    groups = [(head, Path(temp) / "head.pid")]
    try:
        end = time.time() + 180
        while _nodes(address, client) < 1:
            assert head.poll() is None and time.time() < end, log_path.read_text()
            time.sleep(1)
        for i in range(1, nodes):
            worker = start_group(node(i, f"--address={address}", f"--node-ip-address={node_ip}"),
                                 Path(temp) / f"worker{i}.pid", env=env, stdout=log)
            groups.append((worker, Path(temp) / f"worker{i}.pid"))
            while _nodes(address, client) < i + 1:
                assert worker.poll() is None and time.time() < end, log_path.read_text()
                time.sleep(1)
        yield address
    finally:
        for proc, pid_file in reversed(groups):
            stop_group(proc, pid_file, grace_s=20)
        log.close()
