"""The settings' key table: every setting of ``config.toml`` with its kind, default, bounds, command-line flag
and environment variable (:data:`SPEC`), and the conversion of a raw value to its kind (:func:`coerce`).

:mod:`libraryfs.settings` is the loader (sources, precedence, the file format) and the public API: it
re-exports the names here. This module reads nothing: no file, no environment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from libraryfs.errors import LibraryError

#: Tables read by the processes (the mount server never reads ``[llm]``: it never calls a model).
PROCESS_TABLES = ("mount", "index", "log")
TABLES = (*PROCESS_TABLES, "llm", "mcp")
#: Tables read by ``libraryfs mcp`` (it never calls a model either).
MCP_TABLES = ("mcp", "log")
#: Every table a ``config.toml`` may hold (``[store]``: the store backend, read by
#: :mod:`libraryfs.fs.backends`); any other top-level name is refused.
KNOWN_TABLES = (*TABLES, "store")
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


#: the longest duration a ``*_s`` setting takes, seconds (~11.6 days): past ~2.9·10¹¹ s a sleep, a lock wait
#: or a socket timeout raises OverflowError ("timestamp out of range for platform time_t") — a crash at the
#: first wait instead of an error at load
DURATION_MAX_S = 1e6


def _f(default: float, doc: str, **kw: Any) -> Setting:
    """A float setting, ≥ 0, at most :data:`DURATION_MAX_S` unless ``high`` says otherwise."""
    return Setting("float", default, doc, low=0, **{"high": DURATION_MAX_S, **kw})


def _i(default: int | None, doc: str, low: int = 0, **kw: Any) -> Setting:
    return Setting("int", default, doc, low=low, **kw)


SPEC: dict[str, Setting] = {
    "mount.entry_timeout_s": _f(1.0, "kernel dentry (lookup) cache, seconds"),
    "mount.attr_timeout_s": _f(1.0, "kernel attribute cache, seconds"),
    "mount.negative_timeout_s": _f(1.0, "kernel negative-lookup cache, seconds"),
    "mount.read_only": Setting("bool", False, "mount read-only", flag="--read-only"),
    "mount.allow_other": Setting("bool", False, "let other users access the mount", flag="--allow-other"),
    "mount.threads": _i(
        1,
        "FUSE worker threads (1: the single-threaded loop, the measured best on 2 cores; N > 1: libfuse's "
        "multithreaded loop, handlers one at a time under the server lock, replies and syncs overlap)",
        1,
        high=64,
        flag="--threads",
    ),
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
    "llm.temperature": _f(0.0, "sampling temperature", high=2.0),  # the OpenAI API's range
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
    "mcp.indexer_restart_wait_s": _f(
        10.0, "how long the MCP server's restart of a dead indexer waits for one still shutting down, seconds"
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
    return v + 0.0  # -0.0 is 0.0 (shown as "-0" otherwise)


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


def _as_str(value: Any) -> str:
    """A text setting as given: a TOML number or boolean (``base_url = 5``) is refused, not turned into text."""
    if not isinstance(value, str):
        raise TypeError(value)
    return value


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
    "str": lambda v: _as_str(v).strip() or None,
    "level": _as_level,
    "levels": lambda v: (parse_levels(str(v)), str(v))[1],
    "budget": _as_budget,
    "choice": lambda v: str(v).strip(),
}


def coerce(key: str, value: Any, source: str) -> Any:
    """``value`` (from a file, the environment or a flag) converted to the kind of setting ``key`` and checked
    against its bounds; ``None`` stays ``None``.

    ``source`` is named in the error (``"file:<path>"``, ``"env:<VAR>"``, ``"flag"``). Raises
    :class:`SettingsError` on a value that does not convert, is out of bounds or is not one of the choices.
    """
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
