"""Tasks of the game-strength suite (`mars eval games`, the MARS strategic-ability protocol):
resolve the policy to a local model, then play the suite (each game's games concurrently,
model turns batched)."""
from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from mars_core.config import GameEvalConfig
from mars_core.config.cluster import ClusterConfig
from mars_core.strength.suite import run_suite
from mars_core.rollout.reports import transcript
from mars_core.rollout.play import PromptBuilder, RolloutStats
from tasks.engine_factory import batch_invariant, bf16_wanted
from tasks.stage_runner import PUBLISH_RETRY
from tasks.model_registry import local_model
from tasks.shards import run_shards, shard_slices


@task(task_run_name="resolve_policy {policy}", cache_policy=NO_CACHE,
      timeout_seconds=3600, **PUBLISH_RETRY)
def resolve_policy(policy: str, tracking: str | None, runs_dir: str) -> str | None:
    """A local model folder for a model policy (None for a bot): `embedded`, a checkpoint or
    model folder, or `models:/NAME@ALIAS` from the registry (`tracking`, else the local store
    of `runs_dir` that `mars train` registers into)."""
    return local_model(policy, tracking, runs_dir)


def _suite_run_name() -> str:
    """`evaluate_suite embedded: tic_tac_toe, kuhn_poker` (the policy and its games)."""
    from prefect.runtime import task_run

    p = task_run.parameters
    return f"evaluate_suite {p['policy']}: {', '.join(p['cfg'].suite)}"


