"""lm-evaluation-harness glue: our benchmark files as custom lm-eval tasks (optional extra).

The single-agent numbers can be cross-checked with EleutherAI's lm-evaluation-harness
(`pip install -e '.[eval]'`, lm-eval 0.4.13). `write_tasks` turns each benchmark into one task
`mars_<name>`: a JSONL of `{id, prompt, reference, benchmark}` (prompt = `task_prompt(q)`, the
exact single-agent prompt) plus a YAML that samples one reply per question (the protocol of
`engines.chat.BENCHMARK_SAMPLING`, no stop strings but the model's end of turn) and grades it with
`eval.graders.is_correct`, so harness accuracy and our own single-agent accuracy are the same
measurement. `run_harness` runs those tasks fully offline against a local model folder (lm-eval
"hf") or an OpenAI-compatible server such as vLLM (lm-eval "local-chat-completions", no
tokenizer download). Task files live in a temporary folder deleted afterwards: GPQA's gated
questions never stay on disk outside the user's own file and never appear in the result.

lm-eval is imported lazily: importing this module never needs it.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from eval.benchmarks import check_names, load, task_prompt
from eval.graders import is_correct
from mars_core.engines.chat import benchmark_sampling
from mars_core.run import offline

TASK_PREFIX = "mars_"
METRIC = "acc"
SAMPLING = {"do_sample": True, **{k: v for k, v in benchmark_sampling().items()
                                   if k != "max_new_tokens"}}  # the protocol's (engines.chat)
OFFLINE_ENV = offline.HUB_OFFLINE
NOISY_LOGGERS = ("lm_eval", "lm-eval", "datasets", "filelock", "urllib3")
API_PACKAGES = ("aiohttp", "requests", "tenacity", "tqdm")
MISSING = "lm-eval is not installed: pip install -e '.[eval]'"


def task_name(benchmark: str) -> str:
    """The lm-eval task name of a benchmark: `gsm8k` -> `mars_gsm8k`."""
    return TASK_PREFIX + benchmark


def process_results(doc: dict, results: list[str]) -> dict[str, int]:
    """lm-eval's per-document scorer: `results[0]` is the model's reply; 1 when our grader
    (`eval.graders.is_correct`) accepts it against `doc["reference"]`, else 0."""
    reply = results[0] if results else ""
    return {METRIC: int(is_correct(doc["benchmark"], reply, doc["reference"]))}


def _task_yaml(name: str, data_file: Path, cache_dir: Path, max_new_tokens: int) -> str:
    """The task config as YAML text. `until: []` keeps lm-eval from cutting replies at its
    default "\\n\\n" (the model's own end-of-turn token still stops it); `process_results` is a
    `!function` tag, which `yaml.safe_dump` cannot write, so that line is appended by hand."""
    import yaml

    config = {
        "task": task_name(name),
        "output_type": "generate_until",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data_file)}, "cache_dir": str(cache_dir)},
        "test_split": "test",
        "doc_to_text": "{{prompt}}",
        "doc_to_target": "{{reference}}",
        "num_fewshot": 0,
        "generation_kwargs": {**SAMPLING, "max_gen_toks": int(max_new_tokens), "until": []},
        "metric_list": [{"metric": METRIC, "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0},
    }
    text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
    return text + f"process_results: !function {__name__}.process_results\n"


def write_tasks(benchmarks: list[str], folder: Path, *, data_dir=None, gpqa_path=None,
                limit: int | None = None, max_new_tokens: int = 1024) -> list[str]:
    """Write one lm-eval task per benchmark into `folder` (created if needed): `<name>.jsonl`
    and `mars_<name>.yaml`; the datasets cache goes to `folder/hf-datasets-cache`. `limit` picks
    the same evenly spread questions as our own evaluation (`benchmarks.load`), not lm-eval's
    first-N. Returns the task names, in the order given."""
    if not benchmarks:
        raise ValueError("no benchmarks given")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    check_names(list(benchmarks), gpqa_path)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cache_dir = folder / "hf-datasets-cache"
    names = []
    for name in dict.fromkeys(benchmarks):
        questions = load(name, data_dir, limit=limit, gpqa_path=gpqa_path)
        data_file = folder / f"{name}.jsonl"
        with open(data_file, "w", encoding="utf-8") as f:
            for q in questions:
                row = {"id": q.id, "prompt": task_prompt(q), "reference": q.reference,
                       "benchmark": q.benchmark}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        (folder / f"{task_name(name)}.yaml").write_text(
            _task_yaml(name, data_file, cache_dir, max_new_tokens), encoding="utf-8")
        names.append(task_name(name))
    return names


def _lm_eval(server: bool = False):
    """The lm_eval package, or the one-line install hint. A server run also needs lm-eval's
    "api" extra (its client imports these lazily, and fails deep inside a run otherwise)."""
    from importlib.util import find_spec

    try:
        import lm_eval
        import lm_eval.evaluator  # noqa: F401
        from lm_eval.tasks import TaskManager  # noqa: F401
    except ImportError:
        raise ValueError(MISSING) from None
    missing = [p for p in API_PACKAGES if server and find_spec(p) is None]
    if missing:
        raise ValueError(f"lm-eval's server client needs {', '.join(missing)}: "
                         f"pip install -e '.[eval]' (lm-eval[hf,api])")
    return lm_eval


@contextlib.contextmanager
def _offline_and_quiet():
    """Hub and datasets offline, lm-eval's INFO chatter off, for the duration only (the
    environment and logger levels are restored afterwards)."""
    saved_env = {k: os.environ.get(k) for k in OFFLINE_ENV}
    os.environ.update(OFFLINE_ENV)
    loggers = [logging.getLogger(n) for n in NOISY_LOGGERS]
    saved_levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, saved_levels):
            lg.setLevel(level)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _load_bars_off():
    """No progress bars for the datasets build and the weight loading (seconds of noise);
    lm-eval's own generation bar stays, it is the only sign of life in a long CPU run."""
    import datasets
    from transformers.utils import logging as hf_logging

    switches = [(datasets.is_progress_bar_enabled(), datasets.disable_progress_bar,
                 datasets.enable_progress_bar),
                (hf_logging.is_progress_bar_enabled(), hf_logging.disable_progress_bar,
                 hf_logging.enable_progress_bar)]
    for _, off, _on in switches:
        off()
    try:
        yield
    finally:
        for was_on, _off, on in switches:
            if was_on:
                on()


