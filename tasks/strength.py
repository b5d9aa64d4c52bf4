"""Tasks of the evaluate and strength stages (game strength during training): the policy
against the evaluation opponents of each training game and each held-out game
(`evaluation.held_out`, never trained on), in every seat (the same code as `mars eval games`),
logged to a nested MLflow run. Every evaluation of a run plays the same deals (one game seed
for the run), so two steps' results pair game by game."""
from __future__ import annotations

import time
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from mars_core.games.catalog import file_name
from mars_core.games.opponents import check_suite
from mars_core.run.layout import (EVALUATE, FINAL, INIT, REPLAYS, RESULTS_FILE, STRENGTH,
                                  STRENGTH_JSON, STRENGTH_MD, input_dir, read_episodes, stage_dir,
                                  write_episodes)
from mars_core.rollout.reports import transcript
from mars_core.rollout.play import RolloutStats, play_episodes
from mars_core.run.seeds import Stream
from mars_core.run.commit import is_done, read_json, write_json
from mars_core.strength.curve import (EXPLOITABILITY_PNG, LEARNING_CURVE_PNG, draw_curves,
                                      exploitability_by_policy, exploitability_words)
from mars_core.strength.suite import (paired_markdown, paired_rows, suite_records,
                                      suite_specs)
from mars_core.vocab import POLICY
from tasks.engine_factory import make_engine, prompt_builder, sampling, use_bf16
from tasks.stage_runner import PUBLISH_RETRY, derive_seed, run_stage
from tasks.paths import read_config
from tasks.game_shards import play_shard, sharded_episodes
from tasks.shards import drop_shards, shard_slices
from tasks.tracking import log_metrics_once, nested_run, set_terminated

_KEYS = ("win_rate", "draw_rate", "loss_rate", "invalid_rate", "mean_return", "ci95",
         "normalized_return")


def eval_prefix(cfg, game: str, opponent: str) -> str:
    """`eval/<game>/`, or `eval/<game>/<opponent>/` where the game has several opponents."""
    several = len(cfg.evaluation.opponents_for(game)) > 1
    return f"eval/{game}/{opponent}/" if several else f"eval/{game}/"


