"""The model registry: final models as MLflow transformers models, downloads through MLflow.

A registered version is an MLflow model with the transformers flavor (task `llm/v1/chat`, the
tokenizer and its chat template kept), so `mlflow models serve -m models:/NAME@candidate`
answers chat requests and `mlflow.transformers.load_model` loads it. Inside it, `model/` holds
the weights and `components/tokenizer/` the tokenizer; a download joins them back into one plain
Hugging Face folder for our engines. Versions are tagged with their lineage (git commit, run
folder and its random key `mars.key`, the checkpoint and the base model they came from): a
version belongs to one run, so a run folder deleted and made again registers a new one.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from mlflow import MlflowClient

from mars_core.run.layout import REGISTERED_FILE
from mars_core.models.manifest import MANIFEST, ManifestError, verify_manifest, write_manifest
from mars_core.models.weights import default_cache_dir, resolve_spec
from mars_core.run.checkpoint import link_or_copy, link_tree
from mars_core.privacy.redact import redact_text
from mars_core.run.commit import fault_point, read_json, write_json
from tasks.paths import run_key
from tasks.tracking import (TrackingError, _transient, client_for, code_tags, ensure_run,
                            git_state, retrying, tracking_uri)

CHAT_TASK = "llm/v1/chat"
MLFLOW_DIR = "mlflow"  # the MLflow model folder inside the final model's stage folder
MODEL_URI = re.compile(r"^models:/(?P<name>[^/@]+)(@(?P<alias>[\w-]+)|/(?P<version>\d+))$")
_WEIGHTS = re.compile(r"\.safetensors(\.index\.json)?$")


class RegistryError(Exception):
    """A registered-model URI that cannot be resolved (one-line message)."""


def _requirements() -> list[str]:
    """What serving needs (MLflow's own inference asks for torchvision, absent here)."""
    from importlib.metadata import version

    return [f"{p}=={version(p).split('+')[0]}" for p in ("torch", "transformers", "mlflow")]


def save_mlflow_model(model_dir: Path, dest: Path, card: str) -> None:
    """`model_dir` (a plain Hugging Face folder) as an MLflow transformers model in `dest`.
    MLflow writes the weights once more; they are replaced by hard links to `model_dir`'s
    (`link_or_copy`: a copy where links fail), so the disk holds one copy."""
    import mlflow.transformers
    from huggingface_hub import ModelCard
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    mlflow.transformers.save_model({"model": model, "tokenizer": tokenizer}, path=str(dest),
                                   task=CHAT_TASK, pip_requirements=_requirements(),
                                   model_card=ModelCard(card))
    del model
    weights = Path(dest) / "model"
    for f in list(weights.iterdir()):
        if _WEIGHTS.search(f.name) or f.name == "config.json":
            f.unlink()
    for f in Path(model_dir).iterdir():
        if _WEIGHTS.search(f.name) or f.name == "config.json":
            link_or_copy(f, weights / f.name)


def log_model_folder(client: MlflowClient, run_id: str, model_dir: Path) -> None:
    """The MLflow model folder `model_dir` as the run's `model` artifact. Into a local file
    store (the default `runs/mlartifacts/`) its files are hard links (`link_tree`; a copy where
    the store is on another filesystem or links fail), so the registered weights are the
    checkpoint's bytes, not a second copy: nothing writes into a logged artifact or a
    checkpoint's files after. Any other store (a tracking server) gets MLflow's upload."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
    from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

    repo = get_artifact_repository(client.get_run(run_id).info.artifact_uri,
                                   tracking_uri=client.tracking_uri)
    if isinstance(repo, LocalArtifactRepository):
        link_tree(Path(model_dir), Path(repo.artifact_dir) / "model")
    else:
        client.log_artifacts(run_id, str(model_dir), "model")


def model_card(run_dir: Path, parent: str, base: str) -> str:
    commit, dirty = git_state()
    return (f"---\ntags: [mars-selfplay]\n---\n# {Path(run_dir).name}\n\n"
            f"Trained by mars-selfplay (commit {commit}{' + local changes' if dirty else ''}) "
            f"from `{base}`; weights of `{parent}`. Run folder: `{Path(run_dir).resolve()}`.\n")


@retrying
def register_model(run_dir: Path, model_dir: Path, name: str, alias: str,
                   lineage: dict[str, str]) -> int:
    """Log the MLflow model folder `model_dir` as the run's `model` artifact (hard links into a
    local store: `log_model_folder`), register it as a new version of `name` (tagged with
    `lineage`, the git state and the run's key) and point `alias` at it. Idempotent per run: a
    resume finds the version of its own MLflow run (which the run's random key names), a new
    folder of the same name makes a new version."""
    run_dir = Path(run_dir)
    done = run_dir / REGISTERED_FILE
    if done.is_file():
        return int(read_json(done)["version"])
    client = client_for(run_dir)
    run_id = ensure_run(run_dir)
    source = f"{client.get_run(run_id).info.artifact_uri}/model"
    if not client.search_registered_models(filter_string=f"name='{name}'"):
        client.create_registered_model(name)
    mine = client.search_model_versions(f"name='{name}' and run_id='{run_id}'")
    if mine:  # registered before a crash: reuse that version
        mv = max(mine, key=lambda v: int(v.version))
    else:
        log_model_folder(client, run_id, model_dir)
        fault_point("mid:register_model:final")
        tags = {**lineage, **code_tags(), "mars.key": run_key(run_dir)}
        mv = client.create_model_version(name, source=source, run_id=run_id, tags=tags)
        fault_point("end:register_model:final")
    client.set_registered_model_alias(name, alias, mv.version)
    write_json(done, {"name": name, "version": int(mv.version), "alias": alias, "source": source})
    return int(mv.version)


def local_model(spec: str, tracking: str | None, runs_dir: str | Path) -> str | None:
    """A local model folder for a policy's or an agent's spec, None for a bot
    (`mars_core.models.weights.resolve_spec`): `models:/NAME@ALIAS` comes from the registry at
    `tracking`, else from the local store of `runs_dir` that `mars train` registers into."""
    return resolve_spec(spec, registry=lambda uri: download_registered(
        uri, tracking or tracking_uri(Path(runs_dir)), default_cache_dir()))


def _store_missing(tracking: str) -> str | None:
    """The local file or folder a tracking URI names when it is not there (None: it is, or the
    store is a server): reading it through MLflow would create it."""
    if tracking.startswith("sqlite:///"):
        where = Path(tracking.removeprefix("sqlite:///").split("?")[0])
    elif tracking.startswith("file:") or "://" not in tracking:
        where = Path(tracking.removeprefix("file://").removeprefix("file:"))
    else:
        return None
    return None if where.exists() else str(where)


def registered_version(uri: str, tracking: str):
    """The model version `uri` names, read only: a local store that does not exist is refused
    as it is (reading it through MLflow would create an empty `mlflow.db`)."""
    from mlflow.exceptions import MlflowException

    m = MODEL_URI.match(uri)
    if not m:
        raise RegistryError(f"bad model URI {uri!r}: use models:/NAME@ALIAS or models:/NAME/VERSION")
    missing = _store_missing(tracking)
    if missing:
        raise RegistryError(f"{uri}: no model registry at {missing} (nothing was registered "
                            "there: give --tracking-uri or --runs-dir of the store that has it)")
    client = MlflowClient(tracking_uri=tracking)
    try:
        return (client.get_model_version_by_alias(m["name"], m["alias"]) if m["alias"]
                else client.get_model_version(m["name"], m["version"]))
    except MlflowException as e:
        first = (str(e).strip().splitlines() or [e.error_code])[0][:200]
        raise RegistryError(f"{uri} not found in {redact_text(tracking)}: "
                            f"{redact_text(first)}") from None


def check_registered(uri: str, tracking: str | None, runs_dir: str | Path) -> int:
    """The version a `models:/` URI resolves to now, before anything is written (the CLI's
    checks: an alias that is not set is one line, not a failed flow)."""
    return int(registered_version(uri, tracking or tracking_uri(Path(runs_dir))).version)


def version_of(folder: str | Path | None) -> dict[str, str]:
    """For a folder from `download_registered`: the registered name and version it holds (what
    a run logs beside the `models:/NAME@ALIAS` it was given); {} for any other folder."""
    if folder is None:
        return {}
    for part in (Path(folder), Path(folder).parent):
        v = re.fullmatch(r"v(\d+)-[0-9a-f]{16}", part.name)
        if v and part.parent.parent.name == "registry":
            return {"policy_model": part.parent.name, "policy_version": v[1]}
    return {}


@retrying
def download_registered(uri: str, tracking: str, cache_dir: Path) -> Path:
    """`models:/NAME@ALIAS` or `models:/NAME/VERSION` -> a local Hugging Face model folder,
    downloaded once (through MLflow's registry resolution) into
    `cache_dir/registry/NAME/vN-<key>` with a manifest of its files' hashes, checked on every
    use. The key hashes the tracking store, the version's run and
    its source: versions restart at 1 in every new store, so `NAME/v1` alone would serve the
    weights of another store (or of a run since deleted)."""
    import mlflow.artifacts

    mv = registered_version(uri, tracking)
    name = MODEL_URI.match(uri)["name"]
    ident = "\n".join((tracking, mv.run_id or "", mv.source or "", str(mv.creation_timestamp)))
    key = hashlib.sha256(ident.encode()).hexdigest()[:16]
    target = Path(cache_dir) / "registry" / name / f"v{mv.version}-{key}"
    if target.is_dir() and not (target / MANIFEST).is_file():
        _set_aside(target)  # from before manifests (or an old `.partial` rename): not trusted
    if not target.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        _drop_stale(target)
        # a folder of our own (two downloads at once never share one), hashed, then renamed
        # into place whole; a download that loses the race drops its copy and uses the winner's
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            # MLflow's `models:/` resolution (its ModelsArtifactRepository reads the global
            # registry URI, not ours): the version's download location, then its artifacts.
            where = MlflowClient(tracking_uri=tracking).get_model_version_download_uri(
                name, mv.version)
            got = Path(mlflow.artifacts.download_artifacts(
                artifact_uri=where, dst_path=str(tmp), tracking_uri=tracking))
            _plain_folder(got)
            write_manifest(got)
            try:
                os.rename(got, target)
            except OSError:
                if not (target / MANIFEST).is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    try:
        verify_manifest(target)  # on every hit: a cached file changed since is refused
    except ManifestError as e:
        raise RegistryError(f"cached {uri} (version {mv.version}): {e}; delete {target} to "
                            "download it again") from None
    return _hf_folder(target)


def _drop_stale(target: Path) -> None:
    """Leftovers of killed downloads: temporary folders older than an hour (a younger one may
    be another process's live download) and the old fixed `.partial` folder."""
    import time

    for old in [*target.parent.glob(f".{target.name}.tmp-*"),
                *target.parent.glob(f"{target.name}.partial")]:
        try:
            if old.name.endswith(".partial") or time.time() - old.stat().st_mtime > 3600:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass


def _set_aside(target: Path) -> None:
    """Move a cache folder out of the way (one rename, so no reader sees it half deleted)."""
    aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    try:
        os.rename(target, aside / "x")
    except OSError:
        pass  # gone already, or replaced by another process
    shutil.rmtree(aside, ignore_errors=True)


def _plain_folder(root: Path) -> None:
    """An MLflow transformers model: link its tokenizer files beside the weights in `model/`
    (one folder our engines load). Anything else stays as downloaded."""
    tokenizer = root / "components" / "tokenizer"
    if (root / "MLmodel").is_file() and tokenizer.is_dir():
        for f in tokenizer.iterdir():
            if not (root / "model" / f.name).exists():
                link_or_copy(f, root / "model" / f.name)


def _hf_folder(root: Path) -> Path:
    """The folder with the model's config: `model/` of an MLflow model, else the root or the
    one subfolder that has it (versions registered as plain folders)."""
    if (root / "MLmodel").is_file() and (root / "model" / "config.json").is_file():
        return root / "model"
    if (root / "config.json").is_file():
        return root
    inner = [d for d in root.iterdir() if d.is_dir() and (d / "config.json").is_file()]
    return inner[0] if len(inner) == 1 else root


# MLflow's answer for an alias that is not set: INVALID_PARAMETER_VALUE "Registered model alias
# X not found." (its SQL and file stores, over REST too); RESOURCE_DOES_NOT_EXIST elsewhere
_NO_ALIAS = re.compile(r"\balias\b.*\bnot (found|exist)|\bnot found\b.*\balias\b", re.I | re.S)
NOT_PROMOTED = "nothing was promoted; run it again once the tracking store answers"


def alias_absent(e: Exception) -> bool:
    """Whether an MLflow error says that the alias is not set (and nothing else: a server error,
    a timeout, a refusal or a missing model is no answer)."""
    from mlflow.exceptions import MlflowException

    return (isinstance(e, MlflowException)
            and e.error_code in ("INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST")
            and bool(_NO_ALIAS.search(str(e))))


@retrying(then=NOT_PROMOTED)
def read_alias(tracking: str, name: str, alias: str) -> int | None:
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=tracking)
    if not client.search_registered_models(filter_string=f"name='{name}'"):
        raise RegistryError(f"no registered model {name!r} in {redact_text(tracking)}")
    try:
        return int(client.get_model_version_by_alias(name, alias).version)
    except MlflowException as e:
        if alias_absent(e):
            return None
        if _transient(e):
            raise  # retried
        first = (str(e).strip().splitlines() or [e.error_code])[0][:300]
        raise RegistryError(f"cannot read the {alias!r} alias of {name!r} in "
                            f"{redact_text(tracking)}: {redact_text(first)}") from None


def alias_version(tracking: str, name: str, alias: str) -> int | None:
    """The version `alias` points at in registered model `name`, None only when the registry
    answers that the alias is not set. Any other error is retried for the tracking retry window
    (`tasks.tracking.retrying`) and then a RegistryError, as is a model not registered at all:
    an outage never reads as "no alias"."""
    try:
        return read_alias(tracking, name, alias)
    except TrackingError as e:
        raise RegistryError(f"cannot read the {alias!r} alias of {name!r} in "
                            f"{redact_text(tracking)}: {e}") from None


@retrying(then="the alias may not have moved; run it again once the tracking store answers")
def set_alias(tracking: str, name: str, alias: str, version: int, tags: dict | None = None) -> None:
    """Point `alias` at `version` (tags, e.g. why, go on the version); idempotent, retried."""
    client = MlflowClient(tracking_uri=tracking)
    client.set_registered_model_alias(name, alias, str(version))
    for k, v in (tags or {}).items():
        client.set_model_version_tag(name, str(version), k, str(v))
