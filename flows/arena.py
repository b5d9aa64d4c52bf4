"""The arena flow, top to bottom:

    open arena: the agents (a preset's, --agents, a training run's checkpoints) meet in a
        round-robin or sampled schedule with balanced seats
    frozen pool (--reference POOL.yaml): each newcomer plays the pool's fixed, seeded
        schedule against reference agents whose ratings never move (MG-Ref)
    resolve the agents to local models, play every match (model turns batched per agent)
    attribute every game (strategy / own rule error / opponent's rule error / timeout)
    rate: TrueSkill over all games and over the games no error decided
    write <out>.json, <out>_leaderboard.md, <out>_ratings.png, <out>_episodes/ (every game,
        for `mars replay`) and <out>_replays/ (a few games as replay pages)
    log them to MLflow (experiment `mars-arena`) when a tracking URI is set, every game as a
        trace with a span per move
"""
from __future__ import annotations

import json
from pathlib import Path

from prefect import flow

from mars_core.arena.config import (PoolConfig, check_agents, labelled, load_arena_config,
                                    load_pool, pool_yaml)
from mars_core.arena.leaderboard import causes, game_record, leaderboard, markdown, per_game
from mars_core.arena.plot import ratings_plot
from mars_core.arena.schedule import (fingerprint, fits, pool_matches, round_robin, sampled,
                                      with_newcomer)
from mars_core.run.layout import write_episodes
from mars_core.privacy.private import reveal
from mars_core.privacy.redact import install_log_redaction, redact
from mars_core.viewer.replay import write_replays
from tasks.artifacts import publish_table
from tasks.arena import (agents_exploitability, log_arena, play_arena, resolve_agents,
                         run_checkpoints, with_verdicts)


def plan(preset: str | None = None, agents: list[str] | None = None, run: str | None = None,
         games: list[str] | None = None, schedule: str | None = None, n: int | None = None,
         matches: int | None = None, seed: int | None = None, reference: str | None = None,
         overrides: list[str] | None = None) -> dict:
    """Everything decided before a game is played (the CLI calls it to refuse bad flags):
    the config, the agents (label -> spec), the matches, the frozen ratings, the checkpoints."""
    checkpoints = run_checkpoints(run) if run else []
    extra = [f"{label}={path}" for label, path, _ in checkpoints]
    if reference:
        pool = load_pool(reference, overrides or [])
        refs = pool.labelled()
        newcomers = labelled(list(agents or []) + extra)
        if not newcomers:
            raise ValueError("--reference needs the newcomer(s) to score: --agents or --run")
        for label, spec in newcomers.items():
            if label in refs:
                raise ValueError(f"newcomer {label!r} is also a reference agent of the pool")
            bad = [g for g in pool.games if not fits(spec, g)]
            if bad:
                raise ValueError(f"newcomer {label!r} cannot play {', '.join(bad)} of the pool")
        base = pool_matches(list(refs), list(pool.games), pool.n, pool.seed)
        per = {label: with_newcomer(base, label) for label in newcomers}
        return {"cfg": pool, "agents": refs | newcomers, "matches": per,
                "frozen": pool.frozen(), "fingerprint": fingerprint(base),
                "checkpoints": [(label, it) for label, _, it in checkpoints], "mode": "pool"}
    cfg = load_arena_config(preset, overrides or [], games=games, schedule=schedule, n=n,
                            matches=matches, seed=seed,
                            agents=(list(agents) if agents else None) or None)
    all_agents = labelled(list(cfg.agents) + extra)
    cfg = cfg.model_copy(update={"agents": tuple(list(cfg.agents) + extra)})
    check_agents(all_agents, cfg.games)
    specs = list(all_agents)
    ms = (round_robin(specs, list(cfg.games), cfg.n, cfg.seed) if cfg.schedule == "round_robin"
          else sampled(specs, list(cfg.games), cfg.matches, cfg.seed))
    return {"cfg": cfg, "agents": all_agents, "matches": {"": ms}, "frozen": {},
            "fingerprint": fingerprint(ms),
            "checkpoints": [(label, it) for label, _, it in checkpoints], "mode": "open"}


