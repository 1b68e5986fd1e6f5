"""Settings precedence (flag > env > file > default), sources, validation, and per-logger log levels."""

from __future__ import annotations

import json
import logging
import os

import pytest

from libraryfs.settings import (
    SPEC,
    TABLES,
    SettingsError,
    configure_logging,
    env_var,
    load_settings,
    parse_levels,
    parse_timeouts,
    rows,
    timeouts_s,
)

FILE = """
[mount]
entry_timeout_s = 5
attr_timeout_s = 2.5
read_only = true
budget = "reads=10,tokens=500"

[index]
toc_max_tokens = 800

[llm]
model = "someone-elses-table"
base_url = "http://127.0.0.1:1/v1"
"""


def test_defaults_without_file_or_env(tmp_path):
    s = load_settings(str(tmp_path), environ={})
    assert s["file"] is None
    assert all(src == "default" for src in s["sources"].values())
    assert timeouts_s(s) == (1.0, 1.0, 1.0)
    assert s["mount"]["read_only"] is False and s["mount"]["budget"] is None
    assert s["index"]["toc_max_tokens"] is None and s["index"]["poll_s"] == 0.2
    assert [r[0] for r in rows(s)] == [
        k for k in SPEC if not k.startswith(("llm.", "mcp."))
    ]  # processes' tables
    everything = load_settings(str(tmp_path), environ={}, tables=TABLES)
    assert [r[0] for r in rows(everything)] == list(SPEC)
    assert everything["llm"]["api_key"] is None and everything["sources"]["llm.api_key"] == "unset"


def test_precedence_flag_env_file_default(tmp_path):
    (tmp_path / "config.toml").write_text(FILE)
    path = str(tmp_path / "config.toml")
    env = {
        "LIBRARYFS_MOUNT_ATTR_TIMEOUT_S": "7",
        "LIBRARYFS_MOUNT_READ_ONLY": "no",
        "LIBRARYFS_INDEX_POLL_S": "0.5",
        "LIBRARYFS_LOG_LEVELS": "libraryfs.indexer=debug",
    }
    s = load_settings(
        str(tmp_path), {"mount.attr_timeout_s": 9.0, "mount.entry_timeout_s": None}, environ=env
    )
    src = s["sources"]
    assert (s["mount"]["attr_timeout_s"], src["mount.attr_timeout_s"]) == (9.0, "flag")  # flag > env > file
    assert (s["mount"]["entry_timeout_s"], src["mount.entry_timeout_s"]) == (5.0, f"file:{path}")  # None flag
    assert (s["mount"]["read_only"], src["mount.read_only"]) == (False, "env:LIBRARYFS_MOUNT_READ_ONLY")
    assert (s["mount"]["negative_timeout_s"], src["mount.negative_timeout_s"]) == (1.0, "default")
    assert s["mount"]["budget"] == "reads=10,tokens=500"
    assert s["index"]["toc_max_tokens"] == 800 and s["index"]["poll_s"] == 0.5
    assert s["log"]["levels"] == "libraryfs.indexer=debug"
    assert s["file"] == path


def test_env_var_names():
    assert env_var("mount.entry_timeout_s") == "LIBRARYFS_MOUNT_ENTRY_TIMEOUT_S"
    assert env_var("log.level") == "LIBRARYFS_LOG_LEVEL"
    assert env_var("log.levels") == "LIBRARYFS_LOG_LEVELS"


@pytest.mark.parametrize(
    "text, words",
    [
        ("[mount]\nentry_timeout = 1\n", ["unknown setting mount.entry_timeout", "entry_timeout_s"]),
        ("[mount]\nentry_timeout_s = -1\n", ["mount.entry_timeout_s", "config.toml"]),
        ('[mount]\nread_only = "perhaps"\n', ["mount.read_only"]),
        ('[mount]\nbudget = "pages=3"\n', ["mount.budget", "pages=3"]),
        ("[index]\ntoc_max_tokens = 50\n", ["index.toc_max_tokens", "between 200 and 100000"]),
        ("[index]\npoll_s = 0\n", ["index.poll_s"]),
        ('[log]\nlevel = "LOUD"\n', ["log.level"]),
        ("[mount\n", ["config.toml"]),
        ("mount = 3\n", ["[mount] must be a table"]),
        ("[bogus]\nx = 1\n", ["unknown table [bogus]", "[store]"]),  # refused like an unknown key
        ("[llm]\nbase_url = 5\n", ["llm.base_url", "not a valid str"]),  # not turned into "5"
        ("[mcp]\nhost = true\n", ["mcp.host"]),
    ],
)
def test_bad_file_values_name_the_setting_and_file(tmp_path, text, words):
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(SettingsError) as e:
        load_settings(str(tmp_path), environ={}, tables=TABLES)
    for w in words:
        assert w in str(e.value)
    assert "\n" not in str(e.value).strip() or text == "[mount\n"


