"""`mars arena` end to end: an open arena of a model, a training run's checkpoints and bots on
an OpenSpiel and a TextArena game (leaderboard, plot, episodes, MLflow, a saved pool), the
frozen pool scoring two newcomers on the same games without moving, and bad flags."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml
from mlflow import MlflowClient

from cli.main import main
from mars_core.run.layout import (CONFIG_FILE, INIT, PREPARE_POLICY, checkpoint_dir, stage_dir,
                                  start_model_dir)


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory, tiny_model_dir):
    """A run directory with the layout `mars train` leaves: a start policy and two
    checkpoints (the tiny model's weights) and one whose weights were pruned."""
    run = tmp_path_factory.mktemp("runs") / "tiny-run"
    stage_dir(run, INIT, PREPARE_POLICY).mkdir(parents=True)
    (run / CONFIG_FILE).write_text("run: {iterations: 3}\n")
    shutil.copytree(tiny_model_dir, start_model_dir(run))
    for k in (0, 2):
        shutil.copytree(tiny_model_dir, checkpoint_dir(run, k))
    checkpoint_dir(run, 1).mkdir(parents=True)  # keep_last removed its weights
    return run


def _arena(*argv) -> int:
    return main(["arena", *argv, "--set", "play.max_new_tokens=8"])


def test_open_arena_rates_models_checkpoints_and_bots(tmp_path, prefect_api, fake_run,
                                                      tiny_model_dir, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    out, pool = tmp_path / "arena.json", tmp_path / "pool.yaml"
    assert _arena("--agents", f"tiny={tiny_model_dir},bot:random,bot:mcts-5,bot:blotto-focus",
                  "--run", str(fake_run), "--games", "tic_tac_toe,colonel_blotto", "--n", "1",
                  "--out", str(out), "--save-pool", str(pool), "--tracking-uri", uri) == 0
    assert "games, leaderboard in" in capsys.readouterr().out
    result = json.loads(out.read_text())
    board = {r["agent"]: r for r in result["leaderboard"]}
    ckpts = ["tiny-run/start", "tiny-run/iter_0000", "tiny-run/iter_0002"]
    assert set(board) == {"tiny", "bot:random", "bot:mcts-5", "bot:blotto-focus", *ckpts}
    assert result["checkpoints"] == [[c, i] for c, i in zip(ckpts, (0, 1, 3))]
    # tic_tac_toe: 6 agents fit (not blotto-focus); colonel_blotto: 6 fit (not MCTS)
    assert board["tiny"]["games"] == 5 * 2 + 5 * 2 and board["bot:mcts-5"]["games"] == 5 * 2
    assert len(result["records"]) == 2 * (15 * 2)
    assert set(result["per_game"]) == {"tic_tac_toe", "colonel_blotto"}
    for rec in result["records"]:
        assert rec["decided_by"] in ("play", "rule_error", "length", "move_limit")
        assert len(rec["cause"]) == len(rec["agents"]) == 2
    ratings = [r["rating"] for r in result["leaderboard"]]
    assert ratings == sorted(ratings, reverse=True)
    # a random tiny model breaks the rules: its games are error-decided, and it shows
    assert board["tiny"]["error_rate"] + board["tiny"]["timeout_rate"] > 0.5
    assert board["bot:random"]["wins_by_opponent_error"] > 0
    assert board["bot:random"]["clean_games"] < board["bot:random"]["games"]
    assert (tmp_path / "arena_ratings.png").stat().st_size > 10_000
    assert "| 1 |" in (tmp_path / "arena_leaderboard.md").read_text()
    assert (tmp_path / "arena_episodes/turns.parquet").is_file()
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(_single_run(client, "mars-arena"))
    # the leaderboard is a table on the flow run, linked to the MLflow run
    shown = _latest_artifact("arena-open")
    assert [r["agent"] for r in json.loads(shown.data)] == [r["agent"] for r in result["leaderboard"]]
    assert f"/runs/{run.info.run_id}" in shown.description
    assert run.data.metrics["rating/tiny"] == pytest.approx(board["tiny"]["rating"])
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"arena.json", "arena_ratings.png", "leaderboard.json", "episodes"} <= arts
    assert "replays" in arts and (tmp_path / "arena_replays/index.html").is_file()
    # any game of the arena replays from the run's artifacts, with its verdict
    rec = next(r for r in result["records"] if r["error_seat"] >= 0)
    page = tmp_path / "game.html"
    assert main(["replay", f"runs:/{run.info.run_id}/episodes", "--episode", rec["episode_id"],
                 "--out", str(page), "--tracking-uri", uri]) == 0
    text = page.read_text()
    assert rec["episode_id"] in text and f'"decided_by": "{rec["decided_by"]}"' in text
    # every game is an MLflow trace of the arena's run, with a span per move
    traces = client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id,
                                  max_results=1000)
    assert len(traces) == len(result["records"])
    by_episode = {t.info.tags["mars.episode"]: t for t in traces}
    for r in result["records"]:
        t = by_episode[r["episode_id"]]
        root = next(s for s in t.data.spans if s.parent_id is None)
        assert len(t.data.spans) == 1 + r["turns"] and t.info.tags["mars.game"] == r["game"]
        assert root.outputs["decided_by"] == r["decided_by"] and root.inputs["seed"] == r["seed"]
    moves = [s for s in by_episode[rec["episode_id"]].data.spans if s.parent_id]
    seat = rec["agents"][rec["error_seat"]]
    bad = next(s for s in moves if not s.attributes["mars.valid"])
    assert bad.attributes["mars.agent"] == seat and bad.status.status_code == "ERROR"
    tiny = next(s for t in traces for s in t.data.spans if s.parent_id
                and s.attributes["mars.agent"] == "tiny")
    assert tiny.attributes["mars.prompt_tokens"] > 0
    assert tiny.attributes["mars.completion_tokens"] > 0
    assert tiny.inputs["observation"] and "reply" in tiny.outputs
    frozen = yaml.safe_load(pool.read_text())
    assert {r["agent"].split("=")[0] for r in frozen["references"]} == set(board)


