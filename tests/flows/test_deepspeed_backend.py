"""The DeepSpeed backend for real (CPU, gloo): the worker under ZeRO-2 fp32 gives the torch
path's weights and metrics, resumes its optimizer state exactly, gives the same update on 2
processes as on 1, fails with one readable line; and `mars train` with
`trainer.backend=deepspeed` survives a kill inside train_step and prunes old DeepSpeed state.

Each worker start costs seconds (DeepSpeed's import and the launcher), so the worker runs are
made once per module and shared."""
from __future__ import annotations

import copy
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import torch
from mlflow import MlflowClient
from safetensors import safe_open
from safetensors.torch import load_file

from cli.main import main
from mars_core.training import deepspeed_backend as ds
from mars_core.config import load_config
from mars_core.run.layout import TRAIN_STEP, checkpoint_dir, final_model_dir, stage_dir
from mars_core.models.weights import load_model, load_tokenizer
from mars_core.training.trainer import TorchUpdater, load_samples, make_optimizer, ppo_update
from tests.conftest import REPO

pytestmark = pytest.mark.timeout(900)
pytest.importorskip("deepspeed")  # the optional backend (pyproject extras `deepspeed`, `gpu`)
SMOKE = str(REPO / "configs/smoke.yaml")
SEEDS = (11, 12)  # iterations 0 and 1


def _write_samples(path: Path, n: int, seed: int) -> Path:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        p = torch.randint(5, 200, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g)
        c = torch.randint(5, 200, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g)
        rows.append({"prompt_ids": p.tolist(), "completion_ids": c.tolist(),
                     "advantage": float(i % 3) - 1.0, "game": "ab"[i % 2],
                     "temperature": (0.6, 1.0)[i % 2]})  # game b sampled at its own 1.0
    pl.DataFrame(rows).write_parquet(path)
    return path


def _config(launcher: str, n: int):
    """2 iterations x 2 minibatches (4 optimizer steps in all), uneven micro-batches (5
    samples a minibatch, 2 per micro-batch: with 2 ranks one rank pads), KL on."""
    return load_config(None, ["optim.lr=1e-3", "optim.warmup_steps=1", "optim.micro_batch_size=2",
                              "optim.minibatches=2", "algorithm.kl_coef=0.2", "run.iterations=2",
                              "trainer.backend=deepspeed", f"trainer.deepspeed.launcher={launcher}",
                              f"trainer.deepspeed.num_processes={n}"])


def _launch(out: Path, cfg, policy, reference, samples, k: int, resume=None) -> dict:
    out.mkdir(parents=True)
    spec = {"policy": str(policy), "reference": str(reference) if reference else None,
            "samples": str(samples), "out": str(out), "resume": str(resume) if resume else None,
            "config": cfg.model_dump(mode="json"), "iteration": k, "seed": SEEDS[k], "bf16": False}
    return ds.launch(spec, cfg.trainer, out)


@pytest.fixture(scope="module")
def worker_runs(tmp_path_factory, tiny_model_dir):
    """Iteration 0 on 1 process (DeepSpeed's launcher), iteration 1 resumed from its state
    (torchrun), iteration 0 again on 2 processes (torchrun); metrics of each."""
    root, start = tmp_path_factory.mktemp("ds-worker"), tiny_model_dir
    batches = [_write_samples(root / f"b{k}.parquet", 10, k) for k in (0, 1)]
    m = {"one": _launch(root / "one", _config("deepspeed", 1), start, start, batches[0], 0)}
    m["resumed"] = _launch(root / "resumed", _config("torchrun", 1), root / "one", start,
                           batches[1], 1, resume=root / "one" / "deepspeed")
    m["two"] = _launch(root / "two", _config("torchrun", 2), start, start, batches[0], 0)
    return root, batches, m


