"""LLM text replaces the deterministic TOC lines when it arrives: the indexer never waits on the model.

In the indexer daemon the LLM builder asks the model in the background (:mod:`libraryfs.llm.deferred`): a
pass writes every TOC at once with the deterministic line wherever the model's answer is not cached yet, and
remembers those lines as *provisional* here (:class:`Refresh`): the entries whose summary, and the sections
whose description or grouping, is on its way. When answers arrive the builder calls :meth:`Refresh.wake`;
the indexer's loop then runs a *refresh pass* (``run_once(refresh=True)``) over the provisional entries and
sections only, which finds the answers in the cache and re-renders those TOCs (and their ancestors').

A slow endpoint therefore delays only the model's text, never a TOC: a new file is in its INDEX.md after
the deterministic latency (docs/llm.md, "Never waiting on the model"). One-shot runs (``libraryfs index``,
``run_once`` in process) keep asking synchronously, so their TOCs carry the model's text when they return.
"""

from __future__ import annotations

import threading
from typing import Any


class Refresh:
    """The provisional lines of one indexer and the event that asks for a refresh pass; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event = threading.Event()
        self.entries: dict[int, tuple[int, bytes]] = {}  #: ino -> (parent, name) of provisional summaries
        self.dirs: set[int] = set()  #: sections with a provisional description or grouping
        self.active = False
        self.passes = 0

    def attach(self, builder: Any) -> bool:
        """Make ``builder`` ask in the background (when it can: the LLM builder); True if it does."""
        defer = getattr(builder, "defer", None)
        self.active = defer is not None
        if defer is not None:
            defer(self.wake)
        return self.active

    def wake(self) -> None:
        """Answers arrived (called from the builder's worker thread)."""
        self._event.set()

    def ready(self) -> bool:
        """True when answers arrived for provisional lines since the last :meth:`take`."""
        if not self._event.is_set():
            return False
        with self._lock:
            if self.entries or self.dirs:
                return True
        self._event.clear()
        return False

    def take(self) -> tuple[dict[int, tuple[int, bytes]], set[int]]:
        """The provisional entries and sections to look at again (they stay provisional until answered)."""
        self._event.clear()
        with self._lock:
            self.passes += 1
            return dict(self.entries), set(self.dirs)

    def entry(self, ino: int, parent: int, name: bytes, provisional: bool) -> None:
        """Record whether entry ``ino``'s summary is provisional."""
        with self._lock:
            if provisional:
                self.entries[ino] = (parent, name)
            else:
                self.entries.pop(ino, None)

    def section(self, ino: int, provisional: bool) -> None:
        """Record whether section ``ino``'s description or grouping is provisional."""
        with self._lock:
            if provisional:
                self.dirs.add(ino)
            else:
                self.dirs.discard(ino)

    def status(self) -> dict[str, Any]:
        """``{"active", "provisional_entries", "provisional_sections", "refresh_passes"}``."""
        with self._lock:
            return {
                "active": self.active,
                "provisional_entries": len(self.entries),
                "provisional_sections": len(self.dirs),
                "refresh_passes": self.passes,
            }
