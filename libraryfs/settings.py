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
    nice = 10                    # the indexer's nice(2) increment (the mount server wins the CPU)

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
"""

from __future__ import annotations

import logging
import math
import os
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from libraryfs.errors import LibraryError
from libraryfs.layout import config_path

#: Tables read by the processes (the mount server never reads ``[llm]``: it never calls a model).
PROCESS_TABLES = ("mount", "index", "log")
TABLES = (*PROCESS_TABLES, "llm", "mcp")
#: Tables read by ``libraryfs mcp`` (it never calls a model either).
MCP_TABLES = ("mcp", "log")
#: Tables whose unknown keys are ignored (reported) instead of refused.
LENIENT_TABLES = ("llm",)
STRUCTURED_MODES = ("auto", "json_schema", "json_object", "json_object_schema", "prompt")
KEY_ENV_VARS = ("LIBRARYFS_LLM_API_KEY", "OPENAI_API_KEY")
_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")


class SettingsError(LibraryError, ValueError):
    """A setting has an unusable value or an unknown name (message names it and its source)."""


@dataclass(frozen=True)
class Setting:
    """One setting: its kind, default, one-line meaning and the bounds a value must meet.

    ``kind``: ``float``, ``int``, ``bool``, ``str``, ``level``, ``levels``, ``budget`` or ``choice``.
    ``low``/``high``: inclusive bounds of a number; ``positive``: strictly above 0. ``flag``: the
    command-line flag that sets it (built by ``libraryfs.cli.options``; ``None``: no flag), ``aliases``:
    older spellings of that flag, accepted but hidden. ``env_aliases``: older environment names, read
    after :func:`env_var`. ``metavar``: how ``--help`` shows the flag's value.
    """

    kind: str
    default: Any
    doc: str
    low: float | None = None
    high: float | None = None
    positive: bool = False
    choices: tuple[str, ...] = ()
    flag: str | None = None
    aliases: tuple[str, ...] = ()
    env_aliases: tuple[str, ...] = ()
    metavar: str | None = None


def _f(default: float, doc: str, **kw: Any) -> Setting:
    return Setting("float", default, doc, low=0, **kw)


def _i(default: int | None, doc: str, low: int = 0, **kw: Any) -> Setting:
    return Setting("int", default, doc, low=low, **kw)


SPEC: dict[str, Setting] = {
    "mount.entry_timeout_s": _f(1.0, "kernel dentry (lookup) cache, seconds"),
    "mount.attr_timeout_s": _f(1.0, "kernel attribute cache, seconds"),
    "mount.negative_timeout_s": _f(1.0, "kernel negative-lookup cache, seconds"),
    "mount.read_only": Setting("bool", False, "mount read-only", flag="--read-only"),
    "mount.allow_other": Setting("bool", False, "let other users access the mount", flag="--allow-other"),
    "mount.budget": Setting(
        "budget",
        None,
        "read budget: reads past it fail with EDQUOT",
        flag="--budget",
        metavar="reads=N,tokens=M",
    ),
    "index.toc_max_tokens": _i(
        None,
        "TOC page bound C in tokens (default: the library's init value)",
        200,
        high=100_000,
        flag="--toc-max-tokens",
    ),
    "index.poll_s": _f(0.2, "indexer idle poll interval, seconds", positive=True, flag="--poll-s"),
    "index.stall_s": _f(
        600.0, "indexer watchdog: seconds without progress that count as hung", positive=True
    ),
    "index.nice": _i(
        10, "nice(2) increment of the indexer process", -20, high=19, env_aliases=("LIBRARYFS_INDEXER_NICE",)
    ),
    "log.level": Setting("level", "INFO", "log level of every logger", flag="--log-level"),
    "log.levels": Setting(
        "levels", "", "per-logger levels, 'libraryfs.indexer=DEBUG,libraryfs.fuse=WARNING'"
    ),
    "llm.base_url": Setting(
        "str", None, "OpenAI-compatible endpoint", flag="--llm-base-url", aliases=("--base-url",)
    ),
    "llm.model": Setting("str", None, "model name", flag="--llm-model", aliases=("--model",)),
    "llm.timeout_s": _f(60.0, "per HTTP request (connect, each read), seconds", flag="--llm-timeout-s"),
    "llm.max_concurrency": _i(2, "requests in flight at once", 1, flag="--llm-max-concurrency"),
    "llm.max_requests_per_hour": _i(
        2000, "spending limit, sliding hour (0: none)", flag="--llm-max-requests-per-hour"
    ),
    "llm.max_tokens_per_hour": _i(
        4_000_000, "spending limit in tokens (0: none)", flag="--llm-max-tokens-per-hour"
    ),
    "llm.batch_size": _i(8, "entries per summarize/file request", 1, flag="--llm-batch-size"),
    "llm.batch_max_tokens": _i(6000, "prompt tokens per batched request"),
    "llm.max_attempts": _i(3, "answers asked for per batch when the answer is invalid", 1),
    "llm.transport_attempts": _i(3, "tries per request on 429/5xx/timeout/connection errors", 1),
    "llm.max_backoff_s": _f(30.0, "cap on one retry wait, seconds"),
    "llm.down_backoff_s": _f(30.0, "first pause of all calls after the endpoint failed, seconds"),
    "llm.structured_output": Setting(
        "choice",
        "auto",
        "auto | json_schema | json_object | json_object_schema | prompt",
        choices=STRUCTURED_MODES,
    ),
    "llm.index_answers": Setting(
        "choice",
        "json",
        "how the index builder asks: json (batched, structured output) | text (one item per request, one "
        "plain sentence back; for small models)",
        choices=("json", "text"),
    ),
    "llm.temperature": _f(0.0, "sampling temperature"),
    "mcp.transport": Setting(
        "choice",
        "stdio",
        "MCP transport: stdio | http",
        choices=("stdio", "http"),
        flag="--transport",
        metavar="stdio|http",
    ),
    "mcp.host": Setting(
        "str", "127.0.0.1", "MCP HTTP bind address (off loopback a token is required)", flag="--host"
    ),
    "mcp.port": _i(8765, "MCP HTTP port (0: any free one)", 0, high=65535, flag="--port"),
    "mcp.read_only": Setting("bool", False, "MCP: refuse every write tool (EROFS)", flag="--read-only"),
    "mcp.response_tokens": _i(
        8000, "token budget of one MCP tool response", 200, high=1_000_000, flag="--response-tokens"
    ),
    "mcp.max_write_bytes": _i(
        8 << 20,
        "largest content MCP write_file/edit_file accept, bytes",
        1,
        high=1 << 30,
        flag="--max-write-bytes",
    ),
}
#: File keys that are not settings of their own but are understood (``[llm] api_key_env``).
FILE_ONLY = {"llm.api_key_env"}


def env_var(key: str) -> str:
    """Environment variable of a dotted key: ``mount.entry_timeout_s`` → ``LIBRARYFS_MOUNT_ENTRY_TIMEOUT_S``."""
    return "LIBRARYFS_" + key.replace(".", "_").upper()


def parse_levels(spec: str) -> dict[str, str]:
    """``"libraryfs.indexer=DEBUG, libraryfs.fuse=warning"`` → ``{"libraryfs.indexer": "DEBUG", ...}``.

    Raises :class:`SettingsError` on an entry without ``=`` or an unknown level name.
    """
    out: dict[str, str] = {}
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, eq, level = part.partition("=")
        level = level.strip().upper()
        if not eq or not name.strip() or level not in _LEVELS:
            raise SettingsError(
                f"bad log level entry {part!r} (want logger=LEVEL, LEVEL one of {', '.join(_LEVELS)})"
            )
        out[name.strip()] = level
    return out


def _as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError
    v = float(value)
    if not math.isfinite(v):
        raise ValueError
    return v


def _as_int(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError
    return int(value)


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off", ""):
        return False
    raise ValueError


def _as_level(value: Any) -> str:
    s = str(value).strip().upper()
    if s not in _LEVELS:
        raise ValueError
    return s


def _as_budget(value: Any) -> str | None:
    s = str(value).strip()
    if not s:
        return None
    from libraryfs.fs.budget import parse_budget_spec

    parse_budget_spec(s)  # raises ValueError naming the bad part
    return s


_CONVERT = {
    "float": _as_float,
    "int": _as_int,
    "bool": _as_bool,
    "str": lambda v: str(v).strip() or None,
    "level": _as_level,
    "levels": lambda v: (parse_levels(str(v)), str(v))[1],
    "budget": _as_budget,
    "choice": lambda v: str(v).strip(),
}


def _coerce(key: str, value: Any, source: str) -> Any:
    """``value`` converted to the kind of ``key`` and checked against its bounds; raises SettingsError."""
    spec = SPEC[key]
    where = f"{key} from {source}"
    if value is None:
        return None
    try:
        v = _CONVERT[spec.kind](value)
    except (TypeError, ValueError, LibraryError) as e:
        detail = f" ({e})" if str(e) and spec.kind in ("budget", "levels") else ""  # our parsers say why
        raise SettingsError(f"{where}: not a valid {spec.kind}: {value!r}{detail}") from None
    if spec.kind in ("float", "int") and v is not None:
        if spec.high is not None and not spec.low <= v <= spec.high:  # type: ignore[operator]
            raise SettingsError(f"{where}: must be between {spec.low:g} and {spec.high:g}, got {v!r}")
        if spec.low is not None and v < spec.low:  # type: ignore[operator]
            raise SettingsError(f"{where}: must be ≥ {spec.low:g}, got {v!r}")
        if spec.positive and v == 0:
            raise SettingsError(f"{where}: must be > 0, got {v!r}")
    if spec.kind == "choice" and v not in spec.choices:
        raise SettingsError(f"{where}: {v!r} is not one of {', '.join(spec.choices)}")
    return v


def read_file(path: str | None, tables: tuple[str, ...] = TABLES) -> tuple[dict[str, Any], list[str]]:
    """The settings of ``tables`` in a TOML file as ``{dotted key: raw value}``, and the ignored keys.

    A missing file gives ``({}, [])``. Raises :class:`SettingsError` on a TOML syntax error, a table that is
    not a table, an unknown key in a strict table, or an API key stored in ``[llm]``.
    """
    if path is None:
        return {}, []
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        return {}, []
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{path}: {e}") from None
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
        out[table][name] = value if source == "default" else _coerce(key, value, source)
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
    return {k: _coerce(k, p, "flag --timeouts") for k, p in zip(TIMEOUT_KEYS, parts, strict=True)}


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
