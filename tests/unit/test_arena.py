"""The arena's parts: TrueSkill updates against hand-checked cases, attribution of real games
(a scripted seat breaking the rules, cut-off replies, bots playing to the end), the
leaderboard's clean ratings, the schedules and the frozen pool's fixed games."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import pytest
from scipy.stats import norm

from mars_core.arena.attribution import attribute
from mars_core.arena.config import (ArenaConfig, ConfigError, check_agents, load_arena_config,
                                    parse_agent)
from mars_core.arena.leaderboard import game_record, leaderboard, markdown, rate
from mars_core.arena.ratings import MU, SIGMA, Rating, Ratings, TrueSkillParams
from mars_core.arena.schedule import (NEWCOMER, Match, fingerprint, pool_matches, round_robin,
                                      sampled, sides, with_newcomer)
from mars_core.engines.scripted import ScriptedEngine, legal_actions_in
from mars_core.games.registry import make_game
from mars_core.run.layout import checkpoint_dir
from mars_core.rollout.play import EpisodeSpec, PromptBuilder, play_episodes
from mars_core.types import SamplingParams

BETA, TAU = SIGMA / 2, SIGMA / 100


def _two_player(mu_w, s_w, mu_l, s_l, draw: bool, p_draw: float = 0.10):
    """TrueSkill's closed-form two-player update (Herbrich et al. 2007, eqs. for v and w)."""
    s_w2, s_l2 = s_w ** 2 + TAU ** 2, s_l ** 2 + TAU ** 2
    c = math.sqrt(2 * BETA ** 2 + s_w2 + s_l2)
    t, eps = (mu_w - mu_l) / c, norm.ppf((p_draw + 1) / 2) * math.sqrt(2) * BETA / c
    if draw:
        den = norm.cdf(eps - t) - norm.cdf(-eps - t)
        v = (norm.pdf(-eps - t) - norm.pdf(eps - t)) / den
        w = v ** 2 + ((eps - t) * norm.pdf(eps - t) + (eps + t) * norm.pdf(eps + t)) / den
    else:
        v = norm.pdf(t - eps) / norm.cdf(t - eps)
        w = v * (v + t - eps)
    new = lambda mu, s2, sign: (mu + sign * s2 / c * v, math.sqrt(s2 * (1 - s2 / c ** 2 * w)))
    return new(mu_w, s_w2, 1), new(mu_l, s_l2, -1)


def test_win_between_equals_matches_the_closed_form_and_the_published_numbers():
    r = Ratings()
    assert r.rate([["a"], ["b"]], [0, 1])
    (mw, sw), (ml, sl) = _two_player(MU, SIGMA, MU, SIGMA, draw=False)
    assert r.get("a").mu == pytest.approx(mw, abs=1e-6) == pytest.approx(29.396, abs=1e-3)
    assert r.get("b").mu == pytest.approx(ml, abs=1e-6) == pytest.approx(20.604, abs=1e-3)
    assert r.get("a").sigma == pytest.approx(sw, abs=1e-6) == pytest.approx(7.171, abs=1e-3)
    assert r.get("b").sigma == pytest.approx(sl, abs=1e-6)


def test_draw_between_equals_and_between_unequal_agents():
    r = Ratings()
    r.rate([["a"], ["b"]], [0, 0])
    assert r.get("a").mu == pytest.approx(25.0, abs=1e-9) and r.get("b").mu == pytest.approx(25.0)
    assert r.get("a").sigma == pytest.approx(6.458, abs=1e-3)
    frozen = {"strong": Rating(30.0, 4.0)}
    r = Ratings(frozen=frozen)
    r.rate([["weak"], ["strong"]], [0, 0])  # drawing a stronger agent raises the weaker one
    (mw, sw), _ = _two_player(MU, SIGMA, 30.0, 4.0, draw=True)
    assert r.get("weak").mu == pytest.approx(mw, abs=1e-4) and r.get("weak").mu > 25
    assert r.get("weak").sigma == pytest.approx(sw, abs=1e-4)


def test_two_against_two_and_one_agent_holding_both_seats_of_a_team():
    r = Ratings()
    r.rate([["a", "b"], ["c", "d"]], [0, 1])
    for x in "ab":
        assert (r.get(x).mu, r.get(x).sigma) == pytest.approx((28.108, 7.774), abs=1e-3)
    for x in "cd":
        assert (r.get(x).mu, r.get(x).sigma) == pytest.approx((21.892, 7.774), abs=1e-3)
    same = Ratings()  # Codenames: one agent plays spymaster and operative of its side
    same.rate([["red", "red"], ["blue", "blue"]], [0, 1])
    assert same.get("red").mu == pytest.approx(r.get("a").mu, abs=1e-9)
    assert same.get("blue").sigma == pytest.approx(r.get("c").sigma, abs=1e-9)