@flow(name="mars-arena", log_prints=True)
def arena_flow(preset: str | None = None, agents: list[str] | None = None,
               run: str | None = None, games: list[str] | None = None,
               schedule: str | None = None, n: int | None = None, matches: int | None = None,
               seed: int | None = None, reference: str | None = None,
               save_pool: str | None = None, out: str = "arena.json",
               overrides: list[str] | None = None, tracking_uri: str | None = None,
               experiment: str = "mars-arena", runs_dir: str = "runs",
               replays: int = 4, private: str | None = None) -> dict:
    """Rate agents against each other (or newcomers against a frozen pool); see the module
    docstring. Returns the leaderboard and where everything was written. Secrets in
    `overrides` and `tracking_uri` come masked, their values in the file `private`
    (`mars_core.privacy.private`)."""
    install_log_redaction()
    revealed = reveal(private, overrides=overrides or [], tracking_uri=tracking_uri)
    overrides, tracking_uri = revealed["overrides"], revealed["tracking_uri"]
    if save_pool and reference:
        raise ValueError("--save-pool freezes an open arena's agents; not with --reference")
    p = plan(preset, agents, run, games, schedule, n, matches, seed, reference, overrides)
    cfg = p["cfg"]
    models = resolve_agents(p["agents"], tracking_uri, runs_dir)
    all_matches, episodes = [], []
    for i, ms in enumerate(p["matches"].values()):  # one schedule per newcomer (pool mode)
        prefix = f"n{i}-" if p["mode"] == "pool" else ""
        used = {a for m in ms for a in m.agents}
        episodes += play_arena(ms, {k: v for k, v in models.items() if k in used}, cfg, prefix)
        all_matches += ms
    records = [game_record(m, ep) for m, ep in zip(all_matches, episodes)]
    params = cfg.trueskill.params()
    rows = leaderboard(records, params, p["frozen"], agents=list(p["agents"]))
    exploit = agents_exploitability(models, cfg)
    for r in rows:  # the model agents' exploitability beside their ratings (Kuhn, Leduc)
        r.update({f"exploitability/{g}": v for g, v in exploit.get(r["agent"], {}).items()})
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    stem = out_path.with_suffix("")
    files = {"md": Path(f"{stem}_leaderboard.md"), "png": Path(f"{stem}_ratings.png")}
    episodes = with_verdicts(episodes, records)
    episodes_dir = Path(f"{stem}_episodes")  # every game, in the layout `mars replay` reads
    episodes_dir.mkdir(parents=True, exist_ok=True)
    write_episodes(episodes_dir, episodes)
    replays_dir = Path(f"{stem}_replays")
    pages = write_replays(episodes, replays_dir, limit=replays) if replays else []
    result = {"mode": p["mode"], "agents": p["agents"], "games": list(cfg.games),
              "schedule": {"kind": getattr(cfg, "schedule", "pool"), "n": cfg.n,
                           "seed": cfg.seed, "matches": len(records),
                           "fingerprint": p["fingerprint"]},
              "pool": cfg.name if isinstance(cfg, PoolConfig) else None,
              "trueskill": cfg.trueskill.model_dump(), "leaderboard": rows,
              "per_game": per_game(records, params, p["frozen"]), "causes": causes(records),
              "checkpoints": p["checkpoints"], "records": records}
    out_path.write_text(json.dumps(redact(result), indent=1))
    files["md"].write_text(markdown(rows))
    ratings_plot(rows, p["checkpoints"], files["png"])
    print("\n" + markdown(rows))
    if save_pool:
        Path(save_pool).write_text(pool_yaml(cfg, rows, Path(save_pool).stem))
        print(f"pool written: {save_pool}")
    run_id = None
    if tracking_uri:
        flat = {"mode": p["mode"], "agents": ",".join(p["agents"]), "games": ",".join(cfg.games),
                "n": cfg.n, "seed": cfg.seed, "matches": len(records),
                "fingerprint": p["fingerprint"], "reference": reference or "",
                "preset": preset or "", "run": run or ""}
        folders = {"episodes": episodes_dir} | ({"replays": replays_dir} if pages else {})
        run_id = log_arena(tracking_uri, experiment, f"arena {p['mode']} "
                           f"{','.join(list(p['agents'])[:4])}", flat, rows,
                           [out_path, files["md"], files["png"]], folders,
                           episodes=episodes)
        print(f"logged to MLflow run {run_id} (experiment {experiment!r})")
    publish_table(f"arena-{cfg.name if isinstance(cfg, PoolConfig) else p['mode']}", rows,
                  f"arena leaderboard ({p['mode']}, {len(records)} games; TrueSkill, "
                  "conservative rating mu - 3 sigma)", tracking_uri, run_id)
    return {"out": str(out_path), "records": len(records), "leaderboard": rows,
            "replays": [str(page) for page in pages],
            "fingerprint": p["fingerprint"], "mlflow_run_id": run_id}
