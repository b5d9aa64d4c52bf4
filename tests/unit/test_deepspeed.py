"""The DeepSpeed backend's parts short of training: the generated config (ZeRO stage,
offload, bf16, the `extra` merge), the launch command and environment, the failure line, the
SPEC checks and the updater's calls; and that the launcher's processes never outlive the flow
(DeepSpeed's real launcher, killed before its rank trains). The real worker runs in
tests/flows/test_deepspeed_backend.py."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mars_core.training import deepspeed_backend as ds
from mars_core.config import OptimConfig, TrainerConfig

pytestmark = pytest.mark.slow  # `make test` runs it; `make test-unit` leaves it out


def _trainer(**deepspeed) -> TrainerConfig:
    return TrainerConfig(backend="deepspeed", deepspeed=deepspeed)


def test_ds_config_zero2_defaults():
    optim = OptimConfig(micro_batch_size=4, grad_clip=0.5)
    cfg = ds.ds_config(_trainer(), optim, bf16=False, world=3)
    assert cfg["zero_optimization"] == {"stage": 2}  # no offload keys at all
    assert cfg["managed_gradient_accumulation"] is False
    assert cfg["gradient_clipping"] == 0.5 and cfg["bf16"] == {"enabled": False}
    assert cfg["train_micro_batch_size_per_gpu"] == 4
    assert cfg["train_batch_size"] == 4 * cfg["gradient_accumulation_steps"] * 3
    json.dumps(cfg)  # DeepSpeed takes it as plain JSON


def test_ds_config_zero3_offload_and_bf16():
    cfg = ds.ds_config(_trainer(zero_stage=3, offload_optimizer=True, offload_params=True),
                       OptimConfig(), bf16=True, world=1)
    assert cfg["zero_optimization"] == {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                        "offload_param": {"device": "cpu"}}
    assert cfg["bf16"] == {"enabled": True}
    optimizer_only = ds.ds_config(_trainer(offload_optimizer=True), OptimConfig(), False, 1)
    assert optimizer_only["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu"}}


def test_ds_config_extra_is_deep_merged_on_top():
    extra = {"zero_optimization": {"reduce_bucket_size": 1000, "offload_optimizer": {"pin_memory": True}},
             "gradient_clipping": 2.0, "communication_data_type": "fp32"}
    cfg = ds.ds_config(_trainer(offload_optimizer=True, extra=extra), OptimConfig(), False, 2)
    assert cfg["zero_optimization"] == {"stage": 2, "reduce_bucket_size": 1000,
                                        "offload_optimizer": {"device": "cpu", "pin_memory": True}}
    assert cfg["gradient_clipping"] == 2.0 and cfg["communication_data_type"] == "fp32"
    assert cfg["managed_gradient_accumulation"] is False


def test_ds_config_rejects_managed_accumulation_and_bad_world():
    with pytest.raises(ValueError, match="managed_gradient_accumulation"):
        ds.ds_config(_trainer(extra={"managed_gradient_accumulation": True}), OptimConfig(), False, 1)
    with pytest.raises(ValueError, match="world must be >= 1"):
        ds.ds_config(_trainer(), OptimConfig(), False, 0)


def test_launch_commands():
    torchrun = ds.launch_command(_trainer(launcher="torchrun", num_processes=2), "/x/spec.json")
    assert torchrun == [sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc_per_node", "2", "-m", "mars_core.training.deepspeed_backend", "/x/spec.json"]
    runner = ds.launch_command(_trainer(num_processes=3), "/x/spec.json")
    assert runner[:7] == [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "3",
                          "--no_local_rank", "--master_port"]
    assert int(runner[7]) > 0 and runner[-3:] == ["--module", "mars_core.training.deepspeed_backend", "/x/spec.json"]
    multi = ds.launch_command(_trainer(hostfile="/etc/hosts.ds"), "/x/spec.json")
    assert multi[multi.index("--hostfile") + 1] == "/etc/hosts.ds" and "--master_port" not in multi


def test_worker_env_is_offline_and_shares_the_cpus():
    env = ds.worker_env({"PATH": "/bin", "PYTHONPATH": "/elsewhere"}, nproc=2)
    assert env["HF_HUB_OFFLINE"] == "1" and env["PATH"] == "/bin"
    assert env["PYTHONPATH"].split(":") == [str(ds.REPO_ROOT), "/elsewhere"]
    assert int(env["OMP_NUM_THREADS"]) >= 1
    assert ds.worker_env({"OMP_NUM_THREADS": "7"}, nproc=2)["OMP_NUM_THREADS"] == "7"


def test_build_locks_without_a_builder_are_removed(tmp_path, capsys):
    """A training killed during DeepSpeed's first-start compile leaves torch's build lock, and
    every later start would wait on it forever: old locks go before a start, and the locks a
    stopped launch made go after it; a fresh lock of a build still running elsewhere stays."""
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path)}
    old, fresh = tmp_path / "py311_cpu" / "shm_comm" / "lock", tmp_path / "other_op" / "lock"
    for lock in (old, fresh):
        lock.parent.mkdir(parents=True)
        lock.touch()
    long_ago = time.time() - ds.STALE_LOCK_S - 60
    os.utime(old, (long_ago, long_ago))
    assert ds.extension_locks(env) == sorted([old, fresh])
    assert ds.clear_build_locks(env) == [old]
    assert not old.exists() and fresh.exists()
    assert "stale torch extension build lock" in capsys.readouterr().err
    assert ds.clear_build_locks(env, since=time.time() + 60) == []
    assert ds.clear_build_locks(env, since=time.time() - 60) == [fresh]
    assert ds.extension_locks(env) == []


def test_failure_line_prefers_the_worker_error(tmp_path):
    log = tmp_path / "deepspeed.log"
    log.write_text(f"Traceback ...\n{ds.ERROR_MARK}ValueError: bad thing\n"
                   "torch.distributed.elastic ChildFailedError\n======\n\n")
    assert ds.failure_line(log) == "ValueError: bad thing"
    log.write_text("starting\nSegmentation fault\n\n")
    assert ds.failure_line(log) == "Segmentation fault"
    log.write_text("")
    assert ds.failure_line(log) == "(empty log)"


def _spec(tmp_path, **changes) -> dict:
    samples = tmp_path / "samples.parquet"
    samples.write_bytes(b"")
    spec = {"policy": "org/model", "reference": None, "samples": str(samples),
            "out": str(tmp_path), "resume": None, "config": {}, "iteration": 0, "seed": 1,
            "bf16": False}
    return {**spec, **changes}


def test_read_spec_checks_keys_and_files(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(_spec(tmp_path)))
    assert ds.read_spec(path)["policy"] == "org/model"  # a hub id is not a path to check
    path.write_text(json.dumps({k: v for k, v in _spec(tmp_path).items() if k != "seed"}))
    with pytest.raises(ValueError, match="lacks: seed"):
        ds.read_spec(path)
    path.write_text(json.dumps(_spec(tmp_path, resume=str(tmp_path / "gone"))))
    with pytest.raises(ValueError, match="resume does not exist"):
        ds.read_spec(path)


def test_worker_main_fails_with_one_marked_line(tmp_path, capsys):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(_spec(tmp_path, samples=str(tmp_path / "none.parquet"))))
    assert ds.main([str(path), "--local_rank=0"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(ds.ERROR_MARK + "ValueError: ") and "samples does not exist" in last


class _FakeEngine:
    def __init__(self):
        self.calls, self.lr = [], 0.5

    def backward(self, loss, scale_wrt_gas=True):
        self.calls.append(("backward", float(loss), scale_wrt_gas))

    def step(self):
        self.calls.append(("step",))
        self.lr = 0.25  # the schedule moves on

    def get_lr(self):
        return [self.lr]

    def get_global_grad_norm(self):
        return None if len(self.calls) < 3 else torch.tensor(2.0)

    def zero_grad(self):
        self.calls.append(("zero_grad",))


def test_deepspeed_updater_accumulates_unscaled_and_reports_the_step_lr():
    engine = _FakeEngine()
    up = ds.DeepSpeedUpdater(engine)
    up.zero_grad()
    up.backward(torch.tensor(3.0))
    assert up.step() == (2.0, 0.5)  # the lr the step used, not the next one
    assert engine.calls == [("zero_grad",), ("backward", 3.0, False), ("step",)]
    assert up.step() == (2.0, 0.25)
    assert ds.DeepSpeedUpdater(_FakeEngine()).step() == (0.0, 0.5)  # no norm yet: 0.0


# a flow process: runs `launch` (1 rank, the launcher argv[3]) on the spec in argv[1]; Ctrl-C
# raises KeyboardInterrupt even when the tests run in the background (SIGINT ignored)
FLOW = """
import json, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from mars_core.training import deepspeed_backend as ds
from mars_core.config import TrainerConfig
trainer = TrainerConfig(backend="deepspeed", deepspeed={"launcher": sys.argv[3]})
ds.launch(json.loads(sys.argv[1]), trainer, sys.argv[2])
"""
# a rank's command line, either launcher
RANK = b"-u\x00-m\x00mars_core.training.deepspeed_backend\x00"


def _descendants(pid: int) -> list[int]:
    """The live processes below `pid` (from /proc)."""
    parents = {}
    for p in Path("/proc").iterdir():
        try:
            fields = (p / "stat").read_text().rsplit(")", 1)[1].split() if p.name.isdigit() else []
        except OSError:
            continue
        if fields and fields[0] not in ("Z", "X"):
            parents[int(p.name)] = int(fields[1])
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [c for c, par in parents.items() if par == parent]
        out += kids
        todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize("launcher, how", [("deepspeed", "kill -9"), ("deepspeed", "Ctrl-C"),
                                           ("torchrun", "kill -9")])
def test_the_launcher_and_its_ranks_never_outlive_the_flow(tmp_path, launcher, how):
    """`launch` runs the launcher as a process group under a keeper: a flow killed with kill -9
    takes launcher, per-node launcher and ranks along (also torchrun's, each in a session of
    its own); its pid file stays, for the next start to check. An interrupted flow stops them
    and removes its pid file."""
    pytest.importorskip("deepspeed")
    out = tmp_path / "train_step.partial"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ds.REPO_ROOT)}
    flow = subprocess.Popen([sys.executable, "-c", FLOW, json.dumps(_spec(tmp_path)), str(out),
                             launcher], env=env, cwd=ds.REPO_ROOT, stderr=subprocess.DEVNULL)
    started: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not any(RANK in _cmdline(p) for p in _descendants(flow.pid)):
            assert time.monotonic() < deadline and flow.poll() is None, "no rank started"
            time.sleep(0.1)
        started = _descendants(flow.pid)
        record = json.loads((tmp_path / ds.PID_FILE).read_text())  # beside the stage's folder
        assert record["parent"] == flow.pid and record["pgid"] in started
        flow.send_signal(signal.SIGKILL if how == "kill -9" else signal.SIGINT)
        flow.wait(timeout=30)
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in started if _alive(p)]
        assert (tmp_path / ds.PID_FILE).exists() == (how == "kill -9")
    finally:
        if flow.poll() is None:
            flow.kill()
        for p in set(started + _descendants(flow.pid)):
            if _alive(p):
                os.kill(p, signal.SIGKILL)