def test_the_arena_on_an_engine_game_and_each_models_exploitability(tmp_path, prefect_api,
                                                                    tiny_model_dir, capsys):
    """Kuhn Poker and OpenSpiel's Nim by name (issue 62): the model agent's exact
    exploitability beside its rating (issue 61), a column of the leaderboard and an MLflow
    metric; the bots have none; the engine game's replay pages are written."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    out = tmp_path / "arena.json"
    assert _arena("--agents", f"tiny={tiny_model_dir},bot:random", "--games",
                  "kuhn_poker,openspiel:nim", "--n", "1", "--out", str(out),
                  "--tracking-uri", uri, "--set", "play.keep_history=false") == 0
    result = json.loads(out.read_text())
    board = {r["agent"]: r for r in result["leaderboard"]}
    assert 0 <= board["tiny"]["exploitability/kuhn_poker"] <= 3  # Kuhn's most is 2.75
    assert not any(k.startswith("exploitability/") for k in board["bot:random"])
    assert set(result["per_game"]) == {"kuhn_poker", "openspiel:nim"}
    table = (tmp_path / "arena_leaderboard.md").read_text()
    assert "exploitability (kuhn_poker)" in table
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(_single_run(client, "mars-arena"))
    assert run.data.metrics["exploitability/kuhn_poker/tiny"] == pytest.approx(
        board["tiny"]["exploitability/kuhn_poker"])
    assert any("openspiel_nim" in p.name for p in (tmp_path / "arena_replays").iterdir())


def _single_run(client, experiment):
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1
    return runs[0].info.run_id


def test_frozen_pool_scores_newcomers_on_the_same_games_and_never_moves(tmp_path, prefect_api,
                                                                       tiny_model_dir):
    pool = tmp_path / "pool.yaml"
    pool.write_text(yaml.safe_dump({
        "name": "mini-ref", "games": ["tic_tac_toe", "colonel_blotto"], "n": 2, "seed": 11,
        "references": [{"agent": "bot:mcts-20", "mu": 29.0, "sigma": 1.5},
                       {"agent": "bot:mcts-5", "mu": 27.0, "sigma": 2.0},
                       {"agent": "bot:blotto-focus", "mu": 24.0, "sigma": 1.0}],
        "play": {"max_new_tokens": 8, "keep_history": False}}))
    runs = []
    for i, newcomers in enumerate(("bot:random", f"tiny={tiny_model_dir}")):
        out = tmp_path / f"score{i}.json"
        assert main(["arena", "--reference", str(pool), "--agents", newcomers,
                     "--out", str(out)]) == 0
        runs.append(json.loads(out.read_text()))
    first, second = runs
    assert first["mode"] == "pool" and first["pool"] == "mini-ref"
    assert first["schedule"]["fingerprint"] == second["schedule"]["fingerprint"]
    games = lambda res: [(r["match_id"], r["seed"], r["game"]) for r in res["records"]]
    assert games(first) == games(second)  # exactly the same games for both newcomers
    for res, label in ((first, "bot:random"), (second, "tiny")):
        board = {r["agent"]: r for r in res["leaderboard"]}
        assert (board["bot:mcts-20"]["mu"], board["bot:mcts-20"]["sigma"]) == (29.0, 1.5)
        assert (board["bot:mcts-5"]["mu"], board["bot:mcts-5"]["sigma"]) == (27.0, 2.0)
        assert board["bot:blotto-focus"]["frozen"] and not board[label]["frozen"]
        assert board[label]["sigma"] < 25 / 3  # only the newcomer's rating moved
        # tic_tac_toe: 2 references x 2 seats x n=2; colonel_blotto: 1 x 2 x 2
        assert board[label]["games"] == 8 + 4
        assert all(label in r["agents"] for r in res["records"])
    assert main(["arena", "--reference", str(pool), "--agents", "bot:always-defect"]) == 2


@pytest.mark.parametrize("argv, message", [
    (["--agents", "embedded,bot:random", "--games", "chess"], "unknown game 'chess'"),
    (["--agents", "embedded,bot:random", "--games", "mini_hanabi"], "cooperative"),
    (["--agents", "bot:random,bot:wizard"], "unknown bot 'bot:wizard'"),
    (["--agents", "embedded"], "at least two agents"),
    (["--agents", "x=/no/such/model,bot:random"], "/no/such/model"),
    (["--agents", "embedded,bot:random", "--n", "0"], "--n must be at least 1"),
    (["--reference", "/no/pool.yaml", "--agents", "embedded"], "no such file"),
    (["--agents", "embedded,bot:random", "--run", "/no/run"], "not a training run directory"),
    (["--agents", "embedded,bot:random", "--out", "/no/dir/a.json"], "--out folder does not"),
])
def test_bad_flags_are_one_line_errors(argv, message, capsys):
    assert main(["arena", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mars: error:") and message in err and "\n" not in err


def _latest_artifact(key: str):
    """The newest Prefect artifact with `key`."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async def read():
        async with get_client() as client:
            found = await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
            return max(found, key=lambda a: a.created)

    return asyncio.run(read())
