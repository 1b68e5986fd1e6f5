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

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from libraryfs.fs.store import Store
from libraryfs.index.jobs import DeterministicBuilder, EntryDoc, Group, SectionDoc
from libraryfs.index.tokens import count_tokens
from libraryfs.llm import prompts as P
from libraryfs.llm.cache import AnswerCache, content_key
from libraryfs.llm.client import BadAnswer, ChatClient, LLMError, SpendLimitReached, Unavailable
from libraryfs.llm.config import LLMConfig

MAX_PAUSE_S = 900.0  #: longest pause after repeated endpoint failures, seconds
ERROR_LOG_INTERVAL_S = 300.0  #: an error kind is logged at most once per this many seconds
MAX_SECTIONS_IN_FILE_PROMPT = 200  #: sections listed when filing (the rest cannot be chosen by the model)

Validator = Callable[[Any, set[int]], dict[int, Any]]
log = logging.getLogger("libraryfs.llm")


class LLMIndexBuilder:
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
        self._logged: dict[str, float] = {}  # error kind → when it was last logged
        self.new_sections = 0

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
        got = self._run(
            P.SUMMARIZE,
            items,
            P.valid_summaries,
            lambda batch: P.user_message("summarize", entries=batch),
            out_tokens_per_item=60,
        )
        return self._merge(docs, asks, got, self.fallback.summarize, "summarize")

    def describe(self, sections: list[SectionDoc]) -> list[str]:
        """One line per section from its entries' names and summary lines."""
        asks = [i for i, s in enumerate(sections) if s.entries]
        items = []
        for i in asks:
            s = sections[i]
            shown = s.entries[: P.SECTION_LINES_IN_PROMPT]
            key = content_key(s.path, str(len(s.entries)), *(f"{n}\t{line}" for n, line in shown))
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
        got = self._run(
            P.DESCRIBE,
            items,
            P.valid_descriptions,
            lambda batch: P.user_message("describe", sections=batch),
            out_tokens_per_item=60,
        )
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
        got = self._run(
            P.FILE,
            items,
            lambda ans, ids: P.valid_filings(ans, ids, paths),
            lambda batch: P.user_message("file", sections=menu, entries=batch),
            out_tokens_per_item=40,
        )
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
        self.last_fallbacks = []
        if n < 2 or n > P.GROUP_MAX_ENTRIES or max_items < 1:
            return None
        key = content_key(section.path, str(max_items), *(f"{nm}\t{ln}" for nm, ln in section.entries))
        entries = [{"id": i + 1, "name": nm, "summary": ln} for i, (nm, ln) in enumerate(section.entries)]

        def validate(ans: Any, ids: set[int]) -> dict[int, Any]:
            """The model's grouping answer as ``{1: [[title, [names]], …]}``; ValueError/KeyError if malformed."""
            return {1: [[t, g] for t, g in P.valid_groups(ans, n, max_items)]}

        got = self._run(
            P.GROUP,
            [(key, {})],
            validate,
            lambda batch: P.user_message(
                "group", path=section.path or "(library root)", max_items=max_items, entries=entries
            ),
            out_tokens_per_item=8 * n + 40 * (n // max_items + 2),
            whole=True,
        )
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
            if j in got:
                out[i] = got[j]
        missing = [i for i, v in enumerate(out) if v is None]
        self.last_fallbacks = [i for i in missing if i in set(asks)]
        if missing:
            for i, v in zip(missing, fallback([inputs[i] for i in missing]), strict=True):
                out[i] = v
        with self._lock:
            self.jobs[job]["fallbacks"] += len(self.last_fallbacks)
        return [v or "" for v in out]

    def _paused(self) -> bool:
        return time.time() < self._paused_until

    def _pause(self, e: LLMError | SpendLimitReached, job: str) -> None:
        now = time.time()
        with self._lock:
            if isinstance(e, SpendLimitReached):
                until, reason = e.resumes_at, "spend_limit"
            else:
                wait = (
                    max(self._next_pause_s, e.retry_after_s or 0.0)
                    if isinstance(e, Unavailable)
                    else self._next_pause_s
                )
                until, reason = now + wait, getattr(e, "kind", "error")
                self._next_pause_s = min(self._next_pause_s * 2, MAX_PAUSE_S)
            self._paused_until = max(self._paused_until, until)
            self._pause_reason = reason
        self._error(job, e)

    def _error(self, job: str, e: BaseException) -> None:
        """Count and record an error (``status()["last_error"]``, shown by ``libraryfs status``) and log it:
        the first of its kind, then at most once per :data:`ERROR_LOG_INTERVAL_S` per kind."""
        kind = "spend_limit" if isinstance(e, SpendLimitReached) else getattr(e, "kind", type(e).__name__)
        now = time.time()
        message = " ".join(str(e).split())[:300]
        with self._lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1
            self.last_error = {"time": now, "job": job, "kind": kind, "message": message}
            due = now - self._logged.get(kind, 0.0) >= ERROR_LOG_INTERVAL_S
            if due:
                self._logged[kind] = now
        if due:
            log.warning(
                "LLM endpoint %s (model %s): %s in the %s job: %s; deterministic results are used meanwhile",
                self.config.base_url,
                self.config.model,
                kind,
                job,
                message,
            )

    def _batches(self, items: list[tuple[int, dict]], whole: bool) -> list[list[tuple[int, dict]]]:
        if whole:
            return [items]
        out: list[list[tuple[int, dict]]] = []
        cur: list[tuple[int, dict]] = []
        cur_tokens = 0
        for it in items:
            t = count_tokens(json.dumps(it[1], ensure_ascii=False))
            if cur and (len(cur) >= self.config.batch_size or cur_tokens + t > self.config.batch_max_tokens):
                out.append(cur)
                cur, cur_tokens = [], 0
            cur.append(it)
            cur_tokens += t
        if cur:
            out.append(cur)
        return out

    def _run(
        self,
        job: P.Job,
        items: list[tuple[str, dict]],
        validate: Validator,
        make_user: Callable[[list[dict]], str],
        out_tokens_per_item: int,
        whole: bool = False,
    ) -> dict[int, Any]:
        """Answers ``{position in items: value}`` for the items the cache or the model answered validly."""
        stats = self.jobs[job.name]
        with self._lock:
            stats["items"] += len(items)
        if not items:
            return {}
        keys = [k for k, _ in items]
        cached = self.cache.get_many(job.name, job.prompt_version, keys)
        got: dict[int, Any] = {i: v for i, v in enumerate(cached) if v is not None}
        with self._lock:
            stats["cache_hits"] += len(got)
        # identical content asked once: key -> positions
        by_key: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            if i not in got:
                by_key.setdefault(k, []).append(i)
        todo = [(pos[0], items[pos[0]][1]) for pos in by_key.values()]
        if not todo or self._paused():
            return got
        batches = self._batches(todo, whole)
        futures = [
            self._pool.submit(self._ask, job, b, validate, make_user, out_tokens_per_item) for b in batches
        ]
        fresh: dict[int, Any] = {}
        for f in futures:
            fresh.update(f.result())
        if fresh:
            self.cache.put_many(job.name, job.prompt_version, [(keys[i], v) for i, v in fresh.items()])
            with self._lock:
                stats["answered"] += len(fresh)
                self._next_pause_s = self.config.down_backoff_s
        for i, v in fresh.items():
            for j in by_key[keys[i]]:
                got[j] = v
        self.cache.save_spend(self.limiter.export())
        return got

    def _ask(
        self,
        job: P.Job,
        batch: list[tuple[int, dict]],
        validate: Validator,
        make_user: Callable[[list[dict]], str],
        out_tokens_per_item: int,
    ) -> dict[int, Any]:
        """Ask the model about one batch (bounded attempts); ``{position: valid answer}``."""
        answers: dict[int, Any] = {}
        remaining = list(batch)
        for _attempt in range(self.config.max_attempts):
            if not remaining or self._paused():
                break
            local = {n + 1: pos for n, (pos, _) in enumerate(remaining)}
            payload = [{"id": n + 1, **item} for n, (_, item) in enumerate(remaining)]
            try:
                answer, _usage = self.client.complete_json(
                    job, make_user(payload), out_tokens_per_item * len(remaining) + 50
                )
                valid = validate(answer, set(local))
            except (BadAnswer, P.InvalidAnswer) as e:
                with self._lock:
                    self.jobs[job.name]["invalid_answers"] += 1
                self._error(job.name, e)
                continue
            except (Unavailable, SpendLimitReached) as e:
                self._pause(e, job.name)
                break
            except LLMError as e:
                self._error(job.name, e)
                break
            if len(valid) < len(local):
                with self._lock:
                    self.jobs[job.name]["invalid_answers"] += 1
                self._error(
                    job.name,
                    P.InvalidAnswer(f"{len(local) - len(valid)} of {len(local)} items missing or invalid"),
                )
            for n, v in valid.items():
                answers[local[n]] = v
            remaining = [(pos, item) for pos, item in remaining if pos not in answers]
        return answers

    # -- status ---------------------------------------------------------------------------------------------
    def status(self) -> dict:
        """Facts for ``status.json["builder"]``: model, requests, tokens, cache hits, fallbacks, errors, spend.

        Shape: ``{"builder", "model", "base_url", "structured_output", "requests", "prompt_tokens",
        "completion_tokens", "tokens", "cache_hits", "cache_misses", "fallbacks", "invalid_answers",
        "new_sections", "jobs": {job: {...}}, "errors": {kind: n}, "last_error", "paused_until",
        "pause_reason", "spend": {...}}`` (times are Unix seconds; tokens as reported by the server).
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
            }

    def close(self) -> None:
        """Stop the request threads (in-flight requests finish first)."""
        self._pool.shutdown(wait=True)
