"""The nightly candidate-vs-champion evaluation: registry aliases in, a logged comparison out,
`champion` moved only on a win (or when the registry answers that there is none yet: a failed
lookup, a 503 behind a real proxy in front of a real MLflow server, fails the night and promotes
nothing); and the `nightly-eval` deployment registers with its cron schedule on a Prefect
server."""
from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from mlflow import MlflowClient

from flows.nightly import nightly_eval_flow
from tasks.model_registry import RegistryError, alias_version
from tests.conftest import REPO
from tests.servers import mlflow_in, started

QUICK = str(REPO / "configs/eval/mars_strategic_quick.yaml")


def _register(uri, tmp_path, model_dir, name, aliases: list[list[str]]) -> MlflowClient:
    """One version of `model_dir` per entry of `aliases`, each given those aliases."""
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment(f"reg-{name}", artifact_location=(tmp_path / "art").as_uri())
    client.create_registered_model(name)
    for names in aliases:
        run = client.create_run(exp)
        client.log_artifacts(run.info.run_id, str(model_dir), "model")
        mv = client.create_model_version(name, source=f"{run.info.artifact_uri}/model",
                                         run_id=run.info.run_id)
        for alias in names:
            client.set_registered_model_alias(name, alias, mv.version)
    return client


def _nightly(uri, tmp_path, name, **kw):
    return nightly_eval_flow(registered_model=name, systems=["single", "autogen"],
                             benchmarks=["gsm8k", "aqua"], limit=2, max_new_tokens=8,
                             tracking_uri=uri, runs_dir=str(tmp_path),
                             out_dir=str(tmp_path / "nightly"), **kw)


@pytest.mark.benchmarks("gsm8k", "aqua")
def test_candidate_that_does_not_win_leaves_the_champion(tmp_path, prefect_api, tiny_model_dir,
                                                         monkeypatch):
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = _register(uri, tmp_path, tiny_model_dir, "tiny", [["champion"], ["candidate"]])
    arena = tmp_path / "arena.yaml"
    arena.write_text("agents: [bot:random]\ngames: [tic_tac_toe]\nn: 1\n"
                     "play: {max_new_tokens: 8, keep_history: false}\n")
    result = _nightly(uri, tmp_path, "tiny", game_eval_preset=QUICK, game_eval_n=1,
                      arena_preset=str(arena), base_model=str(tiny_model_dir))
    assert result["decision"] == "keep" and not result["promoted"]
    assert result["versions"] == {"candidate": 2, "champion": 1}
    assert int(client.get_model_version_by_alias("tiny", "champion").version) == 1
    report = json.loads(open(result["out"]).read())
    assert report["mas_difference"]["n"] == 8  # 2 systems x 2 benchmarks x 2 questions
    assert report["strategic_difference"]["n"] > 0  # same weights: no significant difference
    assert not report["strategic_difference"]["wins"] and report["decision"]["promote"] is False
    assert {r["model"] for r in report["table"]} >= {"candidate", "champion",
                                                     "candidate - champion"}
    # per system and benchmark, paired by question (same weights: no measurable change)
    table = (Path(result["out"]).parent / "table.md").read_text()
    assert "| candidate - champion (points, paired) | reading |" in table
    assert "| all | all | 8 | +0.0 ± " in table and "no measurable change" in table
    run = client.get_run(result["mlflow_run_id"])
    assert run.data.metrics["promoted"] == 0 and "mas/difference" in run.data.metrics
    assert "strategic/ci95" in run.data.metrics
    # the arena round: candidate, champion and the base model against the preset's bot
    board = {r["agent"]: r for r in report["arena"]["leaderboard"]}
    assert set(board) == {"candidate", "champion", "base", "bot:random"}
    assert board["candidate"]["games"] == 3 * 2  # one game per opponent and seating
    assert "arena/rating/bot_random" in run.data.metrics
    arena_run = client.get_run(report["arena"]["mlflow_run_id"])
    assert arena_run.data.tags["mars.kind"] == "arena"
    assert "arena/rating/candidate" in run.data.metrics


