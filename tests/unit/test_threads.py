"""A shared machine (mars_core/run/threads.py): the `mars` command's startup puts OpenMP's
passive wait policy and a patient Prefect start in its environment before anything loads torch
or Prefect, every child process inherits them, a value the user set wins, a training step
beside a second CPU-bound torch job runs under that policy, and a temporary Prefect server that
still does not start in time is one line naming the setting to raise. (What the policy is worth
is a figure, not an assertion: bench/contention_bench.py, docs/performance.md.)"""
from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from mars_core.run import threads
from tests.conftest import REPO

pytestmark = pytest.mark.slow  # `make test` runs it; `make test-unit` leaves it out

OURS = ("OMP_WAIT_POLICY", threads.PREFECT_STARTUP_TIMEOUT)
# a child process of a process that started as the `mars` command does (cli.main imported first)
SHOW = "import os; print(*(os.environ.get(k) for k in {keys!r}))"
THROUGH_THE_CLI = ("import subprocess, sys\nimport cli.main\n"
                   "sys.exit(subprocess.run([sys.executable, '-c', {child!r}]).returncode)")
# another job on the machine: torch with its own defaults (threads that spin), busy until killed
HOG = ("import torch\na = torch.randn(512, 512)\nprint('ready', flush=True)\n"
       "while True:\n    a @ a")
# a tiny Llama's training step (forward, backward, an optimizer step); the environment it ran in
STEP = """
import math, os, torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 128, (4, 32))
loss = model(input_ids=ids, labels=ids).loss
loss.backward()
opt.step()
assert math.isfinite(loss.item())
print('step', os.environ.get('OMP_WAIT_POLICY'), torch.get_num_threads())
"""


def _env(**extra: str) -> dict[str, str]:
    """This process's environment without our settings (as a fresh shell has it), plus extra."""
    env = {k: v for k, v in os.environ.items() if k not in OURS}
    env["PYTHONPATH"] = str(REPO)
    return {**env, **extra}


def _through_the_cli(child: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", THROUGH_THE_CLI.format(child=child)], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def test_apply_sets_what_is_missing_and_keeps_what_is_set():
    environ = {"OMP_WAIT_POLICY": "ACTIVE"}
    threads.apply(environ)
    assert environ == {"OMP_WAIT_POLICY": "ACTIVE", threads.PREFECT_STARTUP_TIMEOUT: "300"}
    environ = {}
    threads.apply(environ)
    assert environ == {"OMP_WAIT_POLICY": "PASSIVE", threads.PREFECT_STARTUP_TIMEOUT: "300"}


def test_the_cli_startup_puts_them_in_its_child_processes():
    done = _through_the_cli(SHOW.format(keys=OURS), _env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["PASSIVE", "300"]


def test_a_value_the_user_set_is_kept():
    done = _through_the_cli(SHOW.format(keys=OURS), _env(**{
        "OMP_WAIT_POLICY": "ACTIVE", threads.PREFECT_STARTUP_TIMEOUT: "7"}))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ACTIVE", "7"]


def test_prefect_reads_the_start_timeout_the_cli_sets():
    code = ("import cli.main\nfrom prefect.settings import "
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS as s\nprint(s.value())")
    done = subprocess.run([sys.executable, "-c", code], env=_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "300"


def _first_heavy_import(path) -> str | None:
    """The first module-level import in `path` of torch, Prefect or one of our packages."""
    heavy = ("torch", "transformers", "prefect", "mlflow", "mars_core", "cli", "tasks", "flows",
             "eval", "tests")
    for node in ast.parse(path.read_text()).body:
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            if name.split(".")[0] in heavy:
                return name
    return None


def test_the_cli_and_the_suite_import_it_before_torch_and_prefect():
    """The `mars` command and the test suite import it before anything that could load torch
    or Prefect (their settings are read when they load)."""
    for path in (REPO / "cli/main.py", REPO / "tests/conftest.py"):
        assert _first_heavy_import(path) == "mars_core.run.threads", path


def test_a_training_step_beside_a_cpu_bound_job_runs_under_the_policy():
    """A second torch process keeps both cores busy (its threads spinning, as torch's defaults
    have them) while a child of a process started as the `mars` command runs a training step:
    the step completes, and OpenMP in that child took the passive policy (libgomp, which torch
    ships on Linux, shows it: spin count 0)."""
    hog = subprocess.Popen([sys.executable, "-c", HOG], env=_env(), stdout=subprocess.PIPE,
                           text=True)
    try:
        assert hog.stdout.readline().strip() == "ready"
        done = _through_the_cli(STEP, _env(OMP_DISPLAY_ENV="VERBOSE"))
        assert hog.poll() is None  # it ran beside the step throughout
    finally:
        hog.kill()
        hog.wait()
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[:2] == ["step", "PASSIVE"]
    if "GOMP_SPINCOUNT" in done.stderr:  # libgomp's own account of its settings
        assert "GOMP_SPINCOUNT = '0'" in done.stderr, done.stderr[-3000:]


TIMED_OUT = ("Timed out while attempting to connect to ephemeral Prefect API server. Ephemeral "
             "server process exited with code 1. stdout: ... stderr: ...")


def test_a_temporary_server_that_does_not_start_in_time_is_one_line(monkeypatch, capsys):
    from cli import signals
    from cli.commands import COMMANDS
    from cli.main import main

    def slow():
        raise RuntimeError(TIMED_OUT)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    # no server configured, whatever the suite's Prefect test harness set up before this test
    monkeypatch.setattr(sys.modules["cli.main"], "check_prefect_api", lambda: False)
    monkeypatch.setattr(signals, "start_temporary_server", slow)
    monkeypatch.setattr(COMMANDS["train"].module, "check", lambda args: None)
    monkeypatch.setattr(COMMANDS["train"].module, "run", pytest.fail)  # never reached
    rc = main(["train", "--config", str(REPO / "configs/smoke.yaml")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("mars: error: Prefect's temporary API server did not answer within")
    assert threads.PREFECT_STARTUP_TIMEOUT in err and "PREFECT_API_URL" in err


def test_the_one_line_finds_the_timeout_behind_another_error():
    from cli.errors import prefect_start_timeout

    try:
        try:
            raise RuntimeError(TIMED_OUT)
        except RuntimeError as e:
            raise ValueError("the flow could not start") from e
    except ValueError as e:
        assert threads.PREFECT_STARTUP_TIMEOUT in prefect_start_timeout(e)
    assert prefect_start_timeout(RuntimeError("something else")) is None
