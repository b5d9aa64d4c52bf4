"""Tasks of the reasoning-benchmark evaluation (multi-agent systems): answer the suite with one
model, and log one evaluation (its models, the comparison table, transcripts) to MLflow."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from mlflow import MlflowClient
from prefect import task
from prefect.cache_policies import NO_CACHE

from eval.benchmarks import load, source_of
from eval.mas import read_records, run_suite, summarize, wilson, write_records
from mars_core.config.cluster import ClusterConfig
from mars_core.engines.chat import BENCHMARK_SAMPLING, ChatParams, is_endpoint
from mars_core.privacy.redact import redact, redact_text
from tasks.engine_factory import bf16_wanted
from tasks.shards import run_shards, shard_slices
from tasks.tracking import _metric_key, log_one_run
from tasks.traces import log_conversation_traces


def chat_engine(model: str, batch_size: int, bf16: str = "auto", api_key_env: str | None = None):
    """`model` is a local model folder or an endpoint URL (`http://host:port`, the server's
    first model; `http://host:port#NAME` picks model NAME); an endpoint gets the value of the
    environment variable `api_key_env` as its bearer key. An error names the URL without its
    credentials."""
    from mars_core.engines.build import build_engine

    api_key = os.environ.get(api_key_env) or None if api_key_env else None
    try:
        return build_engine(model, batch_size=batch_size, bf16=bf16_wanted(bf16), chat=True,
                            api_key=api_key)
    except ConnectionError as e:
        raise ConnectionError(redact_text(str(e))) from None


def _shard_name() -> str:
    from prefect.runtime import task_run

    p = task_run.parameters
    return f"mas_shard {redact_text(p['model'])}: questions {p['start']}-{p['stop']}"


@task(task_run_name=_shard_name, cache_policy=NO_CACHE)
def mas_shard(model: str, systems: list[str], benchmarks: list[str], limit: int | None,
              data_dir: str | None, gpqa_path: str | None, max_new_tokens: int, seed: int,
              batch_size: int, bf16: str, start: int, stop: int,
              api_key_env: str | None = None, journal: str | None = None) -> tuple[str, list]:
    """Questions `start`..`stop` of the suite (loaded here, on whichever machine runs it)
    under every system, with an engine of its own: (the engine's name, the results). With a
    `journal` folder the replies are kept in `<journal>/q<start>-<stop>/<system>.jsonl`, and
    a rerun resumes from them (`eval.journal`)."""
    questions = [q for name in benchmarks for q in load(name, data_dir, limit, gpqa_path)]
    engine = chat_engine(model, batch_size, bf16, api_key_env)
    return engine.name, run_suite(engine, systems, questions[start:stop],
                                  ChatParams(max_new_tokens=max_new_tokens, seed=seed),
                                  max_batch=max(batch_size * 8, 1), progress=print,
                                  journal=Path(journal) / f"q{start}-{stop}" if journal else None,
                                  model=model)


@task(cache_policy=NO_CACHE)
def evaluate_mas(label: str, model: str, systems: list[str], benchmarks: list[str],
                 out_dir: str, *, limit: int | None = None, data_dir: str | None = None,
                 gpqa_path: str | None = None, max_new_tokens: int = BENCHMARK_SAMPLING.max_new_tokens, seed: int = 0,
                 batch_size: int = 32, bf16: str = "auto",
                 cluster: ClusterConfig | None = None, api_key_env: str | None = None,
                 journal_dir: str | None = None) -> dict:
    """Every system on every benchmark with one model (loaded once); per-question records and
    transcripts go to `<out_dir>/<label>/<system>/<benchmark>.jsonl`. Returns the summary
    rows, the records folder, the gated benchmarks and the cost. With `cluster` sharded the
    questions split into `cluster.shards` ranges, each a mas_shard task run with its own
    engine (on the Ray cluster where one is configured); the results are the same. An
    endpoint gets the key in the environment variable `api_key_env` (the cluster's workers
    get the variable through `cluster.ray.env`). With `journal_dir`, the replies received are
    kept in `<journal_dir>/<label>/` (on a cluster: where the shards' machines share that
    folder), so a killed evaluation, rerun, resumes from them; the caller removes them
    (`eval.mas.remove_journal`) once its results are written."""
    questions = [q for name in benchmarks
                 for q in load(name, data_dir, limit, gpqa_path)]
    cluster = cluster or ClusterConfig()
    started = time.perf_counter()
    shard = {"model": model, "systems": systems, "benchmarks": benchmarks, "limit": limit,
             "data_dir": data_dir, "gpqa_path": gpqa_path, "max_new_tokens": max_new_tokens,
             "seed": seed, "batch_size": batch_size, "bf16": bf16, "api_key_env": api_key_env,
             "journal": str(Path(journal_dir) / label) if journal_dir else None}
    if cluster.sharded and len(questions) > 1:
        parts = run_shards(mas_shard, [shard | {"start": r.start, "stop": r.stop} for r in
                                       shard_slices(len(questions), cluster.shards)], cluster)
        results = [r for name in systems for part in parts for r in part[1] if r.system == name]
        engine_name = parts[0][0]
    else:
        engine_name, results = mas_shard.fn(**shard, start=0, stop=len(questions))
    seconds = time.perf_counter() - started
    gated = {q.benchmark for q in questions if q.gated}
    folder = Path(out_dir) / label
    write_records(results, folder, gated)
    rows = summarize(results)
    for r in rows:
        print(f"{label}: {r['system']:8s} {r['benchmark']:13s} accuracy {r['accuracy']:5.1f}% "
              f"[{r['ci_low']:.1f}, {r['ci_high']:.1f}] n={r['n']}, {r['calls']} calls, "
              f"{r['prompt_tokens'] + r['completion_tokens']} tokens, {r['errors']} errors")
    return {"label": label, "model": redact_text(model), "rows": rows, "records": str(folder),
            "gated": sorted(gated), "seconds": seconds, "engine": engine_name,
            "sources": {b: source_of(b, data_dir, gpqa_path) for b in benchmarks}}


def log_mas(tracking: str, experiment: str, name: str, params: dict, reports: list[dict],
            table: list[dict], files: list[Path], extra_metrics: dict | None = None) -> str:
    """One MLflow run for one evaluation: params, the comparison table (MLflow table and
    Markdown), the results file; a nested run per model with `accuracy/<system>/<benchmark>`,
    `ci95/...`, `calls/...`, `tokens/...`, its transcripts, and one MLflow trace per
    conversation (`tasks.traces`: a span per agent turn, linked to the nested run; gated
    benchmarks' text withheld). Returns the parent run id."""
    kind = {"mars.kind": "mas-eval"}
    metrics = [(_metric_key(k), v) for k, v in (extra_metrics or {}).items()]
    metrics += [(_metric_key("avg", row["model"], row["system"]), row["avg"])
                for row in table if row.get("avg") is not None]

    def per_model(client: MlflowClient, exp: str, parent: str) -> None:
        for rep in reports:
            def questions_and_traces(client: MlflowClient, exp: str, child: str, rep=rep) -> None:
                answered = read_records(Path(rep["records"]))  # as written: gated text already gone
                log_question_sets(client, child, answered, rep.get("sources", {}))
                traced = log_conversation_traces(tracking, exp, child, answered, rep["model"],
                                                 set(rep.get("gated", ())))
                print(f"{rep['label']}: {len(traced)} conversations traced in MLflow")

            cell = [(_metric_key(key, r["system"], r["benchmark"]), value) for r in rep["rows"]
                    for key, value in (("accuracy", r["accuracy"]), ("ci95", r["ci95"]),
                                       ("calls", r["calls"]),
                                       ("tokens", r["prompt_tokens"] + r["completion_tokens"]))]
            log_one_run(client, experiment, f"{name} / {rep['label']}",
                        {**kind, "mars.model": rep["model"]}, parent=parent,
                        params={"model": rep["model"], "engine": rep["engine"]},
                        metrics=cell + [("seconds", rep["seconds"])],
                        tables={"mas_results.json": rep["rows"]},
                        folders={"transcripts": rep["records"]}, then=questions_and_traces)

    return log_one_run(tracking, experiment, name, kind, params=params, metrics=metrics,
                       tables={"comparison_table.json": table}, files=files, then=per_model)


def log_question_sets(client: MlflowClient, run_id: str, answered: list,
                      sources: dict[str, str]) -> None:
    """Each benchmark's questions that the model answered, as an MLflow dataset input of its
    run (source: the benchmark file or the publisher's dataset; rows: ids and references, no
    question text), so an accuracy traces back to the exact questions."""
    import mlflow.data
    import pandas as pd
    from mlflow.entities import DatasetInput, InputTag

    from mars_core.run import offline

    offline.quiet_logs()  # MLflow's "source can be interpreted in multiple ways" (a local path)
    seen: dict[str, dict] = {}
    for r in answered:
        seen.setdefault(r.benchmark, {})[r.id] = r.reference
    inputs = []
    for bench, refs in sorted(seen.items()):
        frame = pd.DataFrame({"id": list(refs), "reference": list(refs.values())})
        ds = mlflow.data.from_pandas(frame, source=sources.get(bench, bench),
                                     name=bench)
        inputs.append(DatasetInput(ds._to_mlflow_entity(),
                                   tags=[InputTag("mlflow.data.context", "evaluation")]))
    if inputs:
        client.log_inputs(run_id, datasets=inputs)


def write_results(out: Path, config: dict, reports: list[dict], table: list[dict],
                  extra: dict | None = None) -> None:
    """The results file: the config, each model's rows and the comparison table."""
    body = {"config": config,
            "models": {r["label"]: {k: r[k] for k in ("model", "engine", "seconds", "rows")}
                       for r in reports},
            "table": table, **(extra or {})}
    out.write_text(json.dumps(redact(body), indent=1))


@task(cache_policy=NO_CACHE)
def evaluate_harness(model: str, benchmarks: list[str], *, limit: int | None, max_new_tokens: int,
                     batch_size: int, data_dir: str | None, gpqa_path: str | None,
                     seed: int) -> dict:
    """lm-evaluation-harness on our benchmark files (eval/harness.py), against a local model
    folder or an endpoint URL. Accuracy is printed with its 95% Wilson interval (the grades
    are 0/1; the normal `1.96 * stderr` has no width at 0% or 100% and is too narrow at small
    n)."""
    from eval.harness import run_harness

    url, _, name = model.partition("#")
    where = ({"base_url": url, "served_model": name or None} if is_endpoint(model)
             else {"model_dir": model})
    result = run_harness(benchmarks, limit=limit, max_new_tokens=max_new_tokens, batch_size=batch_size,
                         data_dir=data_dir, gpqa_path=gpqa_path, seed=seed, **where)
    for bench, r in result["benchmarks"].items():
        lo, hi = wilson(round(r["accuracy"] * r["n"]), r["n"])
        print(f"lm-eval {bench:13s} accuracy {100 * r['accuracy']:5.1f}% "
              f"(95% Wilson interval {100 * lo:.1f}-{100 * hi:.1f}, n={r['n']})")
    return result


def log_harness(tracking: str, experiment: str, spec: str, result: dict, out: Path) -> str:
    """One MLflow run: `harness/<benchmark>/accuracy` (%) and `.../stderr`, the results file."""
    return log_one_run(tracking, experiment, f"lm-eval {spec}",
                       {"mars.kind": "lm-eval", "mars.model": spec},
                       params={"model": spec, **{k: v for k, v in result["config"].items()
                                                 if k not in ("sampling", "tasks")}},
                       metrics=[(_metric_key("harness", bench, key), 100.0 * float(r[key]))
                                for bench, r in result["benchmarks"].items()
                                for key in ("accuracy", "stderr")],
                       files=[out])
