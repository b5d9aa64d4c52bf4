"""The ablation's seed-level aggregation (`mars_core.strength.ablation`) on synthetic evaluations: a
variant better on every seed is detected, one that differs by chance is not, and a gain that
one seed's deals show but the seeds disagree on does not clear either (the seed is the unit of
replication, not the deal)."""
from __future__ import annotations

import json
import random

import pytest

from mars_core.strength.ablation import (ALL, ablation_markdown, ablation_plot, ablation_rows,
                                         add_gains, clears, curve_bands, per_seed_rows,
                                         seed_interval)
from mars_core.strength.suite import paired_rows
from mars_core.types import Episode
from mars_core.vocab import POLICY, Outcome

SEEDS = (0, 1, 2)
DEALS = 120


def _episodes(returns: list[float], opponent: str = "bot:random") -> list[Episode]:
    """Kuhn Poker games, the policy in seat 0 on even deals and seat 1 on odd ones; `returns`
    are the policy's chips per deal (the deal's id says which deal it is)."""
    out = []
    for i, r in enumerate(returns):
        seat = i % 2
        agents = (POLICY, opponent) if seat == 0 else (opponent, POLICY)
        mine = Outcome.WIN if r > 0 else Outcome.LOSS
        theirs = Outcome.LOSS if r > 0 else Outcome.WIN
        out.append(Episode(f"eval-kuhn_poker-{opponent}-s{seat}-{i:05d}", "kuhn_poker", i, agents,
                           (r, -r) if seat == 0 else (-r, r),
                           (mine, theirs) if seat == 0 else (theirs, mine)))
    return out


def _deal_returns(rng: random.Random) -> list[float]:
    return [rng.choice((-2.0, -1.0, 1.0, 2.0)) for _ in range(DEALS)]


def _comparison(variants) -> list[dict]:
    """`variants`: name -> f(seed, the reference's returns on that seed's deals) -> returns."""
    seed_rows = []
    for seed in SEEDS:
        reference = _deal_returns(random.Random(1000 + seed))
        evaluations = {"mars": _episodes(reference)}
        evaluations |= {name: _episodes(f(seed, reference)) for name, f in variants.items()}
        seed_rows += [{**r, "seed": seed, "base": "kuhn"}
                      for r in per_seed_rows(evaluations, "mars")]
    return ablation_rows(seed_rows, "mars")


def _row(rows, variant, opponent="bot:random"):
    return next(r for r in rows if r["variant"] == variant and r["opponent"] == opponent)


def test_a_variant_better_on_every_seed_clears_twice_its_half_width():
    # "better" turns a third of the reference's lost deals into wins, on every seed
    rows = _comparison({"better": lambda seed, ref: [abs(r) if i % 3 == 0 else r
                                                     for i, r in enumerate(ref)]})
    better = _row(rows, "better")
    assert better["seeds"] == list(SEEDS) and len(better["diff_per_seed"]) == 3
    assert all(d > 0 for d in better["diff_per_seed"])
    assert better["diff"] > 2 * better["diff_ci95"] > 0 and better["clears"]
    assert better["paired_games"] == [DEALS] * 3
    mars = _row(rows, "mars")
    assert mars["diff"] is None and not mars["clears"]
    assert better["normalized_return"] > mars["normalized_return"]
    text = ablation_markdown(rows, "mars")
    assert "| kuhn | kuhn_poker | bot:random | better | 3 |" in text and " *" in text
    assert "Differences that clear twice their half-width: better on kuhn_poker" in text


def test_no_difference_does_not_clear():
    # "same" plays other deals' luck: fresh returns from the reference's own distribution
    rows = _comparison({"same": lambda seed, ref: _deal_returns(random.Random(2000 + seed))})
    same = _row(rows, "same")
    assert same["diff_ci95"] is not None and not same["clears"]
    assert abs(same["diff"]) <= 2 * same["diff_ci95"]
    assert "No difference from mars clears twice its half-width." in ablation_markdown(rows, "mars")


def test_seeds_that_disagree_do_not_clear_though_each_seeds_deals_do():
    # within each seed the paired difference is large (every deal moves the same way), but
    # its sign changes with the seed: across seeds there is no established difference
    rows = _comparison({"flaky": lambda seed, ref: [abs(r) if seed != 1 else -abs(r)
                                                    for r in ref]})
    flaky = _row(rows, "flaky")
    per_seed = flaky["diff_per_seed"]
    assert per_seed[0] > 0 > per_seed[1] and per_seed[2] > 0
    assert all(abs(d) > 2 * h for d, h in zip(per_seed, flaky["diff_ci95_per_seed"]))
    assert not flaky["clears"]


def test_one_seed_gives_no_interval_and_nothing_clears():
    assert seed_interval([]) == (None, None)
    assert seed_interval([50.0]) == (50.0, None)
    assert seed_interval([40.0, 60.0])[1] > 0
    assert not clears(30.0, None) and not clears(None, 1.0) and clears(-3.0, 1.0)
    ref = _deal_returns(random.Random(7))
    rows = ablation_rows([{**r, "seed": 0} for r in per_seed_rows(
        {"mars": _episodes(ref), "better": _episodes([abs(r) for r in ref])}, "mars")], "mars")
    better = _row(rows, "better")
    assert better["diff"] > 0 and better["diff_ci95"] is None and not better["clears"]
    assert "(1 seed)" in ablation_markdown(rows, "mars")


