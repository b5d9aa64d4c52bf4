"""The comparison flow: train several presets the same way, evaluate every final model on one
strategic suite, and log one table (the MARS paper's Table 4 layout) to MLflow:

    for each preset: train (a subflow; resumes a finished or interrupted run)
    evaluate the start policy and every final model on the evaluation preset
    comparison.json / comparison.md / radar chart -> one MLflow run in `experiment`

Rerunning the same command skips finished trainings and evaluations, so an interrupted
comparison continues where it stopped.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from prefect import flow

from mars_core.config import load_strategic_config
from mars_core.private import reveal
from mars_core.redact import install_log_redaction
from mars_core.strength import comparison_table, per_game_normalized, radar_chart
from mars_core.layout import final_model_dir
from mars_core.stages import MARKER, is_done, read_json, stage_output, write_json
from flows.train import train_flow
from tasks.artifacts import publish_table
from tasks.common import initial_policy
from tasks.paths import check_run_name, lock_run_dir, run_dir_for, unlock_run_dir
from tasks.strategic import evaluate_suite
from tasks.tracking import log_comparison, tracking_uri

ABLATIONS = ("configs/ablations/mars.yaml", "configs/ablations/wo_turn_level.yaml",
             "configs/ablations/wo_agent_specific.yaml", "configs/ablations/fixed_opponent.yaml")


def evaluation_key(cfg, model: str) -> str:
    """What decides an evaluation's records: the whole evaluation config (suite, n, seed, how
    the policy plays) and the weights (the model folder and its stage manifest, which hashes
    every file). A change in any of them is another cache entry, never a stale reuse."""
    model_dir = Path(model)
    marker = model_dir / MARKER
    ident = {"eval": cfg.model_dump(mode="json"), "model": str(model_dir.resolve()),
             "weights": marker.read_text() if marker.is_file() else None}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


def _evaluated(folder: Path, cfg, label: str, model: str) -> list[dict]:
    """The records of one policy, evaluated once per evaluation key (kept in
    `folder-<key>`, reused on a rerun with the same settings and weights)."""
    folder = folder.with_name(f"{folder.name}-{evaluation_key(cfg, model)}")
    if not is_done(folder):
        with stage_output(folder) as out:
            write_json(out / "records.json", evaluate_suite(cfg, label, model)["records"])
    return read_json(folder / "records.json")


@flow(name="mars-compare", log_prints=True)
def compare_flow(presets: list[str] | None = None, overlays: list[str] | None = None,
                 overrides: list[str] | None = None,
                 eval_preset: str = "configs/eval/mars_strategic_quick.yaml",
                 games: list[str] | None = None, n: int | None = None, name: str = "ablations",
                 runs_dir: str = "runs", experiment: str = "mars-ablations",
                 private: str | None = None) -> dict:
    """Train each of `presets` (default: the four ablations) with the same `overlays` (e.g.
    configs/scales/smoke.yaml) and `overrides` (secrets masked, their values in the file
    `private`: `mars_core.private`), as runs `<name>-<preset>`; evaluate on `eval_preset`
    (narrowed to `games`, `n` games per seat); log the table."""
    install_log_redaction()
    shown = list(overrides or [])
    reveal(private, overrides=shown)  # refuses a secret given in clear
    presets = list(presets or ABLATIONS)
    labels = [Path(p).stem for p in presets]
    if len(set(labels)) != len(labels):
        raise ValueError("compare: two presets share a file name; rename one")
    folder = run_dir_for(runs_dir, f"{name}-compare", "--name")
    for label in labels:
        check_run_name(f"{name}-{label}", "a preset's run name (--name plus its file name)")
    ecfg = load_strategic_config(eval_preset, games, None, n, None)
    trained = {}
    for preset, label in zip(presets, labels):
        # the subflow's parameters are stored too: the masked overrides and the same file
        result = train_flow(config=preset, run_name=f"{name}-{label}", runs_dir=runs_dir,
                            overrides=shown, overlays=overlays or [], private=private)
        trained[label] = result
    first = trained[labels[0]]["run_dir"]
    policies = {"start": initial_policy(first)}
    policies |= {label: str(final_model_dir(r["run_dir"])) for label, r in trained.items()}
    lock_run_dir(folder)  # one comparison per folder at a time
    try:
        scores = {label: per_game_normalized(_evaluated(folder / f"eval_{label}", ecfg, label, m))
                  for label, m in policies.items()}
        rows, markdown = comparison_table(scores)
        files = [folder / "comparison.json", folder / "comparison.md",
                 folder / "comparison_radar.png"]
        write_json(files[0], rows)
        files[1].write_text(f"# {name}: normalized return per game (0-100)\n\n{markdown}")
        radar_chart(scores, files[2], title=f"{name}: normalized return")
    finally:
        unlock_run_dir(folder)
    print(f"comparison ({ecfg.n} games per game x opponent x seat):\n{markdown}")
    params = {"presets": ",".join(presets), "overlays": ",".join(overlays or []),
              "overrides": ",".join(shown), "eval_preset": eval_preset,
              "eval.n": ecfg.n, "eval.games": ",".join(ecfg.suite), "eval.seed": ecfg.seed,
              **{f"run.{label}": r["mlflow_run_id"] for label, r in trained.items()}}
    run_id = log_comparison(tracking_uri(Path(runs_dir)), experiment, name, params, rows, files)
    print(f"logged the table to MLflow run {run_id} (experiment {experiment!r})")
    publish_table(f"compare-{name}", rows, f"{name}: normalized return per game (0-100)",
                  tracking_uri(Path(runs_dir)), run_id)
    return {"table": rows, "markdown": markdown, "mlflow_run_id": run_id,
            "runs": {label: r["run_dir"] for label, r in trained.items()}}
