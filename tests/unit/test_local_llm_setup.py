"""libraryfs.llm.local without running the model: one-line errors, the server's command line, settings."""

from __future__ import annotations

import pytest

from libraryfs.llm import local
from libraryfs.llm.config import load_config


def test_a_missing_model_distribution_is_one_clear_error():
    with pytest.raises(
        local.LocalModelError, match=r"not installed .*pip install 'libraryfs\[llm-local\]'"
    ) as e:
        local.model_path("libraryfs-no-such-model")
    assert "\n" not in str(e.value)


def test_a_distribution_without_the_gguf_file_is_one_clear_error():
    with pytest.raises(local.LocalModelError, match="is installed but no-such.gguf is missing"):
        local.model_path("pytest", "no-such.gguf")


def test_recommended_settings_are_valid_llm_settings():
    """What `libraryfs llm serve` prints must load: every key is a setting, every value passes validation."""
    overrides = {"base_url": "http://127.0.0.1:1/v1", "model": local.MODEL_NAME, **local.RECOMMENDED}
    cfg = load_config(None, overrides, env={})
    assert cfg.enabled and cfg.index_answers == "text" and cfg.max_concurrency == 1
    assert cfg.structured_output == "json_object_schema"
    env = {"LIBRARYFS_LLM_" + k.upper(): str(v) for k, v in overrides.items()}
    assert load_config(None, None, env=env).to_dict() == cfg.to_dict()
