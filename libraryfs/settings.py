"""The one settings loader: ``<libdir>/config.toml``, the environment and command-line flags.

Precedence, highest first: **flag > environment > file > default**. Every value remembers its source —
``"flag"``, ``"env:<VAR>"``, ``"file:<path>"`` or ``"default"`` — for ``libraryfs config show``. Every bad
value is one :class:`SettingsError` line naming the setting and its source
(``mount.attr_timeout_s from file:/…/config.toml: not a valid float: 'soon'``).

One TOML file per library (tables other than these are ignored)::

    [mount]
    entry_timeout_s = 1.0        # kernel dentry (lookup) cache, seconds (0: every lookup reaches the server)
    attr_timeout_s = 1.0         # kernel attribute cache, seconds
    negative_timeout_s = 1.0     # kernel cache of "no such file", seconds
    read_only = false
    allow_other = false          # other users may access the mount (root, or user_allow_other in fuse.conf)
    budget = "reads=200,tokens=50000"   # optional read budget: reads past it fail with EDQUOT

    [index]
    toc_max_tokens = 2000        # page bound C of every TOC (default: the value given at `libraryfs init`)
    poll_s = 0.2                 # idle journal poll interval, seconds
    stall_s = 600                # watchdog: no progress for this long counts as hung, seconds
    nice = 10                    # the indexer's nice(2) increment, SCHED_BATCH, its session's autogroup

    [log]
    level = "INFO"
    levels = "libraryfs.indexer=DEBUG,libraryfs.fuse=WARNING"   # per-logger levels

    [llm]                        # the LLM endpoint of the index builder (docs/llm.md)
    base_url = "http://127.0.0.1:11434/v1"
    model = "qwen2.5:7b-instruct"
    api_key_env = "GROQ_KEY"     # the *name* of a variable holding the key (never the key itself)

    [mcp]                        # `libraryfs mcp` (docs/mcp.md); the bearer token is never stored here
    transport = "stdio"          # or "http"
    host = "127.0.0.1"           # HTTP bind; off loopback a token (LIBRARYFS_MCP_TOKEN) is required
    port = 8765
    read_only = false
    response_tokens = 8000       # token budget of one tool response
    max_write_bytes = 8388608    # largest content write_file/edit_file accept

Every key has an environment variable ``LIBRARYFS_<TABLE>_<KEY>`` (:func:`env_var`:
``LIBRARYFS_MOUNT_ENTRY_TIMEOUT_S``, ``LIBRARYFS_INDEX_POLL_S``, ``LIBRARYFS_LOG_LEVELS``,
``LIBRARYFS_LLM_BASE_URL``, …); older names stay accepted below it (``LIBRARYFS_INDEXER_NICE``). An unknown
key in ``[mount]``/``[index]``/``[log]``/``[mcp]`` is an error (a typo must not be silently ignored); unknown keys in
``[llm]`` are reported by ``config show`` and otherwise ignored, as they always were.

The API key is never read from the file (a key there is refused): it comes from ``LIBRARYFS_LLM_API_KEY``,
else ``OPENAI_API_KEY``, else the variable named by ``[llm] api_key_env``, or from a flag
(:func:`api_key`).

The key table (:data:`SPEC`: kinds, defaults, bounds, flags, environment names) and the conversion of one
raw value (:func:`coerce`) are in :mod:`libraryfs.settings_spec`; this module reads the sources, applies the
precedence and is the API every caller imports (it re-exports those names).
"""

from __future__ import annotations

import logging
import os
import sys
import tomllib
from collections.abc import Mapping
from typing import Any

from libraryfs.errors import LibraryError
from libraryfs.layout import config_path

# The key table and the value conversion (libraryfs.settings_spec); this module is their public API.
from libraryfs.settings_spec import FILE_ONLY as FILE_ONLY
from libraryfs.settings_spec import KEY_ENV_VARS as KEY_ENV_VARS
from libraryfs.settings_spec import KNOWN_TABLES as KNOWN_TABLES
from libraryfs.settings_spec import LENIENT_TABLES as LENIENT_TABLES
from libraryfs.settings_spec import MCP_TABLES as MCP_TABLES
from libraryfs.settings_spec import PROCESS_TABLES as PROCESS_TABLES
from libraryfs.settings_spec import SPEC as SPEC
from libraryfs.settings_spec import STRUCTURED_MODES as STRUCTURED_MODES
from libraryfs.settings_spec import TABLES as TABLES
from libraryfs.settings_spec import Setting as Setting
from libraryfs.settings_spec import SettingsError as SettingsError
from libraryfs.settings_spec import coerce as coerce
from libraryfs.settings_spec import env_var as env_var
from libraryfs.settings_spec import parse_levels as parse_levels


