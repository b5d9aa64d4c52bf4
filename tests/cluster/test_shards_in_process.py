"""Shards without a cluster: the same Prefect tasks in this process. A stage resumed after
one shard finished plays only the missing one, and the merged episodes equal one pass."""
from __future__ import annotations

import pytest

from mars_core.config import ConfigError, load_config
from mars_core.run.layout import (GENERATE_ROLLOUTS, INIT, POLICY_FILE, PREPARE_POLICY,
                                  SHARD_STATS_FILE, shard_folder, stage_dir)
from mars_core.run.commit import read_json, write_json
from mars_core.run.seeds import Stream
from tasks.stage_runner import derive_seed
from tasks.paths import prepare_run_dir
from tasks.shards import shard_slices, write_shard
from tests.conftest import REPO


def test_shard_slices_are_contiguous_balanced_and_cover_everything():
    assert shard_slices(10, 4) == [range(0, 3), range(3, 6), range(6, 8), range(8, 10)]
    assert shard_slices(2, 8) == [range(0, 1), range(1, 2)]  # never an empty shard
    assert shard_slices(0, 3) == [range(0, 0)]
    for n, k in [(7, 3), (64, 5), (1, 1)]:
        assert [i for r in shard_slices(n, k) for i in r] == list(range(n))


@pytest.mark.parametrize("override, words", [
    ("cluster.shards=0", "cluster.shards"), ("cluster.ray.address=' '", "empty address"),
    ("cluster.ray.cpus_per_shard=0", "cpus_per_shard")])
def test_bad_cluster_settings_are_named(override, words):
    with pytest.raises(ConfigError, match=words):
        load_config(REPO / "configs/smoke.yaml", [override])


def test_a_shard_appears_whole_or_not_at_all(tmp_path):
    stage = stage_dir(tmp_path, 0, GENERATE_ROLLOUTS)

    def broken(folder):
        (folder / "half.parquet").write_bytes(b"x")
        raise OSError("disk full")

    with pytest.raises(OSError):
        write_shard(stage, 0, broken)
    assert not shard_folder(stage, 0).exists()
    assert [p.name for p in shard_folder(stage, 0).parent.iterdir()] == []  # no leftovers
    write_shard(stage, 0, lambda f: (f / "a").write_text("1"))
    write_shard(stage, 0, lambda f: (f / "a").write_text("2"))  # there already: kept
    assert (shard_folder(stage, 0) / "a").read_text() == "1"


def test_a_resumed_stage_plays_only_the_missing_shard(tmp_path, tiny_model_dir, prefect_api):
    from prefect import flow

    from tasks.rollout import _play, _sharded, plan_iteration, rollout_shard

    run_dir = str(tmp_path / "run")
    cfg = load_config(REPO / "configs/smoke.yaml", [f"model.path={tiny_model_dir}",
                                                    "rollout.episodes_per_iteration=4",
                                                    "cluster.shards=2"])
    prepare_run_dir(tmp_path / "run", cfg)
    init = stage_dir(run_dir, INIT, PREPARE_POLICY)
    init.mkdir(parents=True)
    write_json(init / POLICY_FILE, {"path": str(tiny_model_dir), "base": str(tiny_model_dir)})
    seed = derive_seed(cfg, Stream.ROLLOUTS, 0)
    specs = plan_iteration(cfg, run_dir, 0, seed)
    stage = stage_dir(run_dir, 0, GENERATE_ROLLOUTS)
    first = rollout_shard.fn(run_dir, 0, 1, 2)  # a killed attempt got this far
    assert first["episodes"] == 2

    @flow
    def resume():
        return _sharded(cfg, run_dir, 0, len(specs))

    episodes, stats, metrics = resume()
    assert read_json(shard_folder(stage, 1) / SHARD_STATS_FILE) == first  # kept, not replayed
    assert read_json(shard_folder(stage, 0) / SHARD_STATS_FILE)["episodes"] == 2
    assert metrics["rollout/shards"] == 2 and stats.generated_tokens > 0
    alone, _, _, _ = _play(cfg, run_dir, 0, specs, seed, progress=False)
    assert [e.episode_id for e in episodes] == [e.episode_id for e in alone]
    assert [[t.completion_ids for t in e.turns] for e in episodes] == \
        [[t.completion_ids for t in e.turns] for e in alone]
    assert [e.outcomes for e in episodes] == [e.outcomes for e in alone]
