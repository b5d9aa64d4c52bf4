"""Two runs of the same command, one of them faulted, must end equal: checkpoint bytes, every
episode once, every metric step once (same values where the pipeline is deterministic), one
registered version, one MLflow run per evaluation."""
from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl
from mlflow import MlflowClient

from mars_core.run.layout import (EPISODES_FILE, GENERATE_ROLLOUTS, checkpoint_dir, final_model_dir,
                                  finished_stages, stage_dir)
from tasks.paths import run_key

NONDETERMINISTIC = ("time/", "memory/", "tokens_per_s", "_s", "checkpoint/size_mb")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _client(run_dir: Path, tracking: str | None = None) -> MlflowClient:
    return MlflowClient(tracking_uri=tracking or f"sqlite:///{run_dir.parent}/mlflow.db")


def _runs(client: MlflowClient, run_dir: Path) -> dict[str, object]:
    """The training run and its nested runs, by name relative to the run folder."""
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    key = run_key(run_dir)  # the folder's random key: the run's `mars.key`, `<key>#<label>` nested
    mine = [r for r in runs if r.data.tags.get("mars.key", "").split("#")[0] == key]
    names = [r.info.run_name for r in mine]
    assert len(names) == len(set(names)), f"an MLflow run was created twice: {sorted(names)}"
    return {r.info.run_name.removeprefix(run_dir.name): r for r in mine}


def first_difference(ref: Path, got: Path) -> str:
    """The first stage file (in run order) whose bytes differ between two runs: where a
    mismatch of the last checkpoint started (weights, a batch, the episodes)."""
    for stage in finished_stages(ref):
        for f in sorted(stage.rglob("*")):
            if f.suffix in (".safetensors", ".parquet") and f.is_file():
                other = got / f.relative_to(ref)
                if not other.is_file() or _digest(other) != _digest(f):
                    return str(f.relative_to(ref))
    return "none"


def assert_same_run(ref: Path, got: Path, iterations: int = 2, tracking: str | None = None) -> None:
    """`tracking`: where `got` tracked (default: the SQLite store beside it)."""
    last = checkpoint_dir(got, iterations - 1)
    for f in sorted((ref / last.relative_to(got)).glob("*.safetensors")):
        assert _digest(last / f.name) == _digest(f), (
            f"checkpoint bytes differ: {f.name}; the first file that differs: "
            f"{first_difference(ref, got)}")
    for f in sorted(final_model_dir(ref).glob("*.safetensors")):
        assert _digest(final_model_dir(got) / f.name) == _digest(f)
    for k in range(iterations):
        ids, want = (pl.read_parquet(stage_dir(r, k, GENERATE_ROLLOUTS) / EPISODES_FILE)
                     ["episode_id"] for r in (got, ref))
        assert ids.n_unique() == len(ids), f"an episode counted twice in iteration {k}"
        assert sorted(ids) == sorted(want)
    cref, cgot = _client(ref), _client(got, tracking)
    rref, rgot = _runs(cref, ref), _runs(cgot, got)
    assert sorted(rgot) == sorted(rref)
    for label, r in rref.items():
        g = rgot[label]
        assert g.info.status == r.info.status == "FINISHED", label
        assert sorted(g.data.metrics) == sorted(r.data.metrics), label
        for key in r.data.metrics:
            want = sorted((m.step, m.value) for m in cref.get_metric_history(r.info.run_id, key))
            have = sorted((m.step, m.value) for m in cgot.get_metric_history(g.info.run_id, key))
            assert [s for s, _ in have] == [s for s, _ in want], f"{label} {key}: steps {have}"
            if not any(tag in key for tag in NONDETERMINISTIC):
                assert [v for _, v in have] == [v for _, v in want], f"{label} {key}"
        arts = sorted(a.path for a in cgot.list_artifacts(g.info.run_id))
        assert arts == sorted(a.path for a in cref.list_artifacts(r.info.run_id)), label
    name = "mars-smoke"
    versions = cgot.search_model_versions(f"name='{name}' and run_id='{rgot[''].info.run_id}'")
    assert len(versions) == 1, f"{len(versions)} registered versions"
    assert cgot.get_model_version_by_alias(name, "candidate").version == versions[0].version
