"""An ablation's record in MLflow: ONE parent run (the table, the plot, a metric per row) with a
nested child per training run (base, variant, seed): its final strength per game and opponent,
its paired difference from the reference on that seed's deals, and its learning curve as
metric history (step = iterations trained), tagged with the training run's MLflow id.

A comparison is logged once: the parent carries the key of its results (`mars.ablation_key`),
and a rerun that finds a finished parent with that key logs nothing new (a finished comparison
rerun; a cut one that resumes logs when it completes).
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric

from tasks.tracking import _metric_key, log_one_run, quiet_links, retrying

KIND = {"mars.kind": "ablation"}
KEY_TAG = "mars.ablation_key"


def ablation_key(params: dict, rows: list[dict]) -> str:
    """What the comparison found and how (a rerun with the same results has the same key)."""
    text = json.dumps({"params": params, "rows": rows}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@retrying
def logged_ablation(tracking: str, experiment: str, key: str) -> str | None:
    """The finished parent run of this comparison, if one is logged already."""
    client = MlflowClient(tracking_uri=quiet_links(tracking))
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    found = client.search_runs([exp.experiment_id], f"tags.`{KEY_TAG}` = '{key}' and "
                               "attributes.status = 'FINISHED'", max_results=1)
    return found[0].info.run_id if found else None


def _row_metrics(rows: list[dict], prefix: str = "") -> list[tuple[str, float]]:
    out = []
    for r in rows:
        cell = [p for p in (r.get("base"), r["game"], r["opponent"]) if p]
        for name, value in (("final", r["normalized_return"]), ("final_ci95", r["ci95"]),
                            ("diff", r["diff"]), ("diff_ci95", r["diff_ci95"]),
                            ("gain", r.get("gain")), ("gain_ci95", r.get("gain_ci95"))):
            if value is not None:
                out.append((_metric_key(prefix + name, *cell, r["variant"]), value))
    return out


def log_ablation(tracking: str, experiment: str, name: str, reference: str, params: dict,
                 rows: list[dict], runs: list[dict], files: list[Path]) -> str:
    """The parent run (`params`, a metric per row of `ablation_rows`, the table and `files`)
    with a child per entry of `runs` (`base`, `variant`, `seed`, `run_dir`, `mlflow_run_id`,
    `rows`: that seed's `per_seed_rows` of the variant, `curve`: its `learning_curve`), the
    differences taken against `reference`. Returns the parent's id; an identical comparison
    is logged once."""
    key = ablation_key(params, rows)
    found = logged_ablation(tracking, experiment, key)
    if found:
        print(f"the comparison is logged already (MLflow run {found})")
        return found

    def children(client: MlflowClient, exp: str, parent: str) -> None:
        for run in runs:
            tags = {**KIND, "mars.variant": run["variant"], "mars.seed": str(run["seed"]),
                    "mars.train_run_id": run["mlflow_run_id"]}
            label = "/".join(str(p) for p in (run.get("base"), run["variant"],
                                               f"seed{run['seed']}") if p is not None)
            metrics = []
            for r in run["rows"]:
                cell = (r["game"], r["opponent"])
                metrics.append((_metric_key("final", *cell), r["normalized_return"]))
                if r["policy"] != reference and r["paired_n"]:
                    metrics.append((_metric_key("diff", *cell), r["diff"]))
                if r.get("gain") is not None:  # against the run's own start
                    metrics.append((_metric_key("gain", *cell), r["gain"]))

            def curve(client: MlflowClient, _exp: str, child: str, points=run["curve"]) -> None:
                now = int(time.time() * 1000)
                history = [Metric(_metric_key("curve", c), float(v), now, p["iterations"])
                           for p in points for c, v in p.items() if c != "iterations"]
                for i in range(0, len(history), 500):
                    client.log_batch(child, metrics=history[i:i + 500])

            log_one_run(client, experiment, f"{name}/{label}", tags, parent=parent,
                        params={"base": run.get("base") or "-", "variant": run["variant"],
                                "seed": run["seed"], "run_dir": run["run_dir"]},
                        metrics=metrics, then=curve)

    return log_one_run(tracking, experiment, f"ablation {name}", {**KIND, KEY_TAG: key},
                       params=params, metrics=_row_metrics(rows),
                       tables={"ablation_table.json": [_flat(r) for r in rows]}, files=files,
                       then=children)


def _flat(row: dict) -> dict:
    """A row for an MLflow table (lists as text)."""
    return {k: (json.dumps(v) if isinstance(v, list) else v) for k, v in row.items()}