def test_three_way_tie_and_three_player_free_for_all():
    r = Ratings()
    r.rate([["a"], ["b"], ["c"]], [0, 0, 0])
    for x in "abc":
        assert r.get(x).mu == pytest.approx(25.0, abs=1e-3)
        assert r.get(x).sigma == pytest.approx(5.70, abs=0.01)
    r = Ratings()
    r.rate([["a"], ["b"], ["c"]], [0, 1, 2])
    assert r.get("a").mu > r.get("b").mu > r.get("c").mu
    assert r.get("b").mu == pytest.approx(25.0, abs=1e-3)  # the middle place of equals
    assert r.get("a").mu - 25 == pytest.approx(25 - r.get("c").mu, abs=1e-6)


def test_frozen_agents_never_move_and_uninformative_games_change_nothing():
    frozen = {"ref": Rating(30.0, 2.0)}
    r = Ratings(frozen=frozen)
    for _ in range(5):
        r.rate([["new"], ["ref"]], [0, 1])
    assert r.get("ref") == Rating(30.0, 2.0) and r.get("new").mu > 25
    before = r.all()
    assert not r.rate([["new"], ["new"]], [0, 1])  # self-play says nothing about skill
    assert not r.rate([["new"]], [0])
    assert r.all() == before
    with pytest.raises(ValueError, match="ranks"):
        r.rate([["a"], ["b"]], [0])
    with pytest.raises(ValueError, match="draw_probability"):
        TrueSkillParams(draw_probability=1.0)


# -- attribution on real games ---------------------------------------------------------------

def _play(tokenizer, game, agents, reply_fn, seed=3, max_new_tokens=48):
    engine = ScriptedEngine(tokenizer, reply_fn)
    prompts = PromptBuilder(tokenizer, "none", keep_history=False)
    spec = EpisodeSpec("t-0", game, seed, tuple(agents))
    params = SamplingParams(max_new_tokens=max_new_tokens)
    return play_episodes([spec], {"m": engine}, prompts, params, progress=False)[0]


def test_a_rule_error_loses_for_its_side_and_hands_the_others_the_game(tokenizer):
    illegal = _play(tokenizer, "tic_tac_toe", ("bot:random", "m"),
                    lambda p: "<answer><9,9></answer>")
    v = attribute(illegal, make_game("tic_tac_toe"))
    assert v["decided_by"] == "rule_error" and v["error_seat"] == 1
    assert v["result"] == ["win", "loss"]
    assert v["cause"] == ["opponent_rule_error", "own_rule_error"]
    assert v["ranks"] == [0, 1]
    ipd = _play(tokenizer, "three_player_ipd", ("bot:tit-for-tat", "m", "bot:always-defect"),
                lambda p: "<answer>no idea</answer>")
    v = attribute(ipd, make_game("three_player_ipd"))
    assert v["result"] == ["win", "loss", "win"] and v["ranks"] == [0, 1, 0]
    assert Counter(v["cause"]) == {"opponent_rule_error": 2, "own_rule_error": 1}


def test_a_cut_off_reply_is_a_timeout_not_a_rule_error(tokenizer):
    ep = _play(tokenizer, "tic_tac_toe", ("m", "bot:random"), lambda p: "thinking " * 40,
               max_new_tokens=8)
    v = attribute(ep, make_game("tic_tac_toe"))
    assert v["decided_by"] == "length" and v["cause"] == ["timeout", "timeout"]
    assert v["result"] == ["loss", "win"]


def _reworded(episode, detail):
    """The episode with its error turn's `error_detail` (text for people) reworded."""
    turns = tuple(replace(t, error_detail=detail) if t.error else t for t in episode.turns)
    return replace(episode, turns=turns)


def test_rewording_the_error_detail_leaves_the_classification_unchanged(tokenizer):
    cut = _play(tokenizer, "tic_tac_toe", ("m", "bot:random"), lambda p: "thinking " * 40,
                max_new_tokens=8)
    illegal = _play(tokenizer, "tic_tac_toe", ("bot:random", "m"),
                    lambda p: "<answer><9,9></answer>")
    game = make_game("tic_tac_toe")
    for ep in (cut, illegal):
        want = attribute(ep, game)
        for detail in ("the reply ran out of tokens", "truncated: not really",
                       "context overflow", ""):
            assert attribute(_reworded(ep, detail), game) == want
    assert attribute(cut, game)["decided_by"] == "length"
    assert attribute(illegal, game)["decided_by"] == "rule_error"