def chat_url(base_url: str) -> str:
    """`http://h:p`, `http://h:p/v1` or the full URL -> `http://h:p/v1/chat/completions`."""
    url = base_url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    return url + ("/chat/completions" if url.endswith("/v1") else "/v1/chat/completions")


def served_name(base_url: str, timeout: float = 10.0) -> str:
    """The first model id the server lists at `/v1/models` (what requests must name)."""
    root = chat_url(base_url)[: -len("/chat/completions")]
    try:
        with urllib.request.urlopen(root + "/models", timeout=timeout) as resp:
            return json.load(resp)["data"][0]["id"]
    except (urllib.error.URLError, OSError, KeyError, IndexError, ValueError) as e:
        raise ValueError(f"cannot list the served models at {root}/models: {e}") from None


def _model_spec(model_dir, base_url, served_model, batch_size, device, seed, max_new_tokens):
    """(lm-eval model type, model_args, batch_size, device) for a folder or a server.

    Folder: "hf" with float32 on CPU (bf16 kernels are slow or missing there), the checkpoint's
    own dtype on a GPU. Server: "local-chat-completions" with no tokenizer (offline: the server
    applies its chat template), `batch_size` concurrent requests of one conversation each."""
    if (model_dir is None) == (base_url is None):
        raise ValueError("give exactly one of model_dir (a local model folder) or base_url "
                         "(an OpenAI-compatible server)")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if model_dir is not None:
        folder = Path(model_dir).expanduser()
        if not (folder / "config.json").is_file():
            raise ValueError(f"model folder not found (no config.json): {folder}")
        if device is None:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = "float32" if str(device).startswith("cpu") else "auto"
        args = {"pretrained": str(folder.resolve()), "dtype": dtype}
        return "hf", args, batch_size, device
    args = {"model": served_model, "base_url": chat_url(base_url),
            "num_concurrent": batch_size, "tokenized_requests": False,
            "tokenizer_backend": None, "max_gen_toks": max_new_tokens, "seed": seed,
            "max_retries": 3, "timeout": 600}
    return "local-chat-completions", args, 1, None


