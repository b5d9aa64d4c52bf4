"""The DeepSpeed trainer backend (`trainer.backend: deepspeed`): the same PPO update
(`mars_core.training.trainer.ppo_update`: same batches, loss, minibatch plan and exact accumulation)
run by launched worker processes under DeepSpeed ZeRO (stage 2 or 3, optional CPU offload).

The parent (`tasks/train.py`) writes a SPEC json and calls `launch`, which starts
`python -m mars_core.training.deepspeed_backend SPEC.json` on every rank through DeepSpeed's launcher or
torchrun. A worker (`main`) loads the policy in fp32, initialises DeepSpeed, restores the
previous DeepSpeed state when the SPEC names one, runs `ppo_update` with a `DeepSpeedUpdater`,
and saves DeepSpeed's checkpoint under `<out>/deepspeed/` plus, on rank 0, the fp32 master
weights as a normal model folder (so bf16 training never rounds the weights it carries from
one iteration to the next) and the metrics.

Gradient accumulation is ours, not DeepSpeed's: with `managed_gradient_accumulation: false`,
`engine.backward(loss, scale_wrt_gas=False)` only accumulates and every `engine.step()` is one
optimizer step, so the batch plan alone decides how many micro-batches a step has (DeepSpeed's
micro-batch size and accumulation steps are bookkeeping only).

SPEC keys: policy (start weights, a model folder), reference (folder or null; needed when
kl_coef > 0), samples (parquet: prompt_ids, completion_ids, advantage, game), out (folder),
resume (a previous `deepspeed/` folder or null), config (`Config.model_dump(mode="json")`),
iteration, seed, bf16.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Mapping

import torch

from mars_core.run.checkpoint import DEEPSPEED_STATE, DEEPSPEED_TAG, save_model
from mars_core.run import offline
from mars_core.config import Config, OptimConfig, TrainerConfig, config_from_dict
from mars_core.run.procgroup import ProcessGroupError, free_port, start_group, stop_group
from mars_core.training.trainer import (enable_gradient_checkpointing, load_samples, lr_lambda,
                                        ppo_update)

WORKER_MODULE = "mars_core.training.deepspeed_backend"
SPEC_FILE = "deepspeed_spec.json"
LOG_FILE = "deepspeed.log"
METRICS_FILE = "deepspeed_metrics.json"
PID_FILE = "deepspeed.pid"  # beside the stage's folder: a resume wipes that folder first
ERROR_MARK = "mars deepspeed worker error: "  # the worker's one-line failure, found in the log
SPEC_KEYS = ("policy", "reference", "samples", "out", "resume", "config", "iteration", "seed",
             "bf16")
REPO_ROOT = Path(__file__).resolve().parents[2]
STALE_LOCK_S = 600  # an op build takes ~30 s here; a build lock older than this has no builder


def _deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def ds_config(trainer: TrainerConfig, optim: OptimConfig, bf16: bool, world: int) -> dict:
    """The DeepSpeed config: ZeRO stage and CPU offload from `trainer.deepspeed`, bf16, the
    gradient clip of `optim`, unmanaged gradient accumulation; micro-batch size x 1
    accumulation step x `world` = train batch size (consistent, bookkeeping only). Then
    `trainer.deepspeed.extra` deep-merged on top (its values win)."""
    if world < 1:
        raise ValueError(f"ds_config: world must be >= 1, got {world}")
    ds = trainer.deepspeed
    zero: dict = {"stage": ds.zero_stage}
    if ds.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    if ds.offload_params:
        zero["offload_param"] = {"device": "cpu"}
    base = {
        "train_micro_batch_size_per_gpu": optim.micro_batch_size,
        "gradient_accumulation_steps": 1,
        "train_batch_size": optim.micro_batch_size * world,
        "managed_gradient_accumulation": False,
        "gradient_clipping": optim.grad_clip,
        "zero_optimization": zero,
        "bf16": {"enabled": bool(bf16)},
        "steps_per_print": 2**31 - 1,  # no progress lines: ppo_update reports its metrics
        "wall_clock_breakdown": False,
    }
    cfg = _deep_merge(base, ds.extra)
    if cfg.get("managed_gradient_accumulation") is not False:
        raise ValueError("trainer.deepspeed.extra must not set managed_gradient_accumulation: "
                         "ppo_update owns the gradient accumulation")
    return cfg


class DeepSpeedUpdater:
    """The `ppo_update` updater over a DeepSpeed engine: backward only accumulates (no division
    by accumulation steps); step is the accumulation boundary (ZeRO clips to
    `gradient_clipping`, steps the optimizer and the LR schedule)."""

    def __init__(self, engine):
        self.engine = engine

    def backward(self, loss: torch.Tensor) -> None:
        self.engine.backward(loss, scale_wrt_gas=False)

    def step(self) -> tuple[float, float]:
        """(global gradient norm before clipping, the lr this step used). The lr is read
        before the step, as `TorchUpdater` does (after it, the schedule has moved on)."""
        lr = float(self.engine.get_lr()[0])
        self.engine.step()
        return float(self.engine.get_global_grad_norm() or 0.0), lr

    def zero_grad(self) -> None:
        self.engine.zero_grad()


def init_deepspeed(model, trainer: TrainerConfig, optim: OptimConfig, bf16: bool,
                   total_steps: int, world: int):
    """(engine, DeepSpeedUpdater) for `model`: AdamW with `optim`'s lr, betas and weight decay
    (torch.optim.AdamW; DeepSpeedCPUAdam, compiled once, when the optimizer is offloaded) and
    the torch path's schedule (`lr_lambda`: warm-up, cosine to 0 at `total_steps`). Needs the
    torch.distributed environment (a launcher sets it). Free of file paths (benches use it)."""
    import deepspeed

    params = [p for p in model.parameters() if p.requires_grad]
    kw = {"lr": optim.lr, "betas": tuple(optim.betas), "weight_decay": optim.weight_decay}
    if trainer.deepspeed.offload_optimizer:
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        opt = DeepSpeedCPUAdam(params, adamw_mode=True, **kw)
    else:
        opt = torch.optim.AdamW(params, **kw)

    def schedule(basic_optimizer):
        return torch.optim.lr_scheduler.LambdaLR(basic_optimizer,
                                                 lr_lambda(optim.warmup_steps, total_steps))

    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, lr_scheduler=schedule,
                                      config=ds_config(trainer, optim, bf16, world))
    return engine, DeepSpeedUpdater(engine)


# ---- the parent side: the launch command, the child's environment, the failure line ----

def launch_command(trainer: TrainerConfig, spec_path: Path | str) -> list[str]:
    """The command that runs the worker on `num_processes` ranks. `deepspeed`: DeepSpeed's
    own launcher (it runs on CPU-only machines too, one process per requested rank);
    `torchrun`: `torch.distributed.run --standalone` (it picks a free rendezvous port)."""
    ds, py, spec = trainer.deepspeed, sys.executable, str(spec_path)
    n = str(ds.num_processes)
    if ds.launcher == "torchrun":
        return [py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", n,
                "-m", WORKER_MODULE, spec]
    cmd = [py, "-m", "deepspeed.launcher.runner", "--num_gpus", n, "--no_local_rank"]
    if ds.hostfile:
        cmd += ["--hostfile", ds.hostfile]  # multi-node: DeepSpeed's default master port
    else:
        cmd += ["--master_port", str(free_port())]
    return cmd + ["--module", WORKER_MODULE, spec]


def worker_env(base: Mapping[str, str], nproc: int) -> dict[str, str]:
    """The parent's environment plus `mars_core.run.offline.ENV` (offline hub, quiet telemetry and
    tokenizers), this repository on
    PYTHONPATH, and (unless set) the CPU threads shared out between the local ranks."""
    env = {**base, **offline.ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), base.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    return env


def failure_line(log: Path) -> str:
    """The worker's own one-line error when it wrote one, else the log's last non-empty line."""
    lines = [ln.strip() for ln in Path(log).read_text(errors="replace").splitlines() if ln.strip()]
    marked = [ln.split(ERROR_MARK, 1)[1] for ln in lines if ERROR_MARK in ln]
    return marked[-1] if marked else (lines[-1] if lines else "(empty log)")


def extension_locks(env: Mapping[str, str]) -> list[Path]:
    """The lock files of torch's C++ extension builds (DeepSpeed compiles its CPU ops there on
    first start): `<TORCH_EXTENSIONS_DIR or torch's default root>/<py..>/<op>/lock`."""
    from torch.utils.cpp_extension import get_default_build_root
    root = Path(env.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())
    return sorted(set(root.glob("*/lock")) | set(root.glob("*/*/lock")))


def clear_build_locks(env: Mapping[str, str], since: float | None = None) -> list[Path]:
    """Remove the extension build locks a killed build left behind: torch waits forever on a
    lock whose builder died (a training stopped mid-compile). `since=None`: locks older than
    STALE_LOCK_S; `since=t`: locks made at or after `t` (called once this launch's own
    process group is gone, so a lock it made has no builder left). Returns what it removed."""
    removed = []
    now = time.time()
    for lock in extension_locks(env):
        try:
            mtime = lock.stat().st_mtime
            if (now - mtime > STALE_LOCK_S) if since is None else (mtime >= since):
                lock.unlink()
                removed.append(lock)
        except FileNotFoundError:
            continue
    for lock in removed:
        print(f"removed a stale torch extension build lock: {lock}", file=sys.stderr)
    return removed


def launch(spec: dict, trainer: TrainerConfig, out: Path | str,
           pid_file: Path | str | None = None) -> dict[str, float]:
    """Write `spec` to `<out>/deepspeed_spec.json`, run the worker on every rank (output to
    `<out>/deepspeed.log`) and return its metrics. A non-zero exit raises RuntimeError with
    one line: the exit status, the worker's error and the log's path.

    The launcher and its ranks run as one process group that never outlives this process
    (`procgroup.start_group`: also after a kill -9 of the flow), recorded in `pid_file`
    (default `<out>/../deepspeed.pid`, outside the stage's scratch folder that a resume
    removes); an exception here (KeyboardInterrupt included) stops the whole group. Extension
    build locks with no builder left (`clear_build_locks`) are removed before the start and
    after a stopped or failed group, so a kill during DeepSpeed's first-start compile does not
    make every later start wait forever."""
    missing = [k for k in SPEC_KEYS if k not in spec]
    if missing:
        raise ValueError(f"deepspeed spec lacks: {', '.join(missing)}")
    out = Path(out)
    spec_path, log = out / SPEC_FILE, out / LOG_FILE
    pid_file = Path(pid_file) if pid_file else out.parent / PID_FILE
    spec_path.write_text(json.dumps(spec, indent=1))
    env = worker_env(os.environ, trainer.deepspeed.num_processes)
    clear_build_locks(env)
    started, rc = time.time() - 1, None
    with log.open("w") as f:
        try:
            proc = start_group(launch_command(trainer, spec_path), pid_file, env=env, stdout=f)
        except ProcessGroupError as e:
            raise RuntimeError(f"cannot start deepspeed training: {e}") from None
        try:
            # short waits: a Ctrl-C that lands on another thread (Prefect's, polars') raises
            # here at once, not when the launcher exits
            while rc is None:
                try:
                    rc = proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            stop_group(proc, pid_file, grace_s=10)
            if rc != 0:  # stopped or failed: a build it was running is dead with it
                clear_build_locks(env, since=started)
    if rc != 0:
        raise RuntimeError(f"deepspeed training failed (exit {rc}): {failure_line(log)}; "
                           f"log: {log}")
    return json.loads((out / METRICS_FILE).read_text())


# ---- the worker side (every rank) ----

def read_spec(path: Path | str) -> dict:
    """The SPEC json, checked: every key present, the files it names exist."""
    spec = json.loads(Path(path).read_text())
    missing = [k for k in SPEC_KEYS if k not in spec]
    if missing:
        raise ValueError(f"deepspeed spec {path} lacks: {', '.join(missing)}")
    for key in ("samples", "resume"):  # policy/reference may be hub ids
        if spec[key] is not None and not Path(spec[key]).exists():
            raise ValueError(f"deepspeed spec {path}: {key} does not exist: {spec[key]}")
    return spec


def _engine(spec: dict, cfg: Config, world: int):
    """The policy (fp32 weights) under DeepSpeed, its previous state restored when given."""
    from mars_core.models.weights import load_model

    model = load_model(spec["policy"])
    enable_gradient_checkpointing(model, cfg.trainer.gradient_checkpointing)
    steps = cfg.run.iterations * cfg.optim.minibatches * cfg.algorithm.ppo_epochs
    engine, updater = init_deepspeed(model, cfg.trainer, cfg.optim, spec["bf16"], steps, world)
    if spec["resume"] is not None:
        loaded, _ = engine.load_checkpoint(spec["resume"], tag=DEEPSPEED_TAG)
        if loaded is None:
            raise ValueError(f"no DeepSpeed state (tag {DEEPSPEED_TAG}) in {spec['resume']}")
    return engine, updater


def _save(engine, spec: dict, metrics: dict, rank: int) -> None:
    """DeepSpeed's checkpoint (every rank writes its partitions); then on rank 0 the fp32
    masters gathered from it (`zero_to_fp32`) as a model folder with the tokenizer, and the
    metrics plus rank 0's peak RSS (`peak_rss_mb`)."""
    import torch.distributed as dist

    from mars_core.models.weights import load_model, load_tokenizer

    out = Path(spec["out"])
    engine.save_checkpoint(str(out / DEEPSPEED_STATE), tag=DEEPSPEED_TAG)
    dist.barrier()
    if rank == 0:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        state = get_fp32_state_dict_from_zero_checkpoint(str(out / DEEPSPEED_STATE),
                                                         tag=DEEPSPEED_TAG)
        model = load_model(spec["policy"])
        model.load_state_dict(state, strict=True)
        save_model(out, model, load_tokenizer(spec["policy"]))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        metrics = {**metrics, "peak_rss_mb": peak}  # rank 0's, the consolidation included
        (out / METRICS_FILE).write_text(json.dumps(metrics, indent=2, sort_keys=True))
    dist.barrier()


