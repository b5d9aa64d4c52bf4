"""The game-strength flow (`mars eval games`; the MARS strategic-ability protocol; Prefect flow
`mars-eval-strategic`, its name kept for existing deployments), top to bottom:

    resolve the policy (embedded, a folder, models:/NAME@ALIAS, or a bot)
    play every game x opponent x seat, n games each (a game's games at once, model turns batched)
    write results.json, the radar chart of normalized returns and sample transcripts
    log them to MLflow (a run with a nested run per game) when a tracking URI is set

The reasoning-benchmark flows (`mars eval mas`, `mars eval harness`) are
`flows/reasoning_benchmarks.py`.
"""
from __future__ import annotations

import json
from pathlib import Path

from prefect import flow

from mars_core.config import load_game_eval_config
from mars_core.privacy.private import reveal
from mars_core.privacy.redact import install_log_redaction, redact
from mars_core.strength.suite import per_game_normalized, radar_chart
from tasks.artifacts import publish_table
from tasks.model_registry import version_of
from tasks.strength_suite import evaluate_suite, resolve_policy
from tasks.tracking import log_game_eval


@flow(name="mars-eval-strategic", log_prints=True)
def game_eval_flow(policy: str = "embedded",
                   preset: str | None = "configs/eval/mars_strategic_quick.yaml",
                   games: list[str] | None = None, opponents: list[str] | None = None,
                   n: int | None = None, seed: int | None = None, out: str = "results.json",
                   overrides: list[str] | None = None, tracking_uri: str | None = None,
                   experiment: str = "mars-strategic-eval", runs_dir: str = "runs",
                   private: str | None = None) -> dict:
    """Evaluate `policy` on a preset (None: the full MARS suite), optionally narrowed to
    `games` / `opponents`; write `out` (a JSON list of records) and files beside it. Secrets
    in `overrides` and `tracking_uri` come masked, their values in the file `private`
    (`mars_core.privacy.private`)."""
    install_log_redaction()
    p = reveal(private, overrides=overrides or [], tracking_uri=tracking_uri)
    overrides, tracking_uri = p["overrides"], p["tracking_uri"]
    cfg = load_game_eval_config(preset, games, opponents, n, seed, overrides)
    model = resolve_policy(policy, tracking_uri, runs_dir)
    if version_of(model):
        print(f"{policy} is {version_of(model)['policy_model']} version "
              f"{version_of(model)['policy_version']}")
    result = evaluate_suite(cfg, policy, model)
    records = result["records"]
    out_path = Path(out)
    files = [out_path, out_path.with_name(out_path.stem + "_radar.png"),
             out_path.with_name(out_path.stem + "_transcripts.md")]
    exploitability = result.get("exploitability", {})
    if exploitability:  # the policy's exact distance from an equilibrium (Kuhn, Leduc)
        files.append(out_path.with_name(out_path.stem + "_exploitability.json"))
        files[-1].write_text(json.dumps(exploitability, indent=1))
    out_path.write_text(json.dumps(redact(records), indent=1))
    scores = per_game_normalized(records)
    radar_chart({policy: scores}, files[1], title=f"normalized return: {policy}")
    files[2].write_text(result["transcripts"])
    summary = ", ".join(f"{g} {v:.1f}" for g, v in scores.items())
    print(f"normalized return per game ({policy}): {summary}; "
          f"{result['generated_tokens']} tokens generated")
    run_id = None
    if tracking_uri:
        params = {"policy": policy, **version_of(model),  # the version an alias resolved to
                  "preset": preset or "mars (built in)", **cfg_params(cfg)}
        run_id = log_game_eval(tracking_uri, experiment, policy, params, records, files,
                               exploitability)
        print(f"logged to MLflow run {run_id} (experiment {experiment!r})")
    publish_table(f"strategic-{policy}", records, f"game evaluation of {policy} "
                  f"({cfg.n} games per game, opponent and seat)", tracking_uri, run_id)
    return {"out": str(out_path), "records": len(records), "normalized": scores,
            "exploitability": {g: r["exploitability"] for g, r in exploitability.items()
                               if "exploitability" in r},
            "worst_case": {g: r["normalized"] for g, r in exploitability.items()
                           if "worst_case" in r},
            "mlflow_run_id": run_id}


def cfg_params(cfg) -> dict:
    """The evaluation config as flat MLflow params."""
    flat = {"n": cfg.n, "seed": cfg.seed, "max_context_tokens": cfg.max_context_tokens}
    flat |= {f"suite.{g}": ",".join(o) for g, o in cfg.suite.items()}
    flat |= {f"play.{k}": v for k, v in cfg.play.model_dump().items()}
    return flat
