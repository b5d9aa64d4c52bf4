"""The replay pages' data: loading episodes from every kind of folder, the reasoning split, the
advantage join, gated and invalid steps, the end step, and a page no reply text can break."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from mars_core.games.registry import make_game
from mars_core.run.layout import (ASSIGN_REWARDS, COMPUTE_ADVANTAGES, GENERATE_ROLLOUTS, iter_dir,
                                  iter_name, stage_dir)
from mars_core.viewer.replay import (ReplayEpisode, load_replays, page_name, pick_spread,
                                     replay_data, replay_html, split_reply, write_replays)
from mars_core.rollout.play import EpisodeSpec, play_episodes
from mars_core.types import Episode, SamplingParams, Turn, episodes_frame, turns_frame

AGENTS = ("bot:random", "bot:mcts-10")


def bot_games(n: int = 3, game: str = "tic_tac_toe", prefix: str = "e") -> list[Episode]:
    specs = [EpisodeSpec(f"{prefix}{i}", game, i, AGENTS) for i in range(n)]
    return play_episodes(specs, None, None, SamplingParams(), progress=False)


def write_flat(folder: Path, episodes: list[Episode], drop: tuple[str, ...] = ()) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    episodes_frame(episodes).drop(*drop, strict=False).write_parquet(folder / "episodes.parquet")
    turns_frame(episodes).drop(*drop, strict=False).write_parquet(folder / "turns.parquet")
    return folder


def samples(folder: Path, rows: list[tuple[str, int, float]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(rows, schema={"episode_id": pl.Utf8, "turn": pl.Int64, "advantage": pl.Float64},
                 orient="row").write_parquet(folder / "samples.parquet")


def gated(ep: Episode, turn: int, reason: str = "unfinished_unit") -> Episode:
    turns = list(ep.turns)
    turns[turn] = replace(turns[turn], eligible=False, gate_reason=reason, reward=0.25)
    return replace(ep, turns=tuple(turns))


def page_payload(page: str) -> list[dict]:
    m = re.search(r'<script type="application/json" id="replay-data">(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


# -- the reply split ----------------------------------------------------------------------------
@pytest.mark.parametrize("reply, reasoning, answer", [
    ("<think>\ncentre is strong</think> so X <answer><X(1,1)></answer>",
     "<think>\ncentre is strong</think> so X", "<answer><X(1,1)></answer>"),
    ("<answer><X(0,0)></answer>", "", "<answer><X(0,0)></answer>"),
    ("I would play the corner", "I would play the corner", ""),
    ("", "", ""),
])
def test_reasoning_is_the_text_before_the_answer_tag(reply, reasoning, answer):
    assert split_reply(reply) == (reasoning, answer)


# -- replay_data --------------------------------------------------------------------------------
def test_data_of_a_real_game_has_every_turn_then_the_end():
    ep = bot_games(1)[0]
    data = replay_data(ep, {0: 0.5, 2: float("nan")})
    steps = data["steps"]
    assert [s["kind"] for s in steps] == ["turn"] * len(ep.turns) + ["end"]
    assert data["agents"] == list(AGENTS) and data["outcomes"] == list(ep.outcomes)
    first = steps[0]
    assert first["rules"] == make_game("tic_tac_toe").rules(0)
    assert steps[1]["rules"] == make_game("tic_tac_toe").rules(1)
    assert "Current board:" in first["observation"] and first["action"] == ep.turns[0].action
    assert first["reasoning"] == "" and first["advantage"] == 0.5
    assert steps[1]["advantage"] is None and steps[2]["advantage"] is None  # missing, NaN
    end = steps[-1]
    assert end["returns"] == list(ep.returns) and end["outcomes"] == list(ep.outcomes)
    marks = end["board"].replace("_", "").split()
    assert len(marks) == len(ep.turns)  # every move on the final board
    json.dumps(data, allow_nan=False)  # JSON-able, no NaN


def test_gated_and_invalid_steps_carry_their_reason_and_error():
    ep = gated(bot_games(1)[0], 1)
    bad = Turn("x", "tic_tac_toe", 0, 0, "player_0", "policy", "board", reply="<think>hm</think> "
               "<answer><X(9,9)></answer>", valid=False, error="invalid_action",
               error_detail="'<X(9,9)>' is not a legal action", format_reward=-10.0, reward=-11.0)
    invalid = Episode("x", "tic_tac_toe", 0, ("policy", "bot:random"), (-1.0, 0.0),
                      ("invalid", "other_invalid"), 0, "invalid_action", "", (bad,))
    step = replay_data(ep)["steps"][1]
    assert step["eligible"] is False and step["gate_reason"] == "unfinished_unit"
    assert step["reward"] == 0.25 and step["advantage"] is None
    data = replay_data(invalid)
    s = data["steps"][0]
    assert not s["valid"] and s["error"] == "invalid_action" and "not a legal" in s["error_detail"]
    assert s["reasoning"] == "<think>hm</think>" and s["answer"] == "<answer><X(9,9)></answer>"
    assert data["kind"] == "invalid" and data["steps"][-1]["error_player"] == 0


def test_arena_result_and_cause_show_at_the_end():
    arena = {"result": ["win", "loss"], "cause": ["strategy", "strategy"],
             "decided_by": "play"}
    ep = replace(bot_games(1)[0], info=json.dumps({"arena": arena}))
    end = replay_data(ep)["steps"][-1]
    assert end["arena"] == arena
    assert [(s["result"], s["cause"]) for s in end["arena_seats"]] == [
        ("win", "strategy"), ("loss", "strategy")]
    assert replay_data(bot_games(1)[0])["steps"][-1]["arena_seats"] is None


# -- the page -----------------------------------------------------------------------------------
def test_script_close_tag_in_a_reply_cannot_break_the_page():
    ep = bot_games(1)[0]
    evil = "</script><script>alert(1)</script><!-- & \u2028 <answer><X(0,0)></answer>"
    turns = (replace(ep.turns[0], reply=evil, observation="</SCRIPT>"), *ep.turns[1:])
    ep = replace(ep, turns=turns, episode_id="</script>")
    page = replay_html(replay_data(ep), title="</script><b>t</b>")
    assert page.lower().count("</script>") == 2  # the data's and the code's own closers
    assert "<script>alert" not in page and "<b>t</b>" not in page
    got = page_payload(page)[0]
    assert got["steps"][0]["reasoning"] == evil.split("<answer>")[0].strip()
    assert got["episode_id"] == "</script>" and got["steps"][0]["observation"] == "</SCRIPT>"


def test_page_is_self_contained_with_the_controls():
    page = replay_html([replay_data(e) for e in bot_games(2)], "two games")
    for needle in ('id="prev"', 'id="next"', 'id="step-label"', 'id="board"', 'id="reasoning"',
                   'id="action"', 'id="reward"', 'id="advantage"', 'id="gate"', 'id="slider"',
                   'id="timeline"', 'id="episode"'):
        assert needle in page
    assert not re.search(r"(src|href)=\"?https?:", page) and "@import" not in page
    assert len(page_payload(page)) == 2
    with pytest.raises(ValueError, match="at least one episode"):
        replay_html([], "none")


def test_write_replays_spreads_over_outcomes_with_safe_names(tmp_path):
    base = bot_games(1)[0]
    kinds = {"w/1": ("win", "loss"), "l 2": ("loss", "win"), "d3": ("draw", "draw"),
             "w4": ("win", "loss")}
    eps = [replace(base, episode_id=i, agents=("policy", "bot:random"), outcomes=o,
                   turns=tuple(replace(t, episode_id=i) for t in base.turns))
           for i, o in kinds.items()]
    eps.append(replace(eps[-1], episode_id="bad", error="parsing_failure", error_player=0))
    picked = pick_spread([ReplayEpisode(e) for e in eps], 4)
    assert [r.episode.episode_id for r in picked] == ["w/1", "l 2", "bad", "d3"]
    pages = write_replays(eps, tmp_path / "out", limit=3)
    assert [p.name for p in pages] == ["w_1.html", "l_2.html", "bad.html"]
    index = (tmp_path / "out" / "index.html").read_text()
    assert all(f'href="{p.name}"' in index for p in pages)
    assert page_payload(pages[2].read_text())[0]["kind"] == "invalid"
    assert write_replays(eps, tmp_path / "none", limit=0) == []
    assert not (tmp_path / "none").exists()
    assert page_name("..") == "episode.html"


# -- loading ------------------------------------------------------------------------------------
@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A run-like folder: iteration 0 raw only; iteration 1 raw, rewarded (one gated step) and
    with advantages for two turns of its first episode."""
    run = tmp_path / "run"
    old = bot_games(2, prefix="it0-")
    write_flat(stage_dir(run, 0, GENERATE_ROLLOUTS), old)
    new = bot_games(3, prefix="it1-")
    write_flat(stage_dir(run, 1, GENERATE_ROLLOUTS), new)
    write_flat(stage_dir(run, 1, ASSIGN_REWARDS), [gated(new[0], 1), *new[1:]])
    samples(stage_dir(run, 1, COMPUTE_ADVANTAGES), [("it1-0", 0, 1.5), ("it1-0", 2, -0.5)])
    (run / f"{iter_name(2)}.partial" / GENERATE_ROLLOUTS).mkdir(parents=True)  # unfinished: ignored
    return run