def run_worker(spec: dict) -> None:
    """One rank's work: init the process group, train, save (see the module docstring)."""
    import logging

    import deepspeed
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator
    from deepspeed.utils import logger

    from mars_core.models.weights import load_model, load_tokenizer

    logger.setLevel(logging.WARNING)
    deepspeed.init_distributed(dist_backend=get_accelerator().communication_backend_name())
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = config_from_dict(spec["config"])
    engine, updater = _engine(spec, cfg, world)
    # the reference in the policy's precision: bf16 weights on both sides, so the KL starts at 0
    ref_dtype = torch.bfloat16 if spec["bf16"] else None
    ref = (load_model(spec["reference"], dtype=ref_dtype).to(engine.device) if spec["reference"]
           else None)
    metrics = ppo_update(engine, ref, updater, load_samples(spec["samples"]), cfg.algorithm,
                         cfg.optim, pad_id=load_tokenizer(spec["policy"]).pad_token_id,
                         seed=spec["seed"], bf16=spec["bf16"],
                         share_prefix=cfg.model.share_prefix, progress=False, rank=rank,
                         world=world)
    _save(engine, spec, metrics, rank)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """`python -m mars_core.training.deepspeed_backend SPEC.json`, on every rank. Exits 1 on any failure
    after printing the traceback and one line `ERROR_MARK<type>: <message>`."""
    parser = argparse.ArgumentParser(prog="python -m mars_core.training.deepspeed_backend")
    parser.add_argument("spec", help="the SPEC json written by mars_core.training.deepspeed_backend.launch")
    parser.add_argument("--local_rank", type=int, default=None)  # older launchers pass it
    args = parser.parse_args(argv)
    offline.apply()  # remote ranks do not get the parent's env
    offline.quiet_logs()  # `import deepspeed` guesses the accelerator aloud
    try:
        run_worker(read_spec(args.spec))
    except Exception as e:  # every rank must exit non-zero, with a readable last line
        traceback.print_exc()
        first = (str(e).strip().splitlines() or [""])[0]
        sys.stderr.write(f"{ERROR_MARK}{type(e).__name__}: {first}\n")
        sys.stderr.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
