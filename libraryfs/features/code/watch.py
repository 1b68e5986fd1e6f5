"""Keep ``code/<repo>/`` fresh: watchdog events → re-parse of only the changed files (issue 9 item 1).

Watchdog (inotify on Linux) watches the *outside* checkout, as ARCHITECTURE §1 says for ingested
directories. Events for indexable files are collected and, after ``debounce_s`` of quiet (editors write a
file as several events: truncate, write, rename), each changed path is re-parsed alone
(:meth:`CodeIndex.update_file`) and its library directory rewritten by :class:`Renderer.update`; a deleted
file's directory is removed. Directory moves/deletes re-check the files the index held below them.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from libraryfs.features.code.index import CodeIndex, is_indexable
from libraryfs.features.code.render import Renderer

log = logging.getLogger(__name__)


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: CodeWatcher) -> None:
        self.w = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        """watchdog callback: queue the changed source file for a one-file re-parse (opens are ignored)."""
        if event.event_type in ("opened", "closed_no_write"):
            return
        for p in (event.src_path, getattr(event, "dest_path", "")):
            if p:
                self.w.note(os.fsdecode(p), event.is_directory)


class CodeWatcher:
    """Watches ``index.root`` and applies changes through ``renderer`` (same index).

    ``on_update(changed, removed)`` (optional) is called after each applied batch, from the worker
    thread. Use as a context manager or call :meth:`start`/:meth:`stop`."""

    def __init__(self, index: CodeIndex, renderer: Renderer, debounce_s: float = 0.2, on_update=None) -> None:
        self.index = index
        self.renderer = renderer
        self.debounce_s = debounce_s
        self.on_update = on_update
        self._pending: set[str] = set()
        self._dirs: set[str] = set()
        self._last_event = 0.0
        self._cv = threading.Condition()
        self._stop = False
        self._observer = Observer()
        self._thread = threading.Thread(target=self._run, name="code-watch", daemon=True)
        self.batches = 0

    def note(self, abspath: str, is_dir: bool) -> None:
        """Record one filesystem event path (absolute)."""
        rel = os.path.relpath(abspath, self.index.root).replace(os.sep, "/")
        if rel.startswith(".."):
            return
        with self._cv:
            if is_dir:
                self._dirs.add(rel)
            elif is_indexable(rel) or rel in self.index.files:
                self._pending.add(rel)
            else:
                return
            self._last_event = time.monotonic()
            self._cv.notify()

    def start(self) -> CodeWatcher:
        """Begin watching (recursive)."""
        self._observer.schedule(_Handler(self), self.index.root, recursive=True)
        self._observer.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching and apply nothing further."""
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._observer.stop()
        self._observer.join(timeout=5)
        self._thread.join(timeout=5)

    def __enter__(self) -> CodeWatcher:
        """Start watching (:meth:`start`); returns the watcher."""
        return self.start()

    def __exit__(self, *exc) -> None:
        """Stop watching (:meth:`stop`); exceptions propagate."""
        self.stop()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stop and not (self._pending or self._dirs):
                    self._cv.wait()
                if self._stop:
                    return
                quiet = time.monotonic() - self._last_event
                if quiet < self.debounce_s:
                    self._cv.wait(self.debounce_s - quiet)
                    continue
                paths, dirs = self._pending, self._dirs
                self._pending, self._dirs = set(), set()
            try:
                self.apply(paths, dirs)
            except Exception:  # noqa: BLE001 - a bad batch must not kill the watcher; logged
                log.exception("code watch: applying %d changes failed", len(paths))

    def apply(self, paths: set[str], dirs: set[str] = frozenset()) -> tuple[list[str], list[str]]:
        """Re-parse ``paths`` (repo-relative) and re-render; ``dirs`` re-checks known files below them.
        Returns ``(changed, removed)``."""
        for d in dirs:
            prefix = d.rstrip("/") + "/"
            paths |= {p for p in self.index.files if p.startswith(prefix)}
            if os.path.isdir(os.path.join(self.index.root, d)):
                for dirpath, _, names in os.walk(os.path.join(self.index.root, d)):
                    for n in names:
                        rel = os.path.relpath(os.path.join(dirpath, n), self.index.root).replace(os.sep, "/")
                        if is_indexable(rel):
                            paths.add(rel)
        changed, removed = [], []
        for rel in sorted(paths):
            full = os.path.join(self.index.root, rel)
            if is_indexable(rel) and os.path.isfile(full):
                before = self.index.files.get(rel)
                fp = self.index.update_file(rel)
                if fp is not None and (before is None or before.sha != fp.sha):
                    changed.append(rel)
            elif rel in self.index.files:
                self.index.remove_file(rel)
                removed.append(rel)
        if changed or removed:
            self.renderer.update(changed, removed)
            self.batches += 1
            log.info("code watch: %d changed, %d removed", len(changed), len(removed))
            if self.on_update is not None:
                self.on_update(changed, removed)
        return changed, removed
