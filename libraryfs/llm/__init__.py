"""The LLM index builder (ARCHITECTURE §4): summaries, section descriptions, inbox filing and TOC groups
written by a model behind any OpenAI-compatible endpoint, falling back per job to the deterministic builder.

Modules: :mod:`.config` (settings and where they came from), :mod:`.client` (the one chat client: the only
``openai`` user; :func:`client_for` builds it for the features and benchmarks that receive one),
:mod:`.prompts` (versioned prompts, schemas, validators), :mod:`.cache` (answers in LMDB ``llmcache``),
:mod:`.spend` (hourly request/token limit), :mod:`.builder` (:class:`LLMIndexBuilder`).
How to point it at OpenAI, vLLM, Ollama or llama.cpp: ``docs/llm.md``.
"""

from __future__ import annotations

import os
from typing import Any

from libraryfs.fs.store import Store
from libraryfs.index.jobs import DeterministicBuilder, IndexBuilder
from libraryfs.llm.config import ConfigError, LLMConfig, load_config

__all__ = ["LLMConfig", "ConfigError", "load_config", "make_builder", "report_line", "client_for"]

NOT_CONFIGURED = (
    "no LLM configured: give --llm-base-url and --llm-model, or set LIBRARYFS_LLM_BASE_URL and "
    "LIBRARYFS_LLM_MODEL (or [llm] in <library>/config.toml; see docs/llm.md)"
)


def client_for(
    libdir: str | os.PathLike[str] | None,
    overrides: dict[str, Any] | None = None,
    *,
    defaults: dict[str, Any] | None = None,
    required: bool = False,
) -> Any:
    """The :class:`~libraryfs.llm.client.ChatClient` of a library's configured endpoint, or None when none
    is configured (base URL and model from flags, environment or ``<libdir>/config.toml``).

    ``overrides``: flag values by :class:`LLMConfig` field (``None`` = not given). ``defaults``: values a
    caller prefers where the user set nothing (source ``default``), e.g. the card solver's longer
    ``timeout_s``. ``required=True`` raises :class:`ConfigError` (one line: what to set) instead of
    returning None; an invalid setting always raises it.
    """
    cfg = load_config(libdir, overrides)
    for field, value in (defaults or {}).items():
        if cfg.sources.get(field) == "default":
            setattr(cfg, field, value)
    if not cfg.enabled:
        if required:
            raise ConfigError(NOT_CONFIGURED)
        return None
    from libraryfs.llm.client import ChatClient  # imports openai only when a model is configured

    return ChatClient(cfg)


def make_builder(
    libdir: str | os.PathLike[str], store: Store, overrides: dict[str, Any] | None = None
) -> IndexBuilder:
    """The index builder for a library: an ``LLMIndexBuilder`` when an endpoint is configured (base URL and
    model from flags, environment or ``<libdir>/config.toml``), else :class:`DeterministicBuilder`.

    ``overrides`` are CLI flag values keyed by :class:`LLMConfig` field (``None`` = not given).
    Raises :class:`ConfigError` when a setting is invalid.
    """
    cfg = load_config(libdir, overrides)
    if not cfg.enabled:
        return DeterministicBuilder()
    from libraryfs.llm.builder import LLMIndexBuilder  # imports openai only when a model is configured

    return LLMIndexBuilder(cfg, store)


def report_line(status: dict) -> str:
    """One line for the end of ``libraryfs index --llm`` from a builder's :meth:`status` dict, e.g.
    ``"llm:gpt-4o-mini: 12 requests, 34,567 tokens, 120 cache hits, 0 fallbacks"``."""
    name = status.get("builder", "deterministic")
    if name == "deterministic" or "requests" not in status:
        return f"{name}: no LLM configured (set LIBRARYFS_LLM_BASE_URL and LIBRARYFS_LLM_MODEL), 0 requests"
    line = (
        f"{name}: {status.get('requests', 0):,} requests, {status.get('tokens', 0):,} tokens, "
        f"{status.get('cache_hits', 0):,} cache hits, {status.get('fallbacks', 0):,} fallbacks"
    )
    if status.get("invalid_answers"):
        line += f", {status['invalid_answers']:,} invalid answers"
    if status.get("pause_reason"):
        line += f"; paused ({status['pause_reason']})"
    err = status.get("last_error")
    if err and (status.get("fallbacks") or status.get("pause_reason")):
        line += f"; last error [{err.get('job')}] {err.get('kind')}: {str(err.get('message', ''))[:100]}"
    return line