def test_several_opponents_get_a_game_row_and_the_outputs_write(tmp_path):
    seed_rows = []
    for seed in SEEDS:
        ref = _deal_returns(random.Random(seed))
        evaluations = {"mars": _episodes(ref) + _episodes(ref, "bot:nash"),
                       "grpo": _episodes([-abs(r) for r in ref]) + _episodes(ref, "bot:nash")}
        seed_rows += [{**r, "seed": seed, "base": "kuhn"}
                      for r in per_seed_rows(evaluations, "mars")]
    rows = ablation_rows(seed_rows, "mars")
    assert {r["opponent"] for r in rows} == {"bot:random", "bot:nash", ALL}
    nash, random_, both = (_row(rows, "grpo", o) for o in ("bot:nash", "bot:random", ALL))
    assert nash["diff"] == 0.0 and random_["diff"] < 0
    assert both["diff"] == (nash["diff"] + random_["diff"]) / 2
    curves = {("kuhn", v, s): [{"iterations": 0, "kuhn_poker vs bot:random": 50.0 + s},
                               {"iterations": 6, "kuhn_poker vs bot:random": 55.0 + s + i}]
              for i, v in enumerate(("mars", "grpo")) for s in SEEDS}
    bands = curve_bands(curves)
    assert len(bands) == 4 and all(b["seeds"] == list(SEEDS) for b in bands)
    grpo_end = next(b for b in bands if b["variant"] == "grpo" and b["iterations"] == 6)
    assert grpo_end["mean"] == 57.0 and grpo_end["ci95"] > 0
    ablation_plot(rows, bands, tmp_path / "ablation.png", title="synthetic")
    assert (tmp_path / "ablation.png").stat().st_size > 1000
    json.dumps(rows)  # the flow writes the rows as JSON


def test_each_runs_gain_over_its_own_start_is_aggregated_over_seeds():
    # per seed: "mars" and "flat" each start from the same policy; mars's final turns every
    # lost deal into a win, flat's final plays exactly its start (the run's final/strength rows)
    seed_rows = []
    for seed in SEEDS:
        start = _deal_returns(random.Random(seed))
        finals = {"mars": [abs(r) for r in start], "flat": list(start)}
        rows = per_seed_rows({v: _episodes(f) + _episodes(start, "bot:nash")
                              for v, f in finals.items()}, "mars")
        for v, final in finals.items():
            strength = paired_rows({"start": _episodes(start) + _episodes(start, "bot:nash"),
                                    "final": _episodes(final) + _episodes(start, "bot:nash")},
                                   "start")
            mine = add_gains([r for r in rows if r["policy"] == v], strength)
            seed_rows += [{**r, "seed": seed, "base": "kuhn"} for r in mine]
    rows = ablation_rows(seed_rows, "mars")
    mars, flat = _row(rows, "mars"), _row(rows, "flat")
    assert len(mars["gain_per_seed"]) == 3 and mars["gain"] > 2 * mars["gain_ci95"] > 0
    assert flat["gain"] == 0.0 and flat["gain_per_seed"] == [0.0] * 3
    assert _row(rows, "mars", "bot:nash")["gain"] == 0.0
    both = _row(rows, "mars", ALL)  # the mean of its opponents' gains
    assert both["gain"] == mars["gain"] / 2
    text = ablation_markdown(rows, "mars")
    assert "| vs its start (paired) | vs mars (paired) |" in text
    assert f"| {mars['gain']:+.1f} ± {mars['gain_ci95']:.1f} | - |" in text
    # a run without a start evaluation has no gain, and says "-"
    lone = ablation_rows([{**r, "seed": 0} for r in add_gains(
        per_seed_rows({"mars": _episodes(_deal_returns(random.Random(3)))}, "mars"), [])],
        "mars")
    assert lone[0]["gain"] is None and "| 0% | - | - |" in ablation_markdown(lone, "mars")


@pytest.mark.parametrize("extra, message", [
    (["--seeds", "0,x"], "--seeds takes distinct whole numbers"),
    (["--seeds", "1,1"], "--seeds takes distinct whole numbers"),
    (["--bases", "configs/lab/kuhn_ppo.yaml"], "--bases goes with --seeds"),
    (["--seeds", "0", "--games", "kuhn_poker"], "--games does not go with --seeds"),
    (["--seeds", "0", "--set", "evaluation.every=0"], "never evaluates"),
    (["--seeds", "0", "--variants", "configs/ablations/variants/mars.yaml,x/mars.yaml"],
     "--variants: two files share a file name"),
])
def test_compare_across_seeds_refuses_bad_input_in_one_line(tmp_path, capsys, extra, message):
    from cli.main import main

    rc = main(["compare", "--runs-dir", str(tmp_path / "runs"), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()
