"""The LLM settings as one typed record, loaded by the one settings loader (:mod:`libraryfs.settings`,
table ``[llm]``): defaults < ``<libdir>/config.toml`` < environment < CLI flags.

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
from collections.abc import Mapping
from typing import Any

from libraryfs.layout import CONFIG_FILE
from libraryfs.settings import KEY_ENV_VARS, SPEC, STRUCTURED_MODES, env_var, load_settings
from libraryfs.settings import SettingsError as ConfigError

__all__ = ["LLMConfig", "ConfigError", "load_config", "CONFIG_FILE", "KEY_ENV_VARS", "STRUCTURED_MODES"]


def _default(field: str) -> Any:
    return SPEC[f"llm.{field}"].default


@dataclasses.dataclass
class LLMConfig:
    """Effective LLM settings. ``enabled`` when both ``base_url`` and ``model`` are set.

    Limits of 0 mean "no limit". Times are seconds, token counts are API-reported tokens.
    """

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None  #: never stored in the library; masked by :meth:`to_dict`
    #: per HTTP request (connect, each read); a hung endpoint costs at most this, seconds
    timeout_s: float = _default("timeout_s")
    #: requests in flight at once
    max_concurrency: int = _default("max_concurrency")
    #: spending limit, sliding one-hour window (0 = none)
    max_requests_per_hour: int = _default("max_requests_per_hour")
    #: spending limit on prompt + completion tokens (0 = none)
    max_tokens_per_hour: int = _default("max_tokens_per_hour")
    #: entries per summarize/file request, sections per describe request
    batch_size: int = _default("batch_size")
    #: prompt tokens per batched request (a batch is cut before this)
    batch_max_tokens: int = _default("batch_max_tokens")
    #: answers asked for per batch when the model's answer is invalid
    max_attempts: int = _default("max_attempts")
    #: tries per request on 429 / 5xx / timeout / connection errors
    transport_attempts: int = _default("transport_attempts")
    #: cap on one wait (Retry-After or exponential backoff), seconds
    max_backoff_s: float = _default("max_backoff_s")
    #: first pause of all calls after the endpoint failed (doubles, ≤ 15 min), seconds
    down_backoff_s: float = _default("down_backoff_s")
    #: auto | json_schema | json_object | json_object_schema | prompt
    structured_output: str = _default("structured_output")
    #: json (batched, structured output) | text (the index builder asks one item per request in plain text)
    index_answers: str = _default("index_answers")
    temperature: float = _default("temperature")
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


#: Environment variable of every field (``LIBRARYFS_LLM_<FIELD>``; :func:`libraryfs.settings.env_var`).
ENV_VARS: dict[str, str] = {k.split(".", 1)[1]: env_var(k) for k in SPEC if k.startswith("llm.")}


def load_config(
    libdir: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> LLMConfig:
    """Effective LLM settings from :func:`libraryfs.settings.load_settings` (table ``[llm]``): defaults <
    file < environment < ``overrides`` (CLI flags).

    ``overrides`` keys are :class:`LLMConfig` field names (``api_key`` allowed); ``None`` values are
    ignored. Unknown file keys are ignored (listed under ``sources["ignored"]``). Raises
    :class:`ConfigError` (= :class:`~libraryfs.settings.SettingsError`) on an invalid value, an unknown
    override or a key stored in the file.
    """
    flags = {}
    for k, v in (overrides or {}).items():
        if k != "api_key" and f"llm.{k}" not in SPEC:
            raise ConfigError(f"unknown LLM setting {k!r}")
        flags[f"llm.{k}"] = v
    s = load_settings(libdir, flags, env, tables=("llm",))
    cfg = LLMConfig(**s["llm"])
    cfg.sources = {key.split(".", 1)[1]: src for key, src in s["sources"].items()}
    if s["ignored"]:
        cfg.sources["ignored"] = ", ".join(k.split(".", 1)[1] for k in s["ignored"])
    return cfg
