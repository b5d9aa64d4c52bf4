"""An iteration stage declared once: `@iteration_stage(NAME, ...)` on its body.

    @iteration_stage(BANK_EPISODES)
    def bank_episodes(ctx: StageContext, out: Path) -> dict:
        turns = pl.read_parquet(ctx.inputs[ASSIGN_REWARDS] / TURNS_FILE)
        ...
        return metrics

The decorator makes the Prefect task the training flow calls, `bank_episodes(run_dir, k)`
(run name `bank_episodes iter_0003`, the stage runner's publish retry): it reads the run's
config once, resolves the stage's declared inputs of its own iteration
(`mars_core.run.layout.STAGE_INPUTS`) and runs the body through `run_stage`, so the folder is
committed whole before anything is published and a finished stage is skipped on a resume
(`tasks.stage_runner`). The body sees the config and the input folders in `ctx`; an input of an
earlier iteration comes from `ctx.earlier(stage, at=j)` (`EARLIER_INPUTS`). The stage module
holds only the body (and its helpers); docs/adding-a-stage.md is the recipe.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from prefect import task
from prefect.cache_policies import NO_CACHE

from mars_core.config import Config
from mars_core.run.layout import (ITERATION_STAGES, STAGE_INPUTS, input_dir, iter_name,
                                  stage_dir)
from mars_core.run.seeds import Stream
from tasks.paths import read_config
from tasks.stage_runner import PUBLISH_RETRY, derive_seed, run_stage


@dataclass(frozen=True)
class StageContext:
    """What a stage's body works from: the run folder, the iteration `k`, the run's config
    and its declared inputs of iteration k (stage name -> folder)."""
    run_dir: str
    k: int
    stage: str
    cfg: Config
    inputs: dict[str, Path] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        """The stage's own (final) folder, where a sharded stage's parts wait beside it."""
        return stage_dir(self.run_dir, self.k, self.stage)

    def earlier(self, stage: str, at: int | str) -> Path:
        """What `stage` wrote in an earlier group `at` (an iteration j < k, or INIT), as
        `EARLIER_INPUTS` declares it for this stage (else UndeclaredInput)."""
        return input_dir(self.run_dir, self.k, reader=self.stage, stage=stage, at=at)

    @classmethod
    def of(cls, run_dir: str, k: int, stage: str) -> "StageContext":
        """The context of `stage` at iteration k: the config read once, the stage's declared
        inputs of iteration k resolved (`STAGE_INPUTS`)."""
        inputs = {s: input_dir(run_dir, k, reader=stage, stage=s)
                  for s in STAGE_INPUTS.get(stage, ()) if s in ITERATION_STAGES}
        return cls(str(run_dir), k, stage, read_config(Path(run_dir)), inputs)

    def seed(self, stream: Stream) -> int:
        """The run's seed for `stream` at this iteration."""
        return derive_seed(self.cfg, stream, self.k)


# stage name -> its task, filled by @iteration_stage as the stage modules are imported
STAGE_TASKS: dict[str, object] = {}


def stage_task(name: str):
    """The task `@iteration_stage(name)` made (the training flow runs ITERATION_STAGES by it)."""
    if name not in STAGE_TASKS:
        raise KeyError(f"no task declares the iteration stage {name!r}: decorate its body with "
                       "@iteration_stage in a tasks module the training flow imports "
                       "(docs/adding-a-stage.md)")
    return STAGE_TASKS[name]


Body = Callable[[StageContext, Path], dict]
Hook = Callable[[StageContext], object]


def iteration_stage(name: str, *, step: bool = True, artifacts: tuple[str, ...] = (),
                    artifact_path: str = "", datasets: tuple[str, ...] = (),
                    when: Callable[[StageContext], bool] | None = None,
                    after: Hook | None = None):
    """Declare the iteration stage `name` (a stage of `ITERATION_STAGES`) by its body
    `body(ctx, out) -> metrics`, which writes the stage's files into `out`. The options are
    `run_stage`'s: the metrics logged at step k (unless `step=False`), the `artifacts` and
    `datasets` published (`artifact_path` may name `{iter}`, the iteration's folder name).
    `when(ctx)` false: the stage does nothing and returns {} (no folder). `after(ctx)` runs
    once the stage is committed and published (clean-ups: merged shards, pruned weights)."""
    if name not in ITERATION_STAGES:
        raise ValueError(f"{name!r} is not an iteration stage of mars_core/run/layout.py "
                         f"(ITERATION_STAGES: {', '.join(ITERATION_STAGES)})")

    def declare(body: Body):
        def run(run_dir: str, k: int) -> dict:
            ctx = StageContext.of(run_dir, k, name)
            if when is not None and not when(ctx):
                return {}
            metrics = run_stage(run_dir, k, name, lambda out: body(ctx, out),
                                step=k if step else None, artifacts=artifacts,
                                artifact_path=artifact_path.format(iter=iter_name(k)),
                                datasets=datasets)
            if after is not None:
                after(ctx)
            return metrics

        run.__name__, run.__qualname__ = body.__name__, body.__qualname__
        run.__module__, run.__doc__ = body.__module__, body.__doc__
        made = task(run, name=body.__name__, task_run_name=name + " iter_{k:04d}",
                          cache_policy=NO_CACHE, **PUBLISH_RETRY)
        made.stage, made.body = name, body
        STAGE_TASKS[name] = made
        return made

    return declare
