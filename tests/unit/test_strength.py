import re
from functools import lru_cache

import pytest
import yaml

from mars_core.engines.scripted import ScriptedEngine
from mars_core.games.opponents import check_suite
from mars_core.stats.intervals import mean_ci95
from mars_core.strength.suite import (RECORD_KEYS, normalized_return, run_suite, seat_record,
                                      suite_specs)
from mars_core.rollout.play import PromptBuilder
from mars_core.types import SamplingParams
from mars_core.types import Episode
from tests.conftest import REPO

PARAMS = SamplingParams(max_new_tokens=16, stop=("</answer>",))


def test_mean_ci95():
    assert mean_ci95([]) == (0.0, 0.0)
    assert mean_ci95([1.0]) == (1.0, 0.0)
    mean, half = mean_ci95([0.0, 1.0, 0.0, 1.0])
    # Student's t with 3 degrees of freedom (3.182), not the normal 1.96: at n = 4 the normal
    # interval would cover the mean only about 86% of the time
    assert mean == 0.5 and half == pytest.approx(3.1824 * (1 / 3) ** 0.5 / 2, rel=1e-4)
    _, wide = mean_ci95([float(i % 2) for i in range(1000)])
    assert wide == pytest.approx(1.9623 * (0.25 * 1000 / 999) ** 0.5 / 1000 ** 0.5, rel=1e-3)


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


def test_prefect_yaml_deployments_point_at_the_flows():
    from prefect.flows import load_flow_from_entrypoint

    from mars_core.arena.config import load_arena_config
    from mars_core.config import load_config, load_game_eval_config

    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    names = set()
    for dep in spec["deployments"]:
        path, name = dep["entrypoint"].split(":")
        flow = load_flow_from_entrypoint(f"{REPO / path}:{name}")
        names.add(flow.name)
        params = dep["parameters"]
        assert set(params) <= set(flow.parameters.properties)  # no misspelled parameter
        if flow.name == "mars-train":
            load_config(REPO / params["config"])
        elif flow.name == "mars-compare":
            from flows.compare import ABLATIONS

            for preset in params.get("presets") or ABLATIONS:
                load_config(REPO / preset, overlays=[REPO / o for o in params["overlays"]])
        elif flow.name == "mars-nightly-eval":
            load_game_eval_config(REPO / params["game_eval_preset"])
            assert dep["schedules"][0]["cron"] == "0 2 * * *"
            load_arena_config(str(REPO / params["arena_preset"]))
        elif flow.name == "mars-eval-strategic":
            load_game_eval_config(REPO / params["preset"])
        elif flow.name == "mars-arena":
            load_arena_config(str(REPO / params["preset"]))
    assert names == {"mars-train", "mars-eval-strategic", "mars-compare", "mars-eval-mas",
                     "mars-nightly-eval", "mars-arena"}


def test_mars_preset_is_the_papers_suite():
    from mars_core.config import load_game_eval_config

    cfg = load_game_eval_config(REPO / "configs/eval/mars_strategic.yaml")
    assert cfg.n == 1000 and cfg.suite == load_game_eval_config(None).suite
    assert cfg.suite["tic_tac_toe"] == ("bot:mcts-100", "bot:mcts-1000")
    assert cfg.suite["connect_four"] == ("bot:mcts-10", "bot:mcts-100")
    quick = load_game_eval_config(REPO / "configs/eval/mars_strategic_quick.yaml")
    assert set(quick.suite) == set(cfg.suite) and quick.n < 10


def test_the_settings_are_checked_against_the_games_that_play():
    """`mars eval games --games leduc_poker --set play.prompt=compact`: the compact layout is
    checked against Leduc alone, not the whole suite's Hanabi (which has none)."""
    from mars_core.config import ConfigError, load_game_eval_config

    cfg = load_game_eval_config(None, ["leduc_poker"], ["bot:random"],
                                overrides=["play.prompt=compact"])
    assert cfg.suite == {"leduc_poker": ("bot:random",)} and cfg.play.prompt == "compact"
    with pytest.raises(ConfigError, match="no compact layout for mini_hanabi"):
        load_game_eval_config(None, overrides=["play.prompt=compact"])


def test_kuhn_nash_self_play_gives_the_first_player_minus_one_eighteenth():
    records, _ = run_suite({"kuhn_poker": ("bot:nash",)}, "bot:nash", None, None, PARAMS, n=4000,
                           seed=0, bot_policy="bot:nash", progress=False)
    seat0 = next(r for r in records if r["seat"] == 0)
    assert abs(seat0["mean_return"] - (-1 / 18)) < seat0["ci95"]
    assert set(RECORD_KEYS) <= set(seat0) and seat0["n"] == 4000 and seat0["invalid_rate"] == 0


