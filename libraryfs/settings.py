"""Settings of the mount server, the indexer daemon and logging: defaults < file < environment < flags.

One TOML file per library, ``<libdir>/config.toml`` (the ``[llm]`` table in the same file belongs to
:mod:`libraryfs.llm.config`; tables other than those below are ignored here)::

    [mount]
    entry_timeout_s = 1.0        # kernel dentry cache, seconds (0: every lookup reaches the server)
    attr_timeout_s = 1.0         # kernel attribute cache, seconds
    negative_timeout_s = 1.0     # kernel cache of "no such file", seconds
    read_only = false
    allow_other = false          # other users may access the mount (root, or user_allow_other in fuse.conf)
    budget = "reads=200,tokens=50000"   # optional read budget: reads past it fail with EDQUOT

    [index]
    toc_max_tokens = 2000        # page bound C of every TOC (default: the value given at `libraryfs init`)
    poll_s = 0.2                 # idle journal poll interval, seconds
    stall_s = 600                # watchdog: no progress for this long counts as hung, seconds

    [log]
    level = "INFO"
    levels = "libraryfs.indexer=DEBUG,libraryfs.fuse=WARNING"   # per-logger levels

Every key has an environment variable ``LIBRARYFS_<TABLE>_<KEY>`` (``LIBRARYFS_MOUNT_ENTRY_TIMEOUT_S``,
``LIBRARYFS_INDEX_POLL_S``, ``LIBRARYFS_LOG_LEVEL``, ``LIBRARYFS_LOG_LEVELS``, …) and may be set by a
command-line flag. Precedence, highest first: **flag > environment > file > default**. Each value remembers
its source (``"flag"``, ``"env:<VAR>"``, ``"file:<path>"``, ``"default"``) — the same spelling as
:mod:`libraryfs.llm.config` — for ``libraryfs config show``.
"""

from __future__ import annotations

import logging
import os
import sys
import tomllib
from collections.abc import Mapping
from typing import Any

from libraryfs.errors import LibraryError

CONFIG_FILE = "config.toml"
TABLES = ("mount", "index", "log")


class SettingsError(LibraryError, ValueError):
    """A setting has an unusable value or an unknown name (message names it and its source)."""


# dotted key -> (kind, default, one-line meaning). kind: float | int | bool | str | level | levels | budget
SPEC: dict[str, tuple[str, Any, str]] = {
    "mount.entry_timeout_s": ("float", 1.0, "kernel dentry (lookup) cache, seconds"),
    "mount.attr_timeout_s": ("float", 1.0, "kernel attribute cache, seconds"),
    "mount.negative_timeout_s": ("float", 1.0, "kernel negative-lookup cache, seconds"),
    "mount.read_only": ("bool", False, "mount read-only"),
    "mount.allow_other": ("bool", False, "let other users access the mount (opt-in)"),
    "mount.budget": ("budget", None, "read budget 'reads=N,tokens=M' (EDQUOT past it); none by default"),
    "index.toc_max_tokens": ("int", None, "TOC page bound C in tokens (default: the library's init value)"),
    "index.poll_s": ("float", 0.2, "indexer idle poll interval, seconds"),
    "index.stall_s": ("float", 600.0, "indexer watchdog: seconds without progress that count as hung"),
    "log.level": ("level", "INFO", "log level of every logger"),
    "log.levels": ("levels", "", "per-logger levels, 'libraryfs.indexer=DEBUG,libraryfs.fuse=WARNING'"),
}
_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")


def env_var(key: str) -> str:
    """Environment variable of a dotted key: ``mount.entry_timeout_s`` → ``LIBRARYFS_MOUNT_ENTRY_TIMEOUT_S``."""
    return "LIBRARYFS_" + key.replace(".", "_").upper()


def config_path(libdir: str) -> str:
    """``<libdir>/config.toml``."""
    return os.path.join(os.path.abspath(libdir), CONFIG_FILE)


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
                f"bad log level entry {part!r} (want logger=LEVEL, LEVEL one of " f"{', '.join(_LEVELS)})"
            )
        out[name.strip()] = level
    return out