def read_file(path: str | None, tables: tuple[str, ...] = TABLES) -> tuple[dict[str, Any], list[str]]:
    """The settings of ``tables`` in a TOML file as ``{dotted key: raw value}``, and the ignored keys.

    A missing file gives ``({}, [])``. Raises :class:`SettingsError` (one line naming the file) on a file that
    cannot be read (a directory, no permission) or is not UTF-8, a TOML syntax error, a top-level name that
    is not one of :data:`KNOWN_TABLES`, a table that is not a table, an unknown key in a strict table, or an
    API key stored in ``[llm]``.
    """
    if path is None:
        return {}, []
    from libraryfs.fs.backends import read_config_text  # the one reader of the file (regular, UTF-8, ≤ 1 MiB)

    try:
        text = read_config_text(path)
    except LibraryError as e:
        raise SettingsError(str(e)) from None
    if text is None:
        return {}, []
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{path}: {e}") from None
    unknown = sorted(k for k in data if k not in KNOWN_TABLES)
    if unknown:
        raise SettingsError(
            f"{path}: unknown table [{unknown[0]}] (known: {', '.join(f'[{t}]' for t in KNOWN_TABLES)})"
        )
    out: dict[str, Any] = {}
    ignored: list[str] = []
    for table in tables:
        section = data.get(table)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise SettingsError(f"{path}: [{table}] must be a table")
        if table == "llm" and "api_key" in section:
            raise SettingsError(
                f"{path}: api_key must not be stored in the library; set LIBRARYFS_LLM_API_KEY "
                "(or name a variable with api_key_env)"
            )
        for k, v in section.items():
            key = f"{table}.{k}"
            if key in SPEC or key in FILE_ONLY:
                out[key] = v
            elif table in LENIENT_TABLES:
                ignored.append(key)
            else:
                known = ", ".join(s.split(".", 1)[1] for s in SPEC if s.startswith(table + "."))
                raise SettingsError(f"{path}: unknown setting {key} (known in [{table}]: {known})")
    return out, sorted(ignored)


def _from_env(key: str, env: Mapping[str, str]) -> tuple[str, str] | None:
    """``(value, "env:<VAR>")`` from the first non-blank variable of ``key`` (its name, then aliases)."""
    for var in (env_var(key), *SPEC[key].env_aliases):
        value = env.get(var)
        if value is not None and value.strip():
            return value, f"env:{var}"
    return None


def api_key(
    env: Mapping[str, str], key_env_name: str | None = None, flag: str | None = None
) -> tuple[str | None, str]:
    """``(key, source)`` of the LLM API key: ``flag``, else ``LIBRARYFS_LLM_API_KEY``, else
    ``OPENAI_API_KEY``, else the variable ``key_env_name`` (``[llm] api_key_env``); ``(None, "unset")``."""
    if flag:
        return str(flag), "flag"
    names = list(KEY_ENV_VARS)
    if key_env_name:
        names.insert(1, key_env_name)
    for var in names:
        value = env.get(var, "").strip()
        if value:
            return value, f"env:{var}"
    return None, "unset"


def load_settings(
    libdir: str | os.PathLike[str] | None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    tables: tuple[str, ...] = PROCESS_TABLES,
) -> dict[str, Any]:
    """Effective settings of one library for the ``tables`` a process uses.

    ``overrides``: values given as command-line flags, by dotted key (``{"mount.read_only": True}``);
    ``None`` means "flag not given"; ``"llm.api_key"`` is accepted. ``environ`` defaults to ``os.environ``.

    Returns ``{table: {name: value}, "sources": {dotted key: source}, "file": path or None, "ignored":
    [dotted keys]}`` (with ``"llm"``: also ``llm.api_key`` and its source, ``"unset"`` when none). Times
    are seconds, ``toc_max_tokens`` tokens (``None``: the library's own init value). Raises
    :class:`SettingsError` naming the setting and its source.
    """
    env = os.environ if environ is None else environ
    path = config_path(os.fspath(libdir)) if libdir else None
    file_values, ignored = read_file(path, tables)
    flags = dict(overrides or {})
    for key in flags:
        if key not in SPEC and key != "llm.api_key":
            raise SettingsError(f"unknown setting {key} given as a flag")
    out: dict[str, Any] = {t: {} for t in tables}
    sources: dict[str, str] = {}
    for key in SPEC:
        table, name = key.split(".", 1)
        if table not in tables:
            continue
        found = _from_env(key, env)
        if flags.get(key) is not None:
            value, source = flags[key], "flag"
        elif found is not None:
            value, source = found
        elif key in file_values:
            value, source = file_values[key], f"file:{path}"
        else:
            value, source = SPEC[key].default, "default"
        out[table][name] = value if source == "default" else coerce(key, value, source)
        sources[key] = source
    if "llm" in tables:
        key_env = file_values.get("llm.api_key_env")
        out["llm"]["api_key"], sources["llm.api_key"] = api_key(
            env, key_env if isinstance(key_env, str) else None, flags.get("llm.api_key")
        )
    out["sources"] = sources
    out["file"] = path if path and os.path.exists(path) else None
    out["ignored"] = ignored
    return out


