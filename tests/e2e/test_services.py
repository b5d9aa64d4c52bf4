"""`mars services`: both servers up on the given ports, the work pool made, MLflow on the
runs folder's store, the lines to export printed; Ctrl-C stops both and frees the ports.

And what it protects (one `mars services --mlflow-auth` for the module): the three calls that
make the `mars-local` worker run a shell command (a flow, a deployment whose
`job_variables.command` is the command, a flow run) are refused from a foreign `Origin`, with
a foreign `Host` (DNS rebinding), without credentials and without a CSRF token, while Prefect's
own client with the auth string makes them; MLflow asks for its login; a `--host` beyond the
loopback without `--mlflow-auth` is refused in one line."""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from mlflow import MlflowClient

from cli.prefect_app import Guard, ui_origins
from cli.service_auth import AUTH_FILE, read_secret, secret_in
from cli.services import POOL, api_session, ensure_work_pool, port_taken
from mars_core.config import ConfigError
from mars_core.run.procgroup import free_port
from tests.conftest import REPO
from tests.servers import mars_cmd

pytestmark = pytest.mark.timeout(600)
ATTACK = "pwned"  # the name of everything the attacker tries to create


def _mars(*args: str, env: dict, out) -> subprocess.Popen:
    return subprocess.Popen(mars_cmd(*args), env=env, cwd=REPO, stdout=out,
                            stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    """`mars services --mlflow-auth` on free ports, running (stopped by the last test, or here)."""
    tmp = tmp_path_factory.mktemp("services")
    runs, log, home = tmp / "runs", tmp / "services.out", tmp / "home"
    pp, mp = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(home),
           "PREFECT_API_URL": "http://127.0.0.1:9/api"}  # a stale export: not asked
    with open(log, "w") as out:
        proc = _mars("services", "--prefect-port", str(pp), "--mlflow-port", str(mp),
                     "--runs-dir", str(runs), "--mlflow-auth", env=env, out=out)
    try:
        end = time.time() + 400
        while "services running" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.time() < end, log.read_text()[-3000:]
            time.sleep(0.5)
        yield {"proc": proc, "log": log, "runs": runs, "home": home, "tmp": tmp, "pp": pp,
               "mp": mp, "api": f"http://127.0.0.1:{pp}/api", "mlflow": f"http://127.0.0.1:{mp}",
               "auth": (home / AUTH_FILE).read_text().strip()}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)


