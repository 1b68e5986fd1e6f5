"""The spending limit: at most N requests and M tokens (prompt + completion) in any sliding hour.

A request is admitted by :meth:`SpendLimiter.reserve` with an estimate of its tokens *before* it is sent
and settled with the API-reported tokens afterwards, so concurrent requests cannot overshoot together.
When the limit is reached no call is made: :class:`SpendLimitReached` says why and when calls resume.
The event list can be exported and loaded so the window survives a restart of the indexer.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable


class SpendLimitReached(Exception):
    """The hourly request or token limit would be exceeded; ``resumes_at`` is a Unix time in seconds."""

    def __init__(self, message: str, resumes_at: float) -> None:
        super().__init__(message)
        self.resumes_at = resumes_at


class SpendLimiter:
    """Sliding-window limiter. ``max_requests``/``max_tokens`` per ``window_s`` seconds; 0 = no limit."""

    def __init__(
        self,
        max_requests: int,
        max_tokens: int,
        window_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        self.window_s = window_s
        self.clock = clock
        self._events: deque[tuple[float, int]] = deque()  # (time s, tokens) of settled requests
        self._inflight_requests = 0
        self._inflight_tokens = 0
        self._lock = threading.Lock()
        self.refusals = 0  #: calls refused so far

    def _prune(self, now: float) -> None:
        while self._events and self._events[0][0] <= now - self.window_s:
            self._events.popleft()

    def _tokens(self) -> int:
        return sum(t for _, t in self._events)

    def reserve(self, est_tokens: int) -> None:
        """Admit one request expected to cost ``est_tokens`` tokens, or raise :class:`SpendLimitReached`."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            if self.max_requests and len(self._events) + self._inflight_requests + 1 > self.max_requests:
                self.refusals += 1
                resumes = self._events[0][0] + self.window_s if self._events else now + 1.0
                raise SpendLimitReached(
                    f"spending limit: {self.max_requests} requests per hour reached", resumes
                )
            used = self._tokens() + self._inflight_tokens
            if self.max_tokens and used + est_tokens > self.max_tokens:
                self.refusals += 1
                # earliest time enough settled tokens leave the window
                need, resumes = used + est_tokens - self.max_tokens, now + 1.0
                for t, n in self._events:
                    need -= n
                    resumes = t + self.window_s
                    if need <= 0:
                        break
                raise SpendLimitReached(
                    f"spending limit: {self.max_tokens:,} tokens per hour reached", resumes
                )
            self._inflight_requests += 1
            self._inflight_tokens += est_tokens

    def settle(self, est_tokens: int, actual_tokens: int) -> None:
        """Record a finished (or failed) request that :meth:`reserve` admitted with ``est_tokens``."""
        with self._lock:
            self._inflight_requests -= 1
            self._inflight_tokens -= est_tokens
            self._events.append((self.clock(), max(0, actual_tokens)))

    def snapshot(self) -> dict:
        """``{"requests_last_hour", "tokens_last_hour", "max_requests_per_hour", "max_tokens_per_hour",
        "refusals"}`` (counts; tokens)."""
        with self._lock:
            self._prune(self.clock())
            return {
                "requests_last_hour": len(self._events) + self._inflight_requests,
                "tokens_last_hour": self._tokens(),
                "max_requests_per_hour": self.max_requests,
                "max_tokens_per_hour": self.max_tokens,
                "refusals": self.refusals,
            }

    def export(self) -> list[list[float]]:
        """Settled events in the window as ``[[time_s, tokens], ...]`` (JSON-able)."""
        with self._lock:
            self._prune(self.clock())
            return [[t, n] for t, n in self._events]

    def load(self, events: list[list[float]]) -> None:
        """Add events saved by :meth:`export` (e.g. by the previous indexer process)."""
        with self._lock:
            merged = sorted([(float(t), int(n)) for t, n in events] + list(self._events))
            self._events = deque(merged)
            self._prune(self.clock())
