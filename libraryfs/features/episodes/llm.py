"""LLM extraction of a unit from a free-text step, over the shared chat client it is given.

Same settings, client, cache and fallback rules as the indexer: the caller builds the
:class:`~libraryfs.llm.client.ChatClient` with :func:`libraryfs.llm.client_for` (``LIBRARYFS_LLM_BASE_URL``,
``LIBRARYFS_LLM_MODEL``, key from ``LIBRARYFS_LLM_API_KEY``/``OPENAI_API_KEY``, or ``<libdir>/config.toml``);
answers are cached by content hash in the ``llmcache`` DB (:class:`libraryfs.llm.cache.AnswerCache`, job
``episode_unit``), so an unchanged step never costs a second call; any failure — HTTP error after the
client's retries, timeout, an answer that is not a JSON object — returns None and the builder falls back to
deterministic extraction (:func:`libraryfs.features.episodes.units.extract_text`). Errors are counted in
:attr:`LLMExtractor.errors`.
"""

from __future__ import annotations

import logging
from typing import Any

from libraryfs.features.episodes.units import Unit
from libraryfs.fs.store import Store
from libraryfs.llm.client import ChatClient, LLMError, SpendLimitReached
from libraryfs.llm.prompts import Job

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


#: The answer's shape (not strict-expressible: ``inventory`` has free keys), so the job asks for json_object.
JOB_SPEC = Job(
    JOB,
    int(PROMPT_VERSION),
    SYSTEM,
    {
        "type": "object",
        "properties": {
            "action": {"type": "string"},
            "objects": {"type": "array", "items": {"type": "string"}},
            "events": {"type": "array", "items": {"type": "string"}},
            "relations": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
            "inventory": {"type": "object", "additionalProperties": {"type": "integer"}},
            "location": {"type": "string"},
            "summary": {"type": "string"},
        },
    },
)
MAX_OUTPUT_TOKENS = 400  #: bound of one extraction answer, tokens


class LLMExtractor:
    """Callable ``(t, text) -> Unit | None`` over the shared chat ``client``, answers cached in ``store``."""

    def __init__(self, client: ChatClient, store: Store | None) -> None:
        self.client = client
        self.model = client.config.model
        self.cache = None
        if store is not None:
            from libraryfs.llm.cache import AnswerCache

            self.cache = AnswerCache(store, str(self.model))
        self.calls = 0
        self.errors = 0

    def _ask(self, text: str) -> dict[str, Any] | None:
        self.calls += 1
        try:
            ans, _usage = self.client.complete_json(JOB_SPEC, text, MAX_OUTPUT_TOKENS, mode="json_object")
            return ans
        except (LLMError, SpendLimitReached) as e:
            self.errors += 1
            log.warning("episode unit extraction failed: %s", str(e)[:160])
            return None

    def __call__(self, t: int, text: str) -> Unit | None:
        """The :class:`Unit` of step ``t`` extracted from its observation ``text`` (cached by content), or
        None when the model failed or answered something unusable (counted in :attr:`errors`)."""
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
                inventory=(
                    {str(k): int(v) for k, v in ans["inventory"].items() if int(v) > 0}
                    if isinstance(ans.get("inventory"), dict)
                    else None
                ),
                vitals=None,
                locations={"place": str(ans["location"])} if ans.get("location") else {},
                summary=str(ans.get("summary", ""))[:200],
                inventory_delta=None,
                vitals_delta=None,
                gained=None,
                lost=None,
                source="llm",
            )
        except (TypeError, ValueError, AttributeError):
            self.errors += 1
            return None


def make_extractor(client: ChatClient | None, store: Store | None) -> LLMExtractor | None:
    """An :class:`LLMExtractor` over ``client`` (:func:`libraryfs.llm.client_for`), None without one."""
    return LLMExtractor(client, store) if client is not None else None
