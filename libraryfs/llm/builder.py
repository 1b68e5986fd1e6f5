"""``LLMIndexBuilder``: the index jobs of ARCHITECTURE §4 answered by a model, with per-job fallback.

Each call (``summarize``, ``describe``, ``file``, ``group``) goes:

1. **cache** — one read transaction looks up every input by (content key, job, prompt version, model);
2. **batch** — the misses are packed several per request (``batch_size`` items, ``batch_max_tokens``
   prompt tokens) and sent, at most ``max_concurrency`` requests at once, with no transaction open;
3. **validate** — each answer is checked item by item (:mod:`libraryfs.llm.prompts`); items missing or
   invalid are asked again, at most ``max_attempts`` answers per batch;
4. **store** — valid answers are written to the cache in one write transaction;
5. **fall back** — whatever is still missing gets :class:`~libraryfs.index.jobs.DeterministicBuilder`'s
   result for that job, and the reason is counted for :meth:`status`.

When the endpoint is unavailable (after the client's bounded retries) or the spending limit is reached,
calls pause for a backoff (doubling from ``down_backoff_s`` up to 15 minutes, or until the Retry-After /
spend window says): in the pause every job answers from the cache or the fallback at once, so the indexer
never waits on a dead endpoint, and the first call after the pause tries again.

``last_fallbacks`` lists, after every call, the input positions that got a fallback result: the indexer
should treat those results as provisional and ask again on a later pass (cached answers cost nothing).
The model only ever writes text for the index; it never decides what a lookup returns (PAPERS.md §1).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from libraryfs.fs.store import Store
from libraryfs.index.jobs import DeterministicBuilder, EntryDoc, Group, SectionDoc
from libraryfs.llm import prompts as P
from libraryfs.llm import textmode as T
from libraryfs.llm.asking import Asking, Question
from libraryfs.llm.cache import AnswerCache, content_key
from libraryfs.llm.client import ChatClient
from libraryfs.llm.config import LLMConfig
from libraryfs.llm.deferred import Deferred, Unit

MAX_SECTIONS_IN_FILE_PROMPT = 200  #: sections listed when filing (the rest cannot be chosen by the model)

__all__ = ["LLMIndexBuilder", "count_bucket"]


class LLMIndexBuilder(Asking):
    """An :class:`~libraryfs.index.jobs.IndexBuilder` backed by an OpenAI-compatible endpoint.

    ``config`` must be enabled (base URL and model); ``store`` holds the ``llmcache`` DB. Thread-safe for
    one caller at a time (the indexer); requests inside one call run concurrently.
    """

    def __init__(self, config: LLMConfig, store: Store, fallback: DeterministicBuilder | None = None) -> None:
        if not config.enabled:
            raise ValueError("LLMIndexBuilder needs base_url and model")
        from libraryfs.llm.spend import SpendLimiter

        self.config = config
        self.name = f"llm:{config.model}"
        self.fallback = fallback or DeterministicBuilder()
        self.cache = AnswerCache(store, str(config.model))
        self.limiter = SpendLimiter(config.max_requests_per_hour, config.max_tokens_per_hour)
        self.limiter.load(self.cache.load_spend())
        self.client = ChatClient(config, self.limiter)
        self._pool = ThreadPoolExecutor(max_workers=config.max_concurrency, thread_name_prefix="llm")
        self._lock = threading.Lock()
        self._paused_until = 0.0
        self._pause_reason = ""
        self._next_pause_s = config.down_backoff_s
        self.last_fallbacks: list[int] = []
        self.jobs: dict[str, dict[str, int]] = {
            j: {"items": 0, "cache_hits": 0, "answered": 0, "fallbacks": 0, "invalid_answers": 0}
            for j in P.JOBS
        }
        self.errors: dict[str, int] = {}
        self.last_error: dict[str, Any] | None = None
        self.health = self.client.health
        self.text_mode = config.index_answers == "text"
        self.deferred: Deferred | None = None
        self.last_deferred: list[int] = []
        self._deferred_items: list[int] = []
        self._tags = 0
        self.new_sections = 0
        self._saved_spend: list[list[float]] | None = None  # the spending window as last written

    def defer(self, on_answers: Callable[[], None] = lambda: None) -> Deferred:
        """Ask the model in the background from now on (:mod:`libraryfs.llm.deferred`): every job answers at
        once from the cache or the fallback; ``last_deferred`` lists the inputs whose model answer is on its
        way (``on_answers`` is called when some arrived: ask again, the cache has them)."""
        if self.deferred is None:
            self.deferred = Deferred(lambda: self._paused_until, on_answers)
        return self.deferred

    def is_paused(self) -> bool:
        """True while calls answer from the cache and the fallback only (endpoint failing, spend limit)."""
        return self._paused()

    # -- the four jobs ----------------------------------------------------------------------------------
    def summarize(self, docs: list[EntryDoc]) -> list[str]:
        """One line (≤ 20 words) per entry; binary and empty entries get the deterministic facts."""
        asks = [i for i, d in enumerate(docs) if not d.is_binary and d.text.strip()]
        items = [
            (
                content_key(docs[i].content_hash),
                {
                    "name": docs[i].name,
                    "path": docs[i].path,
                    "size_bytes": docs[i].size_bytes,
                    "text": P.excerpt(docs[i].text),
                },
            )
            for i in asks
        ]
        ask = Question(P.SUMMARIZE, P.valid_summaries, lambda b: P.user_message("summarize", entries=b), 60)
        got = self._run(ask, items)
        return self._merge(docs, asks, got, self.fallback.summarize, "summarize")

    def describe(self, sections: list[SectionDoc]) -> list[str]:
        """One line per section from its entries' names and summary lines."""
        asks = [i for i, s in enumerate(sections) if s.entries]
        items = []
        for i in asks:
            s = sections[i]
            shown = s.entries[: P.SECTION_LINES_IN_PROMPT]
            # the count is keyed by bucket: one more entry in a big section is not worth a request
            key = content_key(
                s.path, str(count_bucket(len(s.entries))), *(f"{n}\t{line}" for n, line in shown)
            )
            items.append(
                (
                    key,
                    {
                        "path": s.path or "(library root)",
                        "entry_count": len(s.entries),
                        "entries": [{"name": n, "summary": line} for n, line in shown],
                    },
                )
            )
        ask = Question(P.DESCRIBE, P.valid_descriptions, lambda b: P.user_message("describe", sections=b), 60)
        got = self._run(ask, items, tag=("describe", *(sections[i].path for i in asks)))
        return self._merge(sections, asks, got, self.fallback.describe, "describe")

    def file(self, docs: list[EntryDoc], sections: list[SectionDoc]) -> list[str]:
        """Target section path per inbox entry: an existing section's path or a new safe name."""
        listed = [s for s in sections if s.path][:MAX_SECTIONS_IN_FILE_PROMPT]
        paths = [s.path for s in listed]
        menu = [{"path": s.path, "description": s.description or f"{len(s.entries)} entries"} for s in listed]
        fingerprint = content_key(*(f"{m['path']}\t{m['description']}" for m in menu))
        items = []
        for d in docs:  # inbox docs may come without a content hash: key on what the prompt shows
            ex = P.excerpt(d.text, 1000)
            items.append(
                (
                    content_key(d.content_hash or content_key(ex), d.name, fingerprint),
                    {"name": d.name, "text": ex},
                )
            )
        asks = list(range(len(docs)))
        ask = Question(
            P.FILE,
            lambda ans, ids: P.valid_filings(ans, ids, paths),
            lambda b: P.user_message("file", sections=menu, entries=b),
            out_tokens_per_item=40,
            sections=paths,
        )
        got = self._run(ask, items, batch_key=("file", fingerprint))
        out = self._merge(docs, asks, got, lambda ds: self.fallback.file(ds, sections), "file")
        with self._lock:
            self.new_sections += sum(1 for i, v in got.items() if v not in paths)
        return out

    def group(self, section: SectionDoc, max_items: int) -> list[Group] | None:
        """Named groups covering every entry exactly once (each ≤ ``max_items``), or ``None``.

        ``None`` (contiguous name ranges) when the section has fewer than 2 or more than
        :data:`~libraryfs.llm.prompts.GROUP_MAX_ENTRIES` entries, or the model gave no valid grouping.
        """
        n = len(section.entries)
        self.last_fallbacks, self.last_deferred = [], []
        if n < 2 or n > P.GROUP_MAX_ENTRIES or max_items < 1 or self.text_mode:
            return None  # a small model asked in plain text cannot group: name ranges
        key = content_key(section.path, str(max_items), *(f"{nm}\t{ln}" for nm, ln in section.entries))
        entries = [{"id": i + 1, "name": nm, "summary": ln} for i, (nm, ln) in enumerate(section.entries)]

        def validate(ans: Any, ids: set[int]) -> dict[int, Any]:
            """The model's grouping answer as ``{1: [[title, [names]], …]}``; ValueError/KeyError if malformed."""
            return {1: [[t, g] for t, g in P.valid_groups(ans, n, max_items)]}

        ask = Question(
            P.GROUP,
            validate,
            lambda b: P.user_message(
                "group", path=section.path or "(library root)", max_items=max_items, entries=entries
            ),
            out_tokens_per_item=8 * n + 40 * (n // max_items + 2),
            whole=True,
        )
        got = self._run(ask, [(key, {})], tag=("group", section.path))
        self.last_deferred = [0] if self._deferred_items else []
        if 0 not in got:
            self.last_fallbacks = [0]
            with self._lock:
                self.jobs["group"]["fallbacks"] += 1
            return None
        try:  # cached answers are validated again against today's entries
            checked = P.valid_groups({"groups": [{"title": t, "ids": g} for t, g in got[0]]}, n, max_items)
        except P.InvalidAnswer:
            return None
        names = [nm for nm, _ in section.entries]
        return [Group(title=t, names=[names[i - 1] for i in ids]) for t, ids in checked]

    # -- machinery ----------------------------------------------------------------------------------------
    def _merge(
        self,
        inputs: list[Any],
        asks: list[int],
        got: dict[int, Any],
        fallback: Callable[[list[Any]], list[str]],
        job: str,
    ) -> list[str]:
        """Model answers where valid, the fallback's result elsewhere (computed only where needed)."""
        out: list[str | None] = [None] * len(inputs)
        for j, i in enumerate(asks):
            if j in got:  # cached answers too are made safe lines (older validators were laxer)
                out[i] = got[j] if job == "file" else P.model_line(str(got[j]), 10_000)
        missing = [i for i, v in enumerate(out) if v is None]
        self.last_fallbacks = [i for i in missing if i in set(asks)]
        self.last_deferred = [asks[j] for j in self._deferred_items]
        if missing:
            for i, v in zip(missing, fallback([inputs[i] for i in missing]), strict=True):
                out[i] = v
        with self._lock:
            self.jobs[job]["fallbacks"] += len(self.last_fallbacks)
        return [v or "" for v in out]

    def _version(self, job: P.Job) -> str:
        """The prompt version of ``job`` as asked (plain-text answers are cached apart from JSON ones)."""
        if self.text_mode and job.name in T.JOBS:
            return T.JOBS[job.name].prompt_version
        return job.prompt_version

    def _run(
        self,
        q: Question,
        items: list[tuple[str, dict]],
        tag: tuple | None = None,
        batch_key: tuple | None = None,
    ) -> dict[int, Any]:
        """Answers ``{position in items: value}`` to question ``q`` for the items the cache or the model answered validly.

        With :attr:`deferred` set, the misses go to the background queue instead (``_deferred_items``: their
        positions; while the builder is paused they wait for the pause to end)."""
        job = q.job
        stats = self.jobs[job.name]
        self._deferred_items = []
        with self._lock:
            stats["items"] += len(items)
        if not items:
            return {}
        keys = [k for k, _ in items]
        pv = self._version(job)
        if self.deferred is not None:
            arrived = self.deferred.take_arrived(pv, keys)
            if arrived:
                self.cache.put_many(job.name, pv, [(keys[i], v) for i, v in arrived.items()])
        cached = self.cache.get_many(job.name, pv, keys)
        got: dict[int, Any] = {i: v for i, v in enumerate(cached) if v is not None}
        with self._lock:
            stats["cache_hits"] += len(got)
        # identical content asked once: key -> positions
        by_key: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            if i not in got:
                by_key.setdefault(k, []).append(i)
        todo = [(pos[0], items[pos[0]][1]) for pos in by_key.values()]
        if not todo:
            return got

        def ask(batch_items: list[tuple[str, dict]]) -> dict[int, Any]:
            """Ask the model about ``[(content key, payload)]`` now (here, or in the background worker):
            ``{position in batch_items: valid answer}``; never inside a store transaction."""
            return self._fetch(q, list(enumerate(it for _k, it in batch_items)))

        if self.deferred is not None:
            self._tags += 1
            unit = Unit(
                job.name,
                pv,
                [(keys[p], it) for p, it in todo],
                ask,
                tag or (job.name, self._tags),
                batch_key or ((job.name, tag) if q.whole else (job.name,)),
            )
            waiting = self.deferred.submit(unit)  # kept through a pause: asked when it ends
            self._deferred_items = [j for w in waiting for j in by_key[keys[todo[w][0]]]]
            self._save_spend()  # the worker's requests since the last call
            return got
        if self._paused():
            return got
        fresh = self._fetch(q, todo)
        if fresh:
            self.cache.put_many(job.name, pv, [(keys[i], v) for i, v in fresh.items()])
        for i, v in fresh.items():
            for j in by_key[keys[i]]:
                got[j] = v
        self._save_spend()
        return got

    def _save_spend(self) -> None:
        """Persist the spending window (:meth:`AnswerCache.save_spend`, one write transaction) only when it
        changed since the last write: most calls spend nothing (cache hits, queued items), and a write per
        job call was an LMDB commit on every TOC a pass renders."""
        events = self.limiter.export()
        if events != self._saved_spend:
            self.cache.save_spend(events)
            self._saved_spend = events

    # -- status ---------------------------------------------------------------------------------------------
    def status(self) -> dict:
        """Facts for ``status.json["builder"]``: model, requests, tokens, cache hits, fallbacks, errors, spend.

        Shape: ``{"builder", "model", "base_url", "structured_output", "index_answers", "requests", "prompt_tokens",
        "completion_tokens", "tokens", "cache_hits", "cache_misses", "fallbacks", "invalid_answers",
        "new_sections", "jobs": {job: {...}}, "errors": {kind: n}, "last_error", "paused_until",
        "pause_reason", "spend": {...}, "endpoint": {...}, "background": {...} | None}`` (times are Unix
        seconds; tokens as reported by the server; ``endpoint``: :meth:`~libraryfs.llm.health.EndpointHealth.
        snapshot` and the pause; ``background``: :meth:`~libraryfs.llm.deferred.Deferred.status`).
        """
        c = dict(self.client.counters)
        with self._lock:
            jobs = {j: dict(v) for j, v in self.jobs.items()}
            paused = self._paused_until if self._paused() else None
            return {
                "builder": self.name,
                "model": self.config.model,
                "base_url": self.config.base_url,
                "structured_output": self.client.mode,
                "index_answers": "text" if self.text_mode else "json",
                "requests": c["requests"],
                "prompt_tokens": c["prompt_tokens"],
                "completion_tokens": c["completion_tokens"],
                "tokens": c["prompt_tokens"] + c["completion_tokens"],
                "http_errors": c["http_errors"],
                "transport_retries": c["transport_retries"],
                "cache_hits": self.cache.hits,
                "cache_misses": self.cache.misses,
                "fallbacks": sum(v["fallbacks"] for v in jobs.values()),
                "invalid_answers": sum(v["invalid_answers"] for v in jobs.values()),
                "new_sections": self.new_sections,
                "jobs": jobs,
                "errors": dict(self.errors),
                "last_error": self.last_error,
                "paused_until": paused,
                "pause_reason": self._pause_reason if paused else None,
                "spend": self.limiter.snapshot(),
                "endpoint": {
                    **self.health.snapshot(),
                    "paused_until": paused,
                    "pause_reason": self._pause_reason if paused else None,
                },
                "background": self.deferred.status() if self.deferred is not None else None,
            }

    def close(self) -> None:
        """Stop the background worker and the request threads (synchronous mode: in-flight requests finish
        first; background mode: they are abandoned, their answers were only ever provisional)."""
        if self.deferred is not None:  # a background request never holds up the daemon's stop
            self.deferred.close()
            self._pool.shutdown(wait=False, cancel_futures=True)
            return
        self._pool.shutdown(wait=True)


def count_bucket(n: int) -> int:
    """``n`` rounded down to two significant digits (``123`` → ``120``; below 50 exact): the entry count a
    section description is keyed by, so one more entry in a big section costs no request."""
    if n < 50:
        return n
    scale = 10 ** (len(str(n)) - 2)
    return n // scale * scale