def test_games_played_to_the_end_are_strategy_with_results_from_the_returns(tokenizer):
    legal = lambda p: f"<answer>{legal_actions_in(p)[0]}</answer>"
    ep = _play(tokenizer, "tic_tac_toe", ("m", "bot:mcts-50"), legal)
    v = attribute(ep, make_game("tic_tac_toe"))
    assert v["decided_by"] == "play" and set(v["cause"]) == {"strategy"}
    expected = {1.0: "win", -1.0: "loss", 0.0: "draw"}
    assert v["result"] == [expected[r] for r in ep.returns]
    cn = play_episodes([EpisodeSpec("c", "codenames", 5, ("bot:random",) * 4)], None, None,
                       SamplingParams(), progress=False)[0]
    v = attribute(cn, make_game("codenames"))
    assert v["teams"] == ["red", "red", "blue", "blue"] and v["team_order"] == ["red", "blue"]
    assert v["result"][0] == v["result"][1] != v["result"][2] == v["result"][3]
    assert v["decided_by"] in ("play", "rule_error", "move_limit")


def test_secret_mafia_rates_the_camps_it_drew():
    ep = play_episodes([EpisodeSpec("m", "secret_mafia", 7, ("bot:random",) * 6)], None, None,
                       SamplingParams(), progress=False)[0]
    v = attribute(ep, make_game("secret_mafia"))
    assert sorted(set(v["teams"])) == ["Mafia", "Village"]
    wins = {t for t, r in zip(v["teams"], v["result"]) if r == "win"}
    assert len(wins) <= 1  # one camp wins (or nobody, on a draw)


def test_cooperative_games_have_nobody_to_rank():
    with pytest.raises(ValueError, match="cooperative"):
        round_robin(["a", "b"], ["mini_hanabi"], 1, 0)


# -- leaderboard ------------------------------------------------------------------------------

def _record(agents, result, decided_by="play", error_seat=-1, game="tic_tac_toe"):
    ranks = {"win": 0, "draw": 0, "loss": 1}
    return {"match_id": "x", "game": game, "agents": list(agents), "teams": ["seat0", "seat1"],
            "team_order": ["seat0", "seat1"], "ranks": [ranks[r] for r in result],
            "result": list(result), "decided_by": decided_by, "error_seat": error_seat,
            "cause": ["strategy"] * 2, "returns": [0.0, 0.0], "turns": 5}


def test_clean_ratings_drop_the_games_an_opponent_error_decided():
    records = [_record(("lucky", "sloppy"), ("win", "loss"), "rule_error", 1)] * 6
    records += [_record(("lucky", "solid"), ("loss", "win"))] * 2
    rows = {r["agent"]: r for r in leaderboard(records)}
    lucky = rows["lucky"]
    assert lucky["wins_by_opponent_error"] == 6 and lucky["clean_games"] == 2
    assert lucky["clean_mu"] < 25 < lucky["mu"]  # its climb came from errors
    assert rows["sloppy"]["error_rate"] == 1.0 and rows["lucky"]["error_rate"] == 0.0
    assert rows["sloppy"]["clean_mu"] == pytest.approx(25.0)  # no clean game at all
    assert rows["lucky"]["win_rate"] == pytest.approx(6 / 8)
    timeouts = [_record(("a", "b"), ("win", "loss"), "length", 1)]
    assert {r["agent"]: r for r in leaderboard(timeouts)}["b"]["timeout_rate"] == 1.0
    assert "| 1 |" in markdown(list(rows.values()))


def test_leaderboard_with_a_frozen_pool_keeps_the_references_ratings():
    frozen = {"ref": Rating(28.0, 1.5)}
    records = [_record(("new", "ref"), ("win", "loss"))] * 4
    rows = {r["agent"]: r for r in leaderboard(records, frozen=frozen)}
    assert (rows["ref"]["mu"], rows["ref"]["sigma"]) == (28.0, 1.5) and rows["ref"]["frozen"]
    assert rows["new"]["mu"] > 28 and not rows["new"]["frozen"]
    assert rate(records, frozen=frozen).get("ref") == Rating(28.0, 1.5)


def test_game_record_from_a_real_match():
    ep = play_episodes([EpisodeSpec("e", "colonel_blotto", 4, ("bot:random", "bot:blotto-focus"))],
                       None, None, SamplingParams(), progress=False)[0]
    rec = game_record(Match("m", "colonel_blotto", 4, ("bot:random", "bot:blotto-focus")), ep)
    assert rec["agents"] == ["bot:random", "bot:blotto-focus"] and rec["turns"] == len(ep.turns)
    assert sorted(rec["result"]) in (["loss", "win"], ["draw", "draw"])


# -- schedules --------------------------------------------------------------------------------

