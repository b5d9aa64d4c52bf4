"""The docs' pictures of the Prefect UI and the MLflow UI (docs/uis.md), taken in headless Chromium.

    .venv/bin/python docs/screenshots.py [--out docs/img] [--keep]

It starts a Prefect server and an MLflow server (the code `mars services` runs) on free ports
with their stores in a temporary folder, trains a one-iteration smoke run on the embedded model
tracked to both (evaluated before and after, so the flow run has its tables and learning
curve), asks the registered model a few multi-agent questions (traces), then opens the pages
a user looks at and saves them as PNGs:

    prefect_flow_run.png    the training flow run with its artifacts
    prefect_artifacts.png   the learning-curve table artifact
    mlflow_run.png          the training run in MLflow (metrics, params, lineage tags)
    mlflow_model.png        the registered version (transformers flavor, lineage)
    mlflow_traces.png       the Traces tab with a multi-agent conversation

About 6 minutes on 2 cores. Needs /usr/bin/chromium and Playwright (the dev extra).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cli.services import mlflow_server, prefect_server, start_all  # noqa: E402
from mars_core.run.procgroup import free_port  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
RUN = "screenshots"
MODEL = "mars-smoke"


def _mars(args: list[str], env: dict) -> None:
    print("+ mars " + " ".join(args), flush=True)
    subprocess.run([str(REPO / ".venv/bin/mars"), *args], env=env, cwd=REPO, check=True)


def _prefect_ids(api: str) -> tuple[str, str]:
    """The training flow run and its learning-curve artifact."""
    os.environ["PREFECT_API_URL"] = api
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async def read():
        async with get_client() as client:
            runs = await client.read_flow_runs()
            run = [r for r in runs if r.parameters.get("run_name") == RUN][-1].id
            curve = await client.read_artifacts(artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[f"{RUN}-learning-curve"])))
            return str(run), str(curve[-1].id)

    return asyncio.run(read())


def _try(action) -> None:
    try:
        action()
    except Exception:  # noqa: BLE001 - an optional click (a tab, a tip that may not show)
        pass


def _shoot(page, url: str, path: Path, wait_text: str | None = None, settle_s: float = 4,
           click: str | None = None) -> None:
    page.goto(url, wait_until="load", timeout=120_000)
    if wait_text:
        try:
            page.get_by_text(wait_text).first.wait_for(timeout=60_000)
        except Exception:  # noqa: BLE001 - take the picture anyway, and say so
            print(f"warning: {wait_text!r} not seen on {url}", flush=True)
    time.sleep(settle_s)  # charts and tables render after the data arrives
    for name in ("Got it", "Close"):  # MLflow's tips and its assistant panel
        _try(lambda: page.get_by_role("button", name=name).first.click(timeout=2000))
    if click:
        _try(lambda: page.get_by_text(click).first.click(timeout=10_000))
        time.sleep(settle_s)
    page.screenshot(path=str(path))
    print(f"saved {path}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "docs/img"))
    ap.add_argument("--keep", action="store_true", help="keep the temporary stores")
    ap.add_argument("--work", help="the stores of an earlier --keep run: only take the pictures")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="mars-screens-"))
    prefect = prefect_server(free_port(), work / "prefect.log", home=work / "prefect-home")
    mlflow = mlflow_server(free_port(), work / "mlflow.db", work / "mlartifacts",
                           work / "mlflow.log")
    start_all(prefect, mlflow)
    try:
        env = {**os.environ, "PREFECT_API_URL": prefect.api_url,
               "MLFLOW_TRACKING_URI": mlflow.url, "MARS_MLFLOW_UI_URL": mlflow.url,
               "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
        if not args.work:
            _produce(work, env, mlflow.url)
        _pictures(out, prefect, mlflow)
    finally:
        for s in (prefect, mlflow):
            s.stop()
        if not (args.keep or args.work):
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        elif not args.work:
            print(f"kept {work} (--work {work} retakes the pictures)")


def _produce(work: Path, env: dict, mlflow_url: str) -> None:
    _mars(["train", "--config", "configs/smoke.yaml", "--runs-dir", str(work / "runs"),
           "--run-name", RUN, "--set", "run.iterations=1", "--set", "evaluation.at_start=true",
           "--set", "evaluation.every=1",
           "--set", "evaluation.opponents={tic_tac_toe: [bot:random, bot:mcts-10]}"], env)
    _mars(["eval", "mas", "--model", f"models:/{MODEL}@candidate", "--systems", "mad",
           "--benchmarks", "math500", "--limit", "1", "--max-tokens", "48",
           "--out", str(work / "mas.json"), "--tracking-uri", mlflow_url], env)


def _pictures(out: Path, prefect, mlflow) -> None:
    flow_run, curve = _prefect_ids(prefect.api_url)
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow.url)
    exp = client.get_experiment_by_name("mars-smoke").experiment_id
    run = [r for r in client.search_runs([exp]) if r.info.run_name == RUN][0].info.run_id
    mas_exp = client.get_experiment_by_name("mars-mas-eval").experiment_id
    version = client.get_model_version_by_alias(MODEL, "candidate").version

    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
        _shoot(page, f"{prefect.url}/runs/flow-run/{flow_run}", out / "prefect_flow_run.png",
               "Artifacts", click="Artifacts")
        _shoot(page, f"{prefect.url}/artifacts/artifact/{curve}",
               out / "prefect_artifacts.png", "tic_tac_toe")
        _shoot(page, f"{mlflow.url}/#/experiments/{exp}/runs/{run}", out / "mlflow_run.png",
               RUN)
        _shoot(page, f"{mlflow.url}/#/models/{MODEL}/versions/{version}",
               out / "mlflow_model.png", f"Version {version}")
        _shoot(page, f"{mlflow.url}/#/experiments/{mas_exp}/traces", out / "mlflow_traces.png",
               "math500", click="math500")
        browser.close()


if __name__ == "__main__":
    main()
