"""Small inputs read as typed: a run name is the whole name, `--set model.bf16=off` is the word
`off`, and the vLLM server's extra_args cannot carry a key or a config file."""
from __future__ import annotations

import pytest

from mars_core.config import ConfigError, load_config, parse_overrides
from tasks.paths import RunDirError, check_run_name
from tests.conftest import REPO

SMOKE = REPO / "configs/smoke.yaml"


@pytest.mark.parametrize("name", ["demo\n", "demo\r\n", "a/b", "../x", ""])
def test_run_name_is_the_whole_name(name):
    with pytest.raises(RunDirError):
        check_run_name(name)
    assert check_run_name("demo-1.b_2") == "demo-1.b_2"


@pytest.mark.parametrize("word", ["on", "off", "auto"])
def test_bf16_words_are_words(word):
    assert load_config(SMOKE, [f"model.bf16={word}"]).model.bf16 == word


def test_yaml11_words_still_set_bool_fields():
    assert parse_overrides(["a.b=off", "a.c=true", "a.d=3"]) == {"a": {"b": "off", "c": True,
                                                                       "d": 3}}
    assert load_config(SMOKE, ["model.share_prefix=off"]).model.share_prefix is False


@pytest.mark.parametrize("flag", ["--api_key", "--api-key", "--config", "--config=args.yaml"])
def test_extra_args_refuse_keys_and_config_files(flag):
    with pytest.raises(ConfigError, match=flag.split("=")[0]):
        load_config(SMOKE, [f"engine.vllm.launch.extra_args=[{flag}, x]"])


def test_bf16_off_written_unquoted_in_a_preset_file_means_off(tmp_path):
    """YAML reads an unquoted `off` as False: the preset still means "off", not an error."""
    from mars_core.config import load_config

    preset = tmp_path / "p.yaml"
    preset.write_text("model:\n  path: embedded\n  bf16: off\n")
    assert load_config(preset).model.bf16 == "off"
    preset.write_text("model:\n  path: embedded\n  bf16: on\n")
    assert load_config(preset).model.bf16 == "on"