def test_run_dir_loads_its_newest_iteration_with_advantages(run_dir):
    got = load_replays(run_dir)
    assert [r.episode.episode_id for r in got] == ["it1-0", "it1-1", "it1-2"]
    first = got[0]
    assert first.iteration == 1 and first.source.endswith(ASSIGN_REWARDS)
    assert first.advantages == {0: 1.5, 2: -0.5} and got[1].advantages == {}
    assert first.episode.turns[1].gate_reason == "unfinished_unit"
    assert [r.episode.episode_id for r in load_replays(iter_dir(run_dir, 1))] == [
        "it1-0", "it1-1", "it1-2"]
    older = load_replays(run_dir, iteration=0)
    assert older[0].source.endswith(GENERATE_ROLLOUTS) and older[0].advantages is None


def test_flat_folder_with_optional_advantages(tmp_path):
    eps = bot_games(2)
    flat = write_flat(tmp_path / "arena", eps)
    got = load_replays(flat)
    assert [r.episode for r in got] == eps
    assert got[0].advantages is None and got[0].iteration is None
    pl.DataFrame({"episode_id": ["e1"], "turn": [0], "advantage": [0.7]}).write_parquet(
        flat / "advantages.parquet")
    assert load_replays(flat)[1].advantages == {0: 0.7}