def test_round_robin_balances_seats_and_shares_seeds_across_rotations():
    ms = round_robin(["a", "b", "c"], ["tic_tac_toe"], 2, seed=1)
    assert len(ms) == 3 * 2 * 2  # pairs x rotations x n
    seat_counts = Counter((m.agents[0]) for m in ms)
    assert seat_counts == {"a": 4, "b": 4, "c": 4}
    by_pair = {}
    for m in ms:
        by_pair.setdefault(frozenset(m.agents), set()).add(m.seed)
    assert all(len(seeds) == 2 for seeds in by_pair.values())  # n seeds, both seatings
    assert len({m.match_id for m in ms}) == len(ms)


def test_schedules_skip_bots_that_do_not_fit_and_fill_teams():
    ms = round_robin(["m", "bot:mcts-10", "bot:nash"], ["kuhn_poker", "tic_tac_toe"], 1, 0)
    poker = [m for m in ms if m.game == "kuhn_poker"]
    assert poker and all("bot:mcts-10" not in m.agents for m in poker)
    assert all("bot:nash" not in m.agents for m in ms if m.game == "tic_tac_toe")
    cn = round_robin(["x", "y"], ["codenames"], 1, 0)
    assert sides("codenames") == [(0, 1), (2, 3)]
    assert {m.agents for m in cn} == {("x", "x", "y", "y"), ("y", "y", "x", "x")}
    ipd = round_robin(["x", "y"], ["three_player_ipd"], 1, 0)  # fewer agents than seats
    assert all(set(m.agents) == {"x", "y"} for m in ipd) and len(ipd) == 3
    sm = sampled(["a", "b", "c", "d"], ["tic_tac_toe"], 5, 0)
    assert len(sm) == 10 and sm == sampled(["a", "b", "c", "d"], ["tic_tac_toe"], 5, 0)


def test_the_pool_schedule_is_the_same_games_for_every_newcomer():
    base = pool_matches(["bot:random", "bot:mcts-10"], ["tic_tac_toe", "kuhn_poker"], 2, 9)
    assert all(NEWCOMER in m.agents for m in base)
    assert all("bot:mcts-10" not in m.agents for m in base if m.game == "kuhn_poker")
    one, two = with_newcomer(base, "ckpt80"), with_newcomer(base, "ckpt120")
    games = lambda ms: [(m.match_id, m.seed, m.game) for m in ms]  # noqa: E731
    assert games(one) == games(two)
    assert [m.agents.index("ckpt80") for m in one] == [m.agents.index("ckpt120") for m in two]
    assert fingerprint(base) == fingerprint(pool_matches(["bot:random", "bot:mcts-10"],
                                                         ["tic_tac_toe", "kuhn_poker"], 2, 9))
    assert fingerprint(base) != fingerprint(pool_matches(["bot:random", "bot:mcts-10"],
                                                         ["tic_tac_toe", "kuhn_poker"], 2, 10))


def test_agents_and_presets_refuse_bad_input_in_one_line():
    ckpt = checkpoint_dir("runs/demo", 1).as_posix()  # runs/demo/iter_0001/save_checkpoint
    assert parse_agent(f"ckpt80={ckpt}") == ("ckpt80", ckpt)
    assert parse_agent("models:/m@champion") == ("models:/m@champion", "models:/m@champion")
    assert parse_agent("bot:mcts-10") == ("bot:mcts-10", "bot:mcts-10")
    for bad, msg in (("x=bot:random", "labelled by its spec"), ("bot:x=embedded", "reserved"),
                     ("bot:wizard", "unknown bot"), ("=embedded", "LABEL=SPEC")):
        with pytest.raises(ValueError, match=msg):
            parse_agent(bad)
    for flags, msg in (({"games": ["chess"]}, "unknown game"),
                       ({"games": ["mini_hanabi"]}, "cooperative"),
                       ({"agents": ["a=embedded", "a=embedded"]}, "twice")):
        with pytest.raises(ConfigError, match=msg):
            load_arena_config(None, [], **flags)
    with pytest.raises(ValueError, match="at least two"):
        check_agents({"embedded": "embedded"}, ["tic_tac_toe"])
    with pytest.raises(ValueError, match="tic_tac_toe: fewer than two"):
        check_agents({"bot:nash": "bot:nash", "bot:mcts-5": "bot:mcts-5"}, ["tic_tac_toe"])
    check_agents({"m": "embedded", "bot:nash": "bot:nash"}, ["kuhn_poker"])
    with pytest.raises(ConfigError, match="unknown config key"):
        load_arena_config(None, ["rounds=3"])
    cfg = load_arena_config(None, ["play.max_new_tokens=99"], agents=["embedded", "bot:random"])
    assert isinstance(cfg, ArenaConfig) and cfg.play.max_new_tokens == 99
