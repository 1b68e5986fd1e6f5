"""Settings of the LLM index builder: defaults < ``<libdir>/config.toml`` ``[llm]`` < environment < CLI flags.

The API key is read from the environment only (``LIBRARYFS_LLM_API_KEY``, else ``OPENAI_API_KEY``, else the
variable named by ``api_key_env`` in the TOML file) or from a CLI flag; it is never written into the library
and a key found in ``config.toml`` is refused. Every setting remembers where its value came from
(``"default"``, ``"file:<path>"``, ``"env:<VAR>"``, ``"flag"``) for ``libraryfs config show``.

Example ``<libdir>/config.toml``::

    [llm]
    base_url = "http://127.0.0.1:11434/v1"   # Ollama
    model = "qwen2.5:7b-instruct"
    timeout_s = 60
    max_concurrency = 2
    max_requests_per_hour = 2000
    max_tokens_per_hour = 4000000
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from typing import Any

from libraryfs.errors import LibraryError

CONFIG_FILE = "config.toml"
STRUCTURED_MODES = ("auto", "json_schema", "json_object", "json_object_schema", "prompt")


class ConfigError(LibraryError, ValueError):
    """A setting has an unusable value (message names the setting and its source)."""


@dataclasses.dataclass
class LLMConfig:
    """Effective LLM settings. ``enabled`` when both ``base_url`` and ``model`` are set.

    Limits of 0 mean "no limit". Times are seconds, token counts are API-reported tokens.
    """

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None  #: never stored in the library; masked by :meth:`to_dict`
    timeout_s: float = 60.0  #: per HTTP request (connect, each read); a hung endpoint costs at most this
    max_concurrency: int = 2  #: requests in flight at once
    max_requests_per_hour: int = 2000  #: spending limit, sliding one-hour window (0 = none)
    max_tokens_per_hour: int = 4_000_000  #: spending limit on prompt + completion tokens (0 = none)
    batch_size: int = 8  #: entries per summarize/file request, sections per describe request
    batch_max_tokens: int = 6000  #: prompt tokens per batched request (a batch is cut before this)
    max_attempts: int = 3  #: answers asked for per batch when the model's answer is invalid
    transport_attempts: int = 3  #: tries per request on 429 / 5xx / timeout / connection errors
    max_backoff_s: float = 30.0  #: cap on one wait (Retry-After or exponential backoff), seconds
    down_backoff_s: float = 30.0  #: first pause of all calls after the endpoint failed (doubles, ≤ 15 min)
    structured_output: str = "auto"  #: auto | json_schema | json_object | json_object_schema | prompt
    temperature: float = 0.0
    sources: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        """True when an endpoint is configured (base URL and model)."""
        return bool(self.base_url and self.model)

    def masked_key(self) -> str | None:
        """The API key with all but its last 4 characters hidden (``None`` when unset)."""
        k = self.api_key
        if not k:
            return None
        return "****" + k[-4:] if len(k) > 8 else "****"

    def to_dict(self, mask: bool = True) -> dict[str, Any]:
        """Settings as a JSON-able dict (``api_key`` masked unless ``mask=False``), without ``sources``."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "sources"}
        if mask:
            d["api_key"] = self.masked_key()
        return d


# field -> (env var, parser)
_INT = "int"
_FLOAT = "float"
_STR = "str"
_FIELDS: dict[str, str] = {
    "base_url": _STR,
    "model": _STR,
    "timeout_s": _FLOAT,
    "max_concurrency": _INT,
    "max_requests_per_hour": _INT,
    "max_tokens_per_hour": _INT,
    "batch_size": _INT,
    "batch_max_tokens": _INT,
    "max_attempts": _INT,
    "transport_attempts": _INT,
    "max_backoff_s": _FLOAT,
    "down_backoff_s": _FLOAT,
    "structured_output": _STR,
    "temperature": _FLOAT,
}
ENV_VARS: dict[str, str] = {
    "base_url": "LIBRARYFS_LLM_BASE_URL",
    "model": "LIBRARYFS_LLM_MODEL",
    "timeout_s": "LIBRARYFS_LLM_TIMEOUT_S",
    "max_concurrency": "LIBRARYFS_LLM_MAX_CONCURRENCY",
    "max_requests_per_hour": "LIBRARYFS_LLM_MAX_REQUESTS_PER_HOUR",
    "max_tokens_per_hour": "LIBRARYFS_LLM_MAX_TOKENS_PER_HOUR",
    "batch_size": "LIBRARYFS_LLM_BATCH_SIZE",
    "structured_output": "LIBRARYFS_LLM_STRUCTURED_OUTPUT",
}
KEY_ENV_VARS = ("LIBRARYFS_LLM_API_KEY", "OPENAI_API_KEY")


