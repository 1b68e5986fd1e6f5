"""How the index builder asks: one batch in JSON, one item in plain text, the pause and the breaker.

A mixin of :class:`~libraryfs.llm.builder.LLMIndexBuilder` (split out to keep modules short); it uses the
builder's ``config``, ``client``, ``health``, ``jobs``, ``errors``, ``_pool`` and ``_lock``. See the builder's
module doc for the policy and :mod:`libraryfs.llm.health` for the breaker.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from libraryfs.index.tokens import count_tokens
from libraryfs.llm import prompts as P
from libraryfs.llm import textmode as T
from libraryfs.llm.client import BadAnswer, ChatClient, LLMError, SpendLimitReached, Unavailable
from libraryfs.llm.config import LLMConfig
from libraryfs.llm.health import EndpointHealth

MAX_PAUSE_S = 900.0  #: longest pause after repeated endpoint failures, seconds

Validator = Callable[[Any, set[int]], dict[int, Any]]


@dataclass(frozen=True)
class Question:
    """What one job call asks the model, built once per call of a builder job.

    ``job``: the prompt and answer schema; ``validate(answer, ids) -> {id: value}`` (raises
    :class:`~libraryfs.llm.prompts.InvalidAnswer`); ``make_user(payload items) -> user message``;
    ``out_tokens_per_item``: the answer budget per item (tokens); ``whole``: every item in one request (a
    grouping); ``sections``: the section paths a plain-text filing may answer with."""

    job: P.Job
    validate: Validator
    make_user: Callable[[list[dict]], str]
    out_tokens_per_item: int
    whole: bool = False
    sections: list[str] | None = None


log = logging.getLogger("libraryfs.llm")


class Asking:
    """The request side of the LLM index builder (see module doc)."""

    config: LLMConfig
    client: ChatClient
    health: EndpointHealth
    jobs: dict[str, dict[str, int]]
    errors: dict[str, int]
    last_error: dict[str, Any] | None
    _pool: ThreadPoolExecutor
    _lock: threading.Lock
    _paused_until: float
    _pause_reason: str
    _next_pause_s: float
    text_mode: bool

    def _paused(self) -> bool:
        return time.time() < self._paused_until

    def _pause(self, e: LLMError | SpendLimitReached, job: str, reason: str | None = None) -> None:
        """Stop asking until the pause ends (see module doc); ``reason`` overrides the error's kind."""
        now = time.time()
        with self._lock:
            if isinstance(e, SpendLimitReached):
                until, why = e.resumes_at, "spend_limit"
            else:
                wait = (
                    max(self._next_pause_s, e.retry_after_s or 0.0)
                    if isinstance(e, Unavailable)
                    else self._next_pause_s
                )
                until, why = now + wait, str(reason or getattr(e, "kind", "error"))
                self._next_pause_s = min(self._next_pause_s * 2, MAX_PAUSE_S)
            self._paused_until = max(self._paused_until, until)
            self._pause_reason = why
        self._error(job, e, failing=not isinstance(e, SpendLimitReached))

    def _error(self, job: str, e: BaseException, failing: bool = False) -> None:
        """Count and record an error (``status()["last_error"]``, shown by ``libraryfs status``). The log
        gets one warning when the endpoint starts failing (``failing``), not one per request."""
        kind = "spend_limit" if isinstance(e, SpendLimitReached) else getattr(e, "kind", type(e).__name__)
        message = " ".join(str(e).split())[:300]
        with self._lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1
            self.last_error = {"time": time.time(), "job": job, "kind": kind, "message": message}
        if failing and self.health.transition(True):
            log.warning(
                "LLM endpoint %s (model %s) is failing: %s in the %s job: %s; deterministic results are used "
                "meanwhile (paused %s; this is logged once until it answers again)",
                self.config.base_url,
                self.config.model,
                kind,
                job,
                message,
                self._pause_reason or "-",
            )
        else:
            log.debug("LLM %s in the %s job: %s", kind, job, message)

    def _outcome(self, job: str, kind: str, e: BaseException | None = None) -> None:
        """Record one answer's outcome; a valid one closes the breaker, :data:`~libraryfs.llm.health.
        BREAKER_BAD_ANSWERS` bad ones in a row open it (a pause, like an endpoint error)."""
        if kind == "ok":
            self.health.record("ok")
            if self.health.transition(False):
                log.info("LLM endpoint %s answers again", self.config.base_url)
            return
        with self._lock:
            self.jobs[job]["invalid_answers"] += 1
        tripped = self.health.record(kind)
        err = e or P.InvalidAnswer("no valid item in the answer")
        if tripped:
            self._pause(
                LLMError(f"{self.health.bad_streak} answers in a row without a valid item: {err}", kind),
                job,
                "bad_answers",
            )
        else:
            self._error(job, err)

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

    def _fetch(self, q: Question, todo: list[tuple[int, dict]]) -> dict[int, Any]:
        """Ask the model about ``todo`` (``[(position, payload item)]``), ``max_concurrency`` requests at a
        time; ``{position: valid answer}``. No transaction is open here (the background worker calls it too)."""
        if self._paused():
            return {}
        if self.text_mode and q.job.name in T.JOBS:
            tjob = T.JOBS[q.job.name]
            futures = [self._pool.submit(self._ask_text, tjob, [it], q.sections) for it in todo]
        else:
            futures = [self._pool.submit(self._ask, q, b) for b in self._batches(todo, q.whole)]
        fresh: dict[int, Any] = {}
        for f in futures:
            fresh.update(f.result())
        if fresh:
            with self._lock:
                self.jobs[q.job.name]["answered"] += len(fresh)
                self._next_pause_s = self.config.down_backoff_s
        return fresh

    def _ask_text(
        self, tjob: T.TextJob, batch: list[tuple[int, dict]], sections: list[str] | None
    ) -> dict[int, Any]:
        """Plain-text mode (:mod:`libraryfs.llm.textmode`): one request per item, each answer judged alone."""
        out: dict[int, Any] = {}
        for pos, item in batch:
            if self._paused():
                break
            try:
                reply = self.client.chat(T.messages(tjob, item, sections), max_tokens=tjob.max_tokens)
            except (Unavailable, SpendLimitReached) as e:
                self.health.record(getattr(e, "kind", "error"))
                self._pause(e, tjob.name)
                break
            except LLMError as e:
                self._outcome(tjob.name, e.kind, e)
                continue
            value = T.parse(tjob, reply.text, item, sections)
            if value is None:
                self._outcome(tjob.name, "invalid_answer", P.InvalidAnswer(f"refused: {reply.text[:80]!r}"))
                continue
            self._outcome(tjob.name, "ok")
            out[pos] = value
        return out

    def _ask(self, q: Question, batch: list[tuple[int, dict]]) -> dict[int, Any]:
        """Ask the model about one batch (bounded attempts); ``{position: valid answer}``."""
        job = q.job
        answers: dict[int, Any] = {}
        remaining = list(batch)
        for _attempt in range(self.config.max_attempts):
            if not remaining or self._paused():
                break
            local = {n + 1: pos for n, (pos, _) in enumerate(remaining)}
            payload = [{"id": n + 1, **item} for n, (_, item) in enumerate(remaining)]
            try:
                answer, _usage = self.client.complete_json(
                    job, q.make_user(payload), q.out_tokens_per_item * len(remaining) + 50
                )
                valid = q.validate(answer, set(local))
            except (BadAnswer, P.InvalidAnswer) as e:
                self._outcome(job.name, getattr(e, "kind", "invalid_answer"), e)
                continue
            except (Unavailable, SpendLimitReached) as e:
                self.health.record(getattr(e, "kind", "error"))
                self._pause(e, job.name)
                break
            except LLMError as e:
                self._error(job.name, e)
                break
            if not valid:
                self._outcome(job.name, "invalid_answer")
            else:
                self._outcome(job.name, "ok")
                if len(valid) < len(local):
                    with self._lock:
                        self.jobs[job.name]["invalid_answers"] += 1
                    self._error(
                        job.name,
                        P.InvalidAnswer(
                            f"{len(local) - len(valid)} of {len(local)} items missing or invalid"
                        ),
                    )
            for n, v in valid.items():
                answers[local[n]] = v
            remaining = [(pos, item) for pos, item in remaining if pos not in answers]
        return answers