@task(task_run_name="evaluate step {step}", cache_policy=NO_CACHE, **PUBLISH_RETRY)
def evaluate(run_dir: str, k: int | str, policy: str, step: int) -> dict:
    """Evaluate `policy` (stage folder `<k>/evaluate`) and log `eval/...` at `step`."""
    cfg = read_config(Path(run_dir))
    suite = cfg.evaluation.suite(cfg.rollout.games)  # training games, then the held-out ones

    def body(out: Path) -> dict:
        specs, cells = _plan(cfg, suite)
        metrics, engine = {}, None
        if cfg.cluster.sharded:
            episodes, _, metrics = sharded_episodes(
                stage_dir(run_dir, k, EVALUATE), len(specs), cfg.cluster, evaluate_shard,
                {"run_dir": run_dir, "k": k, "policy": policy, "step": step}, "evaluate")
        else:
            engine = make_engine(cfg, policy, log_dir=Path(run_dir))
            episodes, _, _ = _play_evaluation(cfg, run_dir, policy, step, specs, engine)
        records = suite_records(cells, episodes, policy)
        for game in suite:
            mine = [ep for ep in episodes if ep.game == game]
            (out / f"transcripts_{file_name(game)}.md").write_text(
                "\n\n".join(transcript(ep) for ep in mine[:: max(1, len(mine) // 4)]))
        write_episodes(out, episodes)
        write_json(out / RESULTS_FILE, records)
        # the games' engine reads the exploitability too where it is the in-process one (a
        # second copy of the model loaded beside the first was the evaluation's peak)
        metrics |= exploitability_metrics(cfg, policy, suite, out,
                                          engine if cfg.engine.backend == "hf" else None)
        if cfg.engine.backend == "hf":  # which precision played (the exact policy, never int8)
            metrics["evaluate/bf16"] = float(use_bf16(cfg, "play"))
        return metrics | {f"{eval_prefix(cfg, r['game'], r['opponent'])}seat{r['seat']}_{key}":
                          r[key] for r in records for key in _KEYS}

    child = nested_run(run_dir, f"eval_step{step:04d}")
    files = (RESULTS_FILE, *(f"transcripts_{file_name(game)}.md" for game in suite))
    metrics = run_stage(run_dir, k, EVALUATE, body, step=step, artifacts=files, run_id=child)
    drop_shards(stage_dir(run_dir, k, EVALUATE))  # merged into the stage folder
    log_metrics_once(run_dir, metrics, step)  # the training run's curves too
    set_terminated(Path(run_dir), child)  # the nested run is complete (idempotent)
    return metrics


def exploitability_metrics(cfg, policy: str, games, out: Path, engine=None) -> dict:
    """The policy's exact exploitability in each of `games` small enough for it (Kuhn,
    Leduc), read at the rollouts' temperature in the run's prompt layout (sampled, with its
    interval, for a reasoning policy: `exploitability.measure_policy`): written to
    `<out>/exploitability_<game>.json` (with the table read), returned as `eval/<game>/...`
    metrics. Nothing where `evaluation.exploitability` is off or no game qualifies; a layout
    it cannot read (reasoning, kept history) is one warning, not a failed evaluation.
    `engine`: the in-process engine of `policy` to read with (default: one loaded here)."""
    from mars_core.strength import exploitability as ex

    games = [g for g in games if g in ex.GAMES] if cfg.evaluation.exploitability else []
    if not games:
        return {}
    engine = engine if engine is not None else make_engine(cfg, policy, backend="hf")
    builder = prompt_builder(cfg, engine.tokenizer)
    metrics: dict[str, float] = {}
    for game in games:
        params = cfg.rollout.per_game_sampling(0).get(game, cfg.rollout.sampling(0))
        try:
            result = ex.measure_policy(engine, builder, game, params)
        except ValueError as exc:
            print(f"exploitability of {game} not measured: {exc}")
            continue
        write_json(out / f"exploitability_{game}.json", result)
        metrics[f"eval/{game}/exploitability"] = result["exploitability"]
        metrics[f"eval/{game}/legal_mass"] = result["legal_mass"]
        if "interval95" in result:  # sampled (a reasoning policy): its bootstrap interval
            low, high = result["interval95"]
            metrics[f"eval/{game}/exploitability_low"] = low
            metrics[f"eval/{game}/exploitability_high"] = high
        for seat, value in enumerate(result["best_response"]):
            metrics[f"eval/{game}/best_response_seat{seat}"] = value
    return metrics


def _plan(cfg, suite: dict | None = None):
    """The evaluation's episodes (the same deals at every step) and their suite cells; the
    suite: the training games, then the held-out ones."""
    suite = suite or cfg.evaluation.suite(cfg.rollout.games)
    check_suite(suite, POLICY)
    return suite_specs(suite, POLICY, cfg.evaluation.games_per_seat,
                       derive_seed(cfg, Stream.EVALUATION_DEALS))


def _play_evaluation(cfg, run_dir: str, policy: str, step: int, specs: list, engine=None):
    """`specs` played by `policy` (on `engine`, else one loaded here): (episodes, stats,
    seconds spent loading the engine)."""
    e, seed = cfg.evaluation, derive_seed(cfg, Stream.EVALUATION_SAMPLING, step)
    start = time.perf_counter()
    engine = engine if engine is not None else make_engine(cfg, policy, log_dir=Path(run_dir))
    load_s, stats = time.perf_counter() - start, RolloutStats()
    episodes = play_episodes(specs, engine, prompt_builder(cfg, engine.tokenizer),
                             sampling(cfg, seed, e.temperature), stats=stats,
                             per_game=cfg.rollout.per_game_sampling(seed, e.temperature))
    return episodes, stats, load_s


@task(task_run_name="evaluate_shard step {step} {shard}/{shards}", cache_policy=NO_CACHE)
def evaluate_shard(run_dir: str, k: int | str, policy: str, step: int, shard: int,
                   shards: int) -> dict:
    """Slice `shard` of `shards` of the evaluation's deals, played by `policy` with its own
    engine into `<k>/evaluate.shards/shard_XXXX/`."""
    cfg = read_config(Path(run_dir))

    def play():
        specs, _ = _plan(cfg)
        mine = [specs[i] for i in shard_slices(len(specs), shards)[shard]]
        return _play_evaluation(cfg, run_dir, policy, step, mine)

    return play_shard(stage_dir(run_dir, k, EVALUATE), shard, play)


def evaluation_records(run_dir: str, k: int | str) -> list[dict]:
    """The per-game, per-opponent, per-seat records of the evaluation after iteration `k`
    (`"init"`: of the start policy)."""
    return read_json(stage_dir(run_dir, k, EVALUATE) / RESULTS_FILE)


def learning_curve(run_dir: str) -> list[dict]:
    """One row per finished evaluation: iterations trained, then each game and opponent's
    normalized return (mean over seats, 0-100), and each game's exact exploitability where it
    was read."""
    cfg = read_config(Path(run_dir))
    points = [(INIT, 0)] + [(k, k + 1) for k in range(cfg.run.iterations)]
    rows = []
    for k, trained in points:
        if not is_done(stage_dir(run_dir, k, EVALUATE)):
            continue
        by: dict[str, list[float]] = {}
        for r in evaluation_records(run_dir, k):
            by.setdefault(f"{r['game']} vs {r['opponent']}", []).append(r["normalized_return"])
        read = exploitability_by_policy({"": (k, stage_dir(run_dir, k, EVALUATE))}).get("", {})
        exact = {f"{g} exploitability": r["exploitability"] for g, r in read.items()}
        rows.append({"iterations": trained, **{c: sum(v) / len(v) for c, v in by.items()},
                     **exact})
    return rows


@task(cache_policy=NO_CACHE, **PUBLISH_RETRY)
def compare_start_final(run_dir: str) -> str:
    """The start policy against the final checkpoint on the same deals (`final/strength/`):
    each one's normalized return with its 95% interval and their paired difference, per game
    and opponent; logged as `strength/<game>/<opponent>/{start,final,diff,diff_ci95}` and the
    table. Returns the table (Markdown)."""
    cfg = read_config(Path(run_dir))
    last = cfg.run.iterations - 1

    def body(out: Path) -> dict:
        start = input_dir(run_dir, FINAL, reader=STRENGTH, stage=EVALUATE, at=INIT)
        final = input_dir(run_dir, FINAL, reader=STRENGTH, stage=EVALUATE, at=last)
        rows = paired_rows({"start": read_episodes(start), "final": read_episodes(final)},
                             "start")
        write_json(out / STRENGTH_JSON, rows)
        (out / STRENGTH_MD).write_text(paired_markdown(rows, "start"))
        draw_curves(Path(run_dir), cfg.run.iterations, out)  # the pictures beside the table
        start = {(r["game"], r["opponent"]): r for r in rows if r["policy"] == "start"}
        metrics = {}
        for r in (r for r in rows if r["policy"] == "final"):
            key = f"strength/{r['game']}/{r['opponent']}"
            metrics |= {f"{key}/start": start[(r["game"], r["opponent"])]["normalized_return"],
                        f"{key}/final": r["normalized_return"], f"{key}/diff": r["diff"],
                        f"{key}/diff_ci95": r["diff_ci95"]}
        return metrics

    run_stage(run_dir, FINAL, STRENGTH, body, step=cfg.run.iterations,
              artifacts=(STRENGTH_JSON, STRENGTH_MD, LEARNING_CURVE_PNG, EXPLOITABILITY_PNG),
              artifact_path=STRENGTH)
    return (stage_dir(run_dir, FINAL, STRENGTH) / STRENGTH_MD).read_text()


def trained_against(pool: list[tuple[str, float]]) -> str:
    """A game's last opponent pool in words: "self-play", "play against bot:random", or a
    curriculum's mix ("self-play and play against bot:random")."""
    names = ["self-play" if o == "self" else f"play against {o}" for o, _ in pool]
    return " and ".join(dict.fromkeys(names)) or "self-play"


def closing_lines(run_dir: str, mlflow_run_id: str) -> str:
    """What a finished run says last, in words: how each game's exploitability moved (where it
    was read), where the curve and the games are, and what to run next."""
    run = Path(run_dir)
    cfg = read_config(run)
    trained_by = {g: trained_against(cfg.rollout.opponent_pool(g, cfg.run.iterations - 1))
                  for g in cfg.rollout.games}
    lines = exploitability_words(run, cfg.run.iterations, trained_by)
    strength = stage_dir(run, FINAL, STRENGTH)
    pictures = [strength / f for f in (EXPLOITABILITY_PNG, LEARNING_CURVE_PNG)
                if (strength / f).is_file()]
    if pictures:
        lines.append("the curve: " + ", ".join(map(str, pictures)) + f" (MLflow run "
                     f"{mlflow_run_id}, artifacts `{STRENGTH}/`; `make mlflow-ui` opens it)")
    last = cfg.run.iterations - 1
    replays = stage_dir(run, last, REPLAYS) / "index.html"
    if replays.is_file():
        lines.append(f"the games, turn by turn: {replays}")
    lines.append("next: `make learn` trains a full recipe and reports it (docs/learning/); "
                 "`mars eval games --policy models:/"
                 f"{cfg.tracking.registered_model}@candidate` measures this model again")
    return "\n".join(lines)
