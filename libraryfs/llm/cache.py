"""LLM answers cached in the library's store (extension table ``llmcache``), surviving restarts.

Key: ``job + 0x00 + sha256(job, prompt version, model, content key)`` (41–50 bytes, far under LMDB's 511).
The content key is the entry's content hash for summaries, and a hash of exactly what the prompt showed
for the other jobs, so any change of content, prompt version or model misses the cache.
Value: JSON ``{"v": answer, "t": unix time s}``. The special key ``0x00 spend`` keeps the spending
window (:mod:`libraryfs.llm.spend`) across restarts.

Reads take one read transaction per batch and writes one write transaction per batch; neither is ever
held across a network call (the builder calls the model between them).
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from libraryfs.fs import schema as S
from libraryfs.fs.backend import prefix_end
from libraryfs.fs.store import Store

DB_NAME = S.DB_LLMCACHE
_SPEND_KEY = b"\x00spend"


def content_key(*parts: str) -> str:
    """sha256 hex of ``parts`` joined unambiguously: the content key of a prompt's input."""
    h = hashlib.sha256()
    for p in parts:
        b = p.encode("utf-8", "surrogateescape")
        h.update(len(b).to_bytes(8, "big"))
        h.update(b)
    return h.hexdigest()


def cache_key(job: str, prompt_version: str, model: str, key: str) -> bytes:
    """Key of one cached answer in the ``llmcache`` table."""
    return (
        job.encode()
        + b"\x00"
        + hashlib.sha256(
            "\x00".join((job, prompt_version, model, key)).encode("utf-8", "surrogateescape")
        ).digest()
    )


class AnswerCache:
    """Cached answers of one model in ``store``'s ``llmcache`` DB. ``hits``/``misses`` count lookups."""

    def __init__(self, store: Store, model: str) -> None:
        self.store = store
        self.model = model
        store.open_table(DB_NAME)
        self.hits = 0
        self.misses = 0

    def get_many(self, job: str, prompt_version: str, keys: list[str]) -> list[Any | None]:
        """Cached answers for ``keys`` (``None`` where absent), in one read transaction."""
        out: list[Any | None] = []
        with self.store.read() as t:
            for k in keys:
                raw = t.kv.get(DB_NAME, cache_key(job, prompt_version, self.model, k))
                if raw is None:
                    out.append(None)
                    continue
                try:
                    out.append(json.loads(raw)["v"])
                except (ValueError, KeyError, TypeError):
                    out.append(None)  # a damaged record is a miss (it is overwritten later)
        n_hit = sum(v is not None for v in out)
        self.hits += n_hit
        self.misses += len(out) - n_hit
        return out

    def put_many(self, job: str, prompt_version: str, items: list[tuple[str, Any]]) -> None:
        """Store ``(content key, answer)`` pairs in one write transaction (answers must be JSON-able)."""
        if not items:
            return
        now = time.time()
        recs = [
            (
                cache_key(job, prompt_version, self.model, k),
                json.dumps({"v": v, "t": now}, ensure_ascii=False).encode(),
            )
            for k, v in items
        ]

        def put(t: Any) -> None:
            """Write every cached answer record into the cache table in this write transaction."""
            for k, v in recs:
                t.kv.put(DB_NAME, k, v)

        self.store.run_write(put)

    def count(self, job: str | None = None) -> int:
        """Number of cached answers (of ``job`` when given)."""
        prefix = job.encode() + b"\x00" if job else b""
        with self.store.read() as t:  # without a job: every key from 0x01 on (0x00 spend is not an answer)
            rows = t.kv.range(
                DB_NAME, prefix or b"\x01", prefix_end(prefix) if prefix else None, keys_only=True
            )
            return sum(1 for _ in rows)

    def load_spend(self) -> list[list[float]]:
        """The spending window saved by :meth:`save_spend` (``[]`` if none)."""
        with self.store.read() as t:
            raw = t.kv.get(DB_NAME, _SPEND_KEY)
        try:
            return json.loads(raw) if raw else []
        except ValueError:
            return []

    def save_spend(self, events: list[list[float]]) -> None:
        """Persist the spending window (``[[time_s, tokens], ...]``)."""
        data = json.dumps(events).encode()
        self.store.run_write(lambda t: t.kv.put(DB_NAME, _SPEND_KEY, data))
