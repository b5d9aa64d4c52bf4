"""Tasks: the starting policy (with the optional format warm-up), the PPO update, checkpoints."""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import torch
from prefect import task
from prefect.cache_policies import NO_CACHE

from mars_core.training import lora, deepspeed_backend as ds
from mars_core.run.checkpoint import (DEEPSPEED_STATE, ESTIMATOR_STATE, TRAINER_STATE, drop_heavy,
                                      is_heavy, link_or_copy, link_tree, load_trainer_state, prune_plan,
                                      save_estimator_state, save_model, save_trainer_state,
                                      share_identical, write_checkpoint_manifest)
from mars_core.models.manifest import MANIFEST, verify_folder
from mars_core.models.prefix import gradient_checkpointing
from mars_core.run.layout import (CHECKPOINT_FILE, COMPUTE_ADVANTAGES, FINAL, FINAL_MODEL, INIT,
                                  MODEL_DIR, OPTIMIZER_STEPS_FILE, POLICY_FILE, PREPARE_POLICY,
                                  SAMPLES_FILE,
                                  SAVE_CHECKPOINT, TRAIN_STEP, checkpoint_dir, final_model_dir,
                                  input_dir, stage_dir)
from mars_core.models.weights import load_model, load_tokenizer, resolve_model
from mars_core.run.memory import release_memory
from mars_core.run.seeds import Stream
from mars_core.run.commit import MARKER, PUBLISHED, read_json, write_json
from mars_core.training.trainer import (TorchUpdater, enable_gradient_checkpointing, load_samples,
                                        make_optimizer, ppo_update)
from mars_core.training.warmup import invalid_rate, sft_steps, warmup_examples
from tasks.engine_factory import make_engine, prompt_builder, sampling, use_bf16
from tasks.policies import initial_policy, policy_at
from tasks.stage import StageContext, iteration_stage
from tasks.stage_runner import PUBLISH_RETRY, derive_seed, run_stage
from tasks.paths import read_config
from tasks.tracking import log_metrics_once
from tasks.model_registry import MLFLOW_DIR, model_card, register_model, save_mlflow_model

# the DeepSpeed worker's spec, log and metrics, and the per-step metrics stay in train_step/,
# out of the checkpoint
RUN_FILES = (ds.SPEC_FILE, ds.LOG_FILE, ds.METRICS_FILE, OPTIMIZER_STEPS_FILE)


def _link_files(src: Path, out: Path, skip: tuple[str, ...]) -> int:
    """Hard-link every file of `src` into `out`, folders recursively (no copy; a copy only where
    the filesystem refuses links: `link_or_copy`), except `skip`; returns the bytes linked."""
    size = 0
    for f in src.iterdir():
        if f.name in (MARKER, PUBLISHED, "metrics.json", MANIFEST, *skip):
            continue
        if f.is_dir():
            link_tree(f, out / f.name)
            size += sum(g.stat().st_size for g in f.rglob("*") if g.is_file())
        else:
            link_or_copy(f, out / f.name)
            size += f.stat().st_size
    return size


def _probe_invalid_rate(cfg, engine, n_games: int, seed: int) -> float:
    """Invalid-action rate of the policy over a few self-play games (`mars_core.training.warmup`)."""
    return invalid_rate(cfg.rollout.games, engine, prompt_builder(cfg, engine.tokenizer),
                        sampling(cfg, seed), n_games, seed,
                        per_game=cfg.rollout.per_game_sampling(seed))


