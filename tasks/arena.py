"""Tasks of the arena: resolve the agents to local models, play the schedule (every model
loaded once, each game's matches at once with model turns batched per agent), write the
results beside `--out`, log them to MLflow."""
from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from mars_core.arena.schedule import Match
from mars_core.config.cluster import ClusterConfig
from mars_core.run.layout import CONFIG_FILE, checkpoint_dir, iter_dir, iter_name, start_model_dir
from mars_core.rollout.play import EpisodeSpec, PromptBuilder, RolloutStats, play_episodes
from mars_core.types import Episode
from tasks.engine_factory import bf16_wanted
from tasks.model_registry import local_model
from tasks.tracking import _metric_key, log_one_run
from tasks.shards import run_shards, shard_slices
from tasks.traces import log_game_traces


def run_checkpoints(run_dir: str) -> list[tuple[str, str, int]]:
    """(label, model folder, training iteration) of a run's checkpoints that still have
    weights: the start policy (the format warm-up, iteration 0) and every `iter_k` checkpoint
    (iteration k+1). Labels are `<run>/start` and `<run>/iter_k`."""
    run = Path(run_dir)
    if not (run / CONFIG_FILE).is_file():
        raise ValueError(f"--run {run_dir}: not a training run directory (no {CONFIG_FILE})")
    out = []
    start = start_model_dir(run)
    if any(start.glob("*.safetensors")):
        out.append((f"{run.name}/start", str(start), 0))
    k = 0
    while iter_dir(run, k).is_dir():
        folder = checkpoint_dir(run, k)
        if any(folder.glob("*.safetensors")):
            out.append((f"{run.name}/{iter_name(k)}", str(folder), k + 1))
        k += 1
    if not out:
        raise ValueError(f"--run {run_dir}: no checkpoint with weights (checkpoint.keep_last "
                         "may have removed them)")
    return out


@task(cache_policy=NO_CACHE)
def resolve_agents(agents: dict[str, str], tracking: str | None, runs_dir: str) -> dict:
    """label -> local model folder (None for a bot)."""
    return {label: local_model(spec, tracking, runs_dir) for label, spec in agents.items()}


def _engines(models: dict[str, str | None], cfg) -> tuple[dict, PromptBuilder | None]:
    """One engine per distinct model folder (labels sharing a folder share it) and the prompt
    builder; every model must use the same tokenizer (one prompt per turn is built)."""
    from mars_core.engines.build import build_engine

    by_path: dict = {}
    engines, first = {}, None
    for label, path in models.items():
        if path is None:
            continue
        if path not in by_path:
            by_path[path] = build_engine(path, batch_size=cfg.play.engine_batch_size,
                                         bf16=bf16_wanted(cfg.bf16))
        engines[label] = by_path[path]
        if first is None:
            first = (label, by_path[path].tokenizer)
        elif by_path[path].tokenizer.get_vocab() != first[1].get_vocab():
            raise ValueError(f"agents {first[0]!r} and {label!r} use different tokenizers; "
                             "the arena builds one prompt per turn for every model")
    if first is None:
        return {}, None
    return engines, PromptBuilder(first[1], cfg.play.prefill, cfg.play.keep_history,
                                  cfg.max_context_tokens, cfg.play.prompt)


@task(cache_policy=NO_CACHE)
def agents_exploitability(models: dict[str, str | None], cfg) -> dict[str, dict[str, float]]:
    """label -> game -> the model agent's exploitability (`mars_core.strength.exploitability`:
    exact, or sampled for a reasoning layout) in the arena's games small enough for it, read
    with the arena's sampling settings; {} where `cfg.exploitability` is off or no game fits."""
    from mars_core.strength import exploitability as ex

    games = [g for g in cfg.games if g in ex.GAMES] if cfg.exploitability else []
    if not games or not any(models.values()):
        return {}
    engines, prompts = _engines(models, cfg)
    out: dict[str, dict[str, float]] = {}
    for label, engine in engines.items():
        for game in games:
            params = cfg.play.per_game_sampling(cfg.seed).get(game, cfg.play.sampling(cfg.seed))
            try:
                out.setdefault(label, {})[game] = ex.measure_policy(
                    engine, prompts, game, params)["exploitability"]
            except ValueError as exc:
                print(f"{label}: exploitability of {game} not measured: {exc}")
    return out


