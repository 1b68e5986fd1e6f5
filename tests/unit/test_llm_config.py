"""LLM settings: precedence flag > env > config.toml > default, key never from the library, CLI display."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from libraryfs.cli.main import cli
from libraryfs.llm import ConfigError, LLMConfig, load_config

TOML = """
[llm]
base_url = "http://127.0.0.1:8000/v1"
model = "file-model"
timeout_s = 12
max_concurrency = 3
max_requests_per_hour = 50
colour = "blue"
"""


@pytest.fixture
def lib(tmp_path):
    (tmp_path / "config.toml").write_text(TOML)
    return tmp_path


def test_defaults_disabled():
    cfg = load_config(None, env={})
    assert isinstance(cfg, LLMConfig) and not cfg.enabled
    assert cfg.sources["model"] == "default" and cfg.sources["api_key"] == "unset"


def test_precedence_flag_over_env_over_file_over_default(lib):
    env = {
        "LIBRARYFS_LLM_MODEL": "env-model",
        "LIBRARYFS_LLM_TIMEOUT_S": "7",
        "LIBRARYFS_LLM_MAX_TOKENS_PER_HOUR": "9999",
    }
    cfg = load_config(lib, {"timeout_s": 3, "base_url": None}, env=env)
    assert cfg.base_url == "http://127.0.0.1:8000/v1" and cfg.sources["base_url"].startswith("file:")
    assert cfg.model == "env-model" and cfg.sources["model"] == "env:LIBRARYFS_LLM_MODEL"
    assert cfg.timeout_s == 3 and cfg.sources["timeout_s"] == "flag"
    assert cfg.max_concurrency == 3 and cfg.max_requests_per_hour == 50
    assert cfg.max_tokens_per_hour == 9999
    assert cfg.batch_size == 8 and cfg.sources["batch_size"] == "default"
    assert cfg.sources["ignored"] == "colour"
    assert cfg.enabled


def test_api_key_from_env_masked_and_refused_in_file(lib, tmp_path):
    cfg = load_config(lib, env={"OPENAI_API_KEY": "sk-abcdefghijkl"})
    assert cfg.api_key == "sk-abcdefghijkl" and cfg.sources["api_key"] == "env:OPENAI_API_KEY"
    assert cfg.to_dict()["api_key"] == "****ijkl"
    cfg = load_config(lib, env={"OPENAI_API_KEY": "sk-a", "LIBRARYFS_LLM_API_KEY": "sk-preferred-1"})
    assert cfg.api_key == "sk-preferred-1"
    (lib / "config.toml").write_text('[llm]\nmodel = "m"\napi_key = "sk-leak"\n')
    with pytest.raises(ConfigError, match="must not be stored"):
        load_config(lib, env={})


def test_api_key_env_names_a_variable(tmp_path):
    (tmp_path / "config.toml").write_text('[llm]\napi_key_env = "GROQ_KEY"\n')
    cfg = load_config(tmp_path, env={"GROQ_KEY": "gsk-123456789"})
    assert cfg.api_key == "gsk-123456789" and cfg.sources["api_key"] == "env:GROQ_KEY"


@pytest.mark.parametrize(
    "env",
    [
        {"LIBRARYFS_LLM_TIMEOUT_S": "soon"},
        {"LIBRARYFS_LLM_MAX_CONCURRENCY": "0"},
        {"LIBRARYFS_LLM_MAX_REQUESTS_PER_HOUR": "-1"},
        {"LIBRARYFS_LLM_STRUCTURED_OUTPUT": "xml"},
    ],
)
def test_invalid_values_name_their_source(env):
    with pytest.raises(ConfigError, match="env:LIBRARYFS_LLM_"):
        load_config(None, env=env)


def test_bad_toml_is_a_config_error(tmp_path):
    (tmp_path / "config.toml").write_text("[llm\nmodel=")
    with pytest.raises(ConfigError):
        load_config(tmp_path, env={})


def test_cli_config_show(lib, monkeypatch):
    monkeypatch.setenv("LIBRARYFS_LLM_API_KEY", "sk-topsecret-9876")
    monkeypatch.delenv("LIBRARYFS_LLM_MODEL", raising=False)
    r = CliRunner().invoke(cli, ["config", "show", "--library", str(lib), "--llm-model", "flag-model"])
    assert r.exit_code == 0, r.output
    assert "enabled" in r.output and "flag-model" in r.output and "****9876" in r.output
    assert "sk-topsecret" not in r.output
    r = CliRunner().invoke(cli, ["config", "show", "--library", str(lib), "--json"])
    data = json.loads(r.output)
    assert (
        data["settings"]["model"] == "file-model"
        and data["sources"]["api_key"] == "env:LIBRARYFS_LLM_API_KEY"
    )
    assert data["settings"]["api_key"] == "****9876"


def test_cli_config_show_bad_file_is_one_line_error(tmp_path):
    (tmp_path / "config.toml").write_text('[llm]\napi_key = "x"\n')
    r = CliRunner().invoke(cli, ["config", "show", "--library", str(tmp_path)])
    assert r.exit_code == 1 and "must not be stored" in r.output and "Traceback" not in r.output
