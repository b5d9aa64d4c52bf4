"""Quiet logs by default: the embedded model's conversion shows no progress bars, DeepSpeed's
accelerator guess and MLflow's dataset-source warning are kept out, and `--verbose`
(MARS_VERBOSE=1) brings all of them back (`mars_core.run.offline.quiet_logs`)."""
from __future__ import annotations

import logging
import sys
import warnings
from types import SimpleNamespace

import pytest

from mars_core.run import offline


@pytest.fixture
def quiet(monkeypatch):
    monkeypatch.delenv(offline.VERBOSE, raising=False)
    yield
    logging.getLogger(offline.DEEPSPEED_LOGGER).removeFilter(offline._not_the_cpu_guess)


def _fake_conversion(monkeypatch, tmp_path):
    """transformers' loaders replaced by stand-ins that draw the bars the real conversion
    draws (the GGUF reader's own tqdm, transformers' "Loading weights" and "Writing model
    shards") and log DeepSpeed's guess, as its save does on a machine without a GPU."""
    import transformers
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    def from_pretrained(*args, **kwargs):
        for _ in gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."):
            pass
        for _ in hf_logging.tqdm(range(3), desc="Loading weights"):
            pass
        return model

    def save_pretrained(out):
        for _ in hf_logging.tqdm(range(1), desc="Writing model shards"):
            pass
        logging.getLogger(offline.DEEPSPEED_LOGGER).warning(
            "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable "
            "to detect it.")

    model = SimpleNamespace(config=SimpleNamespace(quantization_config=None, name_or_path=""),
                            save_pretrained=save_pretrained)
    tokenizer = SimpleNamespace(chat_template="x", save_pretrained=lambda out: None)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda *a, **k: tokenizer)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    return gguf


def _convert(gguf, tmp_path, capsys) -> str:
    from mars_core.models.weights import _convert_gguf

    handler = logging.StreamHandler(sys.stderr)  # as DeepSpeed's own handler: to stderr
    ds = logging.getLogger(offline.DEEPSPEED_LOGGER)
    ds.addHandler(handler)
    try:
        capsys.readouterr()
        _convert_gguf(gguf, tmp_path / "out")
        return capsys.readouterr().err
    finally:
        ds.removeHandler(handler)


def test_the_conversion_shows_no_progress_bars_by_default(quiet, monkeypatch, tmp_path, capsys):
    from transformers.utils import logging as hf_logging
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    reader_bar, was_on = gguf_utils.tqdm, hf_logging.is_progress_bar_enabled()
    err = _convert(_fake_conversion(monkeypatch, tmp_path), tmp_path, capsys)
    assert "GGUF tensors" not in err and "Loading weights" not in err, err
    assert "Writing model shards" not in err and "Setting accelerator" not in err, err
    # put back as they were: the bars of the rest of the process are its own business
    assert gguf_utils.tqdm is reader_bar and hf_logging.is_progress_bar_enabled() == was_on


def test_verbose_brings_the_bars_back(quiet, monkeypatch, tmp_path, capsys):
    from transformers.utils import logging as hf_logging

    monkeypatch.setenv(offline.VERBOSE, "1")
    hf_logging.enable_progress_bar()
    err = _convert(_fake_conversion(monkeypatch, tmp_path), tmp_path, capsys)
    assert "Converting and de-quantizing GGUF tensors" in err and "Loading weights" in err, err
    assert "Setting accelerator to CPU" in err


def test_the_mlflow_dataset_source_warning_is_filtered_unless_verbose(quiet, monkeypatch):
    message = ("The specified dataset source can be interpreted in multiple ways: "
               "LocalArtifactDatasetSource, LocalArtifactDatasetSource. MLflow will assume "
               "that this is a LocalArtifactDatasetSource source.")
    for verbose, shown in (("1", 1), ("0", 0)):
        monkeypatch.setenv(offline.VERBOSE, verbose)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            offline.quiet_logs()
            warnings.warn(message, UserWarning)
            warnings.warn("another warning", UserWarning)  # only that one is filtered
        assert [str(w.message) for w in seen] == [message] * shown + ["another warning"]


def test_mars_train_verbose_sets_the_switch(monkeypatch):
    from cli.commands import parser

    monkeypatch.delenv(offline.VERBOSE, raising=False)
    args = parser().parse_args(["train", "--config", "configs/smoke.yaml"])
    assert args.verbose is False and not offline.verbose()
    for argv in (["train", "--config", "configs/smoke.yaml", "--verbose"],
                 ["eval", "games", "--policy", "bot:random", "--verbose"],
                 ["eval", "mas", "--model", "embedded", "--verbose"],
                 ["arena", "--verbose"], ["compare", "--verbose"]):
        monkeypatch.delenv(offline.VERBOSE, raising=False)
        assert parser().parse_args(argv).verbose is True and offline.verbose(), argv


def test_loads_and_saves_draw_no_bars_unless_verbose(quiet, monkeypatch, tiny_model_dir,
                                                     tokenizer, tmp_path, capsys):
    """transformers draws "Loading weights" on every load and "Writing model shards" on every
    save (every stage of every iteration)."""
    from mars_core.models.weights import load_model
    from mars_core.run.checkpoint import save_model

    capsys.readouterr()
    save_model(tmp_path / "a", load_model(tiny_model_dir), tokenizer)
    err = capsys.readouterr().err
    assert "Loading weights" not in err and "Writing model shards" not in err
    monkeypatch.setenv(offline.VERBOSE, "1")
    load_model(tiny_model_dir)
    assert "Loading weights" in capsys.readouterr().err
