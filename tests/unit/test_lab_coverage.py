"""The coverage model (mars_core/lab/coverage.py): a table policy optimal in a fitted set of
Tic-Tac-Toe positions and uniform elsewhere, scored exactly against a random opponent and by
sampled games against OpenSpiel's MCTS, and the set grown most visited first."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from functools import cache

import pytest

from mars_core.lab import coverage
from mars_core.lab.tictactoe import decisive_positions, optimal_moves, winner
from tests.conftest import REPO

ALL = frozenset(decisive_positions(10 ** 6))


def _recursive_vs_random(fitted: frozenset) -> float:
    """The same expectation as `exact_vs_random`, by recursion over the game tree instead of
    its layers, the policy's moves written out here rather than taken from the module."""

    @cache
    def score(board: str, seat: str) -> float:
        won = winner(board)
        if won is not None:
            return 1.0 if won == seat else 0.0
        if "." not in board:
            return 0.5
        mark = "X" if board.count("X") == board.count("O") else "O"
        legal = [i for i, c in enumerate(board) if c == "."]
        moves = (sorted(optimal_moves(board, mark)) if mark == seat and (board, mark) in fitted
                 else legal)
        return sum(score(board[:m] + mark + board[m + 1:], seat) for m in moves) / len(moves)

    return 100.0 * (score("." * 9, "X") + score("." * 9, "O")) / 2


def test_the_exact_score_against_random_matches_a_recursion_over_the_tree():
    # nothing fitted is uniform against uniform: the two seats' scores sum to one game's
    assert coverage.exact_vs_random(set())[0] == pytest.approx(50.0, abs=1e-9)
    some = frozenset(random.Random(0).sample(sorted(ALL), 300))
    for fitted in (frozenset(), some, ALL):
        assert coverage.exact_vs_random(fitted)[0] == pytest.approx(_recursive_vs_random(fitted),
                                                                     abs=1e-9)
    # minimax play (uniform among optimal moves) against random is far above the start, and
    # fitting a subset lands in between
    start, part, full = (coverage.exact_vs_random(f)[0] for f in (frozenset(), some, ALL))
    assert start < part < full and full == pytest.approx(93.63, abs=0.01)


def _positions(labels: str) -> frozenset:
    """Every reachable position not over where some move is not labelled."""
    found = set()

    def walk(board: str) -> None:
        if winner(board) is not None or "." not in board or board in seen:
            return
        seen.add(board)
        mark = "X" if board.count("X") == board.count("O") else "O"
        if coverage.decisive(board, mark, labels):
            found.add((board, mark))
        for i in (i for i, c in enumerate(board) if c == "."):
            walk(board[:i] + mark + board[i + 1:])

    seen: set[str] = set()
    walk("." * 9)
    return frozenset(found)


def test_best_response_labels_score_what_expectimax_says_and_above_minimax():
    assert _positions("minimax") == ALL
    best = _positions("random_best")
    # playing the best response to a random opponent everywhere scores its expectimax value
    expect = float(coverage._random_best_value("." * 9, "X") + coverage._random_best_value(
        "." * 9, "O")) / 2 * 100
    assert coverage.exact_vs_random(best, "random_best")[0] == pytest.approx(expect, abs=1e-9)
    assert expect == pytest.approx(97.99, abs=0.01)  # minimax play: 93.63
    # against random the opening matters (a corner), where under perfect play it does not
    assert coverage.label_moves("." * 9, "X", "random_best") == {0, 2, 6, 8}
    assert ("." * 9, "X") in best and ("." * 9, "X") not in ALL
    # a win in one is a label under both
    assert coverage.label_moves("XX.OO....", "X", "random_best") == {2}
    assert coverage.label_moves("XX.OO....", "X") == {2}
    with pytest.raises(ValueError, match="labels 'nash' is not one of minimax, random_best"):
        coverage.curve(labels="nash")


def test_reach_is_the_policys_visits_to_decisive_positions():
    _, reach = coverage.exact_vs_random(set())
    assert set(reach) <= ALL and all(0 < p <= 1 for p in reach.values())
    # as O, each of X's nine openings is reached with probability 1/9, and each is decisive
    # (a corner opening must be answered in the centre, ...)
    openings = {("." * i + "X" + "." * (8 - i), "O") for i in range(9)}
    assert all(reach[p] == pytest.approx(1 / 9) for p in openings)
    # the empty board is not decisive (every opening draws under perfect play)
    assert ("." * 9, "X") not in reach
    # a fitted position plays only optimal moves, so positions below its bad moves lose weight
    fitted = frozenset(openings)
    _, after = coverage.exact_vs_random(fitted)
    assert sum(after.values()) != pytest.approx(sum(reach.values()))


