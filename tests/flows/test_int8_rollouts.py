"""`rollout.int8`: the training games are sampled by a dynamic-int8 copy of each iteration's
policy, rebuilt every iteration, while the evaluations play the exact policy; the update sees
the difference as its behaviour gap and corrects it with the importance weight."""
from __future__ import annotations

import pytest

import mars_core.engines.hf as hf
from mars_core.config import load_config
from mars_core.run.commit import read_json
from mars_core.run.layout import EVALUATE, GENERATE_ROLLOUTS, METRICS_FILE, stage_dir
from tests.flows.test_overlap import SMOKE, _gap, _sets, _train


@pytest.mark.full  # an optional speed-up of play; `make test`: its refusals below
def test_int8_samples_the_training_games_only(tmp_path, prefect_api, tiny_model_dir,
                                              monkeypatch):
    quantized = []
    quantize = hf.quantize_int8
    monkeypatch.setattr(hf, "quantize_int8", lambda m: quantized.append(1) or quantize(m))
    runs = tmp_path / "runs"
    sets = [*_sets(tiny_model_dir), "run.iterations=2", "evaluation.every=1",
            "evaluation.games_per_seat=1"]
    assert _train(runs, "q", [*sets, "rollout.int8=true"]) == 0
    assert len(quantized) == 2  # one int8 copy per iteration's games, none for evaluations
    run = runs / "q"
    assert read_json(stage_dir(run, 0, GENERATE_ROLLOUTS) / METRICS_FILE)["rollout/int8"] == 1.0
    # the evaluation says which precision played (fp32 here: the suite sets MARS_BF16_AUTO=off)
    assert read_json(stage_dir(run, 0, EVALUATE) / METRICS_FILE)["evaluate/bf16"] == 0.0
    assert _train(runs, "f", sets) == 0  # the exact policy plays: no gap
    assert _gap(runs / "f", 0) < 1e-4 < _gap(run, 0)


@pytest.mark.parametrize("sets,message", [
    (["rollout.int8=true", "algorithm.is_cap=null"], "rollout.int8 .* algorithm.is_cap"),
    (["rollout.int8=true", "engine.backend=vllm"], "in-process engine"),
])
def test_int8_is_refused_where_it_cannot_be_corrected_or_run(sets, message):
    with pytest.raises(Exception, match=message):
        load_config(SMOKE, sets)
