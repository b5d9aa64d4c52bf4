"""The Connect Four adapter: action strings, board rendering, rewards and prompt examples."""
import random
import re

from mars_core.games.base import parse_reply
from mars_core.games.board_games import ConnectFour
from mars_core.games.registry import make_game

# An action-looking token in prompt text: anything in angle brackets but the answer tags.
TOKEN = re.compile(r"<(?!/?answer>)[^<>\s]+>")
EMPTY_ROW = "_ _ _ _ _ _ _"


def play(g, moves, seed=0):
    s = g.new_state(seed)
    rewards = [g.apply(s, m) for m in moves]
    return s, rewards


def test_registry_builds_connect_four():
    g = make_game("connect_four")
    assert isinstance(g, ConnectFour) and g.draw_bonus and g.num_players == 2
    assert g.forfeit_return(g.new_state(0), 0) == -1.0


def test_action_strings_map_to_columns_both_ways():
    g = ConnectFour()
    s = g.new_state(0)
    legal = g.legal_actions(s)
    assert legal == {f"<X({c})>": c for c in range(7)}
    assert all(s.s.action_to_string(0, c) == f"x{c}" for c in range(7))  # id = column
    for action in legal:
        assert parse_reply(f"<answer>{action}</answer>", set(legal)).action == action
    g.apply(s, 3)
    assert g.legal_actions(s) == {f"<O({c})>": c for c in range(7)}
    assert g.action_string(s, 1, 5) == "<O(5)>"


def test_full_column_is_not_legal():
    g = ConnectFour()
    s, _ = play(g, [0] * 6)
    legal = g.legal_actions(s)
    assert "<X(0)>" not in legal and set(legal.values()) == set(range(1, 7))


def test_board_is_top_row_first_under_a_column_header():
    g = ConnectFour()
    s, _ = play(g, [3, 3, 4, 0])  # X col 3, O on top of it, X col 4, O col 0
    assert g.board(s).splitlines() == [
        "0 1 2 3 4 5 6",
        *[EMPTY_ROW] * 4,
        "_ _ _ O _ _ _",
        "O _ _ X X _ _",
    ]
    obs = g.observation(s, 0, [(1, "<O(0)>")])
    assert obs.startswith("Opponent (O) played <O(0)>.\nCurrent board:\n0 1 2 3 4 5 6\n")
    assert "You are X. Legal actions: <X(0)>, <X(1)>" in obs
    assert "x" not in g.board(s) and "." not in g.board(s)


def test_vertical_four_wins_with_step_rewards():
    g = ConnectFour()
    s, rewards = play(g, [0, 1, 0, 1, 0, 1, 0])
    assert rewards[:-1] == [[0.0, 0.0]] * 6 and rewards[-1] == [1.0, -1.0]
    assert g.is_terminal(s) and g.returns(s) == [1.0, -1.0]
    assert g.outcome(g.returns(s), 0) == "win" and g.outcome(g.returns(s), 1) == "loss"


def test_diagonal_four_wins_for_o():
    g = ConnectFour()
    # O builds the rising diagonal from the bottom of column 0 to row 4 of column 3 (X fills
    # in underneath, O waits in column 6); X never has more than three in a line.
    s, rewards = play(g, [1, 0, 2, 1, 2, 2, 3, 6, 3, 6, 3, 3])
    assert rewards[-1] == [-1.0, 1.0] and g.is_terminal(s)
    assert g.board(s).splitlines()[-4:] == [
        "_ _ _ O _ _ _",
        "_ _ O X _ _ _",
        "_ O X X _ _ O",
        "O X X X _ _ O",
    ]


def test_prompt_examples_are_legal_looking_in_own_mark():
    g = ConnectFour()
    rng = random.Random(0)
    legal_anywhere: set[str] = set()
    texts = {0: [g.rules(0)], 1: [g.rules(1)]}
    for seed in range(5):
        s = g.new_state(seed)
        while not g.is_terminal(s):
            p = g.current_player(s)
            legal = g.legal_actions(s)
            legal_anywhere |= set(legal)
            texts[p].append(g.observation(s, p, []))
            g.apply(s, rng.choice(sorted(legal.values())))
    for p, mark in ((0, "X"), (1, "O")):
        assert f"<answer><{mark}(3)></answer>" in g.rules(p)
        tokens = {t for text in texts[p] for t in TOKEN.findall(text)}
        assert tokens and all(re.fullmatch(rf"<{mark}\([0-6]\)>", t) for t in tokens)
        for t in tokens:
            assert parse_reply(f"<answer>{t}</answer>", legal_anywhere).action == t


def test_adapter_holds_no_episode_state():
    g = ConnectFour()
    before = dict(vars(g))
    a, b = g.new_state(0), g.new_state(1)
    g.apply(a, 3)
    assert g.legal_actions(b) == {f"<X({c})>": c for c in range(7)}
    assert vars(g) == before
