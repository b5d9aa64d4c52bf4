"""The learning lab: Kuhn Poker's exact references, the per-state baseline against them, and the
capacity probe on a tiny model."""
from __future__ import annotations

import json
import sys
from collections import defaultdict

import polars as pl
import pytest

from mars_core.advantages.estimators import compute_advantages
from mars_core.lab import kuhn
from mars_core.rollout.play import EpisodeSpec, play_episodes
from mars_core.types import SamplingParams, turns_frame
from tests.conftest import REPO


def test_the_best_response_to_random_folds_only_j_facing_a_bet():
    br = kuhn.best_response()
    assert len(br) == 12 and len(kuhn.info_states()) == 12
    assert {k for k, bet in br.items() if not bet} == {"Jb", "Jpb"}
    q = kuhn.action_values(br, kuhn.UNIFORM)
    assert q["Jb"] == (-1.0, -2.0) and q["Kb"] == (-1.0, 2.0)  # fold J, call K
    assert q["J"] == (-1.0, -0.5)  # bluffing J beats checking against a random caller
    # the best response's value over both seats (random opens with a bet half the time):
    # 0.458 chips, the normalized return (range -2..2) of 61.5 the docs name
    v = kuhn.state_value(br, q)
    value = (sum(v[c] for c in "JQK") / 3 + sum(v[c + "p"] + v[c + "b"] for c in "JQK") / 6) / 2
    assert (value + 2) / 4 * 100 == pytest.approx(61.46, abs=0.01)
    assert kuhn.normalized_value(br) == pytest.approx(61.458, abs=1e-3)
    # always betting differs only where J faces a bet (a chip lost there, 1/12 of the hands)
    assert kuhn.normalized_value(dict.fromkeys(br, 1.0)) == pytest.approx(59.375, abs=1e-3)
    assert kuhn.normalized_value(kuhn.UNIFORM) < 59.375


def _random_play(n: int) -> pl.DataFrame:
    specs = [EpisodeSpec(f"e{i}", "kuhn_poker", i, ("bot:random", "bot:random"))
             for i in range(n)]
    episodes = play_episodes(specs, None, None, SamplingParams(), progress=False)
    df = turns_frame(episodes)
    return df.with_columns(pl.col("game_reward").alias("reward"))


def test_a_per_state_baseline_matches_the_exact_advantages():
    """Turns grouped by their information state (the observation) get, on average, exactly
    Q(I, a) - V(I) of the policy that played them; grouped by seat (MARS's default) they do
    not: the baseline is then the seat's value, not the state's."""
    df = _random_play(6000)
    q = kuhn.action_values(kuhn.UNIFORM, kuhn.UNIFORM)
    v = kuhn.state_value(kuhn.UNIFORM, q)
    exact = {(k, a): q[k][a] - v[k] for k in q for a in (0, 1)}

    def mean_advantage(group_keys):
        adv = compute_advantages(df, "mars", group_keys=group_keys)
        sums = defaultdict(list)
        for obs, action, a in adv.select("observation", "action", "advantage").iter_rows():
            card, history, _ = kuhn.read_decision(obs)
            sums[(card + history, int(action == "<BET>"))].append(a)
        return {key: sum(x) / len(x) for key, x in sums.items()}

    per_state = mean_advantage(("game", "role", "observation"))
    assert set(per_state) == set(exact)
    worst = max(abs(per_state[k] - exact[k]) for k in exact)
    assert worst < 0.25, worst
    per_seat = mean_advantage(("game", "role"))
    assert max(abs(per_seat[k] - exact[k]) for k in exact) > 1.0  # K's bet is not J's


def test_the_signal_table_shrinks_with_p_one_minus_p_and_normalizing_equalizes_it():
    """At the uniform policy K facing a bet is pushed three times as hard as J (its gap in
    value is larger); divided by the state's std every state is pushed alike; at a policy that
    bets 96% of the time facing a bet, J's push is 25x weaker than supervision's."""
    start = kuhn.update_signal(kuhn.UNIFORM)
    assert start["Jb"]["pg"] == pytest.approx(-0.25) and start["Kb"]["pg"] == pytest.approx(0.75)
    assert {round(abs(v["pg_normalized"]), 6) for v in start.values()} == {0.5}
    assert sum(start[k]["reach"] for k in ("J", "Q", "K")) == pytest.approx(1.0)
    assert sum(start[k]["reach"] for k in ("Jp", "Qp", "Kp", "Jb", "Qb", "Kb")) == pytest.approx(1.0)
    leaning = kuhn.update_signal({k: 0.96 for k in kuhn.UNIFORM})
    jb = leaning["Jb"]
    assert jb["pg"] == pytest.approx(0.96 * 0.04 * -1.0) and jb["supervised"] == pytest.approx(-0.96)
    assert jb["pg_normalized"] == pytest.approx(-(0.96 * 0.04) ** 0.5)
    certain = kuhn.update_signal({k: 1.0 for k in kuhn.UNIFORM})
    assert all(v["pg"] == 0 and v["pg_normalized"] == 0 for v in certain.values())