def _parse(name: str, value: Any, source: str) -> Any:
    kind = _FIELDS[name]
    try:
        if kind == _INT:
            if isinstance(value, bool):
                raise ValueError
            v: Any = int(value)
            if v < 0:
                raise ValueError
        elif kind == _FLOAT:
            v = float(value)
            if v < 0:
                raise ValueError
        else:
            v = str(value).strip() or None
    except (TypeError, ValueError):
        raise ConfigError(f"llm.{name} from {source}: not a valid {kind} ≥ 0: {value!r}") from None
    if name == "structured_output" and v not in STRUCTURED_MODES:
        raise ConfigError(f"llm.structured_output from {source}: {v!r} is not one of {STRUCTURED_MODES}")
    if name in ("max_concurrency", "batch_size", "max_attempts", "transport_attempts") and v < 1:
        raise ConfigError(f"llm.{name} from {source}: must be ≥ 1")
    return v


def read_file(libdir: str | os.PathLike[str] | None) -> tuple[dict[str, Any], str | None]:
    """The ``[llm]`` table of ``<libdir>/config.toml`` (``{}`` if absent) and the file's path.

    Raises :class:`ConfigError` on a TOML syntax error or when the table holds an API key.
    """
    if libdir is None:
        return {}, None
    path = os.path.join(os.path.abspath(os.fspath(libdir)), CONFIG_FILE)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        return {}, None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {e}") from e
    table = doc.get("llm", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [llm] must be a table")
    if "api_key" in table:
        raise ConfigError(
            f"{path}: api_key must not be stored in the library; set LIBRARYFS_LLM_API_KEY "
            "(or name a variable with api_key_env)"
        )
    return table, path


def load_config(
    libdir: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> LLMConfig:
    """Effective settings: defaults < file ``[llm]`` < environment < ``overrides`` (CLI flags).

    ``overrides`` keys are :class:`LLMConfig` field names (``api_key`` allowed); ``None`` values are
    ignored. Unknown file keys are ignored (listed under ``sources["ignored"]``). Raises
    :class:`ConfigError` on an invalid value.
    """
    env = os.environ if env is None else env
    cfg = LLMConfig()
    src = {name: "default" for name in _FIELDS}
    table, path = read_file(libdir)
    unknown = []
    for k, v in table.items():
        if k in _FIELDS:
            setattr(cfg, k, _parse(k, v, f"file:{path}"))
            src[k] = f"file:{path}"
        elif k != "api_key_env":
            unknown.append(k)
    for name, var in ENV_VARS.items():
        if env.get(var, "").strip():
            setattr(cfg, name, _parse(name, env[var], f"env:{var}"))
            src[name] = f"env:{var}"
    key_vars = list(KEY_ENV_VARS)
    if isinstance(table.get("api_key_env"), str):
        key_vars.insert(1, table["api_key_env"])
    src["api_key"] = "unset"
    for var in key_vars:
        if env.get(var, "").strip():
            cfg.api_key, src["api_key"] = env[var].strip(), f"env:{var}"
            break
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        if k == "api_key":
            cfg.api_key, src[k] = str(v), "flag"
        elif k in _FIELDS:
            setattr(cfg, k, _parse(k, v, "flag"))
            src[k] = "flag"
        else:
            raise ConfigError(f"unknown LLM setting {k!r}")
    if unknown:
        src["ignored"] = ", ".join(sorted(unknown))
    cfg.sources = src
    return cfg