def timeouts_s(settings: Mapping[str, Any]) -> tuple[float, float, float]:
    """``(entry, attr, negative)`` kernel cache timeouts in seconds from loaded settings."""
    m = settings["mount"]
    return (m["entry_timeout_s"], m["attr_timeout_s"], m["negative_timeout_s"])


TIMEOUT_KEYS = ("mount.entry_timeout_s", "mount.attr_timeout_s", "mount.negative_timeout_s")


def parse_timeouts(spec: str | None) -> dict[str, float | None]:
    """``"E,A,N"`` (seconds) → the three ``mount.*_timeout_s`` overrides; ``None`` → no overrides.

    Raises :class:`SettingsError` unless there are exactly three non-negative numbers.
    """
    if not spec:
        return {k: None for k in TIMEOUT_KEYS}
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) != 3:
        raise SettingsError(f"--timeouts wants entry,attr,negative seconds, got {spec!r}")
    return {k: coerce(k, p, "flag --timeouts") for k, p in zip(TIMEOUT_KEYS, parts, strict=True)}


def flag_argv(overrides: Mapping[str, Any]) -> list[str]:
    """Command-line flags that give a child process the same ``overrides`` (dotted keys; ``None`` skipped):
    ``{"mount.read_only": True, "index.poll_s": 0.5}`` → ``["--read-only", "--poll-s", "0.5"]``. The three
    kernel cache timeouts become one ``--timeouts E,A,N`` (all three must be given). Raises
    :class:`SettingsError` for a key without a flag."""
    argv: list[str] = []
    given = {k: v for k, v in overrides.items() if v is not None}
    if any(k in given for k in TIMEOUT_KEYS):
        if not all(k in given for k in TIMEOUT_KEYS):
            raise SettingsError("--timeouts needs all three kernel cache timeouts")
        argv.append("--timeouts=" + ",".join(f"{float(given.pop(k)):g}" for k in TIMEOUT_KEYS))
    for key, value in given.items():
        flag = SPEC[key].flag if key in SPEC else None
        if flag is None:
            raise SettingsError(f"setting {key} has no command-line flag")
        if SPEC[key].kind == "bool":
            argv += [flag] if value else []
        else:
            argv.append(f"{flag}={value}")
    return argv


def rows(settings: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """``[(dotted key, value, source), ...]`` of the loaded tables in :data:`SPEC` order — what
    ``config show`` prints (the API key is left out: see ``llm.api_key`` in the settings)."""
    out = []
    for key in SPEC:
        table, name = key.split(".", 1)
        if table in settings and name in settings[table]:
            out.append((key, settings[table][name], settings["sources"][key]))
    return out


# -- logging ---------------------------------------------------------------------------------------------
_HANDLER_NAME = "libraryfs-stderr"


def configure_logging(settings: Mapping[str, Any] | None = None, stream=None) -> logging.Handler:
    """Install the stderr log handler and the levels from ``settings["log"]`` (call again to reload).

    Format: under journald (:func:`libraryfs.notify.under_journal`) ``<priority>logger: message`` with no
    timestamp (the journal adds it); under systemd without the journal (``INVOCATION_ID``) the same without
    the priority prefix; otherwise ``time logger LEVEL message``. Per-logger levels from ``log.levels``;
    loggers named there before but not now go back to inheriting. Returns the handler.
    """
    from libraryfs.notify import JournalFormatter, under_journal, under_systemd

    log_cfg = (settings or {}).get("log") or {"level": "INFO", "levels": ""}
    root = logging.getLogger()
    handler = next((h for h in root.handlers if h.get_name() == _HANDLER_NAME), None)
    if handler is None:
        handler = logging.StreamHandler(stream or sys.stderr)
        handler.set_name(_HANDLER_NAME)
        if under_journal():
            handler.setFormatter(JournalFormatter())
        elif under_systemd():
            handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        else:
            handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        root.addHandler(handler)
    root.setLevel(log_cfg.get("level") or "INFO")
    levels = parse_levels(log_cfg.get("levels") or "")
    previous: set[str] = getattr(configure_logging, "_named", set())
    for name in previous - set(levels):
        logging.getLogger(name).setLevel(logging.NOTSET)
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    configure_logging._named = set(levels)  # type: ignore[attr-defined]
    return handler
