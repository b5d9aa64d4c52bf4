import pytest
import yaml

from mars_core.evaluation import mean_ci95, normalized_return, seat_record, suite_specs
from mars_core.types import Episode
from tests.conftest import REPO


def test_mean_ci95():
    assert mean_ci95([]) == (0.0, 0.0)
    assert mean_ci95([1.0]) == (1.0, 0.0)
    mean, half = mean_ci95([0.0, 1.0, 0.0, 1.0])
    assert mean == 0.5 and half == pytest.approx(1.96 * (1 / 3) ** 0.5 / 2)


def test_seat_record_counts_outcomes():
    eps = [Episode(f"e{i}", "tic_tac_toe", i, ("policy", "bot:random"), r, o)
           for i, (r, o) in enumerate([((1.0, -1.0), ("win", "loss")), ((0.0, 0.0), ("draw", "draw")),
                                       ((-1.0, 0.0), ("invalid", "other_invalid")),
                                       ((-1.0, 1.0), ("loss", "win"))])]
    r = seat_record("tic_tac_toe", "m", "bot:random", 0, eps)
    assert (r["win_rate"], r["draw_rate"], r["loss_rate"], r["invalid_rate"]) == (0.25, 0.25, 0.25, 0.25)
    assert r["mean_return"] == pytest.approx(-0.25) and r["n"] == 4
    assert r["normalized_return"] == pytest.approx(37.5)


def test_normalized_return_scales():
    assert normalized_return("tic_tac_toe", -1.0) == 0.0
    assert normalized_return("tic_tac_toe", 0.0) == 50.0
    assert normalized_return("kuhn_poker", -1 / 18) == pytest.approx(100 * (2 - 1 / 18) / 4)
    assert normalized_return("leduc_poker", 13.0) == 100.0


def test_suite_specs_cover_both_seats_with_the_same_deals():
    specs, cells = suite_specs({"tic_tac_toe": ("bot:mcts-10",)}, "policy", 3, seed=5)
    assert [s.agents for s in specs] == [("policy", "bot:mcts-10")] * 3 + [("bot:mcts-10", "policy")] * 3
    assert len({s.episode_id for s in specs}) == 6
    assert [s.seed for s in specs[:3]] == [s.seed for s in specs[3:]]
    assert [c.seats for c in cells] == [(0,)] * 3 + [(1,)] * 3


def test_self_play_cell_reports_every_seat_from_one_set_of_games():
    specs, cells = suite_specs({"tic_tac_toe": ("self",)}, "policy", 4, seed=0)
    assert len(specs) == 4 and all(s.agents == ("policy", "policy") for s in specs)
    assert cells[0].seats == (0, 1)


def test_prefect_yaml_deployments_point_at_the_flow():
    from prefect.flows import load_flow_from_entrypoint

    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    for dep in spec["deployments"]:
        path, name = dep["entrypoint"].split(":")
        flow = load_flow_from_entrypoint(f"{REPO / path}:{name}")
        assert flow.name == "mars-train"
        assert (REPO / dep["parameters"]["config"]).is_file()
