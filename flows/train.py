"""The training flow, top to bottom like the algorithm:

    prepare_policy (base model, format warm-up) -> evaluate the start policy
    for each iteration k:
        generate_rollouts -> build_players -> filter_steps -> assign_rewards
        -> bank_episodes -> build_batch -> compute_advantages -> replays (HTML pages)
        -> train_step -> save_checkpoint -> (every k) evaluate
        (with `rollout.overlap`, iteration k+1's games are played in a thread while k's
        train_step runs, by the policy before that update: `_ahead`)
    register the final checkpoint (alias `candidate`)
    the start policy against the final one, on the same deals (when both were evaluated)

Every stage is resumable: running the flow again on the same run directory skips finished
stages and continues at the first unfinished one. Which folders each stage reads:
`mars_core.run.layout.STAGE_INPUTS` and `EARLIER_INPUTS` (drawn in docs/dag.md).
"""
from __future__ import annotations

import contextvars
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from prefect import flow

from mars_core.config import load_config
from mars_core.models.weights import import_loaders
from mars_core.privacy.private import reveal
from mars_core.privacy.redact import install_log_redaction
from mars_core.run.layout import (EVALUATE, GENERATE_ROLLOUTS, INIT, ITERATION_STAGES,
                                  SAVE_CHECKPOINT, TRAIN_STEP, input_dir)
from tasks.artifacts import Progress, flush_logs, publish_markdown, publish_table
from tasks.policies import initial_policy
from tasks.stage_runner import check_finished_stages
from tasks.vllm_launch import shutdown_engines
from tasks.estimate import estimate_line, refined_line, warmup_seconds
from tasks.strength import (closing_lines, compare_start_final, evaluate, evaluation_records,
                            learning_curve)
from tasks.paths import lock_run_dir, prepare_run_dir, run_dir_for, unlock_run_dir
from tasks.rollout import STOP_PLAY, generate_rollouts
from tasks.shards import connect, share_config, unshare_config
from tasks.tracking import ensure_run, nested_run, set_terminated, tracking_uri
from tasks.stage import stage_task
from tasks.train import prepare_policy, register_final
# the other modules of iteration stages: `_iteration` runs their @iteration_stage tasks by name
import tasks.batching, tasks.postprocess, tasks.replay  # noqa: E401,F401,E402


def summary_line(k: int, n: int, m: dict) -> str:
    def g(key, fmt="{:.3f}"):
        return fmt.format(m[key]) if key in m else "-"

    return (f"iter {k + 1}/{n}: reward {g('reward/mean')}, invalid {g('rollout/invalid_action_rate')}, "
            f"P0 win {g('rollout/seat0_win_rate')} draw {g('rollout/seat0_draw_rate')}, "
            f"gated {g('gated/total', '{:.0f}')}, loss {g('train/loss', '{:.4f}')}, kl {g('train/kl', '{:.4f}')}, "
            f"{g('rollout/tokens_per_s', '{:.0f}')} tok/s, "
            f"rollout {g(f'time/{GENERATE_ROLLOUTS}', '{:.0f}')}s "
            f"train {g(f'time/{TRAIN_STEP}', '{:.0f}')}s, peak memory "
            f"{g(f'memory/{GENERATE_ROLLOUTS}_peak_rss_gib', '{:.1f}')} / "
            f"{g(f'memory/{TRAIN_STEP}_peak_rss_gib', '{:.1f}')} GiB")


@flow(name="mars-train", log_prints=True)
def train_flow(config: str = "configs/demo.yaml", run_name: str | None = None,
               runs_dir: str = "runs", overrides: list[str] | None = None,
               overlays: list[str] | None = None, private: str | None = None) -> dict:
    """Train (or resume) the run `runs_dir/run_name` with the preset `config`, the `overlays`
    merged on top (e.g. configs/scales/smoke.yaml) and then the `key=value` overrides (an
    override holding a secret comes masked, its value in the file `private`:
    `mars_core.privacy.private`)."""
    install_log_redaction()
    overrides = reveal(private, overrides=overrides or [])["overrides"]
    cfg = load_config(config, overrides, overlays=overlays or [])
    run_dir = str(run_dir_for(runs_dir, run_name or Path(config).stem))
    lock_run_dir(Path(run_dir))  # one process per run folder (a second one gets a clear error)
    try:
        resumed = prepare_run_dir(Path(run_dir), cfg)
        if resumed:
            check_finished_stages(Path(run_dir))
        share_config(run_dir, cfg)  # for shard workers in other processes, while it runs
        estimate = estimate_line(cfg, Path(run_dir))  # after the precision calibration
        if estimate:
            print(estimate)
        run_id = ensure_run(Path(run_dir))
        try:
            result = _iterations(run_dir, cfg)
        except BaseException:
            set_terminated(Path(run_dir), run_id, "FAILED")
            raise
        finally:
            shutdown_engines()  # a vLLM server this run started
        set_terminated(Path(run_dir), run_id)
    finally:
        unshare_config(run_dir)
        unlock_run_dir(Path(run_dir))
    done = (f"run {run_dir} complete: model '{cfg.tracking.registered_model}' version "
            f"{result['model_version']} has the alias 'candidate'")
    print(done)
    closing = closing_lines(run_dir, run_id) if result["strength"] else ""
    if result["strength"]:
        print("strength, start policy vs final policy (normalized return 0-100, 95% intervals; "
              "* = the paired difference clears twice its half-width):\n" + result["strength"])
        print(closing)
    _publish_summary(run_dir, run_id, done, result["strength"], closing)
    flush_logs()  # the summary above reaches the Prefect UI before the process exits
    return {"run_dir": run_dir, "mlflow_run_id": run_id, **result}