@pytest.fixture(scope="module")
def torch_path(worker_runs, tiny_model_dir):
    """The same two iterations with TorchUpdater in this process: (weights, metrics) after each."""
    _, batches, _ = worker_runs
    cfg = _config("torchrun", 1)
    model, ref = load_model(tiny_model_dir), load_model(tiny_model_dir)
    pad = load_tokenizer(tiny_model_dir).pad_token_id
    opt, sched = make_optimizer(model, cfg.optim, total_steps=4)
    after = []
    for k, batch in enumerate(batches):
        metrics = ppo_update(model, ref, TorchUpdater(model, opt, sched, cfg.optim.grad_clip),
                             load_samples(batch), cfg.algorithm, cfg.optim,
                             pad_id=pad, seed=SEEDS[k], progress=False)
        after.append((copy.deepcopy(model.state_dict()), metrics))
    return after


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def _max_diff(saved: dict, expected: dict) -> float:
    return max(float((saved[k] - expected[k]).abs().max()) for k in saved)


def _same_metrics(a: dict, b: dict, rel: float, abs_: float = 1e-9) -> None:
    for key in ("loss", "pg_loss", "kl", "clip_frac", "ratio_mean", "grad_norm", "lr",
                "optimizer_steps", "samples"):
        assert a[key] == pytest.approx(b[key], rel=rel, abs=abs_), key


@pytest.mark.full  # the optional backend's runs; `make test`: its errors, tests/unit/test_deepspeed.py
def test_one_process_zero2_matches_the_torch_path(worker_runs, torch_path, tiny_model_dir):
    root, _, m = worker_runs
    weights, metrics = torch_path[0]
    saved = _weights(root / "one")
    assert all(v.dtype == torch.float32 for v in saved.values())
    assert _max_diff(saved, weights) < 1e-5
    assert _max_diff(saved, load_model(tiny_model_dir).state_dict()) > 1e-3  # it did move
    _same_metrics(m["one"], metrics, rel=1e-5)
    assert m["one"]["kl"] > 0 and m["one"]["peak_rss_mb"] > 0
    assert (root / "one/deepspeed/latest").read_text().strip() == "state"
    assert (root / "one/tokenizer.json").is_file()


@pytest.mark.full  # the optional backend's runs; `make test`: its errors, tests/unit/test_deepspeed.py
def test_resumed_worker_continues_the_optimizer_and_schedule(worker_runs, torch_path):
    root, _, m = worker_runs
    weights, metrics = torch_path[1]
    assert _max_diff(_weights(root / "resumed"), weights) < 1e-5
    _same_metrics(m["resumed"], metrics, rel=1e-5)
    assert m["resumed"]["lr"] < m["one"]["lr"]  # the cosine schedule went on, not restarted


@pytest.mark.full  # the optional backend's runs; `make test`: its errors, tests/unit/test_deepspeed.py
def test_two_processes_give_the_one_process_update(worker_runs):
    """Same update within fp32 noise. Adam divides by sqrt(v) + 1e-8, so an element whose
    gradient is a near-total cancellation (|g| ~ 1e-8) moves by a different fraction of lr
    when the sum is taken in another order; the torch path alone shows the same for
    micro-batch 1 vs 2. So: all but a handful of 1.6M elements within 1e-5."""
    root, _, m = worker_runs
    one, two = _weights(root / "one"), _weights(root / "two")
    off = sum(int(((one[k] - two[k]).abs() > 1e-5).sum()) for k in one)
    assert off <= 10 and _max_diff(one, two) < 5e-4
    # the KL to the reference is ~5e-5, a difference of nearly equal log-probs: summed in
    # another order (two ranks) it moved by 3e-9 on an AMD EPYC (the weights agree as above)
    _same_metrics(m["two"], m["one"], rel=1e-5, abs_=1e-8)
    assert len(list((root / "two/deepspeed/state").glob("zero_pp_rank_*_optim_states.pt"))) == 2


@pytest.mark.parametrize("launcher", ["deepspeed", "torchrun"])
def test_a_failing_worker_raises_one_line(tmp_path, tiny_model_dir, launcher):
    cfg = _config(launcher, 1)
    with pytest.raises(RuntimeError) as err:
        _launch(tmp_path / "out", cfg, tiny_model_dir, None, tmp_path / "missing.parquet", 0)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("deepspeed training failed (exit ")
    assert "ValueError: deepspeed spec" in msg and "samples does not exist" in msg
    assert msg.endswith(f"; log: {tmp_path / 'out' / 'deepspeed.log'}")


