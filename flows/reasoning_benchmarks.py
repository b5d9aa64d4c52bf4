"""The reasoning-benchmark flows: the reasoning benchmarks inside multi-agent systems
(`mars eval mas`, Prefect flow `mars-eval-mas`: the MARS paper's Table 1) and the single-agent
numbers through lm-evaluation-harness (`mars eval harness`, Prefect flow `mars-eval-harness`).
The game-strength flow (`mars eval games`) is `flows/strength_suite.py`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from prefect import flow

from eval.benchmarks import SHIPPED, check_names
from eval.mas import (comparison_table, markdown, paired_cells, paired_cells_markdown,
                           read_records, remove_journal)
from eval.systems import SYSTEMS, check_systems
from mars_core.config import config_from_dict
from mars_core.config.base import former
from mars_core.config.cluster import ClusterConfig
from mars_core.privacy.private import reveal
from mars_core.privacy.redact import install_log_redaction, redact, redact_text
from mars_core.engines.chat import BENCHMARK_SAMPLING, benchmark_sampling, is_endpoint
from tasks.artifacts import publish_markdown
from tasks.reasoning_benchmarks import (evaluate_harness, evaluate_mas, log_harness, log_mas,
                                        write_results)
from tasks.strength_suite import resolve_policy


@flow(name="mars-eval-mas", log_prints=True)
def mas_eval_flow(model: str = "embedded", baseline: str | None = None,
                  systems: list[str] | None = None, benchmarks: list[str] | None = None,
                  limit: int | None = None, out: str = "mas_results.json",
                  data_dir: str | None = None, gpqa_path: str | None = None,
                  max_new_tokens: int = BENCHMARK_SAMPLING.max_new_tokens, seed: int = 0,
                  batch_size: int = 32, bf16: str = "auto",
                  tracking_uri: str | None = None, experiment: str = "mars-mas-eval",
                  runs_dir: str = "runs", shards: int = 1, ray_address: str | None = None,
                  api_key_env: str | None = None, baseline_api_key_env: str | None = None,
                  private: str | None = None, max_tokens: int | None = None) -> dict:
    """Reasoning benchmarks inside multi-agent systems (the MARS paper's Table 1), top to
    bottom:

        resolve the model (and the baseline): embedded, a folder, models:/NAME@ALIAS or an
            OpenAI-compatible endpoint URL (a vLLM server)
        answer every benchmark with every system (single, mad, autogen), questions batched
            (in `shards` question ranges, on the Ray cluster at `ray_address` if given)
        write `out` (accuracy with 95% CI, calls, tokens per system x benchmark, the table)
            and transcripts beside it (`<out>_transcripts/<model>/<system>/<benchmark>.jsonl`)
        log them to MLflow (a run, a nested run per model) when a tracking URI is set

    An endpoint's key comes from the environment variable `api_key_env` (the baseline's:
    `baseline_api_key_env`), sent as a bearer key. Credentials in `model`, `baseline` or
    `tracking_uri` come masked, their values in the file `private` (`mars_core.privacy.private`), and
    are masked in everything written (files, MLflow, Prefect artifacts, logs). `max_tokens`:
    the former name of `max_new_tokens` (deployments made before the rename), accepted with a
    deprecation note until the next release.
    """
    max_new_tokens = former(max_tokens, "max_tokens", max_new_tokens, "max_new_tokens")
    install_log_redaction()
    p = reveal(private, model=model, baseline=baseline, tracking_uri=tracking_uri)
    model, baseline, tracking_uri = p["model"], p["baseline"], p["tracking_uri"]
    shown, shown_baseline = redact_text(model), baseline and redact_text(baseline)
    systems = systems or list(SYSTEMS)
    benchmarks = benchmarks or list(SHIPPED)
    check_systems(systems)
    check_names(benchmarks, gpqa_path)
    keys = {"model": api_key_env, "baseline": baseline_api_key_env}
    # a cluster's workers get the key variables through cluster.ray.env (tasks.shards: set by
    # a worker setup hook, not in Ray's runtime env)
    env = {v: os.environ[v] for v in keys.values() if v and v in os.environ}
    cluster = config_from_dict({"shards": shards, "ray": {"address": ray_address, "env": env}},
                               ClusterConfig)
    out_path = Path(out)
    records = out_path.with_name(out_path.stem + "_transcripts")
    journal = out_path.with_name(out_path.stem + "_journal")
    specs = {"model": model, **({"baseline": baseline} if baseline else {})}
    reports = []
    for label, spec in specs.items():
        local = spec if is_endpoint(spec) else resolve_policy(spec, tracking_uri, runs_dir)
        reports.append(evaluate_mas(label, local, systems, benchmarks, str(records),
                                    limit=limit, data_dir=data_dir, gpqa_path=gpqa_path,
                                    max_new_tokens=max_new_tokens, seed=seed, batch_size=batch_size,
                                    bf16=bf16, cluster=cluster, api_key_env=keys[label],
                                    journal_dir=str(journal)))
        reports[-1]["model"] = redact_text(spec)
    table = comparison_table({r["label"]: r["rows"] for r in reports},
                             "baseline" if baseline else None)
    config = {"model": shown, "baseline": shown_baseline or "", "systems": ",".join(systems),
              "benchmarks": ",".join(benchmarks), "limit": limit,
              **benchmark_sampling(max_new_tokens), "seed": seed}
    write_results(out_path, config, reports, table)
    remove_journal(journal)  # every model's results are written: nothing left to resume
    table_md = out_path.with_name(out_path.stem + "_table.md")
    table_text = markdown(table)
    table_md.write_text(table_text)
    text, files = table_text, [out_path, table_md]
    if baseline:  # the same questions in both: the difference paired by question, per cell
        paired = paired_cells(read_records(records / "model"), read_records(records / "baseline"))
        paired_md = out_path.with_name(out_path.stem + "_paired.md")
        paired_text = paired_cells_markdown(paired, "model", "baseline")
        paired_md.write_text(paired_text)
        text += "\n" + paired_text
        files.append(paired_md)
    print("\n" + text)
    run_id = None
    if tracking_uri:
        run_id = log_mas(tracking_uri, experiment, f"mas {shown}", config, reports, table,
                         files)
        print(f"logged to MLflow run {run_id} (experiment {experiment!r})")
    publish_markdown(f"mas-{shown}", text, f"reasoning benchmarks in multi-agent "
                     f"systems: {shown}" + (f" vs {shown_baseline}" if baseline else ""),
                     tracking_uri, run_id)
    return {"out": str(out_path), "records": sum(r["n"] for rep in reports for r in rep["rows"]),
            "table": table, "mlflow_run_id": run_id}


@flow(name="mars-eval-harness", log_prints=True)
def harness_eval_flow(model: str = "embedded", benchmarks: list[str] | None = None,
                      limit: int | None = None, out: str = "harness_results.json",
                      data_dir: str | None = None, gpqa_path: str | None = None,
                      max_new_tokens: int = BENCHMARK_SAMPLING.max_new_tokens, seed: int = 0,
                      batch_size: int = 8,
                      tracking_uri: str | None = None, experiment: str = "mars-mas-eval",
                      runs_dir: str = "runs", private: str | None = None) -> dict:
    """The single-agent numbers through lm-evaluation-harness (the `eval` extra): resolve the
    model, run our benchmark files as lm-eval tasks graded by our graders, write `out`, log to
    MLflow when a tracking URI is set (credentials in `model` or `tracking_uri`: as in
    `mas_eval_flow`)."""
    install_log_redaction()
    p = reveal(private, model=model, tracking_uri=tracking_uri)
    model, tracking_uri = p["model"], p["tracking_uri"]
    benchmarks = benchmarks or list(SHIPPED)
    check_names(benchmarks, gpqa_path)
    local = model if is_endpoint(model) else resolve_policy(model, tracking_uri, runs_dir)
    result = evaluate_harness(local, benchmarks, limit=limit, max_new_tokens=max_new_tokens,
                              batch_size=batch_size, data_dir=data_dir, gpqa_path=gpqa_path,
                              seed=seed)
    result["model"] = redact_text(model)
    out_path = Path(out)
    out_path.write_text(json.dumps(redact(result), indent=1))
    run_id = log_harness(tracking_uri, experiment, redact_text(model), result, out_path) \
        if tracking_uri else None
    return {"out": str(out_path), "records": sum(r["n"] for r in result["benchmarks"].values()),
            "benchmarks": result["benchmarks"], "mlflow_run_id": run_id}
