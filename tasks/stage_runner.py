"""The stage runner every task shares: run a stage once (files committed before anything is
published), publish its metrics and artifacts once, check the finished stages before a resume,
and the run's seed for a stream."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from mars_core.config import Config
from mars_core.run.checkpoint import is_heavy
from mars_core.run.commit import (PUBLISHED, StageError, fault_point, is_done, read_json,
                                  stage_output, verify_stage, write_json)
from mars_core.run.layout import (FINAL, METRICS_FILE, PREPARE_POLICY, SAVE_CHECKPOINT,
                                  checkpoint_dir, finished_stages, iteration_of, stage_dir)
from mars_core.run.memory import PeakRSS, release_memory
from mars_core.run.seeds import Stream, stream_seed
from tasks.tracking import log_artifacts, log_dataset, log_metrics_once


def _publishing_failed(task, task_run, state) -> bool:
    """Retry a task only when it failed to publish to a tracking server that stayed down for
    the whole retry window: its files are committed, so the retry only publishes."""
    from tasks.tracking import TrackingError

    try:
        error = state.result(raise_on_failure=False)
    except Exception:  # noqa: BLE001 - no result to judge: do not retry
        return False
    return isinstance(error, TrackingError)


# Prefect retries for stage tasks (a finished stage is skipped, so a retry is idempotent)
PUBLISH_RETRY = dict(retries=1, retry_delay_seconds=10, retry_condition_fn=_publishing_failed)


def run_stage(run_dir: Path, k: int | str, stage: str, body: Callable[[Path], dict],
              step: int | None, artifacts: tuple[str, ...] = (), artifact_path: str = "",
              run_id: str | None = None, datasets: tuple[str, ...] = ()) -> dict:
    """Run `body(out_dir) -> metrics` unless the stage already finished, then publish it:
    its metrics (with `time/<stage>` and `memory/<stage>_peak_rss_gib`: `mars_core.run.memory`)
    at `step` and the files or folders `artifacts` (names in
    the stage folder; `"."`: the whole folder) under `artifact_path`, and the Parquet tables
    `datasets` as MLflow dataset inputs, to the training run or `run_id`. Files are committed before anything is published; what was published is noted
    in the stage folder, so a resumed run publishes what is missing, once. Returns the metrics."""
    final = stage_dir(run_dir, k, stage)
    if not is_done(final):
        start = time.perf_counter()
        with stage_output(final, fault=f"{stage}:{k}") as out:
            with PeakRSS() as peak:
                metrics = body(out)
            release_memory()  # what the stage freed, back before the next one starts
            metrics[f"time/{stage}"] = time.perf_counter() - start
            metrics[f"memory/{stage}_peak_rss_gib"] = peak.gib
            write_json(out / METRICS_FILE, metrics)
            _fault_pause(f"{stage}:{k}", out)
        fault_point(f"end:{stage}:{k}")
    metrics = read_json(final / METRICS_FILE)
    publish_stage(run_dir, final, metrics, step, artifacts, artifact_path, run_id, datasets)
    return metrics


def publish_stage(run_dir: Path, final: Path, metrics: dict, step: int | None,
                  artifacts: tuple[str, ...], artifact_path: str, run_id: str | None,
                  datasets: tuple[str, ...] = ()) -> None:
    """Publish a finished stage's metrics and artifacts, each once (the ledger `_PUBLISHED.json`
    in the stage folder; metric steps are checked in MLflow too)."""
    ledger_file = final / PUBLISHED
    ledger = read_json(ledger_file) if ledger_file.is_file() else {}
    wanted = ((["metrics"] if step is not None else []) + [f"artifact:{a}" for a in artifacts]
              + [f"dataset:{d}" for d in datasets])
    if all(ledger.get(w) for w in wanted):
        return
    for item in wanted:
        if ledger.get(item):
            continue
        if item == "metrics":
            log_metrics_once(run_dir, metrics, step, run_id=run_id)
        elif item.startswith("dataset:"):
            log_dataset(run_dir, final / item.removeprefix("dataset:"), final.name, run_id=run_id)
        else:
            local = final if item == "artifact:." else final / item.removeprefix("artifact:")
            if local.exists():
                log_artifacts(run_dir, local, artifact_path, run_id=run_id)
        ledger[item] = True
        write_json(ledger_file, ledger)


def check_finished_stages(run_dir: Path) -> None:
    """Before a resume: every finished stage's files against its marker (sizes; SHA-256 for the
    stages a resume reads next). The first damaged stage and everything after it are moved to
    `.damaged/<time>/` and redone; when their inputs are gone (pruned checkpoints), a
    StageError says which file is damaged."""
    stages = finished_stages(run_dir)
    if not stages:
        return
    deep = _deep_checked(stages)
    for i, folder in enumerate(stages):
        problem = verify_stage(folder, hashes=folder in deep, may_be_gone=is_heavy)
        if problem is None:
            continue
        redo = i - 1 if folder.name == SAVE_CHECKPOINT and i > 0 else i  # its train step too
        _redo_from(run_dir, stages[redo:], problem)
        return


def _deep_checked(stages: list[Path]) -> set[Path]:
    """The stages a resume reads: the start policy, the newest checkpoint, the last iteration
    and the final stages (hashing every old stage would cost more than it protects)."""
    deep = {s for s in stages if s.name == PREPARE_POLICY or s.parent.name == FINAL}
    ckpts = [s for s in stages if s.name == SAVE_CHECKPOINT]
    if ckpts:
        deep.add(ckpts[-1])
    last_iter = max((s.parent for s in stages if iteration_of(s.parent.name) is not None),
                    default=None)
    deep |= {s for s in stages if s.parent == last_iter}
    return deep


def _redo_from(run_dir: Path, stages: list[Path], problem: str) -> None:
    first = stages[0]
    k = iteration_of(first.parent.name)
    if k is not None:
        needs = checkpoint_dir(run_dir, k - 1) if k > 0 else None
        if needs is not None and not any(needs.glob("*.safetensors")):
            raise StageError(f"{problem}; redoing it needs the weights of {needs}, which were "
                             "pruned (checkpoint.keep_last): restore the file or start a new run")
    aside = Path(run_dir) / ".damaged" / time.strftime("%Y%m%d-%H%M%S")
    for folder in stages:
        target = aside / folder.relative_to(run_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(folder, target)
    print(f"{problem}: redoing {len(stages)} stages from {first.relative_to(run_dir)} "
          f"(the old ones are kept in {aside})", flush=True)


def _fault_pause(where: str, out: Path) -> None:
    """Crash-test hook: with MARS_FAULT_PAUSE=<stage>:<k>, stop inside that stage (its work
    done, its marker not yet written) and wait to be killed. Unset in normal use."""
    if os.environ.get("MARS_FAULT_PAUSE") == where:
        (out / "PAUSED").write_text(where)
        time.sleep(3600)


def derive_seed(cfg: Config, stream: Stream, k: int | None = None) -> int:
    """The run's seed for `stream` (at iteration or step `k`): `mars_core.run.seeds`."""
    return stream_seed(cfg.run.seed, stream, k)