def _stderr(value) -> float:
    """lm-eval's standard error of the mean, 0.0 where it has none (fewer than 2 items)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(out) else out


def _summary(results: dict, benchmarks: list[str]) -> dict:
    """{name: {accuracy, n, stderr}} from lm-eval's results (only numbers, never text)."""
    out = {}
    for name in benchmarks:
        row = results["results"][task_name(name)]
        n = results.get("n-samples", {}).get(task_name(name), {}).get("effective")
        out[name] = {"accuracy": float(row[f"{METRIC},none"]), "n": int(n),
                     "stderr": _stderr(row.get(f"{METRIC}_stderr,none"))}
    return out


def run_harness(benchmarks: list[str], *, model_dir=None, base_url=None, served_model=None,
                limit: int | None = None, max_new_tokens: int = 1024, batch_size: int = 8,
                data_dir=None, gpqa_path=None, device=None, seed: int = 0) -> dict:
    """Run lm-eval on our benchmarks against a model folder or a server, fully offline.

    Returns {"benchmarks": {name: {"accuracy", "n", "stderr"}}, "lm_eval_version", "config"}
    where accuracy is the mean of `process_results`' 0/1 grades over the n questions and
    stderr = sample std / sqrt(n) (0.0 for n < 2). Samples are not logged, so no question or
    reply text is returned; the task folder (JSONL, YAML, datasets cache) is deleted."""
    benchmarks = list(dict.fromkeys(benchmarks))
    check_names(benchmarks, gpqa_path)
    model, model_args, lm_batch, device = _model_spec(
        model_dir, base_url, served_model, batch_size, device, seed, max_new_tokens)
    lm_eval = _lm_eval(server=base_url is not None)
    if model == "local-chat-completions" and not model_args["model"]:
        model_args["model"] = served_name(base_url)
    with (tempfile.TemporaryDirectory(prefix="mars-harness-") as tmp,
          contextlib.ExitStack() as offline):
        # the questions first: `hf://` reads them from the hub, before lm-eval goes offline
        tasks = write_tasks(benchmarks, Path(tmp), data_dir=data_dir, gpqa_path=gpqa_path,
                            limit=limit, max_new_tokens=max_new_tokens)
        offline.enter_context(_offline_and_quiet())
        offline.enter_context(_load_bars_off())
        from lm_eval.evaluator import simple_evaluate
        from lm_eval.tasks import TaskManager

        manager = TaskManager(include_path=tmp, include_defaults=False)
        results = simple_evaluate(
            model=model, model_args=model_args, tasks=tasks, batch_size=lm_batch,
            device=device, task_manager=manager, apply_chat_template=True,
            log_samples=False, random_seed=seed, numpy_random_seed=seed,
            torch_random_seed=seed, fewshot_random_seed=seed)
    if not results:
        raise ValueError("lm-eval returned no results")
    config = {"model": model, "model_dir": str(model_dir) if model_dir else None,
              "base_url": model_args.get("base_url"), "served_model": model_args.get("model"),
              "limit": limit, "max_new_tokens": max_new_tokens, "batch_size": batch_size,
              "device": device, "seed": seed, "sampling": dict(SAMPLING),
              "apply_chat_template": True, "tasks": tasks}
    return {"benchmarks": _summary(results, benchmarks),
            "lm_eval_version": lm_eval.__version__, "config": config}