def _iterations(run_dir: str, cfg) -> dict:
    """The run's stages in the order of `mars_core.run.layout.STAGES` (init, each iteration, final);
    each task skips its stage when the stage's folder is already committed (a resume)."""
    name = Path(run_dir).name
    expected, started = warmup_seconds(cfg, Path(run_dir)), time.monotonic()
    prepare_policy(run_dir)
    if expected:  # the estimate again, at the pace the warm-up ran
        refined = refined_line(cfg, Path(run_dir), expected, time.monotonic() - started)
        if refined:
            print(refined)
    every = cfg.evaluation.every
    if every and cfg.evaluation.at_start:
        start = initial_policy(run_dir, INIT, reader=EVALUATE)
        _evaluated(run_dir, INIT, evaluate(run_dir, INIT, start, 0), 0)
    last: dict = {}
    n = cfg.run.iterations
    progress = Progress(f"{name}-iterations", 0, n, f"iterations of {name}")
    ahead: dict[int, Future] = {}  # an iteration's games, started while the one before trains
    STOP_PLAY.clear()
    if cfg.rollout.overlap and cfg.cluster.ray.address is not None:
        connect(cfg.cluster)  # from this thread: the games played ahead use its connection
    try:
        for k in range(n):
            last = _iteration(run_dir, k, bool(every and ((k + 1) % every == 0 or k + 1 == n)),
                              ahead, cfg.rollout.overlap and k + 1 < n)
            print(summary_line(k, n, last))
            progress.update(k + 1)
    except BaseException:
        _stop(ahead)
        raise
    version = register_final(run_dir)
    strength = compare_start_final(run_dir) if every and cfg.evaluation.at_start else ""
    return {"model_version": version, "strength": strength, **last}


def _iteration(run_dir: str, k: int, evaluated: bool, ahead: dict[int, Future],
               overlap: bool) -> dict:
    """Iteration k, stage by stage in the layout's order (`ITERATION_STAGES`, each run by the
    task its `@iteration_stage` body declares, `tasks.stage`; the folders each stage reads:
    `STAGE_INPUTS`); the stages' metrics merged, a later key winning. Its games come from
    `ahead` when they were started during iteration k-1's update; with `overlap`, iteration
    k+1's are started before k's update and have ended before k's checkpoint is saved (saving
    prunes older weights; evaluating uses the engines). The evaluation runs every
    `evaluation.every` iterations and after the last (`evaluated`)."""
    metrics: dict = {}
    for stage in ITERATION_STAGES:
        if stage == GENERATE_ROLLOUTS and k in ahead:
            metrics |= ahead.pop(k).result()
            continue
        if stage == EVALUATE:
            if evaluated:
                policy = str(input_dir(run_dir, k, reader=EVALUATE, stage=SAVE_CHECKPOINT))
                metrics |= _evaluated(run_dir, k, evaluate(run_dir, k, policy, k + 1), k + 1)
            continue
        if stage == TRAIN_STEP and overlap:
            ahead[k + 1] = _ahead(run_dir, k + 1)
        if stage == SAVE_CHECKPOINT and k + 1 in ahead:
            ahead[k + 1].exception()  # waits; a failure is raised when iteration k+1 takes them
        metrics |= stage_task(stage)(run_dir, k)
    return metrics


def _ahead(run_dir: str, k: int) -> Future:
    """generate_rollouts(run_dir, k) in a thread of its own, with the flow run's context (its
    task run belongs to this flow run: the Prefect UI shows it beside the update). A daemon
    thread: a stopped flow does not wait for games on a cluster to end."""
    import_loaders()  # not raced by the two threads' first loads
    future: Future = Future()
    context = contextvars.copy_context()

    def play():
        try:
            future.set_result(context.run(generate_rollouts, run_dir, k))
        except BaseException as e:  # noqa: BLE001 (handed to the flow's thread)
            future.set_exception(e)

    threading.Thread(target=play, name=f"rollouts ahead {k}", daemon=True).start()
    return future


def _stop(ahead: dict[int, Future], wait_s: float = 60.0) -> None:
    """The flow is failing: games played ahead stop at their next round of engine calls
    (in process; shards on a cluster run out) and are waited for up to `wait_s`."""
    STOP_PLAY.set()
    for future in ahead.values():
        try:
            future.exception(timeout=wait_s)
        except BaseException:  # noqa: BLE001 (still running, or a second interrupt)
            pass


def _evaluated(run_dir: str, k, metrics: dict, trained: int) -> dict:
    """The evaluation's table on the flow run (the nested MLflow run has the rest)."""
    publish_table(f"{Path(run_dir).name}-evaluation", evaluation_records(run_dir, k),
                  f"{Path(run_dir).name}: evaluation after {trained} iterations",
                  tracking_uri(Path(run_dir).parent), nested_run(run_dir, f"eval_step{trained:04d}"))
    return metrics


def _publish_summary(run_dir: str, run_id: str, done: str, strength: str, closing: str) -> None:
    """The learning curve (one row per evaluation) and the run's summary on the flow run."""
    name, store = Path(run_dir).name, tracking_uri(Path(run_dir).parent)
    curve = learning_curve(run_dir)
    if curve:
        publish_table(f"{name}-learning-curve", curve, f"{name}: learning curve (normalized "
                      "return 0-100 per game and opponent, by iterations trained)", store, run_id)
    text = done + (f"\n\nStart policy vs final policy (normalized return, 95% intervals):"
                   f"\n\n{strength}\n\n{closing}" if strength else "")
    publish_markdown(f"{name}-summary", text, f"{name}: training run", store, run_id)