def _tiny(model, *extra) -> list[str]:
    sets = [f"model.path={model}", "model.max_context_tokens=1024", "rollout.max_new_tokens=8",
            "warmup.steps=1", "warmup.probe_games=1", "evaluation.every=0",
            "trainer.backend=deepspeed", "trainer.deepspeed.launcher=torchrun",
            "checkpoint.keep_last=1", *extra]
    return [arg for s in sets for arg in ("--set", s)]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _float32_only(path: Path) -> bool:
    with safe_open(str(path), "pt") as f:
        return all(f.get_slice(k).get_dtype() == "F32" for k in f.keys())


@pytest.mark.full  # the optional backend's runs; `make test`: its errors, tests/unit/test_deepspeed.py
def test_train_flow_with_deepspeed_survives_a_kill_and_prunes(tmp_path, prefect_api, tiny_model_dir):
    args = ["train", "--config", SMOKE, "--runs-dir", str(tmp_path), "--run-name", "ds",
            *_tiny(tiny_model_dir)]
    run = tmp_path / "ds"
    stepping = stage_dir(run, 1, TRAIN_STEP)
    paused = stepping.with_name(stepping.name + ".partial") / "PAUSED"
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PYTHONPATH": str(REPO),
           "MARS_FAULT_PAUSE": f"{TRAIN_STEP}:1"}
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", *args], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.time() + 600
    while not paused.is_file():
        assert proc.poll() is None and time.time() < end, "the run did not reach the pause"
        time.sleep(0.1)
    killed_weights = _digest(paused.parent / "model.safetensors")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert main(args) == 0  # resumed: iteration 1's train_step runs again, from iteration 0

    ck0, ck1 = checkpoint_dir(run, 0), checkpoint_dir(run, 1)
    assert _digest(ck1 / "model.safetensors") == killed_weights  # the same update again
    assert _float32_only(ck1 / "model.safetensors")
    state = ck1 / "deepspeed/state"  # bf16_zero_pp_rank_0_... where model.bf16 resolves to on
    assert (state / "mp_rank_00_model_states.pt").is_file()
    assert len(list(state.glob("*zero_pp_rank_0_mp_rank_00_optim_states.pt"))) == 1
    assert (ck1 / "trainer_state.pt").is_file() and (ck1 / "estimator_state.json").is_file()
    assert not (ck1 / ds.SPEC_FILE).exists() and not (ck1 / ds.LOG_FILE).exists()
    # keep_last 1: iteration 0's weights and DeepSpeed state are gone, its light files stay
    assert not (ck0 / "deepspeed").exists() and not list(ck0.glob("*.safetensors"))
    assert not (ck0 / "trainer_state.pt").exists() and (ck0 / "config.json").is_file()
    spec1 = json.loads((stage_dir(run, 1, TRAIN_STEP) / ds.SPEC_FILE).read_text())
    assert spec1["resume"] == str((ck0 / "deepspeed").resolve()) and spec1["iteration"] == 1
    for k in (0, 1):  # published, so the stage folders keep only the light files
        step = stage_dir(run, k, TRAIN_STEP)
        assert not (step / "deepspeed").exists() and (step / ds.LOG_FILE).is_file()
    final = final_model_dir(run)
    assert (final / "model.safetensors").is_file() and not (final / "deepspeed").exists()
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("mars-smoke")
    parent = [r for r in client.search_runs([exp.experiment_id])
              if "mlflow.parentRunId" not in r.data.tags][0]
    for key in ("train/loss", "train/pg_loss", "train/grad_norm", "train/kl"):
        assert sorted(h.step for h in client.get_metric_history(parent.info.run_id, key)) == [0, 1]
    assert "train/peak_rss_mb" in parent.data.metrics
