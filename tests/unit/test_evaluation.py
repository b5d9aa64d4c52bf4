import pytest
import yaml

from mars_core.evaluation import eval_specs, mean_ci95, seat_summary
from mars_core.types import Episode
from tests.conftest import REPO


def test_mean_ci95():
    assert mean_ci95([]) == (0.0, 0.0)
    assert mean_ci95([1.0]) == (1.0, 0.0)
    mean, half = mean_ci95([0.0, 1.0, 0.0, 1.0])
    assert mean == 0.5 and half == pytest.approx(1.96 * (1 / 3) ** 0.5 / 2)


def test_seat_summary_counts_outcomes():
    eps = [Episode(f"e{i}", "tic_tac_toe", i, ("policy", "bot:random"), r, o)
           for i, (r, o) in enumerate([((1.0, -1.0), ("win", "loss")), ((0.0, 0.0), ("draw", "draw")),
                                       ((-1.0, 0.0), ("invalid", "other_invalid")),
                                       ((-1.0, 1.0), ("loss", "win"))])]
    s = seat_summary(eps, 0)
    assert (s["win_rate"], s["draw_rate"], s["loss_rate"], s["invalid_rate"]) == (0.25, 0.25, 0.25, 0.25)
    assert s["mean_return"] == pytest.approx(-0.25) and s["n"] == 4


def test_eval_specs_cover_both_seats():
    specs = eval_specs("tic_tac_toe", 2, "bot:mcts-10", 3, seed=5)
    assert [s.agents for s in specs] == [("policy", "bot:mcts-10")] * 3 + [("bot:mcts-10", "policy")] * 3
    assert len({s.episode_id for s in specs}) == 6


def test_prefect_yaml_deployments_point_at_the_flow():
    from prefect.flows import load_flow_from_entrypoint

    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    for dep in spec["deployments"]:
        path, name = dep["entrypoint"].split(":")
        flow = load_flow_from_entrypoint(f"{REPO / path}:{name}")
        assert flow.name == "mars-train"
        assert (REPO / dep["parameters"]["config"]).is_file()