@task(cache_policy=NO_CACHE)
def play_arena(matches: list[Match], models: dict[str, str | None], cfg,
               prefix: str = "") -> list[Episode]:
    """Play every match; one game's matches at a time (mixing long and short prompts in one
    batch slows CPU sampling), each model's turns batched. Episode ids are `prefix` + match id.
    With `cfg.cluster` sharded, the match list splits into `cluster.shards` contiguous slices,
    each a play_arena task run of its own (on the Ray cluster where one is configured)."""
    if cfg.cluster.sharded and len(matches) > 1:
        one = cfg.model_copy(update={"cluster": ClusterConfig()})
        parts = run_shards(play_arena, [{"matches": matches[r.start:r.stop], "models": models,
                                         "cfg": one, "prefix": prefix}
                                        for r in shard_slices(len(matches), cfg.cluster.shards)],
                           cfg.cluster)
        return [ep for part in parts for ep in part]
    engines, prompts = _engines(models, cfg)
    stats, episodes = RolloutStats(), {}
    for game in dict.fromkeys(m.game for m in matches):
        mine = [m for m in matches if m.game == game]
        specs = [EpisodeSpec(prefix + m.match_id, m.game, m.seed, m.agents) for m in mine]
        start = time.perf_counter()
        got = play_episodes(specs, engines or None, prompts, cfg.play.sampling(cfg.seed),
                            progress=False, stats=stats,
                            per_game=cfg.play.per_game_sampling(cfg.seed))
        print(f"{game}: {len(got)} games in {time.perf_counter() - start:.0f} s")
        episodes.update({m.match_id: ep for m, ep in zip(mine, got)})
    return [episodes[m.match_id] for m in matches]


def with_verdicts(episodes: list[Episode], records: list[dict]) -> list[Episode]:
    """The episodes with each game's arena verdict (per-seat agent, result, cause) added to
    their info, so a replay page can show why the game was won or lost."""
    out = []
    for ep, r in zip(episodes, records):
        info = json.loads(ep.info) if ep.info else {}
        info["arena"] = {k: r[k] for k in ("agents", "teams", "result", "cause", "decided_by")}
        out.append(replace(ep, info=json.dumps(info, sort_keys=True)))
    return out


def log_arena(tracking: str, experiment: str, name: str, params: dict, rows: list[dict],
              files: list[Path], folders: dict[str, Path], tags: dict | None = None,
              episodes: list[Episode] | None = None) -> str:
    """One MLflow run: params, `rating|clean_rating|win_rate|error_rate/<agent>` metrics (and
    `exploitability/<game>/<agent>` for the model agents where it was read), the
    leaderboard as an MLflow table, the files and folders (the episodes, replay pages) as
    artifacts, and one MLflow trace per game of `episodes` (`tasks.traces`: a span per move,
    linked to the run). Returns its id."""
    def traces(client, exp: str, run_id: str) -> None:
        if episodes:
            traced = log_game_traces(tracking, exp, run_id, episodes)
            print(f"{len(traced)} games traced in MLflow")

    return log_one_run(tracking, experiment, name, {"mars.kind": "arena", **(tags or {})},
                       params=params, metrics=[
                           (_metric_key(key, r["agent"]), r[key])
                           for r in rows for key in ("rating", "mu", "sigma", "clean_rating",
                                                     "win_rate", "error_rate", "timeout_rate")
                           + tuple(k for k in r if k.startswith("exploitability/"))],
                       tables={"leaderboard.json": rows}, files=files, folders=folders,
                       then=traces)