def test_a_positions_gain_is_exactly_what_fitting_it_alone_adds():
    fitted = frozenset(random.Random(2).sample(sorted(ALL), 100))
    base = coverage.exact_vs_random(fitted)[0]
    gains = coverage.gains_vs_random(fitted)
    assert not set(gains) & fitted and set(gains) <= ALL
    best = max(gains, key=gains.get)
    for p in [best, *random.Random(3).sample(sorted(gains), 5)]:
        assert gains[p] == pytest.approx(coverage.exact_vs_random(fitted | {p})[0] - base,
                                         abs=1e-9)
    # from nothing, the best single position is one of O's answers to an opening
    assert max(coverage.gains_vs_random(set()).items(), key=lambda kv: kv[1])[0][1] == "O"


def test_sampled_games_against_mcts_are_reproducible_and_minimax_play_beats_uniform():
    a = coverage.sampled_vs_mcts(set(), games_per_seat=6, seed=3)
    assert a == coverage.sampled_vs_mcts(set(), games_per_seat=6, seed=3)
    none, ci, visits = a
    full, _, full_visits = coverage.sampled_vs_mcts(ALL, games_per_seat=6, seed=3)
    assert 0 <= none <= 100 and ci >= 0 and full > none
    assert set(visits) <= ALL and set(full_visits) <= ALL and sum(visits.values()) > 0


def test_the_curve_grows_the_set_most_visited_first_and_stops_where_asked():
    rounds = coverage.curve(step=10, limit=20, games_per_seat=4, until=None)
    assert [r.positions for r in rounds] == [0, 10, 20]
    assert rounds[0].covered == 0 and rounds[0].vs_random == pytest.approx(50.0)
    assert all(0 <= r.covered <= 1 for r in rounds) and rounds[2].covered > rounds[0].covered
    # the most visited positions first: ten of them already cover a share of the decisions
    assert rounds[1].covered > 0.1 and rounds[1].vs_random > rounds[0].vs_random
    # a target already met stops at once
    assert len(coverage.curve(step=10, games_per_seat=2, until=(0, 0))) == 1
    with pytest.raises(ValueError, match="step must be >= 1"):
        coverage.curve(step=0)
    with pytest.raises(ValueError, match="order 'best' is not one of visits, gain"):
        coverage.curve(order="best")
    # the answer-knowing order buys more score against random with the same positions
    by_gain = coverage.curve(step=20, limit=20, games_per_seat=2, until=None, order="gain")
    by_visits = coverage.curve(step=20, limit=20, games_per_seat=2, until=None)
    assert by_gain[1].vs_random > by_visits[1].vs_random


def test_the_bench_prints_the_table_and_prices_it_by_a_probe(tmp_path):
    arm = tmp_path / "arm_5.json"
    arm.write_text(json.dumps({"states": 24, "fit_step": 16, "fit_seconds": 1200.0,
                               "cpu": "a CPU"}))
    out = tmp_path / "c.json"
    run = subprocess.run([sys.executable, str(REPO / "bench" / "coverage.py"), "--step", "5",
                          "--limit", "5", "--games-per-seat", "2", "--order", "gain",
                          "--labels", "random_best",
                          "--probe", str(arm),
                          "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "| 0 | 50.0 |" in run.stdout and "50 s a position" in run.stdout
    assert "(random_best labels), worth most against bot:random first" in run.stdout
    rows = json.loads(out.read_text())["rounds"]
    assert [r["positions"] for r in rows] == [0, 5]
    assert f"| 5 | {rows[1]['vs_random']:.1f} |" in run.stdout
    assert run.stdout.splitlines()[-1].endswith(f"{5 * 50 / 3600:.1f} |")
    for content, why in (("{}", "not a capacity-probe arm's result"),
                         (json.dumps({"states": 24, "fit_step": None, "fit_seconds": 9.0}),
                          "never fitted")):
        arm.write_text(content)
        bad = subprocess.run([sys.executable, str(REPO / "bench" / "coverage.py"), "--probe",
                              str(arm)], capture_output=True, text=True, timeout=300)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
        assert why in bad.stderr
