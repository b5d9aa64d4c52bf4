"""Task: the policy against a fixed bot in every seat, logged to a nested MLflow run."""
from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from mars_core.evaluation import evaluate_vs_bot
from mars_core.games.registry import make_game
from mars_core.reports import transcript
from mars_core.stages import write_json
from tasks.common import derive_seed, make_engine, prompt_builder, run_stage, sampling
from tasks.paths import read_config
from tasks.rollout import write_episodes
from tasks.tracking import log_artifacts, log_metrics_once, nested_run

STAGE = "evaluate"
_KEYS = ("win_rate", "draw_rate", "loss_rate", "invalid_rate", "mean_return", "mean_return_ci95")


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate(run_dir: str, k: int | str, policy: str, step: int) -> dict:
    """Evaluate `policy` (stage folder `<k>/evaluate`) and log `eval/...` at `step`."""
    cfg = read_config(Path(run_dir))
    e = cfg.evaluation

    def body(out: Path) -> dict:
        engine = make_engine(cfg, policy)
        prompts = prompt_builder(cfg, engine.tokenizer)
        metrics, records, played = {}, [], []
        for game in cfg.rollout.games:
            n_players = make_game(game).num_players
            recs, episodes, stats = evaluate_vs_bot(
                engine, prompts, game, n_players, e.opponent, e.games_per_seat,
                sampling(cfg, derive_seed(cfg, step, 5), e.temperature), derive_seed(cfg, 7))
            played += episodes
            (out / f"transcripts_{game}.md").write_text(
                "\n\n".join(transcript(ep) for ep in episodes[:: max(1, len(episodes) // 4)]))
            records += [{**r, "policy": policy} for r in recs]
            for r in recs:
                for key in _KEYS:
                    metrics[f"eval/{game}/seat{r['seat']}_{key}"] = r[key]
        write_episodes(out, played)
        write_json(out / "results.json", records)
        for f in sorted(out.iterdir()):  # re-logging after a crash overwrites
            if f.name == "results.json" or f.name.startswith("transcripts_"):
                log_artifacts(run_dir, f, "", run_id=child)
        return metrics

    child = nested_run(run_dir, f"eval_step{step:04d}")
    metrics = run_stage(run_dir, k, STAGE, body, step=step)
    log_metrics_once(run_dir, metrics, step, run_id=child)
    return metrics
