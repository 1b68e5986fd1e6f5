"""LLM answers cached in the library's LMDB (named DB ``llmcache``), surviving restarts.

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

from libraryfs.fs.store import Store

DB_NAME = b"llmcache"
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
    """LMDB key of one cached answer."""
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
        self.db = store.open_db(DB_NAME)
        self.hits = 0
        self.misses = 0

    def get_many(self, job: str, prompt_version: str, keys: list[str]) -> list[Any | None]:
        """Cached answers for ``keys`` (``None`` where absent), in one read transaction."""
        out: list[Any | None] = []
        with self.store.read() as t:
            for k in keys:
                raw = t.t.get(cache_key(job, prompt_version, self.model, k), db=self.db)
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
            for k, v in recs:
                t.t.put(k, v, db=self.db)

        self.store.run_write(put)

    def count(self, job: str | None = None) -> int:
        """Number of cached answers (of ``job`` when given)."""
        n = 0
        prefix = job.encode() + b"\x00" if job else b""
        with self.store.read() as t:
            cur = t.t.cursor(db=self.db)
            if cur.set_range(prefix or b"\x01"):
                for k in cur.iternext(keys=True, values=False):
                    if prefix and not k.startswith(prefix):
                        break
                    n += 1
        return n

    def load_spend(self) -> list[list[float]]:
        """The spending window saved by :meth:`save_spend` (``[]`` if none)."""
        with self.store.read() as t:
            raw = t.t.get(_SPEND_KEY, db=self.db)
        try:
            return json.loads(raw) if raw else []
        except ValueError:
            return []

    def save_spend(self, events: list[list[float]]) -> None:
        """Persist the spending window (``[[time_s, tokens], ...]``)."""
        data = json.dumps(events).encode()
        self.store.run_write(lambda t: t.t.put(_SPEND_KEY, data, db=self.db))
