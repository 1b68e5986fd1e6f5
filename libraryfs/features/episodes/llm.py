"""LLM extraction of a unit from a free-text step — the only module of ``episodes`` that imports ``openai``.

Same settings, cache and fallback rules as the indexer: the endpoint and model come from
:func:`libraryfs.llm.config.load_config` (``LIBRARYFS_LLM_BASE_URL``, ``LIBRARYFS_LLM_MODEL``, key from
``LIBRARYFS_LLM_API_KEY``/``OPENAI_API_KEY``, or ``<libdir>/config.toml``); answers are cached by content
hash in the ``llmcache`` DB (:class:`libraryfs.llm.cache.AnswerCache`, job ``episode_unit``), so an
unchanged step never costs a second call; any failure — HTTP error, timeout, an answer that is not the
JSON object asked for — returns None and the builder falls back to deterministic extraction
(:func:`libraryfs.features.episodes.units.extract_text`). Errors are counted in :attr:`LLMExtractor.errors`.

When the shared client (:class:`libraryfs.llm.client.ChatClient`) settles, this module should call it
instead of ``openai`` directly.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from libraryfs.features.episodes.units import Unit
from libraryfs.fs.store import Store

log = logging.getLogger(__name__)

JOB = "episode_unit"
PROMPT_VERSION = "1"
SYSTEM = (
    "You turn one step of an agent's episode log into a JSON object with the keys: "
    '"action" (string), "objects" (list of salient object names near the agent), "events" (list of event '
    'types such as collect_wood, place_table, eat_cow), "relations" (list of [subject, relation, object]), '
    '"inventory" (object item -> count), "location" (a place name), "summary" (at most 20 words). '
    "Use lower_snake_case names. Answer with the JSON object only."
)


class LLMExtractor:
    """Callable ``(t, text) -> Unit | None`` over an OpenAI-compatible endpoint, cached in ``store``."""

    def __init__(
        self, base_url: str, model: str, api_key: str | None, store: Store | None, timeout_s: float = 60.0
    ) -> None:
        import openai

        self.model = model
        self.client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "none", timeout=timeout_s, max_retries=1
        )
        self.cache = None
        if store is not None:
            from libraryfs.llm.cache import AnswerCache

            self.cache = AnswerCache(store, model)
        self.calls = 0
        self.errors = 0

    def _ask(self, text: str) -> dict[str, Any] | None:
        import openai

        self.calls += 1
        try:
            resp = self.client.chat.completions.create(
                model=self.model,
                temperature=0,
                messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
                response_format={"type": "json_object"},
            )
            content = resp.choices[0].message.content or ""
            s = content.strip()
            if s.startswith("```"):
                s = s.strip("`").removeprefix("json").strip()
            ans = json.loads(s)
            return ans if isinstance(ans, dict) else None
        except (openai.OpenAIError, json.JSONDecodeError, IndexError, AttributeError) as e:
            self.errors += 1
            log.warning("episode unit extraction failed: %s", str(e)[:160])
            return None

    def __call__(self, t: int, text: str) -> Unit | None:
        from libraryfs.llm.cache import content_key

        key = content_key(text)
        ans = self.cache.get_many(JOB, PROMPT_VERSION, [key])[0] if self.cache else None
        if ans is None:
            ans = self._ask(text)
            if ans is None:
                return None
            if self.cache:
                self.cache.put_many(JOB, PROMPT_VERSION, [(key, ans)])
        try:
            return Unit(
                t=t,
                action=str(ans.get("action", "")),
                objects=sorted({str(o) for o in ans.get("objects", [])}),
                events=[str(e) for e in ans.get("events", [])],
                relations=[
                    [str(x) for x in r][:3]
                    for r in ans.get("relations", [])
                    if isinstance(r, list) and len(r) >= 3
                ],
                inventory={str(k): int(v) for k, v in (ans.get("inventory") or {}).items() if int(v) > 0},
                location=str(ans.get("location", "") or ""),
                summary=str(ans.get("summary", ""))[:200],
                gained=None,
                lost=None,
                source="llm",
            )
        except (TypeError, ValueError, AttributeError):
            self.errors += 1
            return None


def make_extractor(libdir: str | None, store: Store | None) -> LLMExtractor | None:
    """An :class:`LLMExtractor` when an endpoint and model are configured, else None."""
    from libraryfs.llm.config import load_config

    cfg = load_config(libdir)
    if not (cfg.base_url and cfg.model):
        return None
    return LLMExtractor(cfg.base_url, cfg.model, cfg.api_key, store, cfg.timeout_s)
