"""Model references are resolved and checked before anything is written: a missing folder that
looks like a hub id, an alias that is not registered, a corrupt checkpoint are one line and exit
2, with no run folder, no `mlflow.db` and no Prefect server; the corrected command then passes.
The registry cache: one complete, hashed copy per version, however many processes fill it."""
from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from cli.main import main
from tests.conftest import REPO

pytestmark = pytest.mark.timeout(600)
SMOKE = str(REPO / "configs/smoke.yaml")
EVAL = ["eval", "strategic", "--games", "tic_tac_toe", "--opponents", "bot:random", "--n", "1"]


@pytest.fixture
def no_server(monkeypatch):
    """A refused command must not get as far as Prefect's temporary server."""
    from cli import signals

    def started():
        raise AssertionError("the temporary Prefect server was started")
    monkeypatch.setattr(signals, "start_temporary_server", started)


def _one_line(capsys, rc) -> str:
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _corrupt_checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [256], "data_offsets": [0, 1024]}})
    data = len(header).to_bytes(8, "little") + header.encode() + b"\0" * 100  # cut short
    (folder / "model.safetensors").write_bytes(data)
    return folder


def test_one_slash_missing_folder_is_refused_then_the_corrected_command_passes(
        tmp_path, capsys, monkeypatch, no_server):
    from cli.commands import COMMANDS, parser

    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    rc = main(["train", "--config", SMOKE, "--runs-dir", str(runs),
               "--set", "model.path=ckpts/iter5"])
    assert "model path does not exist: ckpts/iter5" in _one_line(capsys, rc)
    assert list(tmp_path.iterdir()) == []  # no run folder, no mlflow.db
    args = parser().parse_args(["train", "--config", SMOKE, "--runs-dir", str(runs)])
    COMMANDS["train"].module.check(args)  # nothing of the refused start stands in its way
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv,needle", [
    (EVAL + ["--policy", "models:/nope@candidate"], "models:/nope@candidate"),
    (EVAL + ["--policy", "ckpts/iter5"], "model path does not exist: ckpts/iter5"),
    (EVAL + ["--policy", "bad-ckpt"], "corrupt checkpoint file"),
    (["arena", "--agents", "nope/ckpt,bot:random", "--games", "tic_tac_toe", "--n", "1"],
     "model path does not exist: nope/ckpt"),
])
def test_bad_model_reference_is_one_line_before_the_server(tmp_path, capsys, monkeypatch,
                                                            no_server, argv, needle):
    monkeypatch.chdir(tmp_path)
    if "bad-ckpt" in argv:
        _corrupt_checkpoint(tmp_path / "bad-ckpt")
    before = sorted(tmp_path.rglob("*"))
    rc = main([*argv, "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "r.json")])
    assert needle in _one_line(capsys, rc)
    assert sorted(tmp_path.rglob("*")) == before  # no mlflow.db, no runs folder, no results


def test_corrected_policy_passes_the_checks(tmp_path, monkeypatch):
    from cli.commands import COMMANDS, parser

    monkeypatch.chdir(tmp_path)
    args = parser().parse_args([*EVAL, "--policy", "embedded", "--runs-dir", str(tmp_path)])
    COMMANDS["eval"].module.check(args)
    assert list(tmp_path.iterdir()) == []


# --- the registry cache ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def registered(tmp_path_factory) -> tuple[str, str]:
    """A version of `tiny-plain` (a small plain model folder) in a fresh local store, alias
    `candidate`: (uri, tracking URI)."""
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("store")
    folder = root / "src"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    for i in range(20):
        (folder / f"part-{i}.bin").write_bytes(bytes([i]) * 200_000)
    tracking = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(tracking_uri=tracking)
    exp = client.create_experiment("cache", artifact_location=(root / "mlartifacts").as_uri())
    run = client.create_run(exp)
    client.log_artifacts(run.info.run_id, str(folder), "model")
    client.create_registered_model("tiny-plain")
    mv = client.create_model_version("tiny-plain", source=f"{run.info.artifact_uri}/model",
                                     run_id=run.info.run_id)
    client.set_registered_model_alias("tiny-plain", "candidate", mv.version)
    return "models:/tiny-plain@candidate", tracking


def _fill(uri: str, tracking: str, cache: str, barrier, out) -> None:
    from tasks.model_registry import download_registered

    barrier.wait()
    out.put(str(download_registered(uri, tracking, Path(cache))))


def test_two_processes_filling_the_cache_leave_one_verified_copy(registered, tmp_path):
    from mars_core.models.manifest import MANIFEST, verify_manifest

    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_fill, args=(*registered, str(tmp_path), barrier, out))
             for _ in range(2)]
    for p in procs:
        p.start()
    got = {out.get(timeout=300) for _ in procs}
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    versions = list((tmp_path / "registry" / "tiny-plain").iterdir())
    assert len(got) == 1 and len(versions) == 1  # one copy, no temporary folder left
    assert (versions[0] / MANIFEST).is_file()
    verify_manifest(versions[0])
    assert len(list(versions[0].rglob("part-*.bin"))) == 20


def test_tampered_cached_file_is_refused(registered, tmp_path):
    from tasks.model_registry import RegistryError, download_registered, version_of

    folder = download_registered(*registered, tmp_path)
    assert version_of(folder) == {"policy_model": "tiny-plain", "policy_version": "1"}
    victim = next(Path(folder).rglob("part-3.bin"))
    victim.write_bytes(b"\1" * 200_000)  # same size, other bytes
    with pytest.raises(RegistryError, match=r"part-3\.bin does not match its manifest"):
        download_registered(*registered, tmp_path)


def test_missing_alias_in_an_existing_store_is_one_line(registered):
    from tasks.model_registry import RegistryError, check_registered

    uri, tracking = registered
    assert check_registered(uri, tracking, "unused") == 1
    with pytest.raises(RegistryError, match="not found"):
        check_registered("models:/tiny-plain@nope", tracking, "unused")
