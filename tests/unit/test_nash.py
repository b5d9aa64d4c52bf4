"""Nash poker opponents: stored CFR+ tables, regeneration, and Kuhn's -1/18 game value."""
import json
import math
import random

import pyspiel
import pytest

from mars_core.games import nash

LEDUC_BOUND = 1e-4  # stored Leduc table: CFR+ 3000 iterations, exploitability ~3.7e-5


class _State:
    """Minimal stand-in for an adapter state: the bots only need `.s`."""

    def __init__(self, s):
        self.s = s


def _check_table(game_name, table):
    game = pyspiel.load_game(game_name)
    legal = nash._info_states(game)
    assert set(table["policy"]) == set(legal)
    for key, probs in table["policy"].items():
        assert sorted(int(a) for a in probs) == legal[key]
        assert all(0.0 <= p <= 1.0 for p in probs.values())
        assert abs(sum(probs.values()) - 1.0) < 1e-9


def test_stored_kuhn_table_is_nash():
    table = nash.load_nash("kuhn_poker")
    assert table["game"] == "kuhn_poker" and table["solver"] == "CFRPlusSolver"
    _check_table("kuhn_poker", table)
    assert nash.exploitability_of("kuhn_poker", table) < 1e-3


def test_kuhn_exploitability_matches_python_implementation():
    from open_spiel.python import policy as policy_lib
    from open_spiel.python.algorithms import exploitability

    table = nash.load_nash("kuhn_poker")
    game = pyspiel.load_game("kuhn_poker")
    tab = policy_lib.TabularPolicy(game)
    for key, idx in tab.state_lookup.items():
        tab.action_probability_array[idx, :] = 0.0
        for a, p in table["policy"][key].items():
            tab.action_probability_array[idx, int(a)] = p
    py = exploitability.exploitability(game, tab)
    assert py == pytest.approx(nash.exploitability_of("kuhn_poker", table), abs=1e-9)
    assert py < 1e-3


def test_stored_leduc_table_is_near_nash():
    table = nash.load_nash("leduc_poker")
    _check_table("leduc_poker", table)
    recomputed = nash.exploitability_of("leduc_poker", table)
    assert recomputed == pytest.approx(table["exploitability"], rel=1e-6, abs=1e-9)
    assert recomputed < LEDUC_BOUND


def test_load_nash_regenerates_missing_file_as_json(tmp_path):
    table = nash.load_nash("kuhn_poker", tmp_path, iterations=200)
    path = tmp_path / "nash_kuhn_poker.json"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp files left behind
    raw = path.read_bytes()
    assert raw.startswith(b"{") and not raw.startswith(b"\x80")  # JSON, not a pickle
    assert json.loads(raw) == table
    assert table["iterations"] == 200
    _check_table("kuhn_poker", table)
    assert nash.exploitability_of("kuhn_poker", table) == pytest.approx(
        table["exploitability"], abs=1e-9)
    # a second load reads the file instead of solving again
    assert nash.load_nash("kuhn_poker", tmp_path, iterations=1) == table


def test_unknown_game_lists_valid_names(tmp_path):
    with pytest.raises(ValueError, match="kuhn_poker, leduc_poker"):
        nash.load_nash("tic_tac_toe", tmp_path)
    with pytest.raises(ValueError, match="kuhn_poker, leduc_poker"):
        nash.NashBot("liars_dice", seed=0, data_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content", ["{not json", json.dumps({"game": "kuhn_poker"}),
                                     json.dumps([1, 2, 3])])
def test_corrupt_file_raises_one_line_error_and_is_kept(tmp_path, content):
    path = tmp_path / "nash_kuhn_poker.json"
    path.write_text(content)
    with pytest.raises(ValueError) as err:
        nash.load_nash("kuhn_poker", tmp_path)
    msg = str(err.value)
    assert str(path) in msg and "\n" not in msg
    assert path.read_text() == content  # user data is never silently overwritten


def test_nash_bot_rejects_unknown_info_state(tmp_path, monkeypatch):
    monkeypatch.setattr(nash, "DEFAULT_ITERATIONS", {"kuhn_poker": 50, "leduc_poker": 5})
    bot = nash.NashBot("kuhn_poker", seed=0, data_dir=tmp_path)
    leduc = pyspiel.load_game("leduc_poker").new_initial_state()
    while leduc.is_chance_node():
        leduc.apply_action(leduc.chance_outcomes()[0][0])
    with pytest.raises(KeyError, match="not in the kuhn_poker Nash table"):
        bot.act(None, _State(leduc))


def _play(game, bots, rng):
    s = game.new_initial_state()
    while not s.is_terminal():
        if s.is_chance_node():
            actions, probs = zip(*s.chance_outcomes())
            s.apply_action(rng.choices(actions, weights=probs)[0])
        else:
            p = s.current_player()
            a = bots[p].act(None, _State(s))
            assert a in s.legal_actions(p)
            s.apply_action(a)
    return s.returns()


def test_kuhn_nash_self_play_value_is_minus_one_eighteenth():
    game = pyspiel.load_game("kuhn_poker")
    bots = [nash.NashBot("kuhn_poker", seed=1), nash.NashBot("kuhn_poker", seed=2)]
    assert bots[0].policy is bots[1].policy  # the table is loaded once and shared
    rng = random.Random(1234)
    n = 20_000
    first = [_play(game, bots, rng)[0] for _ in range(n)]
    mean = sum(first) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in first) / (n - 1))
    half = 1.96 * sd / math.sqrt(n)
    assert mean - half <= -1 / 18 <= mean + half, (mean, half)


def test_leduc_nash_bot_plays_legal_actions():
    game = pyspiel.load_game("leduc_poker")
    bots = [nash.NashBot("leduc_poker", seed=3), nash.NashBot("leduc_poker", seed=4)]
    rng = random.Random(0)
    for _ in range(200):
        r = _play(game, bots, rng)
        assert r[0] == -r[1]