def test_old_files_without_newer_columns_get_defaults(tmp_path):
    eps = bot_games(1)
    flat = write_flat(tmp_path / "old", eps, drop=("eligible", "gate_reason", "info",
                                                   "error_detail"))
    ep = load_replays(flat)[0].episode
    assert all(t.eligible and t.gate_reason == "" for t in ep.turns) and ep.info == ""
    assert [t.action for t in ep.turns] == [t.action for t in eps[0].turns]


def test_turns_only_sample_rebuilds_the_episodes(tmp_path):
    eps = bot_games(2)
    folder = tmp_path / "sample"
    folder.mkdir()
    turns_frame(eps).write_parquet(folder / "episodes_sample.parquet")
    got = [r.episode for r in load_replays(folder)]
    assert [e.episode_id for e in got] == ["e0", "e1"]
    for mine, real in zip(got, eps):
        assert mine.agents == real.agents and mine.returns == real.returns
        assert mine.outcomes == real.outcomes and mine.turns == real.turns


def test_bad_inputs_are_one_line_value_errors(tmp_path, run_dir):
    cases = [(tmp_path / "nope", "no such folder"), (tmp_path, "no episodes found")]
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "turns.parquet").write_text("not parquet")
    cases.append((garbage, "cannot read"))
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    pl.DataFrame({"x": [1]}).write_parquet(wrong / "turns.parquet")
    cases.append((wrong, "column(s) episode_id, turn, player missing"))
    empty = write_flat(tmp_path / "empty", [])
    cases.append((empty, "no episodes found"))
    for folder, needle in cases:
        with pytest.raises(ValueError, match=re.escape(needle)) as e:
            load_replays(folder)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"has no iteration 7 with episodes \(it has 0, 1\)"):
        load_replays(run_dir, iteration=7)
    with pytest.raises(ValueError, match="applies to a run directory"):
        load_replays(run_dir / "iter_0001", iteration=0)
