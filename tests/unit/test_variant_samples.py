"""bench/variant_samples.py: a finished run's batches put through compute_advantages again,
under its own config (which must give back what it trained on) and under each claim-1
variant; the greedy update trains the same rows whatever the estimator, except in states
without a label."""
from __future__ import annotations

import importlib.util

import polars as pl

from tests.conftest import REPO
from tests.unit.test_all_actions import _frame, _turn

SPEC = importlib.util.spec_from_file_location("variant_samples_under_test",
                                              REPO / "bench" / "variant_samples.py")
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)

# per batch: a state where both actions were seen (labelled), and one where only <BET> was,
# with two different returns (no label: its turns keep the estimator's advantage)
BATCHES = [[_turn(0, [1, 2], "<BET>", -2.0), _turn(1, [1, 2], "<PASS>", -1.0),
            _turn(2, [3, 4], "<BET>", 1.0, role="player_1"),
            _turn(3, [3, 4], "<BET>", -1.0, role="player_1")],
           [_turn(4, [1, 2], "<BET>", -2.0), _turn(5, [1, 2], "<BET>", -1.5),
            _turn(6, [3, 4], "<BET>", 2.0, role="player_1"),
            _turn(7, [3, 4], "<BET>", -1.0, role="player_1")]]
UNLABELLED_TURNS = 2  # a batch's turns in the state without a label


def _run(tmp_path, monkeypatch, overrides):
    from mars_core.config import dump_config, load_config
    from mars_core.run.checkpoint import ESTIMATOR_STATE
    from mars_core.run.layout import (BATCH_FILE, BUILD_BATCH, COMPUTE_ADVANTAGES, CONFIG_FILE,
                                      SAVE_CHECKPOINT, stage_dir)
    from tasks import batching, stage as stage_module
    from tests.unit.test_stage import _offline_run_stage

    run = tmp_path / "run"
    run.mkdir()
    cfg = load_config(REPO / "configs" / "smoke.yaml", overrides)
    (run / CONFIG_FILE).write_text(dump_config(cfg))
    monkeypatch.setattr(stage_module, "run_stage", _offline_run_stage)
    for k, rows in enumerate(BATCHES):
        folder = stage_dir(run, k, BUILD_BATCH)
        folder.mkdir(parents=True)
        _frame(rows).drop("advantage").write_parquet(folder / BATCH_FILE)
        batching.compute_advantages.fn(str(run), k)
        checkpoint = stage_dir(run, k, SAVE_CHECKPOINT)
        checkpoint.mkdir(parents=True)
        out = stage_dir(run, k, COMPUTE_ADVANTAGES)
        (checkpoint / ESTIMATOR_STATE).write_text((out / ESTIMATOR_STATE).read_text())
    return run


def _table(out: str) -> dict[str, dict[str, int]]:
    """{iteration: {column: differing samples}} from the printed table."""
    lines = [ln for ln in out.splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return {cells[0]: dict(zip(head[2:], map(int, cells[2:])))
            for cells in ([c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:])}


def test_greedy_trains_the_same_rows_under_every_variant_but_in_unlabelled_states(
        tmp_path, monkeypatch, capsys):
    run = _run(tmp_path, monkeypatch, ["algorithm.train_actions=greedy",
                                       "algorithm.action_memory=8",
                                       "algorithm.drop_zero_advantage=true"])
    assert bench.main([str(run)]) == 0
    table = _table(capsys.readouterr().out)
    assert set(table) == {"0", "1", "all 2"}
    variants = [v.stem for v in bench.VARIANTS]
    assert len(variants) == 5 and "mars" in variants
    for k in ("0", "1"):
        assert table[k]["own config"] == 0  # the recomputation gives back what was trained
        assert all(table[k][v] <= UNLABELLED_TURNS for v in variants)
    # ... and there the estimator shows: the variants do not all agree with the run
    assert max(table["all 2"][v] for v in variants) > 0


def test_the_estimator_weighted_update_differs_where_greedy_does_not(tmp_path, monkeypatch,
                                                                     capsys):
    run = _run(tmp_path, monkeypatch, [])  # train_actions: sampled, the smoke estimator
    assert bench.main([str(run)]) == 0
    out = capsys.readouterr().out
    table = _table(out)
    assert table["0"]["own config"] == 0 and table["1"]["own config"] == 0
    assert max(table["all 2"][v.stem] for v in bench.VARIANTS) > 2 * UNLABELLED_TURNS
    assert out.splitlines()[-1].startswith("against grpo, over all batches: mars ")


def test_the_differences_are_counted_by_row_and_advantage():
    a = pl.DataFrame({"turn_id": ["t0", "t1"], "completion_ids": [[1], [2]],
                      "advantage": [1.0, 0.5]})
    assert bench.differing(a, a) == 0
    assert bench.differing(a, a.with_columns(pl.Series("advantage", [1.0, 0.25]))) == 1
    assert bench.differing(a, a.head(1)) == 1
    assert bench.differing(a, a.with_columns(pl.Series("completion_ids", [[1], [3]]))) == 2


def test_a_folder_that_is_not_a_finished_run_is_one_line(tmp_path, capsys):
    assert bench.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no config.yaml" in err[0]
    (tmp_path / "config.yaml").write_text((REPO / "configs" / "smoke.yaml").read_text())
    assert bench.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no iteration" in err[0]