def test_services_start_both_servers_and_print_the_exports(services):
    text, pp, mp = services["log"].read_text(), services["pp"], services["mp"]
    auth_file, password_file = services["home"] / AUTH_FILE, services["runs"] / "services" / \
        "mlflow-admin-password"
    assert f"export PREFECT_API_URL=http://127.0.0.1:{pp}/api" in text
    assert f'export PREFECT_API_AUTH_STRING="$(cat {auth_file})"' in text
    assert f"export MLFLOW_TRACKING_URI=http://127.0.0.1:{mp}" in text
    assert ("export MLFLOW_TRACKING_USERNAME=admin MLFLOW_TRACKING_PASSWORD="
            f'"$(cat {password_file})"') in text
    assert f"work pool '{POOL}' (process) created" in text
    secrets = [services["auth"], password_file.read_text().strip()]
    for path in (auth_file, password_file, services["runs"] / "services" / "mlflow-auth.ini"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    logs = [text] + [p.read_text() for p in (services["runs"] / "services").glob("*.log")]
    assert not any(s in t for s in secrets for t in logs)  # printed as $(cat FILE) only
    api = services["api"]
    assert httpx.get(f"{api}/health").status_code == 200  # the probe needs no credentials
    assert httpx.get(f"{api}/work_pools/{POOL}").status_code == 401
    with api_session(api, services["auth"]) as s:
        assert s.get(f"work_pools/{POOL}").json()["type"] == "process"
    assert ensure_work_pool(api, auth=services["auth"]) is False  # there already: left as it is


def test_mlflow_asks_for_its_login_and_serves_the_runs_store(services, monkeypatch):
    url, runs, tmp = services["mlflow"], services["runs"], services["tmp"]
    got = httpx.get(f"{url}/api/2.0/mlflow/experiments/search", params={"max_results": 1})
    assert got.status_code == 401
    password = (runs / "services" / "mlflow-admin-password").read_text().strip()
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
    client = MlflowClient(tracking_uri=url)
    run = client.create_run(client.create_experiment("services-check"))
    (tmp / "note.txt").write_text("hello")
    client.log_artifact(run.info.run_id, str(tmp / "note.txt"))
    assert (runs / "mlflow.db").is_file()  # the local store's file, served
    assert [p.read_text() for p in (runs / "mlartifacts").rglob("note.txt")] == ["hello"]


def _three_calls(api: str, headers: dict, marker) -> list[int]:
    """The attack: a flow, a deployment on the mars-local pool whose command is a shell
    command, a run of it; the status of each answer (ids made up where a call was refused)."""
    with httpx.Client(base_url=api + "/", headers=headers, timeout=30) as c:
        flow = c.post("flows/", json={"name": ATTACK})
        flow_id = flow.json().get("id") if flow.status_code < 300 else str(uuid.uuid4())
        dep = c.post("deployments/", json={
            "name": ATTACK, "flow_id": flow_id, "work_pool_name": POOL,
            "job_variables": {"command": f"touch {marker}"}})
        dep_id = dep.json().get("id") if dep.status_code < 300 else str(uuid.uuid4())
        run = c.post(f"deployments/{dep_id}/create_flow_run", json={})
    return [flow.status_code, dep.status_code, run.status_code]


def _csrf(api: str, auth: str) -> dict:
    """The headers of a client holding the auth string and a CSRF token (fetched properly)."""
    with api_session(api, auth) as s:
        return {k: s.headers[k] for k in ("Authorization", "Prefect-Csrf-Token",
                                          "Prefect-Csrf-Client")}


@pytest.mark.parametrize("attacker", ["foreign origin", "foreign host", "no credentials",
                                      "no csrf token"])
def test_the_three_call_attack_is_refused(services, attacker):
    api, pp, marker = services["api"], services["pp"], services["tmp"] / f"{attacker}.pwned"
    full = _csrf(api, services["auth"])  # even holding the secret, where the check is another
    headers = {"foreign origin": {**full, "Origin": "http://evil.example"},
               "foreign host": {**full, "Host": f"evil.example:{pp}"},
               "no credentials": {},
               "no csrf token": {"Authorization": full["Authorization"]}}[attacker]
    codes = _three_calls(api, headers, marker)
    assert all(code in (400, 401, 403) for code in codes), codes
    if attacker == "foreign origin":  # and the browser gets no CORS answer for it
        pre = httpx.options(f"{api}/flows/", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in pre.headers
    if attacker == "no credentials":  # nor can it read, or get a CSRF token
        assert httpx.get(f"{api}/csrf-token", params={"client": "x"}).status_code == 401
    with api_session(api, services["auth"]) as s:
        assert s.get(f"flows/name/{ATTACK}").status_code == 404
        assert s.post("deployments/filter", json={}).json() == []


def test_prefects_own_client_with_the_auth_string_makes_the_three_calls(services):
    from prefect.client.orchestration import PrefectClient

    async def calls():
        async with PrefectClient(services["api"], auth_string=services["auth"]) as c:
            flow_id = await c.create_flow_from_name("mars-legit")
            dep_id = await c.create_deployment(flow_id, "legit", work_pool_name=POOL,
                                               job_variables={"command": "true"})
            return await c.create_flow_run_from_deployment(dep_id)

    run = asyncio.run(calls())
    assert run.state.is_scheduled()


def test_the_mars_cli_needs_the_auth_string(services):
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    from cli.errors import check_prefect_api

    with temporary_settings({PREFECT_API_URL: services["api"]}):
        with pytest.raises(ConfigError) as refused:
            check_prefect_api()
        assert str(refused.value) == (f"the Prefect API at {services['api']} refused our "
                                      "credentials (401): export PREFECT_API_AUTH_STRING as "
                                      "`mars services` prints it")
        with temporary_settings({PREFECT_API_AUTH_STRING: services["auth"]}):
            assert check_prefect_api() is True


def test_services_ctrl_c_stops_both(services):  # last: it stops the module's services
    proc, log = services["proc"], services["log"]
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    rc = proc.wait(timeout=120)
    assert rc == 0, log.read_text()[-3000:]
    assert log.read_text().rstrip().endswith("mars: services stopped")
    assert not port_taken("127.0.0.1", services["pp"])
    assert not port_taken("127.0.0.1", services["mp"])


def test_services_refuse_a_port_in_use_in_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "cli.main", "services", "--prefect-port",
                               str(port), "--runs-dir", str(tmp_path / "runs")],
                              env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"mars: error: --prefect-port: 127.0.0.1:{port} is in use "
                                   "(a Prefect server already running? stop it or give another "
                                   "--prefect-port)")
    assert not (tmp_path / "runs").exists()


def test_a_host_beyond_the_loopback_needs_auth_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "cli.main", "services", "--host", "0.0.0.0",
                           "--prefect-port", str(free_port()), "--mlflow-port", str(free_port()),
                           "--runs-dir", str(tmp_path / "runs")], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "mars: error: --host 0.0.0.0 opens both servers to other machines: add --mlflow-auth "
        "(Prefect always asks for its auth string; MLflow's registry would be open to anyone "
        "who reaches it)")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "home").exists()


def test_secrets_are_made_once_private_and_refused_when_open(tmp_path):
    path = tmp_path / "d" / "secret"
    first = secret_in(path)
    assert len(first) >= 40 and secret_in(path) == first  # reused
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="open to other users"):
        read_secret(path)


def test_the_guard_checks_host_and_origin():
    g = Guard(None, {"localhost", "box"}, ui_origins("127.0.0.1", 4200))

    def refused(host, origin=None):
        headers = {b"host": host.encode()} | ({b"origin": origin.encode()} if origin else {})
        return g.refusal(headers)

    assert refused("127.0.0.1:4200") is None and refused("[::1]:4200") is None
    assert refused("localhost:4200", "http://127.0.0.1:4200") is None  # the UI's origins
    assert refused("10.1.2.3:4200", "http://10.1.2.3:4200") is None  # same origin
    assert refused("evil.example:4200") == (400, "Invalid host header")
    assert refused("")[0] == 400
    assert refused("127.0.0.1:4200", "http://evil.example") == (403, "Origin not allowed")
    assert refused("127.0.0.1:4200", "http://127.0.0.1:9999")[0] == 403  # another port
    assert refused("127.0.0.1:4200", "null")[0] == 403
