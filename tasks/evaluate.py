"""Task: the policy against each training game's evaluation opponent in every seat (the same
code as `mars eval strategic`), logged to a nested MLflow run."""
from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from mars_core.evaluation import run_suite
from mars_core.reports import transcript
from mars_core.stages import write_json
from tasks.common import derive_seed, make_engine, prompt_builder, run_stage, sampling
from tasks.paths import read_config
from tasks.rollout import write_episodes
from tasks.tracking import log_artifacts, log_metrics_once, nested_run

STAGE = "evaluate"
_KEYS = ("win_rate", "draw_rate", "loss_rate", "invalid_rate", "mean_return", "ci95",
         "normalized_return")


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate(run_dir: str, k: int | str, policy: str, step: int) -> dict:
    """Evaluate `policy` (stage folder `<k>/evaluate`) and log `eval/...` at `step`."""
    cfg = read_config(Path(run_dir))
    e = cfg.evaluation

    def body(out: Path) -> dict:
        engine = make_engine(cfg, policy, log_dir=Path(run_dir))
        suite = {game: (e.opponent_for(game),) for game in cfg.rollout.games}
        records, episodes = run_suite(
            suite, policy, engine, prompt_builder(cfg, engine.tokenizer),
            sampling(cfg, derive_seed(cfg, step, 5), e.temperature), e.games_per_seat,
            derive_seed(cfg, 7),
            per_game=cfg.rollout.per_game_sampling(derive_seed(cfg, step, 5), e.temperature))
        for game in cfg.rollout.games:
            mine = [ep for ep in episodes if ep.game == game]
            (out / f"transcripts_{game}.md").write_text(
                "\n\n".join(transcript(ep) for ep in mine[:: max(1, len(mine) // 4)]))
        write_episodes(out, episodes)
        write_json(out / "results.json", records)
        for f in sorted(out.iterdir()):  # re-logging after a crash overwrites
            if f.name == "results.json" or f.name.startswith("transcripts_"):
                log_artifacts(run_dir, f, "", run_id=child)
        return {f"eval/{r['game']}/seat{r['seat']}_{key}": r[key] for r in records for key in _KEYS}

    child = nested_run(run_dir, f"eval_step{step:04d}")
    metrics = run_stage(run_dir, k, STAGE, body, step=step)
    log_metrics_once(run_dir, metrics, step, run_id=child)
    return metrics
