"""Model requests in the background, so the indexer never waits on the model to publish a TOC (issue 13).

With a :class:`Deferred` attached, an :class:`~libraryfs.llm.builder.LLMIndexBuilder` call answers at once
from the cache (or the deterministic fallback) and hands what the cache lacked to this queue; one worker
thread asks the model, keeps the valid answers in memory, and calls ``on_answers`` — the indexer then runs a
*refresh pass* over the entries and sections that got a provisional (deterministic) line, which finds the
answers through the builder (the builder moves them into the LMDB cache from the indexer's own thread: the
worker never touches the store).

- **Order:** filings first (an inbox entry waits for its answer), then summaries, section descriptions,
  groupings (a section's description is asked from its entries' lines, so asking it before their summaries
  arrive would be wasted).
- **Supersede:** a description or grouping of a section replaces a queued one for the same section (only
  the newest listing is worth a request); an item already queued is not queued twice.
- **Batching across passes:** queued items of one job (and one section menu for filings) go out together,
  ``batch_size`` per request as in the synchronous mode.
- **Pauses:** while the builder is paused (endpoint down, breaker open, spending limit) the worker waits;
  items unanswered because of a pause stay queued; items the model answered invalidly are given up for
  :data:`GIVE_UP_S` (their deterministic line stays; no request loop on an item the model cannot answer).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("libraryfs.llm")

PRIORITY = {"file": 0, "summarize": 1, "describe": 2, "group": 3}
GIVE_UP_S = 3600.0  #: an item the model answered invalidly is not asked again for this long, seconds
PRUNE_MIN = 1024  #: expired give-ups are dropped once this many are remembered (then at twice what is left)


@dataclass
class Unit:
    """Work for one builder job: ``items`` ``[(cache key, payload item)]`` and how to ask and validate.

    ``tag`` identifies what a newer unit replaces (``("describe", path)``); ``batch_key`` which queued units
    may share requests; ``ask`` is the builder's fetch closure ``(items) -> {position: value}``."""

    job: str
    prompt_version: str
    items: list[tuple[str, dict]]
    ask: Callable[[list[tuple[str, dict]]], dict[int, Any]]
    tag: tuple
    batch_key: tuple
    seq: int = 0
    keys: set[str] = field(default_factory=set)