def test_mcts_beats_random():
    records, _ = run_suite({"tic_tac_toe": ("bot:random",)}, "bot:mcts-25", None, None, PARAMS,
                           n=12, seed=0, bot_policy="bot:mcts-25", progress=False)
    for r in records:
        assert r["win_rate"] > 0.5 and r["loss_rate"] < 0.2 and r["normalized_return"] > 70


_LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


@lru_cache(maxsize=None)
def _minimax(board: str, me: str) -> tuple[int, int]:
    """(value for `me` to move, best cell) by full search: +1 win, 0 draw, -1 loss."""
    other = "O" if me == "X" else "X"
    for a, b, c in _LINES:
        if board[a] == board[b] == board[c] == other:
            return -1, -1
    empty = [i for i, c in enumerate(board) if c == "_"]
    if not empty:
        return 0, -1
    best = (-2, -1)
    for i in empty:
        value = -_minimax(board[:i] + me + board[i + 1:], other)[0]
        best = max(best, (value, -i))
    return best[0], -best[1]


def perfect_reply(prompt: str) -> str:
    """Read the rendered board and mark from the prompt and answer with a minimax move."""
    obs = prompt[prompt.rindex("Current board:"):]
    board = "".join(obs.splitlines()[1:4]).replace(" ", "")
    me = re.search(r"You are ([XO])\.", obs).group(1)
    cell = _minimax(board, me)[1]
    return f"<{me}({cell // 3},{cell % 3})></answer>"


def test_perfect_tic_tac_toe_policy_never_loses_to_mcts(tokenizer):
    engine = ScriptedEngine(tokenizer, perfect_reply)
    records, episodes = run_suite({"tic_tac_toe": ("bot:mcts-100",)}, "minimax", engine,
                                  PromptBuilder(tokenizer, "answer", keep_history=False), PARAMS,
                                  n=10, seed=0, progress=False)
    assert len(episodes) == 20 and [r["seat"] for r in records] == [0, 1]
    for r in records:
        assert r["loss_rate"] == 0 and r["invalid_rate"] == 0 and r["normalized_return"] >= 50