@pytest.mark.slow  # `make test` runs it; `make test-unit` leaves it out (it runs long)
def test_the_probe_fits_on_a_tiny_model_and_the_lab_writes_its_table(tiny_model_dir, tmp_path):
    from mars_core.lab.probe import Arm, fit, items

    arm = Arm("tiny", style="compact", rank=4, lr=1e-2)
    curve = fit(tiny_model_dir, arm, steps=2, stop_at_fit=False)
    assert [s["step"] for s in curve.steps] == [0, 1, 2]
    assert all(len(s["p_bet"]) == 12 and 0 <= s["n_best"] <= 12 for s in curve.steps)
    assert curve.steps[0]["p_bet"] != curve.steps[2]["p_bet"]  # it trained
    from mars_core.models.weights import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    paper, compact = items(tok, "paper"), items(tok, "compact")
    assert [i.label for i in paper] == [i.label for i in compact]
    assert sum(len(i.prompt) for i in compact) < 0.6 * sum(len(i.prompt) for i in paper)

    import subprocess

    out = tmp_path / "probe"
    run = subprocess.run([sys.executable, str(REPO / "bench" / "lab.py"), "--model",
                          str(tiny_model_dir), "--out", str(out), "--steps", "1", "--arms", "1",
                          "--bf16", "off"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    table = json.loads((out / "probe.json").read_text())
    assert list(table) == ["1"] and (out / "probe.png").stat().st_size > 0
    assert "| 1 | compact, LoRA r16 attention, lr 1e-4 |" in (out / "probe.md").read_text()
    bad = subprocess.run([sys.executable, str(REPO / "bench" / "lab.py"), "--arms", "9",
                          "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == ["--arms: no arm 9 (0 to 5)"]
    for flags, flag in ((["--held-out", "4"], "--held-out"), (["--positions", "30"], "--positions"),
                        (["--game", "tic_tac_toe", "--positions", "0"], "--positions")):
        bad = subprocess.run([sys.executable, str(REPO / "bench" / "lab.py"), *flags, "--out",
                              str(out)], capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
            f"{flag}: a number of Tic-Tac-Toe positions (with --game tic_tac_toe)"]


def test_tic_tac_toe_move_values_are_perfect_play():
    from mars_core.lab import tictactoe as t

    assert t.value(".........", "X") == 0  # a draw with perfect play
    assert t.optimal_moves("XX.OO....", "X") == {2}  # win now
    assert t.move_values("XX.OO....", "X")[6] == -1  # elsewhere O wins at 5
    assert t.optimal_moves("XX.OO....", "O") == {2, 5}  # O to move: win now, or block with a fork
    assert t.optimal_moves("X...O...X", "O") == {1, 3, 5, 7}  # an edge, not a corner: a draw
    assert t.move_values("X...O...X", "O")[2] == -1
    assert t.move_values("XXXOO....", "O") == {}  # over
    assert t.move_cell("<X(1,2)>") == 5 and t.move_cell("<O(0,0)>") == 0
    assert t.move_cell("<X(3,0)>") is None and t.move_cell("pass") is None


def test_a_tic_tac_toe_position_reads_back_from_either_layout():
    import random

    from mars_core.games.registry import make_game
    from mars_core.lab import tictactoe as t

    adapter, rng, seen = make_game("tic_tac_toe"), random.Random(3), 0
    for _ in range(4):
        state = adapter.new_state(0)
        while not adapter.is_terminal(state):
            p = adapter.current_player(state)
            board = adapter.board(state).replace(" ", "").replace("\n", "").replace("_", ".")
            for style in ("paper", "compact"):
                assert t.read_position(adapter.observation_for(state, p, [], style)) == \
                    (board, adapter.MARKS[p])
            adapter.apply(state, rng.choice(sorted(adapter.legal_actions(state).values())))
            seen += 1
    assert seen > 20
    assert t.read_position("Your card: K\nLegal: <PASS> <BET>") is None


def test_the_learning_report_counts_optimal_moves():
    import importlib.util
    from types import SimpleNamespace as Turn

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("learning_under_test", REPO / "bench/learning.py")
    learning = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(learning)
    obs = ("You are X. Legal: <X(0,2)> <X(1,0)> <X(1,2)> <X(2,1)> <X(2,2)>\n"
           "Board:\nX X _\n_ O _\nO _ _")  # X wins at (0,2), the one optimal move of five
    empty = ("You are X. Legal: " + " ".join(f"<X({r},{c})>" for r in range(3) for c in range(3))
             + "\nBoard:\n_ _ _\n_ _ _\n_ _ _")
    turn = {"game": "tic_tac_toe", "agent": "policy", "valid": True}
    turns = [Turn(**turn, observation=obs, action=a) for a in ("<X(0,2)>", "<X(2,2)>")]
    turns += [Turn(**turn, observation=empty, action="<X(1,1)>"),  # any first move draws
              Turn(**{**turn, "agent": "bot:random"}, observation=obs, action="<X(2,2)>"),
              Turn(**{**turn, "valid": False}, observation=obs, action="")]
    rates = learning.ttt_optimal_rates([Turn(turns=turns)])
    assert rates["all"] == (2 / 3, 3) and rates["decisive"] == (0.5, 2)
    assert rates["chance"] == (0.2, 2)
    # against a random opponent the opening matters (a corner), so the centre misses there
    assert rates["vs_random"] == (1 / 3, 3)
    assert rates["vs_random_chance"][0] == pytest.approx((0.2 + 0.2 + 4 / 9) / 3)
    assert "| iter 6 | 67% (n=3) | 50% (n=2) | 20% | 33% (n=3) | 28% |" in (
        learning.optimal_markdown({"iter 6": rates}))


def test_blotto_values_are_exact_against_the_random_allocator():
    from mars_core.games.blotto import ColonelBlotto, format_allocation
    from mars_core.lab import blotto

    class Draws:  # randint answers a scripted pair: random_action's two break points
        def __init__(self, a, b):
            self.left = [a, b]

        def randint(self, lo, hi):
            return self.left.pop(0)

    draws = blotto.random_allocations()
    assert len(draws) == 441 and len(set(draws)) == 231
    assert [ColonelBlotto.random_action(None, None, Draws(a, b))
            for a in range(21) for b in range(21)] == [format_allocation(list(d)) for d in draws]
    # random against random breaks even, exactly (each round counted from both sides)
    assert sum(blotto.value_vs_random(d) for d in draws) == pytest.approx(0, abs=1e-12)
    assert blotto.round_result((7, 7, 6), (10, 10, 0)) == -1
    assert blotto.round_result((7, 7, 6), (7, 7, 6)) == 0
    assert blotto.round_result((7, 7, 6), (20, 0, 0)) == 1
    assert blotto.value_vs_random((7, 7, 6)) > 0.3 > abs(blotto.value_vs_random((10, 10, 0)))
    assert blotto.units("[C6 A7 B7]") == (7, 7, 6) and blotto.units("[A7 B7 C7]") is None
    # the match: first to 5 of 9 rounds, else more rounds won, else a draw
    assert blotto.match_value(1, 0, 0) == 1 and blotto.match_value(0, 1, 0) == -1
    assert blotto.match_value(0, 0, 1) == 0 and blotto.match_value(0.5, 0.5, 0) == pytest.approx(0)
    # a seat that never loses a round wins the match unless all nine are ties (a draw)
    assert blotto.match_value(0.3, 0, 0.7) == pytest.approx(1 - 0.7 ** 9)
    assert 85 < blotto.normalized_vs_random((7, 7, 6)) < 90
    assert blotto.normalized_vs_random((10, 10, 0)) < 60
    best, score = blotto.best_vs_random()
    assert min(best) >= 5 and score == blotto.normalized_vs_random(best)  # a spread one


def test_the_learning_report_counts_blotto_allocations():
    import importlib.util
    from types import SimpleNamespace as Obj

    from mars_core.lab import blotto

    spec = importlib.util.spec_from_file_location("learning_under_test", REPO / "bench/learning.py")
    learning = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(learning)
    turn = {"game": "colonel_blotto", "agent": "policy", "valid": True}
    first = Obj(agents=("policy", "bot:random"), info='{"rounds_won": [5, 2]}', turns=[
        Obj(**turn, action="[A7 B7 C6]"), Obj(**turn, action="[A10 B10 C0]"),
        Obj(**{**turn, "agent": "bot:random"}, action="[A0 B0 C20]")])
    second = Obj(agents=("bot:random", "policy"), info='{"rounds_won": [5, 1]}', turns=[
        Obj(**turn, action="[A6 B7 C7]"), Obj(**{**turn, "valid": False}, action="")])
    rates = blotto.allocation_rates([first, second, Obj(agents=("bot:random",), info="",
                                                         turns=[])])
    assert rates["valid"] == (0.75, 4) and rates["spread"] == (2 / 3, 3)
    value = (2 * blotto.value_vs_random((7, 7, 6)) + blotto.value_vs_random((10, 10, 0))) / 3
    assert rates["value"] == (pytest.approx(value), 3)
    assert rates["rounds_won"] == (6 / 13, 13) and rates["games_invalid"] == (0.5, 2)
    assert blotto.allocation_rates([]) == {}
    line = f"| iter 8 | 75.0% (n=4) | 67% (n=3) | {value:+.3f} (n=3) | 46% (n=13) | 50% (n=2) |"
    table = learning.blotto_markdown({"iter 8": rates, "start": {}})
    assert line in table and "| start |" not in table
    assert "The best allocation every round, [A6 B7 C7]: a round +0.329, a normalized return of " \
        "87.1 against `bot:random` (exact)." in table


@pytest.mark.slow  # `make test` runs it; `make test-unit` leaves it out (it runs long)
def test_the_probe_fits_tic_tac_toe_positions_on_a_tiny_model(tiny_model_dir, tmp_path):
    from mars_core.lab import tictactoe
    from mars_core.lab.probe import TTT_POSITIONS, Arm, fit, items
    from mars_core.models.weights import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    paper, compact = items(tok, "paper", game="tic_tac_toe"), items(tok, "compact",
                                                                    game="tic_tac_toe")
    assert len(compact) == TTT_POSITIONS and [i.best for i in paper] == [i.best for i in compact]
    for item in compact:  # every legal move is an answer; the best ones are minimax's
        board, mark = item.key.split(":")
        assert len(item.answers) == board.count(".")
        assert 0 < len(item.best) < len(item.answers)
        texts = [tok.decode(a).removesuffix("</answer>") for a in item.answers]
        assert {tictactoe.move_cell(texts[i]) for i in item.best} == \
            tictactoe.optimal_moves(board, mark)
    curve = fit(tiny_model_dir, Arm("tiny", rank=4, lr=1e-2, game="tic_tac_toe"), steps=1,
                stop_at_fit=False, chunk=8)
    assert curve.states == TTT_POSITIONS and len(curve.steps) == 2
    assert all(0 <= s["n_best"] <= TTT_POSITIONS and "p_bet" not in s for s in curve.steps)
    assert all(0 < p < 1 for p in curve.steps[0]["p_best"].values())
    with pytest.raises(ValueError, match="no game 'chess'"):
        items(tok, "compact", game="chess")
    # held-out positions: decisive, none of them fitted; measured each step, never trained
    unseen = items(tok, "compact", game="tic_tac_toe", held_out=6)
    assert len(unseen) == 6 and not {i.key for i in unseen} & {i.key for i in compact}
    assert all(0 < len(i.best) < len(i.answers) for i in unseen)
    with pytest.raises(ValueError, match="held-out states are Tic-Tac-Toe's"):
        items(tok, "compact", held_out=2)
    with pytest.raises(ValueError, match="a number of positions is Tic-Tac-Toe's"):
        items(tok, "compact", positions=5)
    more = items(tok, "compact", game="tic_tac_toe", positions=30)
    assert len(more) == 30 and not {i.key for i in unseen} & {i.key for i in more}
    held = fit(tiny_model_dir, Arm("tiny", rank=4, lr=1e-2, game="tic_tac_toe"), steps=1,
               stop_at_fit=False, chunk=8, held_out=6)
    assert held.held_out == 6 and all(0 <= s["held_out"]["n_best"] <= 6 for s in held.steps)
    assert held.steps[0]["held_out"]["chance"] == pytest.approx(
        sum(len(i.best) / len(i.answers) for i in unseen) / 6, abs=1e-4)
    # the fitted positions' curve is the one without held-out positions: measuring moves nothing
    assert [s["p_best"] for s in held.steps] == [s["p_best"] for s in curve.steps]