class Deferred:
    """The queue and its worker thread. ``paused_until()`` is the builder's pause end (Unix s); ``on_answers``
    is called (from the worker) after a fetch that brought at least one valid answer."""

    def __init__(
        self, paused_until: Callable[[], float], on_answers: Callable[[], None] = lambda: None
    ) -> None:
        self.paused_until = paused_until
        self.on_answers = on_answers
        self._cond = threading.Condition()
        self._units: dict[tuple, Unit] = {}
        self._queued: dict[tuple[str, str], tuple] = {}  # (prompt_version, key) -> tag of its unit
        self._arrived: dict[tuple[str, str], Any] = {}  # (prompt_version, key) -> valid answer
        self._gave_up: dict[tuple[str, str], float] = {}  # (prompt_version, key) -> when (Unix s)
        self._prune_at = PRUNE_MIN  # prune expired give-ups when there are this many (amortised O(1))
        self._seq = itertools.count()
        self._stop = False
        self.in_flight = 0
        self.fetched = 0  #: answers brought in so far
        self._thread = threading.Thread(target=self._run, name="llm-deferred", daemon=True)
        self._thread.start()

    # -- the indexer's side -----------------------------------------------------------------------------
    def submit(self, unit: Unit) -> list[int]:
        """Queue ``unit``'s items that are neither queued, arrived nor given up; returns the positions of
        ``unit.items`` that are now waiting for the model (queued before or now) or whose answer has arrived
        but was not taken yet: the worker may bring it between the caller's :meth:`take_arrived` and this
        call, and such an item must stay provisional — else its line kept the fallback and the answer stayed
        here unread (no refresh pass looks for it). For those, ``on_answers`` is called again."""
        waiting: list[int] = []
        fresh: list[tuple[str, dict]] = []
        here = False
        now = time.time()
        with self._cond:
            old = self._units.pop(unit.tag, None)
            if old is not None:  # superseded: its items are free again
                for old_key in old.keys:
                    self._queued.pop((old.prompt_version, old_key), None)
            for i, (key, item) in enumerate(unit.items):
                k = (unit.prompt_version, key)
                if k in self._arrived:
                    waiting.append(i)
                    here = True
                    continue
                if now - self._gave_up.get(k, -GIVE_UP_S) < GIVE_UP_S:
                    continue
                waiting.append(i)
                if k not in self._queued:
                    fresh.append((key, item))
            if fresh:
                unit.items, unit.seq, unit.keys = fresh, next(self._seq), {k for k, _ in fresh}
                self._units[unit.tag] = unit
                for key in unit.keys:
                    self._queued[(unit.prompt_version, key)] = unit.tag
                self._cond.notify_all()
        if here:
            self.on_answers()  # the refresh pass that takes them (the first call may have found none)
        return waiting

    def take_arrived(self, prompt_version: str, keys: list[str]) -> dict[int, Any]:
        """Answers that arrived for ``keys`` (removed from memory: the caller caches them) by position."""
        out: dict[int, Any] = {}
        with self._cond:
            for i, key in enumerate(keys):
                v = self._arrived.pop((prompt_version, key), None)
                if v is not None:
                    out[i] = v
        return out

    def status(self) -> dict[str, int]:
        """``{"queued", "in_flight", "arrived", "fetched", "given_up"}`` (items; ``given_up``: those not to be
        asked again yet, i.e. given up less than :data:`GIVE_UP_S` ago)."""
        now = time.time()
        with self._cond:
            return {
                "queued": len(self._queued),
                "in_flight": self.in_flight,
                "arrived": len(self._arrived),
                "fetched": self.fetched,
                "given_up": sum(now - t < GIVE_UP_S for t in self._gave_up.values()),
            }

    def close(self) -> None:
        """Stop the worker (a request in flight finishes first)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    # -- the worker --------------------------------------------------------------------------------------
    def _next(self) -> list[Unit] | None:
        """Wait for work outside a pause; the units of the most urgent job sharing one ``batch_key``."""
        with self._cond:
            while True:
                if self._stop:
                    return None
                wait = self.paused_until() - time.time()
                if self._units and wait <= 0:
                    break
                self._cond.wait(timeout=min(max(wait, 0.05), 5.0) if self._units else None)
            first = min(self._units.values(), key=lambda u: (PRIORITY.get(u.job, 9), u.seq))
            units = sorted(
                (u for u in self._units.values() if u.batch_key == first.batch_key), key=lambda u: u.seq
            )
            for u in units:
                del self._units[u.tag]
                for key in u.keys:
                    self._queued.pop((u.prompt_version, key), None)
            self.in_flight = sum(len(u.items) for u in units)
            return units

    def _run(self) -> None:
        while True:
            units = self._next()
            if units is None:
                return
            newest = units[-1]
            items = [it for u in units for it in u.items]
            try:
                got = newest.ask(items)
            except Exception as e:  # never let the worker die; the items stay deterministic
                log.warning("background %s request failed: %s", newest.job, e)
                got = {}
            paused = self.paused_until() > time.time()
            now = time.time()
            with self._cond:
                self.in_flight = 0
                for i, (key, _item) in enumerate(items):
                    k = (newest.prompt_version, key)
                    if i in got:
                        self._arrived[k] = got[i]
                    elif not paused:
                        self._gave_up[k] = now
                # keys are content hashes: edits keep adding new ones, so expired ones are dropped
                if len(self._gave_up) >= self._prune_at:
                    self._gave_up = {k: t for k, t in self._gave_up.items() if now - t < GIVE_UP_S}
                    self._prune_at = max(PRUNE_MIN, 2 * len(self._gave_up))
                requeue = [u for u in units if paused and u.tag not in self._units]
                for u in requeue:  # unanswered because of a pause: ask again after it
                    left = [(k, it) for k, it in u.items if (u.prompt_version, k) not in self._arrived]
                    if left:
                        u.items, u.keys = left, {k for k, _ in left}
                        self._units[u.tag] = u
                        for key in u.keys:
                            self._queued[(u.prompt_version, key)] = u.tag
                self.fetched += len(got)
            if got:
                self.on_answers()
