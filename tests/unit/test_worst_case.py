"""Tic-Tac-Toe's worst case (issue 61): the exact best response to a policy, searched over
every position the policy reaches. Minimax play draws in both seats; a uniform policy's
figure equals a plain recursion's; pruned moves make a lower bound; a language model is read
in its layout, and a near-uniform one is refused by name before minutes are spent."""
from __future__ import annotations

from functools import cache

import pytest

from mars_core.games.registry import make_game
from mars_core.lab import tictactoe as ttt
from mars_core.strength import worst_case as wc


def board(state) -> str:
    return "".join(c.upper() if c in "xo" else "." for r in str(state).strip().splitlines()
                   for c in r)


def minimax(positions):
    out = []
    for p in positions:
        best = ttt.optimal_moves(board(p.state), "X" if p.state.current_player() == 0 else "O")
        row = [1.0 if a in best else 0.0 for a in p.actions]
        out.append([x / sum(row) for x in row])
    return out


def uniform(positions):
    return [[1 / len(p.actions)] * len(p.actions) for p in positions]


def plain(seat: int) -> float:
    """The uniform policy's worst case by a plain recursion over boards."""
    game = make_game("tic_tac_toe").game

    @cache
    def v(history: tuple) -> float:
        s = game.new_initial_state()
        for a in history:
            s.apply_action(a)
        if s.is_terminal():
            return s.returns()[seat]
        vals = [v(history + (a,)) for a in s.legal_actions()]
        return min(vals) if s.current_player() != seat else sum(vals) / len(vals)
    return v(())


def test_minimax_play_draws_against_the_best_response_in_both_seats():
    for seat in (0, 1):
        assert wc.worst_case_of(minimax, seat)["worst_case"] == pytest.approx(0, abs=1e-9)


def test_a_uniform_policy_matches_a_plain_recursion():
    for seat in (0, 1):
        got = wc.worst_case_of(uniform, seat)
        assert got["worst_case"] == pytest.approx(plain(seat))
        assert got["reads"] > 1000 and got["pruned"] < 1e-9


def test_pruned_moves_give_a_lower_bound_and_max_reads_refuses_by_name():
    def peaked(positions):
        out = []
        for p in positions:
            best = min(ttt.optimal_moves(board(p.state), "X" if p.state.current_player() == 0
                                         else "O"))
            out.append([0.99 if a == best else 0.01 / (len(p.actions) - 1 or 1)
                        for a in p.actions] if len(p.actions) > 1 else [1.0])
        return out
    exact, bound = wc.worst_case_of(peaked, 0, prune=0.0), wc.worst_case_of(peaked, 0, prune=0.02)
    assert bound["worst_case"] <= exact["worst_case"] + 1e-12
    assert bound["reads"] < exact["reads"] and 0 < bound["pruned"] <= 0.01 + 1e-9
    with pytest.raises(ValueError, match="more than 100 positions of seat 0"):
        wc.worst_case_of(uniform, 0, max_reads=100)


def test_a_language_model_is_read_in_its_layout(tiny_model_dir):
    from mars_core.engines.hf import HFEngine
    from mars_core.rollout.play import PromptBuilder

    engine = HFEngine.from_path(tiny_model_dir, batch_size=8, device="cpu")
    builder = PromptBuilder(engine.tokenizer, "answer", keep_history=False, style="compact")
    with pytest.raises(ValueError, match="positions of seat 0"):  # near-uniform: refused
        wc.read_worst_case(engine.model, engine.tokenizer, builder, max_reads=50)
    r = wc.read_worst_case(engine.model, engine.tokenizer, builder, prune=0.3, max_reads=50)
    assert -1 <= r["worst_case"] <= 1
    assert r["normalized"] == pytest.approx(50 * (r["worst_case"] + 1))
    assert [s["seat"] for s in r["seats"]] == [0, 1]
    with pytest.raises(ValueError, match="answers at once"):
        wc.read_worst_case(engine.model, engine.tokenizer,
                           PromptBuilder(engine.tokenizer, "think", keep_history=False))