def _coerce(key: str, value: Any, source: str) -> Any:
    kind = SPEC[key][0]
    where = f"{key} from {source}"
    if value is None:
        return None
    try:
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError
            v: Any = float(value)
            if not v >= 0 or v == float("inf"):
                raise ValueError
            if key in ("index.poll_s", "index.stall_s") and v == 0:
                raise ValueError
            return v
        if kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            v = int(value)
            if key == "index.toc_max_tokens" and not 200 <= v <= 100_000:
                raise SettingsError(f"{where}: must be between 200 and 100000 tokens, got {v}")
            return v
        if kind == "bool":
            if isinstance(value, bool):
                return value
            s = str(value).strip().lower()
            if s in ("1", "true", "yes", "on"):
                return True
            if s in ("0", "false", "no", "off", ""):
                return False
            raise ValueError
        if kind == "level":
            s = str(value).strip().upper()
            if s not in _LEVELS:
                raise ValueError
            return s
        if kind == "levels":
            parse_levels(str(value))
            return str(value)
        if kind == "budget":
            s = str(value).strip()
            if not s:
                return None
            try:
                from libraryfs.fs.budget import parse_budget_spec
            except ImportError:  # pragma: no cover - the budget module ships with the package
                return s
            parse_budget_spec(s)
            return s
        return str(value)
    except SettingsError:
        raise
    except (TypeError, ValueError, LibraryError) as e:
        detail = f" ({e})" if str(e) else ""
        raise SettingsError(f"{where}: not a valid {kind}: {value!r}{detail}") from None


def read_file(path: str) -> dict[str, Any]:
    """The ``[mount]``/``[index]``/``[log]`` keys of a TOML file as ``{dotted key: raw value}``.

    A missing file gives ``{}``. Raises :class:`SettingsError` on a TOML syntax error or an unknown key in
    one of those tables (a typo must not be silently ignored).
    """
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{path}: {e}") from None
    out: dict[str, Any] = {}
    for table in TABLES:
        section = data.get(table)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise SettingsError(f"{path}: [{table}] must be a table")
        for k, v in section.items():
            key = f"{table}.{k}"
            if key not in SPEC:
                known = ", ".join(s.split(".", 1)[1] for s in SPEC if s.startswith(table + "."))
                raise SettingsError(f"{path}: unknown setting {key} (known in [{table}]: {known})")
            out[key] = v
    return out


def load_settings(
    libdir: str | None, overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Effective settings of one library.

    ``overrides``: values given as command-line flags, by dotted key (``{"mount.read_only": True}``);
    a ``None`` value means "flag not given". ``environ`` defaults to ``os.environ``.

    Returns ``{"mount": {key: value}, "index": {...}, "log": {...}, "sources": {dotted key: source},
    "file": path or None}`` where source is ``"flag"``, ``"env:<VAR>"``, ``"file:<path>"`` or ``"default"``.
    Times are seconds, ``toc_max_tokens`` tokens (``None``: the library's own init value).
    Raises :class:`SettingsError` naming the setting and its source.
    """
    env = os.environ if environ is None else environ
    path = config_path(libdir) if libdir else None
    file_values = read_file(path) if path else {}
    out: dict[str, Any] = {t: {} for t in TABLES}
    sources: dict[str, str] = {}
    overrides = dict(overrides or {})
    for key in overrides:
        if key not in SPEC:
            raise SettingsError(f"unknown setting {key} given as a flag")
    for key, (_kind, default, _doc) in SPEC.items():
        var = env_var(key)
        if overrides.get(key) is not None:
            value, source = overrides[key], "flag"
        elif env.get(var) not in (None, ""):
            value, source = env[var], f"env:{var}"
        elif key in file_values:
            value, source = file_values[key], f"file:{path}"
        else:
            value, source = default, "default"
        table, name = key.split(".", 1)
        out[table][name] = _coerce(key, value, source) if source != "default" else default
        sources[key] = source
    out["sources"] = sources
    out["file"] = path if path and os.path.exists(path) else None
    return out


def timeouts_s(settings: Mapping[str, Any]) -> tuple[float, float, float]:
    """``(entry, attr, negative)`` kernel cache timeouts in seconds from loaded settings."""
    m = settings["mount"]
    return (m["entry_timeout_s"], m["attr_timeout_s"], m["negative_timeout_s"])


def parse_timeouts(spec: str | None) -> dict[str, float | None]:
    """``"E,A,N"`` (seconds) → the three ``mount.*_timeout_s`` overrides; ``None`` → no overrides.

    Raises :class:`SettingsError` unless there are exactly three non-negative numbers.
    """
    keys = ("mount.entry_timeout_s", "mount.attr_timeout_s", "mount.negative_timeout_s")
    if not spec:
        return {k: None for k in keys}
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) != 3:
        raise SettingsError(f"--timeouts wants entry,attr,negative seconds, got {spec!r}")
    return {k: _coerce(k, p, "flag --timeouts") for k, p in zip(keys, parts, strict=False)}


def rows(settings: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """``[(dotted key, value, source), ...]`` in :data:`SPEC` order — what ``config show`` prints."""
    out = []
    for key in SPEC:
        table, name = key.split(".", 1)
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