def _warmup_examples(cfg, tokenizer, n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """The warm-up's examples, answered by `warmup.demonstrator` (`mars_core.training.warmup`)."""
    return warmup_examples(cfg.rollout.games, prompt_builder(cfg, tokenizer), sampling(cfg, seed),
                           tokenizer, n, seed, demonstrator=cfg.warmup.demonstrator)


@task(cache_policy=NO_CACHE, **PUBLISH_RETRY)
def prepare_policy(run_dir: str) -> dict:
    """Resolve the base model (converting the embedded GGUF once), measure how often it answers
    validly, and run the format warm-up when the preset asks for one."""
    cfg = read_config(Path(run_dir))
    final = stage_dir(run_dir, INIT, PREPARE_POLICY)

    def body(out: Path) -> dict:
        base = str(resolve_model(cfg.model.path))
        w, seed, metrics = cfg.warmup, derive_seed(cfg, Stream.WARMUP, 0), {}
        engine = (make_engine(cfg, base, backend="hf", fp32_weights=w.steps > 0)
                  if (w.steps or w.probe_games) else None)
        if w.probe_games:
            metrics["warmup/invalid_rate_before"] = _probe_invalid_rate(cfg, engine, w.probe_games, seed)
        if w.steps == 0:
            if metrics.get("warmup/invalid_rate_before", 0.0) > 0.9:
                print(f"warning: the starting policy's replies are invalid in "
                      f"{metrics['warmup/invalid_rate_before']:.0%} of turns, so RL gets almost "
                      "no signal; consider a format warm-up (warmup.steps, e.g. 12)")
            write_json(out / POLICY_FILE, {"path": base, "base": base})
            return metrics
        model, tok = engine.model, engine.tokenizer
        examples = _warmup_examples(cfg, tok, w.steps * w.batch_size, seed)
        trained = lora.attach(model, w.lora) if w.lora.rank else model
        with gradient_checkpointing(trained, w.gradient_checkpointing):
            losses = sft_steps(trained, examples, steps=w.steps, batch_size=w.batch_size,
                               lr=w.lr, pad_id=tok.pad_token_id, seed=seed,
                               bf16=use_bf16(cfg, "update"), share_prefix=cfg.model.share_prefix,
                               micro_batch_size=w.micro_batch_size)
        if w.lora.rank:  # the adapter merged into the engine's own weights (in place)
            model = trained.merge_and_unload()
        release_memory()  # the warm-up's freed activations and optimizer state go back
        if w.probe_games:
            metrics["warmup/invalid_rate_after"] = _probe_invalid_rate(cfg, engine, w.probe_games, seed + 1)
        save_model(out / MODEL_DIR, model, tok)
        write_checkpoint_manifest(out / MODEL_DIR)
        write_json(out / POLICY_FILE, {"path": str((final / MODEL_DIR).resolve()), "base": base})
        return {**metrics, "warmup/loss_first": losses[0], "warmup/loss_last": losses[-1],
                "warmup/examples": float(len(examples))}

    return run_stage(run_dir, INIT, PREPARE_POLICY, body, step=0)


def _policy_and_reference(cfg, run_dir: str, k: int, device: str, bf16: bool = False):
    """The model the update trains and the KL reference (None without a KL term): the policy
    of iteration k and the start policy, or with `trainer.lora` the start policy carrying the
    run's adapter (its frozen weights held in bf16 when the update runs under bf16 autocast)
    and the same module with its adapters off."""
    path = policy_at(run_dir, k, reader=TRAIN_STEP)
    if cfg.trainer.lora.rank:
        adapter = Path(path) / lora.ADAPTER if k > 0 else None
        start = initial_policy(run_dir, k, reader=TRAIN_STEP)
        model = lora.attach(load_model(start).to(device), cfg.trainer.lora, adapter)
        if bf16:
            lora.hold_base_in_bf16(model)
        return model, lora.AdaptersOff(model) if cfg.algorithm.kl_coef > 0 else None
    model = load_model(path).to(device)
    ref = (load_model(initial_policy(run_dir, k, reader=TRAIN_STEP)).to(device)
           if cfg.algorithm.kl_coef > 0 else None)
    return model, ref


def _train_torch(cfg, run_dir: str, k: int, out: Path) -> dict:
    """The PPO update in this process; saves the weights (merged, and the adapter, with LoRA)
    and the optimizer/scheduler state."""
    path = policy_at(run_dir, k, reader=TRAIN_STEP)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    bf16 = use_bf16(cfg, "update")
    model, ref = _policy_and_reference(cfg, run_dir, k, device, bf16)
    tok = load_tokenizer(path)
    enable_gradient_checkpointing(model, cfg.trainer.gradient_checkpointing)
    steps = cfg.run.iterations * cfg.optim.minibatches * cfg.algorithm.ppo_epochs
    opt, sched = make_optimizer(model, cfg.optim, steps)
    load_trainer_state(path, opt, sched)
    samples = load_samples(input_dir(run_dir, k, reader=TRAIN_STEP, stage=COMPUTE_ADVANTAGES)
                           / SAMPLES_FILE)
    metrics, steps = {}, []
    if samples:
        metrics = ppo_update(model, ref, TorchUpdater(model, opt, sched, cfg.optim.grad_clip),
                             samples, cfg.algorithm, cfg.optim, pad_id=tok.pad_token_id,
                             seed=derive_seed(cfg, Stream.TRAINING, k),
                             bf16=bf16,
                             share_prefix=cfg.model.share_prefix,
                             on_step=lambda j, m: steps.append(m))
    write_json(out / OPTIMIZER_STEPS_FILE, steps)
    save_trainer_state(out, opt, sched, k)
    if cfg.trainer.lora.rank and bf16:  # the bf16 base dropped, the fp32 start read again
        lora.save_adapter(out, model)
        del model, ref, opt, sched
        release_memory()
        lora.merge_into_start(out, initial_policy(run_dir, k, reader=TRAIN_STEP), tok)
    elif cfg.trainer.lora.rank:
        lora.save(out, model, tok)
    else:
        save_model(out, model, tok)
    return metrics


def _absolute(path: str) -> str:
    """A local folder as an absolute path (the workers may not share our cwd); a hub id as is."""
    return str(Path(path).resolve()) if Path(path).exists() else path


def _train_deepspeed(cfg, run_dir: str, k: int, out: Path) -> dict:
    """The PPO update in DeepSpeed worker processes (`mars_core.training.deepspeed_backend`), resuming
    the previous checkpoint's `deepspeed/` state when it has one. The workers write the fp32
    weights and `deepspeed/`; the trainer state keeps the iteration and RNG states only. An
    empty batch launches nothing: the weights and the previous state carry over (links)."""
    path = policy_at(run_dir, k, reader=TRAIN_STEP)
    prev = Path(path) / DEEPSPEED_STATE
    samples_file = input_dir(run_dir, k, reader=TRAIN_STEP, stage=COMPUTE_ADVANTAGES) / SAMPLES_FILE
    metrics = {}
    if pq.read_metadata(samples_file).num_rows:  # the footer only: the workers read the rows
        spec = {"policy": _absolute(path),
                "reference": _absolute(initial_policy(run_dir, k, reader=TRAIN_STEP))
                if cfg.algorithm.kl_coef > 0 else None,
                "samples": str(samples_file.resolve()), "out": str(out.resolve()),
                "resume": str(prev.resolve()) if prev.is_dir() else None,
                "config": cfg.public(), "iteration": k,
                "seed": derive_seed(cfg, Stream.TRAINING, k), "bf16": use_bf16(cfg, "update")}
        metrics = ds.launch(spec, cfg.trainer, out)
    else:
        save_model(out, load_model(path), load_tokenizer(path))
        if prev.is_dir():
            link_tree(prev, out / DEEPSPEED_STATE)
    save_trainer_state(out, None, None, k)
    return metrics


def _share_small_files(run_dir: str, reference: str, out: Path) -> None:
    """The files of `out` other than weights and optimizer state (the tokenizer's) that are the
    same as `reference`'s become links to them, when `reference` is a folder of this run."""
    ref = Path(reference)
    if ref.is_dir() and ref.resolve().is_relative_to(Path(run_dir).resolve()):
        share_identical(out, ref, skip=is_heavy)


def _log_optimizer_steps(ctx: StageContext) -> None:
    """Each optimizer step's metrics as MLflow metrics `opt/<name>` at the run's global
    optimizer step (iteration k's first is k x steps per iteration), each step once."""
    file, k = ctx.folder / OPTIMIZER_STEPS_FILE, ctx.k
    per_iter = ctx.cfg.optim.minibatches * ctx.cfg.algorithm.ppo_epochs
    for j, m in enumerate(read_json(file) if file.is_file() else []):
        log_metrics_once(Path(ctx.run_dir), {f"opt/{key}": v for key, v in m.items()},
                         k * per_iter + j)


@iteration_stage(TRAIN_STEP, after=_log_optimizer_steps)
def train_step(ctx: StageContext, out: Path) -> dict:
    """One PPO update on iteration k's batch, from the policy (and optimizer state) of k-1,
    with the backend `trainer.backend` names (torch in process, or DeepSpeed workers)."""
    cfg = ctx.cfg
    train = _train_deepspeed if cfg.trainer.backend == "deepspeed" else _train_torch
    metrics = train(cfg, ctx.run_dir, ctx.k, out) | {"bf16": float(use_bf16(cfg, "update"))}
    _share_small_files(ctx.run_dir, policy_at(ctx.run_dir, ctx.k, reader=TRAIN_STEP), out)
    save_estimator_state(out, read_json(ctx.inputs[COMPUTE_ADVANTAGES] / ESTIMATOR_STATE))
    return {f"train/{key}": v for key, v in metrics.items()}


def _prune(ctx: StageContext) -> None:
    """After the checkpoint is published: the train step's own weights (the checkpoint holds
    the only link it still needs) and the weights of checkpoints older than
    `checkpoint.keep_last`."""
    drop_heavy(ctx.inputs[TRAIN_STEP])
    cfg = ctx.cfg
    keep = max(cfg.checkpoint.keep_last, 1 + cfg.rollout.policy_lag)  # k+1's games may play k-1
    for j in prune_plan(ctx.k, keep, cfg.checkpoint.keep_every):
        drop_heavy(checkpoint_dir(ctx.run_dir, j))


@iteration_stage(SAVE_CHECKPOINT, after=_prune)
def save_checkpoint(ctx: StageContext, out: Path) -> dict:
    """Publish iteration k's weights and trainer state as `iter_k/save_checkpoint/` (hard links,
    no copy) and prune the weights of checkpoints older than `checkpoint.keep_last`."""
    src = ctx.inputs[TRAIN_STEP]
    size = _link_files(src, out, skip=RUN_FILES)
    write_json(out / CHECKPOINT_FILE, {"iteration": ctx.k, "source": str(src)})
    write_checkpoint_manifest(out)  # before the commit: a checkpoint always has one
    return {"checkpoint/size_mb": size / 2**20}


@task(cache_policy=NO_CACHE, timeout_seconds=3600, **PUBLISH_RETRY)
def register_final(run_dir: str) -> int:
    """The last checkpoint's model files (no trainer or DeepSpeed state, no LoRA adapter: its
    merged weights are the model) as `final/model/`, and as the MLflow transformers model
    `final/model/mlflow/` (hard links to the same weights), registered as version `candidate`."""
    cfg = read_config(Path(run_dir))
    final = input_dir(run_dir, FINAL, reader=FINAL_MODEL, stage=SAVE_CHECKPOINT,
                      at=cfg.run.iterations - 1)
    start = input_dir(run_dir, FINAL, reader=FINAL_MODEL, stage=PREPARE_POLICY, at=INIT)
    base = read_json(start / POLICY_FILE)["base"]

    def body(out: Path) -> dict:
        verify_folder(final)  # a checkpoint changed since it was written is not registered
        _link_files(final, out, skip=(TRAINER_STATE, ESTIMATOR_STATE, DEEPSPEED_STATE,
                                      lora.ADAPTER, CHECKPOINT_FILE))
        save_mlflow_model(out, out / MLFLOW_DIR, model_card(Path(run_dir), str(final), base))
        _share_small_files(run_dir, str(out), out / MLFLOW_DIR / "components" / "tokenizer")
        write_checkpoint_manifest(out)
        return {}

    run_stage(run_dir, FINAL, FINAL_MODEL, body, step=None)
    lineage = {"mars.run_dir": str(Path(run_dir).resolve()), "mars.parent_checkpoint": str(final),
               "mars.base_model": base}
    return register_model(Path(run_dir), final_model_dir(run_dir) / MLFLOW_DIR,
                          cfg.tracking.registered_model, "candidate", lineage)
