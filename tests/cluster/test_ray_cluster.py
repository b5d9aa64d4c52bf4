"""A Ray cluster of two nodes on this machine (`ray start --head` plus `ray start --address`,
each node with one CPU), started and stopped here: the smoke preset's rollouts, a quick
strategic evaluation and a reasoning-benchmark evaluation, sharded over it as Prefect tasks,
equal the single-process results. `make test` runs the sharded rollouts (with the evaluation's
shards) and the bf16 case; `make test-full` the rest (marked `full`)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import pytest

from mars_core.run.layout import (EPISODES_FILE, EVALUATE, GENERATE_ROLLOUTS, METRICS_FILE,
                                  RESULTS_FILE, TURNS_FILE, checkpoint_dir, shards_dir, stage_dir)
from tests.conftest import REPO
from tests.faults.conftest import run_env, train
from tests.raycluster import two_node_cluster

pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def ray_cluster():
    with two_node_cluster() as address:
        yield address


def _train(runs: Path, name: str, model: Path, prefect_api: str, *extra: str):
    args = [sys.executable, "-m", "cli.main", "train", "--config", str(REPO / "configs/smoke.yaml"),
            "--runs-dir", str(runs), "--run-name", name, "--set", f"model.path={model}",
            "--set", "warmup.steps=2", "--set", "warmup.probe_games=1",
            "--set", "run.iterations=1", "--set", "evaluation.every=1",
            "--set", "evaluation.at_start=false",
            "--set", "rollout.episodes_per_iteration=4", *extra]
    done = train(args, run_env(prefect_api))
    assert done.returncode == 0, done.stderr[-3000:]
    return runs / name


def test_sharded_rollouts_on_two_nodes_equal_one_process(tmp_path, tiny_model_dir, prefect_api,
                                                         ray_cluster):
    one = _train(tmp_path / "runs", "one", tiny_model_dir, prefect_api)
    two = _train(tmp_path / "runs", "two", tiny_model_dir, prefect_api,
                 "--set", "cluster.shards=2", "--set", f"cluster.ray.address={ray_cluster}")
    for table in (EPISODES_FILE, TURNS_FILE):
        a = pl.read_parquet(stage_dir(one, 0, GENERATE_ROLLOUTS) / table)
        b = pl.read_parquet(stage_dir(two, 0, GENERATE_ROLLOUTS) / table)
        exact = [c for c in a.columns if c != "logprobs"]
        assert len(a) > 0 and a.select(exact).equals(b.select(exact)), table
    # every token, move and outcome is the same; a sampled token's log-prob may differ in the
    # last bits with the batch it was computed in (the trainer recomputes its own)
    for x, y in zip(a["logprobs"].to_list(), b["logprobs"].to_list()):
        assert len(x) == len(y) and max((abs(p - q) for p, q in zip(x, y)), default=0) < 1e-4
    metrics = json.loads((stage_dir(two, 0, GENERATE_ROLLOUTS) / METRICS_FILE).read_text())
    assert metrics["rollout/shards"] == 2 and metrics["rollout/shard_nodes"] == 2
    assert not shards_dir(stage_dir(two, 0, GENERATE_ROLLOUTS)).exists()  # merged, then dropped
    # the evaluation after the step, sharded the same way: the same games, the same records
    results = [[{k: v for k, v in rec.items() if k != "policy"}  # the policy: its run's path
                for rec in json.loads((stage_dir(r, 0, EVALUATE) / RESULTS_FILE).read_text())]
               for r in (one, two)]
    assert results[0] == results[1] and results[0]
    a, b = (pl.read_parquet(stage_dir(r, 0, EVALUATE) / EPISODES_FILE) for r in (one, two))
    assert a.equals(b)
    metrics = json.loads((stage_dir(two, 0, EVALUATE) / METRICS_FILE).read_text())
    assert metrics["evaluate/shards"] == 2 and metrics["evaluate/shard_nodes"] == 2
    for f in checkpoint_dir(one, 0).glob("*.safetensors"):  # the same update
        assert f.read_bytes() == (checkpoint_dir(two, 0) / f.name).read_bytes()
    from prefect import get_client

    with get_client(sync_client=True) as client:
        names = {r.name for r in client.read_task_runs() if r.name.startswith("rollout_shard")}
    assert {"rollout_shard iter_0000 0/2", "rollout_shard iter_0000 1/2"} <= names
    with get_client(sync_client=True) as client:
        names = {r.name for r in client.read_task_runs() if r.name.startswith("evaluate_shard")}
    assert {"evaluate_shard step 1 0/2", "evaluate_shard step 1 1/2"} <= names


@pytest.mark.full  # `make test`: the two-node sharded run above; bf16 play: tests/unit/test_batch_invariance.py
def test_bf16_rollouts_of_the_embedded_model_equal_one_process(tmp_path, embedded_dir,
                                                                prefect_api, ray_cluster):
    """Issue 64's case: the embedded model in bf16 (the precision of every GPU run and of
    AVX512-BF16 or AMX CPUs), one Kuhn Poker iteration of 6 games at seed 17, in one process
    and in 3 shards over the two nodes: in the batch-invariant mode every column, log-probs
    included, and the checkpoint bytes are equal (without it, 6 of 6 replies differed)."""
    common = ("--set", "model.bf16=on", "--set", "model.batch_invariant=on",
              "--set", "run.seed=17", "--set", "rollout.games=[kuhn_poker]",
              "--set", "rollout.episodes_per_iteration=6", "--set", "evaluation.every=0",
              "--set", "warmup.steps=0")
    one = _train(tmp_path / "runs", "one", embedded_dir, prefect_api, *common)
    three = _train(tmp_path / "runs", "three", embedded_dir, prefect_api, *common,
                   "--set", "cluster.shards=3", "--set", f"cluster.ray.address={ray_cluster}")
    for table in (EPISODES_FILE, TURNS_FILE):
        a = pl.read_parquet(stage_dir(one, 0, GENERATE_ROLLOUTS) / table)
        b = pl.read_parquet(stage_dir(three, 0, GENERATE_ROLLOUTS) / table)
        assert len(a) > 0 and a.equals(b), table
    metrics = json.loads((stage_dir(three, 0, GENERATE_ROLLOUTS) / METRICS_FILE).read_text())
    assert metrics["rollout/shards"] == 3 and metrics["rollout/shard_nodes"] == 2
    files = sorted(checkpoint_dir(one, 0).glob("**/*.safetensors"))
    assert files
    for f in files:  # the same update
        twin = checkpoint_dir(three, 0) / f.relative_to(checkpoint_dir(one, 0))
        assert f.read_bytes() == twin.read_bytes(), f.name


@pytest.mark.full  # `make test` shards rollouts and evaluation in the first test
def test_sharded_strategic_evaluation_equals_one_process(tmp_path, tiny_model_dir, prefect_api,
                                                         ray_cluster):
    def evaluate(out: Path, *extra: str) -> list[dict]:
        args = [sys.executable, "-m", "cli.main", "eval", "strategic", "--policy",
                str(tiny_model_dir), "--games", "tic_tac_toe,kuhn_poker", "--opponents",
                "bot:random", "--n", "2", "--out", str(out), "--runs-dir", str(tmp_path / "runs"),
                "--set", "play.max_new_tokens=16", *extra]
        done = train(args, run_env(prefect_api))
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(out.read_text())

    one = evaluate(tmp_path / "one.json")
    two = evaluate(tmp_path / "two.json", "--set", "cluster.shards=2",
                   "--set", f"cluster.ray.address={ray_cluster}")
    assert [r["game"] for r in one] == ["tic_tac_toe"] * 2 + ["kuhn_poker"] * 2
    assert one == two


@pytest.mark.full  # `make test` shards rollouts and evaluation in the first test
@pytest.mark.benchmarks("gsm8k", "aqua")
def test_sharded_reasoning_benchmarks_equal_one_process(tmp_path, tiny_model_dir, prefect_api,
                                                        ray_cluster):
    def evaluate(name: str, *extra: str) -> tuple[dict, dict]:
        out = tmp_path / f"{name}.json"
        args = [sys.executable, "-m", "cli.main", "eval", "mas", "--model", str(tiny_model_dir),
                "--systems", "single,mad", "--benchmarks", "gsm8k,aqua", "--limit", "2",
                "--max-tokens", "12", "--out", str(out), "--runs-dir", str(tmp_path / "runs"),
                *extra]
        done = train(args, run_env(prefect_api))
        assert done.returncode == 0, done.stderr[-3000:]
        rows = json.loads(out.read_text())["models"]["model"]["rows"]
        replies = {}
        for f in sorted((tmp_path / f"{name}_transcripts/model").rglob("*.jsonl")):
            for line in f.read_text().splitlines():
                r = json.loads(line)
                replies[(r["system"], r["benchmark"], r["id"])] = (
                    r["prediction"], [t["reply"] for t in r["transcript"]])
        return rows, replies

    one_rows, one = evaluate("one")
    two_rows, two = evaluate("two", "--shards", "3", "--ray-address", ray_cluster)
    assert len(one) == 8 and one == two  # 2 systems x 2 benchmarks x 2 questions
    assert one_rows == two_rows


@pytest.mark.full  # `make test`: overlap in one process (tests/flows/test_overlap.py)
def test_overlapped_rollouts_on_two_nodes_equal_one_process(tmp_path, tiny_model_dir, prefect_api,
                                                            ray_cluster):
    """`rollout.overlap` on the cluster: iteration 1's shards are played from the flow's
    second thread while iteration 0 trains; games and weights equal the one-process run."""
    overlap = ("--set", "rollout.overlap=true", "--set", "run.iterations=2",
               "--set", "evaluation.every=0")
    one = _train(tmp_path / "runs", "one", tiny_model_dir, prefect_api, *overlap)
    two = _train(tmp_path / "runs", "two", tiny_model_dir, prefect_api, *overlap,
                 "--set", "cluster.shards=2", "--set", f"cluster.ray.address={ray_cluster}")
    for k in (0, 1):
        a, b = (pl.read_parquet(stage_dir(r, k, GENERATE_ROLLOUTS) / EPISODES_FILE)
                for r in (one, two))
        assert len(a) > 0 and a.equals(b), k
    metrics = json.loads((stage_dir(two, 1, GENERATE_ROLLOUTS) / METRICS_FILE).read_text())
    assert metrics["rollout/shards"] == 2
    for f in checkpoint_dir(one, 1).glob("*.safetensors"):
        assert f.read_bytes() == (checkpoint_dir(two, 1) / f.name).read_bytes()
