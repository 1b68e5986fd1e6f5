"""Import outside directory trees into a library, and keep them mirrored with watchdog.

Writes go through :func:`libraryfs.fs.tree.open_tree`: through the mount when the library is mounted,
directly into the store otherwise — journaled either way, so the indexer summarises what arrives.
Symbolic links are skipped (an outside link target is never read), as are dotfiles unless asked.
Names the library generates itself are renamed on the way in: ``INDEX.md`` → ``INDEX.source.md``,
``.index`` → ``_index``. This is the only module importing ``watchdog``.
"""

from __future__ import annotations

import logging
import os
import threading

from libraryfs.fs.generated import INDEX_FILE, PAGES_DIRNAME, is_generated
from libraryfs.fs.tree import Tree, open_tree
from libraryfs.shown import escape_controls, show_name
from libraryfs.words import count

log = logging.getLogger("libraryfs.ingest")

_RENAME = {INDEX_FILE: "INDEX.source.md", PAGES_DIRNAME: "_index"}


def _dest_name(name: str) -> str:
    return _RENAME.get(name, name)


def check_section(section: str) -> str:
    """Normalise ``--into``: a relative path of plain names (no ``.``, ``..``, empty or generated names).

    Raises :class:`~libraryfs.errors.InvalidArgument` with a one-line message; returns the clean path.
    """
    from libraryfs.errors import InvalidArgument

    comps = [c for c in section.split("/") if c]
    bad = [
        c
        for k, c in enumerate(comps)
        if c in (".", "..") or is_generated(c, at_root=k == 0) or len(c.encode()) > 255
    ]
    if bad:
        raise InvalidArgument(f"invalid --into {section!r}: use a relative path of plain names")
    return "/".join(comps)


def _rel(section: str, *parts: str) -> str:
    comps = [c for c in section.strip("/").split("/") if c] + [_dest_name(p) for p in parts if p]
    return "/".join(comps)


def plan(source: str, include_hidden: bool = False) -> tuple[list[tuple[str, str]], int, dict[str, int]]:
    """Files to import as ``(absolute source path, relative path)``; plus skipped count and reasons."""
    files: list[tuple[str, str]] = []
    skipped: dict[str, int] = {}
    for root, dirs, names in os.walk(source, followlinks=False):
        keep = []
        for d in sorted(dirs):
            if not include_hidden and d.startswith("."):
                reason = "hidden"
            elif os.path.islink(os.path.join(root, d)):  # a link to a directory: listed here, not followed
                reason = "symlink"
            else:
                keep.append(d)
                continue
            skipped[reason] = skipped.get(reason, 0) + 1
        dirs[:] = keep
        for n in sorted(names):
            p = os.path.join(root, n)
            if not include_hidden and n.startswith("."):
                skipped["hidden"] = skipped.get("hidden", 0) + 1
                continue
            if os.path.islink(p):
                skipped["symlink"] = skipped.get("symlink", 0) + 1
                continue
            if not os.path.isfile(p):
                skipped["special"] = skipped.get("special", 0) + 1
                continue
            files.append((p, os.path.relpath(p, source)))
    return files, sum(skipped.values()), skipped


#: Skip reasons that are nouns (counted: ``1 symlink``, ``2 symlinks``); the others are adjectives
#: (``2 hidden``, ``1 unreadable``, ``3 special``).
_NOUNS = frozenset({"symlink"})


def ingest_tree(
    libdir: str,
    source: str,
    section: str = "",
    *,
    include_hidden: bool = False,
    progress: bool = True,
    tree: Tree | None = None,
) -> dict:
    """Copy every regular file under ``source`` to ``section/<relative path>``; returns counts.

    ``{"files": n, "bytes": total bytes, "skipped": n, "skipped_why": "…"}``. Unreadable files are
    skipped and counted, never fatal. ``progress``: a tqdm bar on stderr, shown only when stderr is a
    terminal.
    """
    section = check_section(section)
    tree = tree or open_tree(libdir)
    files, nskip, why = plan(source, include_hidden)
    total = 0
    done = 0
    bar = None
    if progress:
        from tqdm import tqdm

        # disable=None: no bar when stderr is not a terminal (a pipe, a log file, a CI job's output)
        bar = tqdm(total=len(files), unit="file", desc="ingest", leave=False, disable=None)
    try:
        for src, rel in files:
            try:
                with open(src, "rb") as f:
                    data = f.read()
            except OSError as e:
                why["unreadable"] = why.get("unreadable", 0) + 1
                nskip += 1
                log.warning("skipping %s: %s", show_name(src), escape_controls(str(e)))
                continue
            tree.write_bytes(_rel(section, *rel.split(os.sep)), data)
            total += len(data)
            done += 1
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        close = getattr(tree, "close", None)
        if close:
            close()
    return {
        "files": done,
        "bytes": total,
        "skipped": nskip,
        "skipped_why": ", ".join(count(v, k) if k in _NOUNS else f"{v} {k}" for k, v in sorted(why.items())),
    }


