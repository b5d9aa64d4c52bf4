"""Nightly evaluation: is the registry's `candidate` better than its `champion`? Top to bottom:

    look up both aliases of the registered model (nothing to do when they are one version)
    answer the reasoning suite (systems x benchmarks, `limit` questions each) with both
    play the game evaluation suite with both (when a preset is given)
    an arena round: candidate, champion, the base model and the preset's bots (TrueSkill
        leaderboard, logged as its own run in `mars-nightly` and beside the comparison)
    compare: paired difference on the same questions, game evaluation difference, Table 1 layout
    log the comparison to MLflow (experiment `mars-nightly`)
    move `champion` to the candidate when it wins by more than the confidence interval
        (or when the registry answers that there is no champion yet): `promotion`, whose
        reason names the interval. A lookup that fails (an outage, a 503, a refusal) is
        retried for the tracking retry window, then fails the night: nothing is promoted

`prefect.yaml` deploys it as `nightly-eval` on a cron schedule.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from prefect import flow

from eval.benchmarks import SHIPPED, check_names
from eval.mas import (comparison_table, decide, markdown, paired_cells, paired_cells_markdown,
                           paired_difference, read_records,
                           game_eval_difference)
from eval.systems import SYSTEMS, Result, check_systems
from mars_core.config import load_game_eval_config
from mars_core.config.base import former
from flows.arena import arena_flow
from mars_core.arena.config import load_arena_config
from tasks.artifacts import publish_markdown
from tasks.reasoning_benchmarks import evaluate_mas, log_mas, write_results
from tasks.strength_suite import evaluate_suite, resolve_policy
from tasks.model_registry import RegistryError, alias_version, set_alias
from tasks.tracking import _metric_key
from tasks.tracking import tracking_uri as local_store


@flow(name="mars-nightly-eval", log_prints=True)
def nightly_eval_flow(registered_model: str = "mars-tic-tac-toe", candidate: str = "candidate",
                      champion: str = "champion", systems: list[str] | None = None,
                      benchmarks: list[str] | None = None, limit: int = 20,
                      max_new_tokens: int = 1024,
                      game_eval_preset: str | None = "configs/eval/mars_strategic_quick.yaml",
                      game_eval_n: int | None = None,
                      arena_preset: str | None = "configs/arena/nightly.yaml",
                      base_model: str | None = "embedded", promote: bool = True,
                      data_dir: str | None = None, gpqa_path: str | None = None,
                      batch_size: int = 32, seed: int = 0, tracking_uri: str | None = None,
                      runs_dir: str = "runs", out_dir: str = "runs/nightly",
                      max_tokens: int | None = None, strategic_preset: str | None = None,
                      strategic_n: int | None = None) -> dict:
    """Evaluate `candidate` against `champion` of `registered_model` and promote on a win
    (see the module docstring). `tracking_uri` defaults to the local store of `runs_dir`.
    `max_tokens`, `strategic_preset`, `strategic_n`: the former names of `max_new_tokens`,
    `game_eval_preset`, `game_eval_n` (deployments made before the rename), accepted with a
    deprecation note until the next release."""
    max_new_tokens = former(max_tokens, "max_tokens", max_new_tokens, "max_new_tokens")
    game_eval_preset = former(strategic_preset, "strategic_preset", game_eval_preset,
                              "game_eval_preset")
    game_eval_n = former(strategic_n, "strategic_n", game_eval_n, "game_eval_n")
    systems, benchmarks = systems or list(SYSTEMS), benchmarks or list(SHIPPED)
    check_systems(systems)
    check_names(benchmarks, gpqa_path)
    store = tracking_uri or local_store(Path(runs_dir))
    versions = {"candidate": alias_version(store, registered_model, candidate),
                "champion": alias_version(store, registered_model, champion)}
    if versions["candidate"] is None:
        raise RegistryError(f"{registered_model} has no {candidate!r} alias in {store}")
    if versions["candidate"] == versions["champion"]:
        print(f"{candidate} and {champion} are both version {versions['candidate']}: nothing to do")
        return {"decision": "unchanged", "promoted": False, "versions": versions}
    labels = [label for label, v in versions.items() if v is not None]
    folder = Path(out_dir) / f"{registered_model}-{time.strftime('%Y%m%d-%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=True)
    local = {label: resolve_policy(f"models:/{registered_model}/{versions[label]}", store,
                                   runs_dir) for label in labels}
    reports = [evaluate_mas(label, local[label], systems, benchmarks, str(folder / "records"),
                            limit=limit, data_dir=data_dir, gpqa_path=gpqa_path,
                            max_new_tokens=max_new_tokens, seed=seed, batch_size=batch_size)
               for label in labels]
    for rep in reports:
        rep["model"] = f"models:/{registered_model}/{versions[rep['label']]}"
    strategic = {}
    if game_eval_preset:
        cfg = load_game_eval_config(game_eval_preset, None, None, game_eval_n, seed)
        strategic = {label: evaluate_suite(cfg, label, local[label])["records"]
                     for label in labels}
    arena = _arena_round(arena_preset, local, base_model, folder, store, runs_dir)
    records = folder / "records"
    mine, theirs = (read_records(records / "candidate"),
                    read_records(records / "champion") if "champion" in local else None)
    mas_diff, strat_diff, promoted, why = promotion(mine, theirs, strategic)
    print(f"decision: {'promote' if promoted else 'keep'} ({why})")
    table = comparison_table({r["label"]: r["rows"] for r in reports},
                             "champion" if "champion" in local else None)
    out = folder / "nightly.json"
    extra = {"versions": versions, "mas_difference": mas_diff,
             "strategic_difference": strat_diff, "strategic": strategic,
             "arena": arena and {"leaderboard": arena["leaderboard"],
                                 "mlflow_run_id": arena["mlflow_run_id"]},
             "decision": {"promote": promoted, "reason": why}}
    config = {"registered_model": registered_model, "candidate": candidate,
              "champion": champion, "systems": ",".join(systems),
              "benchmarks": ",".join(benchmarks), "limit": limit, "max_new_tokens": max_new_tokens,
              "game_eval_preset": game_eval_preset or "", "game_eval_n": game_eval_n,
              "arena_preset": arena_preset or "", "base_model": base_model or "", "seed": seed}
    write_results(out, config, reports, table, json.loads(json.dumps(extra, default=str)))
    text = markdown(table)
    if theirs:  # per system and benchmark, paired by question
        text += "\n" + paired_cells_markdown(paired_cells(mine, theirs), "candidate", "champion")
    (folder / "table.md").write_text(text)
    print("\n" + text)
    metrics = {"promoted": float(promoted)}
    files = [out, folder / "table.md"]
    if arena:
        metrics |= {_metric_key("arena/rating", r["agent"]): r["rating"]
                    for r in arena["leaderboard"]}
        files += [folder / "arena_leaderboard.md", folder / "arena_ratings.png"]
    for name, diff in (("mas", mas_diff), ("strategic", strat_diff)):
        if diff and diff["n"]:
            metrics |= {f"{name}/difference": diff["difference"], f"{name}/ci95": diff["ci95"]}
    run_id = log_mas(store, "mars-nightly", f"nightly {registered_model} v{versions['candidate']}"
                     f" vs {versions['champion'] or 'none'}", config, reports, table,
                     files, metrics)
    if promoted and promote:
        set_alias(store, registered_model, champion, versions["candidate"],
                  {"mars.promoted_by": run_id, "mars.promotion_reason": why})
        print(f"{champion} -> version {versions['candidate']}")
    verdict = (f"**{'promote' if promoted else 'keep'}**: {why}"
               + (f"; `{champion}` -> version {versions['candidate']}" if promoted and promote
                  else "") + "\n\n" + text)
    publish_markdown(f"nightly-{registered_model}", verdict, f"nightly evaluation of "
                     f"{registered_model}: {candidate} v{versions['candidate']} vs {champion} "
                     f"v{versions['champion'] or '-'}", store, run_id)
    return {"decision": "promote" if promoted else "keep", "promoted": promoted and promote,
            "reason": why, "versions": versions, "out": str(out), "mlflow_run_id": run_id}


def promotion(candidate: list[Result], champion: list[Result] | None,
              strategic: dict[str, list[dict]] | None = None
              ) -> tuple[dict | None, dict | None, bool, str]:
    """(reasoning difference, game evaluation difference, promote?, reason) for the candidate's
    and the champion's reasoning records (None: no champion yet, promote) and game records
    (`{"candidate": [...], "champion": [...]}`, when that suite was played). Both differences
    carry small-sample 95% intervals (`eval.mas`: Student's t with a variance floor for bounded
    outcomes, so 4 questions out of 4 won is no win); the candidate is promoted only when the
    reasoning interval lies above 0 and the game one does not lie below 0 (`decide`), and
    the reason names those intervals."""
    if champion is None:
        return None, None, *decide(None, None)
    mas = paired_difference(candidate, champion)
    strat = (game_eval_difference(strategic["candidate"], strategic["champion"])
             if strategic else None)
    return mas, strat, *decide(mas, strat)


def _arena_round(preset: str | None, local: dict[str, str], base_model: str | None,
                 folder: Path, store: str, runs_dir: str) -> dict | None:
    """Candidate, champion (when there is one) and the base model join the preset's agents
    (bots) in one arena; its leaderboard is logged as a run of `mars-nightly`."""
    if not preset:
        return None
    agents = list(load_arena_config(preset).agents)
    agents += [f"{label}={path}" for label, path in local.items()]
    if base_model:
        agents.append(f"base={base_model}")
    from mars_core.privacy.private import withheld

    with withheld(tracking_uri=store) as hidden:  # a store's password is no subflow parameter
        result = arena_flow(preset=preset, agents=agents, out=str(folder / "arena.json"),
                            experiment="mars-nightly", runs_dir=runs_dir, **hidden)
    top = result["leaderboard"][0]
    print(f"arena: {top['agent']} leads ({top['rating']:.2f}); "
          + ", ".join(f"{r['agent']} {r['rating']:.2f}" for r in result["leaderboard"][1:]))
    return result