@pytest.mark.parametrize("what", ["latin-1", "directory", "fifo", "device"])
def test_an_unreadable_config_file_is_one_line_naming_it(tmp_path, what, run_cli):
    """A ``config.toml`` that is not UTF-8, or is a directory: ``config show``, ``status``, ``check`` and
    ``find`` printed a Python traceback (UnicodeDecodeError); ``mount`` said only the exception's name. A FIFO
    there, or a symlink to ``/dev/zero``, made ``status`` and ``config show`` hang."""
    path = tmp_path / "lib" / "config.toml"
    assert run_cli("init", str(tmp_path / "lib")).returncode == 0
    if path.exists():
        path.unlink()
    if what == "directory":
        path.mkdir()
    elif what == "fifo":  # a reader blocked forever on open()
        os.mkfifo(path)
    elif what == "device":  # a read that never ends
        path.symlink_to("/dev/zero")
    else:
        path.write_bytes(b"\xff\xfe [mount]\nread_only = true\n")
    with pytest.raises(SettingsError, match="config.toml"):
        load_settings(str(tmp_path / "lib"), environ={})
    for args in (["config", "show", "--library"], ["status"], ["check"], ["find"], ["index"]):
        r = run_cli(*args, str(tmp_path / "lib"), *(["x"] if args == ["find"] else []), timeout=60)
        assert r.returncode != 0 and "Traceback" not in r.stderr, (args, r.stderr)
        assert str(path) in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_bad_env_and_flag_values_name_their_source(tmp_path):
    with pytest.raises(SettingsError, match="env:LIBRARYFS_MOUNT_ATTR_TIMEOUT_S"):
        load_settings(str(tmp_path), environ={"LIBRARYFS_MOUNT_ATTR_TIMEOUT_S": "soon"})
    with pytest.raises(SettingsError, match="flag"):
        load_settings(str(tmp_path), {"index.poll_s": -1}, environ={})
    with pytest.raises(SettingsError, match="unknown setting mount.nope"):
        load_settings(str(tmp_path), {"mount.nope": 1}, environ={})


def test_parse_timeouts():
    assert parse_timeouts(None) == {
        "mount.entry_timeout_s": None,
        "mount.attr_timeout_s": None,
        "mount.negative_timeout_s": None,
    }
    assert parse_timeouts("0,2,0.5") == {
        "mount.entry_timeout_s": 0.0,
        "mount.attr_timeout_s": 2.0,
        "mount.negative_timeout_s": 0.5,
    }
    with pytest.raises(SettingsError):
        parse_timeouts("1,1")
    with pytest.raises(SettingsError):
        parse_timeouts("1,x,1")


def test_parse_levels():
    assert parse_levels(" libraryfs.indexer=debug , libraryfs.fuse=WARNING,") == {
        "libraryfs.indexer": "DEBUG",
        "libraryfs.fuse": "WARNING",
    }
    for bad in ("libraryfs.indexer", "=DEBUG", "libraryfs.x=CHATTY"):
        with pytest.raises(SettingsError):
            parse_levels(bad)


def test_configure_logging_sets_and_resets_per_logger_levels(tmp_path):
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        s = load_settings(
            str(tmp_path),
            environ={"LIBRARYFS_LOG_LEVEL": "WARNING", "LIBRARYFS_LOG_LEVELS": "libraryfs.test_a=DEBUG"},
        )
        h = configure_logging(s)
        assert root.level == logging.WARNING
        assert logging.getLogger("libraryfs.test_a").getEffectiveLevel() == logging.DEBUG
        assert logging.getLogger("libraryfs.test_b").getEffectiveLevel() == logging.WARNING
        s2 = load_settings(str(tmp_path), environ={"LIBRARYFS_LOG_LEVELS": "libraryfs.test_b=ERROR"})
        assert configure_logging(s2) is h  # reload reuses the handler: no duplicated lines
        assert root.level == logging.INFO
        assert logging.getLogger("libraryfs.test_a").level == logging.NOTSET  # dropped: inherits again
        assert logging.getLogger("libraryfs.test_b").getEffectiveLevel() == logging.ERROR
    finally:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
        logging.getLogger("libraryfs.test_a").setLevel(logging.NOTSET)
        logging.getLogger("libraryfs.test_b").setLevel(logging.NOTSET)


@pytest.mark.parametrize("text", ["[bogus]\nx = 1\n", "[llm]\nbase_url = 5\n", "[mount]\nthreads = -1\n"])
def test_status_says_what_is_wrong_with_the_config_and_mount_refuses_it(tmp_path, text, run_cli):
    """A bad value in a table a command does not itself read: ``status`` said nothing about it (rc 0, as if
    all were well), and ``mount`` said "mounted" while its indexer died on ``[llm] base_url = 5``. Now
    ``status`` has a ``config`` line (and ``config_error`` in ``--json``) and ``mount`` fails with the one
    line before mounting anything."""
    lib = tmp_path / "lib"
    assert run_cli("init", str(lib)).returncode == 0
    (lib / "config.toml").write_text(text)
    st = json.loads(run_cli("status", str(lib), "--json").stdout)
    assert st["config_error"] and "config.toml" in st["config_error"], st
    human = run_cli("status", str(lib)).stdout
    assert "config      error: " in human, human
    r = run_cli("mount", str(lib), str(tmp_path / "mnt"), timeout=60)
    assert r.returncode != 0 and "config.toml" in r.stderr and "Traceback" not in r.stderr, r.stderr
    with open("/proc/mounts") as f:
        assert "libraryfs:" + str(lib) not in f.read()