def watch_tree(
    libdir: str,
    source: str,
    section: str = "",
    *,
    include_hidden: bool = False,
    stop: threading.Event | None = None,
) -> None:
    """Mirror changes under ``source`` into the library until ``stop`` is set (or Ctrl-C).

    Falls back to watchdog's polling observer when inotify watches run out (errno 28/24).
    """
    # Over 80 lines on purpose: the watchdog handler class is defined here, around the closure over ``tree``
    # and ``rel``, so that watchdog is imported only by the commands that watch.
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer
    from watchdog.observers.polling import PollingObserver

    section = check_section(section)
    tree = open_tree(libdir)
    source = os.path.abspath(source)

    def rel(path: str) -> str | None:
        """Library path for ``path`` under ``source`` (within ``section``), or None outside ``source`` or
        hidden (unless ``include_hidden``)."""
        r = os.path.relpath(path, source)
        parts = r.split(os.sep)
        if r.startswith("..") or (not include_hidden and any(p.startswith(".") for p in parts)):
            return None
        return _rel(section, *parts)

    class Handler(FileSystemEventHandler):
        """Watchdog event handler mirroring creations, changes, deletions and moves under ``source`` into the
        library tree (:class:`watchdog.events.FileSystemEventHandler`)."""

        def _copy(self, path: str) -> None:
            r = rel(path)
            if r is None or os.path.islink(path) or not os.path.isfile(path):
                return
            try:
                with open(path, "rb") as f:
                    tree.write_bytes(r, f.read())
            except FileNotFoundError:
                pass  # a temporary file that vanished: nothing to mirror
            except OSError as e:
                log.warning("mirror %s: %s", show_name(path), escape_controls(str(e)))

        def on_created(self, event):
            """Make the directory, or copy the file, that appeared (overrides
            ``FileSystemEventHandler.on_created``)."""
            if event.is_directory:
                r = rel(event.src_path)
                if r:
                    tree.makedirs(r)
            else:
                self._copy(event.src_path)

        def on_modified(self, event):
            """Copy a modified file again (overrides ``FileSystemEventHandler.on_modified``)."""
            if not event.is_directory:
                self._copy(event.src_path)

        def on_closed(self, event):
            """Copy a file closed after writing (inotify ``IN_CLOSE_WRITE``; overrides
            ``FileSystemEventHandler.on_closed``)."""
            self._copy(event.src_path)

        def on_deleted(self, event):
            """Remove the deleted file or directory from the library (overrides
            ``FileSystemEventHandler.on_deleted``)."""
            r = rel(event.src_path)
            if r:
                tree.remove(r)

        def on_moved(self, event):
            """Rename within the library; a move in from outside (or of an unmirrored path) copies like a
            creation, a move out or to a hidden name removes (overrides
            ``FileSystemEventHandler.on_moved``)."""
            a, b = rel(event.src_path), rel(event.dest_path)
            if a and b and tree.exists(a):
                tree.rename(a, b)
            elif b:
                self.on_created(
                    type("E", (), {"is_directory": event.is_directory, "src_path": event.dest_path})()
                )
            elif a:
                tree.remove(a)

    handler = Handler()
    try:
        obs = Observer()
        obs.schedule(handler, source, recursive=True)
        obs.start()
    except OSError as e:
        log.warning("inotify unavailable (%s); polling instead", e)
        obs = PollingObserver(timeout=1.0)
        obs.schedule(handler, source, recursive=True)
        obs.start()
    stop = stop or threading.Event()
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        obs.stop()
        obs.join()