@task(task_run_name=_suite_run_name, cache_policy=NO_CACHE)
def evaluate_suite(cfg: GameEvalConfig, policy: str, model: str | None,
                   transcripts_per_game: int = 2) -> dict:
    """Every game x opponent x seat of the suite for the policy, with one model load. Each
    game's games run concurrently (its model turns batched); games run one after another:
    mixing all six in one batch puts 900-token Hanabi prompts beside 100-token board prompts,
    and on 2 CPU cores the quick suite then took 243 s instead of 140 s.

    With `cfg.cluster` sharded, the games split into `cluster.shards` groups, each an
    evaluate_suite task run of its own (on the Ray cluster where one is configured); the
    records come back in suite order, the same as from one process."""
    games = list(cfg.suite)
    if cfg.cluster.sharded and len(games) > 1:
        return _sharded_suite(cfg, policy, model, transcripts_per_game)
    engine = prompts = None
    if model is not None:
        from mars_core.engines.build import build_engine

        bf16 = bf16_wanted(cfg.bf16)
        engine = build_engine(model, batch_size=cfg.play.engine_batch_size, bf16=bf16,
                              batch_invariant=batch_invariant(cfg.batch_invariant, bf16))
        prompts = PromptBuilder(engine.tokenizer, cfg.play.prefill, cfg.play.keep_history,
                                cfg.max_context_tokens, cfg.play.prompt)
    stats, records, texts = RolloutStats(), [], []
    for game in cfg.suite:  # one game at a time: see the docstring
        recs, episodes = run_suite({game: cfg.suite[game]}, policy, engine, prompts,
                                   cfg.play.sampling(cfg.seed), cfg.n, cfg.seed,
                                   bot_policy=None if model is not None else policy, stats=stats,
                                   per_game=cfg.play.per_game_sampling(cfg.seed))
        records += recs
        picked = episodes[:: max(1, len(episodes) // transcripts_per_game)][:transcripts_per_game]
        texts += [transcript(ep) for ep in picked]
    exploitability = {}
    if engine is not None:
        exploitability = policy_exploitability(
            engine, prompts, [g for g in cfg.suite
                              if cfg.exploitability is None or g in cfg.exploitability],
            cfg.play.sampling(cfg.seed), cfg.play.per_game_sampling(cfg.seed))
    if engine is not None and cfg.worst_case and "tic_tac_toe" in cfg.suite:
        exploitability["tic_tac_toe"] = policy_worst_case(
            engine, prompts, cfg.play.per_game_sampling(cfg.seed).get(
                "tic_tac_toe", cfg.play.sampling(cfg.seed)).temperature)
    for r in records:
        print(f"{r['game']:13s} vs {r['opponent']:13s} seat {r['seat']}: return "
              f"{r['mean_return']:+.3f} ± {r['ci95']:.3f}, normalized {r['normalized_return']:.1f}, "
              f"win {r['win_rate']:.2f} draw {r['draw_rate']:.2f} loss {r['loss_rate']:.2f} "
              f"invalid {r['invalid_rate']:.2f}")
    return {"records": records, "transcripts": "\n\n".join(texts),
            "exploitability": exploitability,
            "generated_tokens": stats.generated_tokens, "tokens_per_s": stats.tokens_per_s,
            "bf16": bool(getattr(engine, "autocast_bf16", False))}  # which precision played


def policy_exploitability(engine, prompts: PromptBuilder, games, params, per_game=None) -> dict:
    """game -> the policy's exploitability figures (`mars_core.strength.exploitability`, the
    table left out) for the games small enough, read with the suite's sampling settings
    (`params`, a game's own from `per_game`) in the layout the suite plays: exactly, or
    sampled with its interval for a reasoning policy; a layout it cannot read (kept history)
    gives {"skipped": the reason}."""
    from mars_core.strength import exploitability as ex

    out = {}
    for game in (g for g in games if g in ex.GAMES):
        game_params = (per_game or {}).get(game, params)
        try:
            r = ex.measure_policy(engine, prompts, game, game_params)
        except ValueError as exc:
            out[game] = {"skipped": str(exc)}
            print(f"{game}: exploitability not measured: {exc}")
            continue
        out[game] = {k: v for k, v in r.items() if k not in ("policy", "counts")}
        interval = " [{:.4f}, {:.4f}] (sampled)".format(*r["interval95"]) \
            if "interval95" in r else ""
        print(f"{game}: exploitability {r['exploitability']:.4f}{interval} (best responses "
              f"{r['best_response'][0]:+.3f} / {r['best_response'][1]:+.3f}; legal answers "
              f"{r['legal_mass']:.1%} of the mass, temperature {game_params.temperature})")
    return out


def policy_worst_case(engine, prompts: PromptBuilder, temperature: float) -> dict:
    """Tic-Tac-Toe's worst case for the policy (`mars_core.strength.worst_case`): each seat's
    expected score against the exact best response, their mean (`worst_case`, -1..1) and as a
    normalized score; {"skipped": the reason} for a policy it cannot read."""
    from mars_core.strength.worst_case import read_worst_case

    try:
        r = read_worst_case(engine.model, engine.tokenizer, prompts, temperature=temperature,
                            autocast=engine.autocast_bf16)
    except ValueError as exc:
        print(f"tic_tac_toe: worst case not measured: {exc}")
        return {"skipped": str(exc)}
    print(f"tic_tac_toe: worst case {r['worst_case']:+.3f} (normalized {r['normalized']:.1f}; "
          "seats " + " / ".join(f"{s['worst_case']:+.3f} ({s['reads']} positions read)"
                                for s in r["seats"]) + ")")
    return r


def _sharded_suite(cfg: GameEvalConfig, policy: str, model: str | None,
                   transcripts_per_game: int) -> dict:
    games = list(cfg.suite)
    parts = [cfg.model_copy(update={"suite": {g: cfg.suite[g] for g in games[r.start:r.stop]},
                                    "cluster": ClusterConfig()})
             for r in shard_slices(len(games), cfg.cluster.shards)]
    got = run_shards(evaluate_suite, [{"cfg": c, "policy": policy, "model": model,
                                       "transcripts_per_game": transcripts_per_game}
                                      for c in parts], cfg.cluster)
    tokens = sum(g["generated_tokens"] for g in got)
    engine_s = sum(g["generated_tokens"] / g["tokens_per_s"] for g in got if g["tokens_per_s"])
    return {"records": [r for g in got for r in g["records"]],
            "transcripts": "\n\n".join(g["transcripts"] for g in got if g["transcripts"]),
            "exploitability": {k: v for g in got for k, v in g.get("exploitability", {}).items()},
            "generated_tokens": tokens, "tokens_per_s": tokens / engine_s if engine_s else 0.0,
            "shards": len(got)}