@pytest.mark.benchmarks("gsm8k", "aqua")
def test_first_candidate_becomes_champion_and_same_versions_do_nothing(
        tmp_path, prefect_api, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = _register(uri, tmp_path, tiny_model_dir, "fresh", [["candidate"]])
    result = _nightly(uri, tmp_path, "fresh", game_eval_preset=None, arena_preset=None)
    assert result["promoted"] and result["reason"] == "no champion yet"
    mv = client.get_model_version_by_alias("fresh", "champion")
    assert int(mv.version) == 1 and mv.tags["mars.promotion_reason"] == "no champion yet"
    again = _nightly(uri, tmp_path, "fresh", game_eval_preset=None, arena_preset=None)
    assert again["decision"] == "unchanged"
    with pytest.raises(RegistryError, match="no registered model 'absent'"):
        _nightly(uri, tmp_path, "absent", game_eval_preset=None, arena_preset=None)
    client.delete_registered_model_alias("fresh", "candidate")
    with pytest.raises(RegistryError, match="has no 'candidate' alias"):
        _nightly(uri, tmp_path, "fresh", game_eval_preset=None, arena_preset=None)


def test_four_questions_all_won_do_not_promote():
    """The nightly decision (`promotion`, no flow run): 4 questions out of 4 won against 4 lost
    do not clear the small-sample interval's bar, 8 out of 8 do; the reason names the
    interval either way."""
    from eval.systems import Result
    from flows.nightly import promotion

    def answers(n, correct):
        return [Result("single", "gsm8k", str(i), "18", "", "answered", 1, correct=correct)
                for i in range(n)]

    mas, strategic, promote, why = promotion(answers(4, True), answers(4, False))
    assert mas["difference"] == 100.0 and mas["ci95"] > 100.0 and strategic is None
    assert not promote and "95% Student-t interval of 4 paired questions" in why
    mas, _, promote, why = promotion(answers(8, True), answers(8, False))
    assert promote and mas["wins"] and "95% Student-t interval of 8 paired questions" in why
    assert promotion(answers(4, True), None)[2:] == (True, "no champion yet")


def test_nightly_deployment_registers_with_its_schedule(prefect_api, tmp_path):
    """`prefect deploy` of prefect.yaml's nightly-eval against a local Prefect server."""
    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    prefect = [sys.executable, "-m", "prefect"]
    subprocess.run([*prefect, "work-pool", "create", "mars-local", "--type", "process"],
                   cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    done = subprocess.run([*prefect, "--no-prompt", "deploy", "--name", "nightly-eval"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    shown = subprocess.run([*prefect, "deployment", "inspect", "mars-nightly-eval/nightly-eval",
                            "--output", "json"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    deployment = json.loads(shown.stdout)
    [schedule] = deployment["schedules"]
    assert schedule["schedule"]["cron"] == "0 2 * * *" and schedule["active"]
    assert deployment["entrypoint"] == "flows/nightly.py:nightly_eval_flow"
    assert deployment["parameters"]["registered_model"] == "mars-tic-tac-toe"


class _Proxy(BaseHTTPRequestHandler):
    """An HTTP proxy in front of the MLflow server that answers 503 to every lookup of the
    `champion` alias and passes everything else through (`seen`: what it was asked)."""
    upstream: str = ""
    seen: list[tuple[str, str]] = []

    def _forward(self):
        self.seen.append((self.command, self.path))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if "/registered-models/alias" in self.path and "alias=champion" in self.path:
            self.send_response(503)
            self.send_header("Content-Length", "19")
            self.end_headers()
            self.wfile.write(b"Service Unavailable")
            return
        up = urlsplit(self.upstream)
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=120)
        skip = {"host", "connection", "transfer-encoding", "content-length"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        conn.request(self.command, self.path, body=body or None, headers=headers)
        got = conn.getresponse()
        data = got.read()
        self.send_response(got.status)
        for k, v in got.getheaders():
            if k.lower() not in skip:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        conn.close()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward

    def log_message(self, *args):
        pass


def test_a_failed_champion_lookup_fails_the_night_and_promotes_nothing(
        tmp_path, prefect_api, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # our retry window, not MLflow's
    monkeypatch.setenv("MARS_TRACKING_RETRY_S", "3")
    server = mlflow_in(tmp_path / "mlflow")
    started(server)
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), type("Proxy", (_Proxy,), {
        "upstream": server.url, "seen": []}))
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        client = _register(server.url, tmp_path, tiny_model_dir, "guarded", [["candidate"]])
        behind = f"http://127.0.0.1:{proxy.server_address[1]}"
        with pytest.raises(RegistryError, match=r"cannot read the 'champion' alias of 'guarded' "
                           r".*503.*nothing was promoted") as failed:
            _nightly(behind, tmp_path, "guarded", game_eval_preset=None, arena_preset=None)
        assert len(str(failed.value).splitlines()) == 1
        lookups = [p for m, p in proxy.RequestHandlerClass.seen if "alias=champion" in p]
        assert len(lookups) >= 2  # retried within the window before giving up
        assert not any(m != "GET" for m, _ in proxy.RequestHandlerClass.seen)  # nothing written
        assert alias_version(server.url, "guarded", "champion") is None  # still no champion
        assert client.get_experiment_by_name("mars-nightly") is None  # no night logged
    finally:
        proxy.shutdown()
        proxy.server_close()
        server.kill()
