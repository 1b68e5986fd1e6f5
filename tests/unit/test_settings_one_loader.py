"""One loader for config.toml: the processes' tables and [llm] share precedence, error style, env names;
the CLI's flags come from the same table (shared options, a child process gets the same flags back)."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from libraryfs.cli.main import cli
from libraryfs.cli.mount_cmds import indexer, mountd
from libraryfs.cli.options import setting_overrides
from libraryfs.llm import client_for, load_config
from libraryfs.settings import SPEC, TABLES, SettingsError, env_var, flag_argv, load_settings


def test_one_error_style_for_every_table(tmp_path):
    path = tmp_path / "config.toml"
    for text, key in (
        ('[llm]\ntimeout_s = "soon"\n', "llm.timeout_s"),
        ('[mount]\nattr_timeout_s = "soon"\n', "mount.attr_timeout_s"),
    ):
        path.write_text(text)
        with pytest.raises(SettingsError) as e:
            load_settings(str(tmp_path), environ={}, tables=TABLES)
        assert str(e.value) == f"{key} from file:{path}: not a valid float: 'soon'"
    for var, key in (
        ("LIBRARYFS_LLM_MAX_CONCURRENCY", "llm.max_concurrency"),
        ("LIBRARYFS_INDEX_POLL_S", "index.poll_s"),
    ):
        with pytest.raises(SettingsError, match=rf"^{key} from env:{var}: must be"):
            load_settings(None, environ={var: "0"}, tables=TABLES)


def test_durations_too_long_to_wait_for_are_refused_at_load_and_minus_zero_is_zero(tmp_path):
    """A finite float too large for the platform's time_t (a sleep, a lock wait or a socket timeout of 1e308 s
    raises OverflowError) is refused when the settings load, as a setting above its bound; -0.0 reads 0.0."""
    from libraryfs.settings_spec import DURATION_MAX_S

    for var, key in (
        ("LIBRARYFS_INDEX_POLL_S", "index.poll_s"),
        ("LIBRARYFS_LLM_TIMEOUT_S", "llm.timeout_s"),
    ):
        for value in ("1e308", str(DURATION_MAX_S * 2)):
            with pytest.raises(
                SettingsError, match=rf"^{key} from env:{var}: must be between 0 and 1e\+06, got"
            ):
                load_settings(None, environ={var: value}, tables=TABLES)
    assert (
        load_settings(None, environ={"LIBRARYFS_INDEX_POLL_S": "86400"}, tables=TABLES)["index"]["poll_s"]
        == 86400
    )
    with pytest.raises(SettingsError, match="llm.temperature .*must be between 0 and 2"):
        load_settings(None, environ={"LIBRARYFS_LLM_TEMPERATURE": "7"}, tables=TABLES)
    (tmp_path / "config.toml").write_text("[mount]\nattr_timeout_s = -0.0\n")
    got = load_settings(str(tmp_path), environ={}, tables=TABLES)["mount"]["attr_timeout_s"]
    assert got == 0.0 and str(got) == "0.0"


def test_the_mount_server_never_reads_llm(tmp_path):
    (tmp_path / "config.toml").write_text('[llm]\ntimeout_s = "soon"\n[mount]\nread_only = true\n')
    s = load_settings(str(tmp_path), environ={})  # the processes' tables: a bad [llm] cannot stop a mount
    assert s["mount"]["read_only"] is True and "llm" not in s
    with pytest.raises(SettingsError, match="llm.timeout_s"):
        load_config(str(tmp_path), env={})


def test_every_key_has_its_env_var_and_old_names_still_work(tmp_path):
    assert {env_var(k) for k in SPEC} >= {
        "LIBRARYFS_LLM_BASE_URL",
        "LIBRARYFS_LLM_MODEL",
        "LIBRARYFS_LLM_TIMEOUT_S",
        "LIBRARYFS_MOUNT_ATTR_TIMEOUT_S",
        "LIBRARYFS_LOG_LEVELS",
    }
    s = load_settings(None, environ={"LIBRARYFS_INDEXER_NICE": "5"})
    assert (s["index"]["nice"], s["sources"]["index.nice"]) == (5, "env:LIBRARYFS_INDEXER_NICE")
    s = load_settings(None, environ={"LIBRARYFS_INDEXER_NICE": "5", "LIBRARYFS_INDEX_NICE": "7"})
    assert (s["index"]["nice"], s["sources"]["index.nice"]) == (7, "env:LIBRARYFS_INDEX_NICE")
    s = load_settings(None, environ={}, tables=("llm",))
    assert s["llm"]["api_key"] is None and s["sources"]["llm.api_key"] == "unset"


def _parse(cmd: click.Command, argv: list[str]) -> dict:
    ctx = cmd.make_context(cmd.name, argv)
    return setting_overrides(dict(ctx.params))


def test_a_child_process_gets_the_same_flags_back():
    given = {
        "mount.read_only": True,
        "mount.budget": "reads=5,tokens=100",
        "mount.entry_timeout_s": 0.0,
        "mount.attr_timeout_s": 2.5,
        "mount.negative_timeout_s": 1.0,
        "log.level": "DEBUG",
    }
    argv = ["LIB", "MNT", *flag_argv(given)]  # what the launcher spawns the mount server with
    assert _parse(mountd, argv) == given
    given = {"index.poll_s": 0.5, "index.toc_max_tokens": 800, "llm.model": "m"}
    assert _parse(indexer, ["LIB", *flag_argv(given)]) == given
    with pytest.raises(SettingsError, match="has no command-line flag"):
        flag_argv({"index.stall_s": 1.0})


def test_the_endpoint_has_one_spelling_and_the_old_ones_still_work(tmp_path, monkeypatch):
    for var in ("LIBRARYFS_LLM_BASE_URL", "LIBRARYFS_LLM_MODEL", "LIBRARYFS_LLM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    r = CliRunner().invoke(
        cli, ["config", "show", "--json", "--llm-base-url", "http://a/v1", "--llm-model", "m"]
    )
    assert r.exit_code == 0 and "deprecated" not in r.output, r.output
    doc = json.loads(r.output)
    assert doc["settings"]["base_url"] == "http://a/v1" and doc["sources"]["base_url"] == "flag"
    r = CliRunner().invoke(
        cli, ["config", "show", "--base-url", "http://b/v1", "--model", "m", "--api-key", "sk-x1234567"]
    )
    assert r.exit_code == 0, r.output
    assert "--base-url is deprecated; use --llm-base-url" in r.output
    assert "http://b/v1" in r.output and "****4567" in r.output
    assert "--base-url" not in CliRunner().invoke(cli, ["config", "show", "--help"]).output  # hidden
    for cmd in (["solve"], ["cards", "add"], ["index"], ["indexer"]):
        assert "--llm-base-url" in CliRunner().invoke(cli, [*cmd, "--help"]).output, cmd


def test_features_receive_the_one_client(tmp_path, monkeypatch):
    monkeypatch.delenv("LIBRARYFS_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("LIBRARYFS_LLM_MODEL", raising=False)
    assert client_for(None) is None
    with pytest.raises(SettingsError, match="no LLM configured"):
        client_for(None, required=True)
    (tmp_path / "config.toml").write_text('[llm]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    c = client_for(str(tmp_path), {"timeout_s": 5}, defaults={"timeout_s": 120.0, "temperature": 0.7})
    assert (c.model, c.config.timeout_s, c.config.temperature) == ("m", 5, 0.7)  # flag beats the default
    assert c.config.transport_attempts == 3 and c._client.max_retries == 0  # one retry policy: ours