@pytest.mark.parametrize("suite,policy,needle", [
    ({"connect_four": ("bot:nash",)}, "policy", "'bot:nash' does not fit connect_four"),
    ({"kuhn_poker": ("bot:mcts-100",)}, "policy", "does not fit kuhn_poker"),
    ({"mini_hanabi": ("bot:nash",)}, "policy", "does not fit mini_hanabi"),
    ({"chess": ("bot:random",)}, "policy", "unknown game 'chess'; choose one of: tic_tac_toe"),
    ({"tic_tac_toe": ("alphazero",)}, "policy", "unknown opponent 'alphazero'; choose one of"),
    ({"leduc_poker": ("bot:random",)}, "bot:mcts-10", "does not fit leduc_poker"),
])
def test_suites_that_do_not_fit_are_refused(suite, policy, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        check_suite(suite, policy)


def _episode(eid, game, agents, returns, error_player=-1):
    from mars_core.types import Episode

    outcomes = tuple("win" if r > 0 else "loss" if r < 0 else "draw" for r in returns)
    return Episode(eid, game, 0, agents, returns, outcomes, error_player)


def test_strength_rows_pair_the_same_deals():
    """Two evaluations of Tic-Tac-Toe against MCTS: games with the same ids are the same deal
    and seat; the paired difference is the mean of per-game differences."""
    from mars_core.strength.suite import paired_markdown, paired_rows

    opp = "bot:mcts-10"
    start = [_episode(f"g{i}", "tic_tac_toe", ("policy", opp) if i % 2 else (opp, "policy"),
                      (-1.0, 1.0)) for i in range(4)]  # the policy loses as seat 0, wins as 1
    later = [_episode(f"g{i}", "tic_tac_toe", start[i].agents, (1.0, -1.0)) for i in range(4)]
    later.append(_episode("extra", "tic_tac_toe", ("policy", opp), (0.0, 0.0)))
    rows = paired_rows({"start": start, "iter 4": later}, "start")
    first, last = rows
    assert (first["policy"], first["n"], first["normalized_return"], first["diff"]) == \
        ("start", 4, 50.0, 0.0)
    assert (last["n"], last["paired_n"]) == (5, 4)
    # seat 0 (odd ids): -1 -> +1 is +100; seat 1 (even ids): +1 -> -1 is -100
    assert last["diff"] == pytest.approx(0.0) and last["diff_ci95"] > 100
    assert last["normalized_return"] == pytest.approx(50.0)
    assert "| iter 4 | tic_tac_toe | bot:mcts-10 | 5 |" in paired_markdown(rows, "start")


def test_a_gain_from_format_alone_reads_format_only_and_a_gain_in_play_reads_play():
    """Issue 32: a gain that is only "answers in format now" is reported as such. Start: the
    policy (seat 0) loses 30 deals by an invalid reply and draws 30; later: it draws all 60,
    so the whole gain comes from the deals it no longer loses by format. Another later policy
    wins every deal: a gain on the valid deals too, in play."""
    from mars_core.strength.suite import paired_markdown, paired_rows

    opp = "bot:random"
    start = [_episode(f"g{i}", "tic_tac_toe", ("policy", opp), (-1.0, 1.0) if i < 30
                      else (0.0, 0.0), error_player=0 if i < 30 else -1) for i in range(60)]
    formatted = [_episode(f"g{i}", "tic_tac_toe", ("policy", opp), (0.0, 0.0)) for i in range(60)]
    better = [_episode(f"g{i}", "tic_tac_toe", ("policy", opp), (1.0, -1.0)) for i in range(60)]
    rows = paired_rows({"start": start, "formatted": formatted, "better": better}, "start")
    first, fmt, play = rows
    assert first["reading"] == "-" and first["invalid_rate"] == 0.5
    assert fmt["diff"] > 2 * fmt["diff_ci95"]  # the overall difference clears ...
    assert fmt["valid_n"] == 30 and fmt["valid_diff"] == 0.0  # ... not on the valid deals
    assert fmt["reading"] == "format only"
    assert play["valid_n"] == 30 and play["valid_diff"] > 2 * play["valid_diff_ci95"]
    assert play["reading"] == "play"
    table = paired_markdown(rows, "start")
    assert "| format only |" in table and "| play |" in table and "(n=30)" in table
    same = paired_rows({"start": start, "again": start}, "start")[1]
    assert same["reading"] == "no clear change"


def test_strength_rows_count_the_policys_own_errors():
    from mars_core.strength.suite import paired_rows

    eps = [_episode("a", "kuhn_poker", ("policy", "bot:random"), (-1.0, 1.0), error_player=0),
           _episode("b", "kuhn_poker", ("bot:random", "policy"), (-1.0, 1.0), error_player=0)]
    row, = paired_rows({"start": eps}, "start")
    assert row["invalid_rate"] == 0.5  # only game a's error is the policy's
    assert row["normalized_return"] == pytest.approx(100 * ((-1 + 2) / 4 + (1 + 2) / 4) / 2)


def test_held_out_games_are_evaluated_beside_the_training_games_never_trained_on():
    """Issue 32: a run evaluates games it never trains on (the MARS generalist's Connect Four,
    Leduc and Simple Hanabi) on the same deals at every evaluation, with their own opponents."""
    from mars_core.config import ConfigError, load_config
    from tasks.strength import _plan

    cfg = load_config(None, ["rollout.games=[tic_tac_toe]", "evaluation.games_per_seat=2",
                             "evaluation.held_out=[connect_four, leduc_poker]",
                             "evaluation.opponents={leduc_poker: bot:random}"])
    assert cfg.evaluation.suite(cfg.rollout.games) == {
        "tic_tac_toe": ("bot:mcts-100",), "connect_four": ("bot:mcts-10",),
        "leduc_poker": ("bot:random",)}
    specs, _ = _plan(cfg)
    assert {s.game for s in specs} == {"tic_tac_toe", "connect_four", "leduc_poker"}
    assert [s.episode_id for s in specs] == [s.episode_id for s in _plan(cfg)[0]]  # same deals
    with pytest.raises(ConfigError, match="kuhn_poker is also a training game"):
        load_config(None, ["rollout.games=[kuhn_poker]", "evaluation.held_out=[kuhn_poker]"])
    with pytest.raises(ConfigError, match="unknown game|no_such_game"):
        load_config(None, ["evaluation.held_out=[no_such_game]"])


def test_training_evaluation_takes_one_opponent_or_several():
    from mars_core.config import ConfigError, load_config

    cfg = load_config(None, ["evaluation.opponents={tic_tac_toe: [bot:random, bot:mcts-10], "
                             "kuhn_poker: bot:random}"])
    assert cfg.evaluation.opponents_for("tic_tac_toe") == ("bot:random", "bot:mcts-10")
    assert cfg.evaluation.opponents_for("kuhn_poker") == ("bot:random",)
    assert cfg.evaluation.opponents_for("connect_four") == ("bot:mcts-10",)  # the default
    with pytest.raises(ConfigError, match="mcts"):
        load_config(None, ["evaluation.opponents={kuhn_poker: [bot:random, bot:mcts-10]}"])
