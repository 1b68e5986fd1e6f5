"""The endpoint's health as the index builder sees it: latency, error rate, the bad-answer circuit breaker.

:class:`EndpointHealth` keeps the outcome of the last :data:`WINDOW` requests (``ok``, or the error kind:
``http_503``, ``timeout``, ``bad_answer``, ``invalid_answer`` …) and their wall times, and decides when the
endpoint is *failing*: after any transport failure that exhausted the client's retries, or after
:data:`BREAKER_BAD_ANSWERS` answers in a row that carried no valid item (a model that answers garbage costs
requests like an endpoint that errors; a circuit breaker in the sense of Nygard, *Release It!*, ch. 5).
The builder pauses while it is failing; the first request after the pause is the half-open probe: one more
bad answer opens the breaker again at once (the streak is only reset by a valid answer).

The mount log gets one warning when the endpoint starts failing and one line when it answers again —
not one per request (:meth:`EndpointHealth.transition`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

WINDOW = 100  #: requests remembered for the error rate and the latency percentiles
BREAKER_BAD_ANSWERS = 5  #: consecutive answers without a valid item that open the breaker


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 3)


class EndpointHealth:
    """Outcomes and latencies of recent requests; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcomes: deque[str] = deque(maxlen=WINDOW)  # "ok" or an error kind, per answer asked for
        self._latencies: deque[float] = deque(maxlen=WINDOW)  # wall time of each HTTP try, seconds
        self.bad_streak = 0
        self.failing = False
        self.failing_since: float | None = None

    def record_latency(self, latency_s: float) -> None:
        """Record the wall time of one HTTP try (answered, failed or timed out), seconds (the chat client)."""
        with self._lock:
            self._latencies.append(latency_s)

    def record(self, kind: str = "ok") -> bool:
        """Record the outcome of one answer asked for (``"ok"`` or an error kind; the builder). Returns True
        when this bad answer makes :data:`BREAKER_BAD_ANSWERS` in a row (the caller opens the breaker)."""
        with self._lock:
            self._outcomes.append(kind)
            if kind == "ok":
                self.bad_streak = 0
                return False
            if kind in ("bad_answer", "invalid_answer", "truncated"):
                self.bad_streak += 1
                return self.bad_streak >= BREAKER_BAD_ANSWERS
            return False

    def transition(self, failing: bool) -> bool:
        """Set the failing state; True when it changed (log only then: once per failure, once per recovery)."""
        with self._lock:
            if failing == self.failing:
                return False
            self.failing = failing
            self.failing_since = time.time() if failing else None
            return True

    def snapshot(self) -> dict[str, Any]:
        """``{"state", "requests_recent", "errors_recent", "error_rate", "latency_p50_s", "latency_p95_s",
        "latency_last_s", "bad_answer_streak", "failing_since"}`` over the last :data:`WINDOW` answers asked
        for (an answer is one request, or up to ``transport_attempts`` tries of one) and HTTP tries (latency,
        seconds)."""
        with self._lock:
            outs, lat = list(self._outcomes), list(self._latencies)
            streak, failing, since = self.bad_streak, self.failing, self.failing_since
        errors = sum(1 for x in outs if x != "ok")
        return {
            "state": "failing" if failing else ("ok" if outs else "unknown"),
            "requests_recent": len(outs),
            "errors_recent": errors,
            "error_rate": round(errors / len(outs), 3) if outs else None,
            "latency_p50_s": _pct(lat, 0.5),
            "latency_p95_s": _pct(lat, 0.95),
            "latency_last_s": round(lat[-1], 3) if lat else None,
            "bad_answer_streak": streak,
            "failing_since": since,
        }
