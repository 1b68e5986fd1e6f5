"""The MCP server process (``libraryfs mcp LIBDIR``): the library served over the Model Context Protocol to
agents without a shell and hosts without ``/dev/fuse`` (official ``mcp`` SDK, ``MCPServer``).

It opens the store and serves it through its own :class:`~libraryfs.fs.view.LibraryView` — the view the
mount serves — so names, errors, permissions, the journal and read accounting are the mount's. It may run
beside a mount of the same library and beside other MCP servers: it takes none of the library's locks
(``mount.lock`` is the mount server's, ``indexer.lock`` the indexer's); LMDB serialises the write
transactions of all processes (one writer at a time), and each side reads the other's commits at its next
transaction. Unlike the mount it never purges orphaned inodes and never sets the clean flag (a mount may
hold unlinked files open), and a file it replaces or removes is not freed at once while a mount runs (the
mount may hold it open): it stays with nlink 0 in ``config[orphans]`` until the mount's last close of it
(:meth:`LibraryView.settle_orphans <libraryfs.fs.view.LibraryView.settle_orphans>`; docs/posix.md C03).
Writes are journaled, so the indexer indexes them: when no indexer runs and the server is not read-only, it
starts one (:func:`~libraryfs.daemon.launcher.start_indexer`) and stops it on exit.

Tools: :mod:`libraryfs.daemon.mcp_tools` (the reference filesystem server's; registered through
:mod:`libraryfs.daemon.mcp_registry`) and :class:`LibraryTools`
(``read_index``, ``find``, ``status``), plus each installed feature's (``Feature.mcp_tools``).
Resources: ``library://INDEX.md`` and ``library://{path}/INDEX.md``; a background task polls the TOC
generation (:class:`~libraryfs.fs.tocwatch.TocWatcher`) and publishes ``ResourceUpdated`` for every page
the indexer rewrote to ``subscriptions/listen`` streams. Transports: stdio (stdout is the protocol; logs go
to stderr) and streamable HTTP (:mod:`libraryfs.daemon.mcp_transport`, which also runs the process). Docs: ``docs/mcp.md``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

import anyio
from mcp import types
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated
from mcp.types import CallToolResult

from libraryfs import __version__
from libraryfs.daemon.mcp_ops import LibraryOps, clean_path, show
from libraryfs.daemon.mcp_registry import MARKER, READ, Budget, ToolRegistry, at_path, result
from libraryfs.daemon.mcp_tools import FsTools
from libraryfs.errors import Busy, LibraryError
from libraryfs.fs.generated import INDEX_FILE, PAGES_DIR, page_name
from libraryfs.fs.store import Store
from libraryfs.fs.tocwatch import TocWatcher
from libraryfs.fs.view import LibraryView
from libraryfs.index import termindex
from libraryfs.index.find import check_term, find_ranked, finder_for
from libraryfs.index.toc import links
from libraryfs.layout import (
    INDEXER_LOCK,
    MOUNT_LOCK,
    acquire_lock,
    child_exit,
    index_backlog,
    indexer_pid,
    lock_holder,
    lock_stopping,
    mount_info,
    term_index_path,
    tie_pipe,
    wait_exit,
)

log = logging.getLogger("libraryfs.mcp")

RESPONSE_TOKENS = 8000  #: default token budget of one tool response
MAX_WRITE_BYTES = 8 << 20  #: default cap on a write_file/edit_file content (bytes, UTF-8)
POLL_S = 0.2  #: how often the TOC generation is read for resource notifications
#: default of ``mcp.indexer_restart_wait_s``: how long a restart waits for an indexer still shutting down (s)
RESTART_WAIT_S = 10.0
URI_ROOT = "library://"

INSTRUCTIONS = """This server is an agent's external memory: a library of files organised in sections
(directories). Every directory (except dot-directories and .gitignore'd paths) has a generated TOC: one line
per entry (name, one-line summary, size in tokens), at INDEX.md (.index/INDEX.md where the user keeps an
INDEX.md of their own). Navigate by reading TOC pages (read_index), not by listing everything; open an
entry by its path. When you do not know a name's section, use find. Write notes with write_file /
edit_file; the indexer adds them to the TOCs within seconds. Paths are library paths ('notes/plan.md')."""


@dataclass
class ServerOptions:
    """How one MCP server serves its library: ``read_only`` refuses every write tool (EROFS);
    ``response_tokens`` bounds one response; ``max_write_bytes`` one written content; ``indexer`` starts
    an indexer when none runs; ``poll_s`` is the TOC-notification poll interval; ``inline_tools`` runs tools
    on the event loop (stdio: one client) instead of worker threads; ``indexer_restart_wait_s``
    (``mcp.indexer_restart_wait_s``) is how long a restart of a dead indexer waits for one still shutting
    down, seconds (:class:`IndexerKeeper`)."""

    read_only: bool = False
    response_tokens: int = RESPONSE_TOKENS
    max_write_bytes: int = MAX_WRITE_BYTES
    indexer: bool = True
    poll_s: float = POLL_S
    inline_tools: bool = False
    indexer_restart_wait_s: float = RESTART_WAIT_S


def page_uri(path: bytes) -> str:
    """``library://`` URI of a TOC page path (``/notes/INDEX.md`` → ``library://notes/INDEX.md``)."""
    return URI_ROOT + show(path).lstrip("/")


class LibraryTools:
    """libraryfs's own tools beside the filesystem ones: ``read_index``, ``find``, ``status``."""

    def __init__(self, reg: ToolRegistry) -> None:
        self.reg = reg
        self.ops = reg.ops
        self.terms = termindex.Reader(term_index_path(reg.libdir))  # read-only, one connection per thread

    def register(self) -> None:
        """Add the tools to the registry."""
        self.reg.add(self.read_index, "read_index", "Read a directory's INDEX.md page", READ)
        self.reg.add(
            self.find,
            "find",
            "Find entries and directories by name, defined name or content (the term index)",
            READ,
        )
        self.reg.add(self.status, "status", "Indexer and library status", READ)

    def read_index(self, path: str = "/", page: int = 0) -> CallToolResult:
        """Read a directory's table of contents: its INDEX.md (page 0) or a further page of a large
        directory (.index/NNNN.md, page ≥ 1). Each line: an entry's name as a link, a one-line summary and
        its size in tokens (a size every file shares is said once, on the page head; a page that says
        `files: ../NAME` lists plain names without their link; on a page that says `"…" = the file's whole
        text`, a line `- name — "text"` quotes a tiny file's entire content: no need to read it); `links`
        gives each entry and page as a library path (page links lead to further pages)."""
        p = self.reg.path(path)
        if page < 0:
            raise ValueError("page must be ≥ 0")
        if page == 0:  # INDEX.md, or .index/INDEX.md where INDEX.md is the user's (docs/posix.md)
            file = self.ops.page0_path(p)
        else:
            file = p.rstrip(b"/") + b"/" + PAGES_DIR + b"/" + page_name(page)
        try:
            data = self.ops.read(file)
        except LibraryError as e:
            raise at_path(e, file) from None
        text = data.decode("utf-8", "replace")
        where = file.rsplit(b"/", 1)[0]
        out_links = []
        for target in links(data):  # relative to the page's directory; normpath keeps them in the library
            full = os.path.normpath(where + b"/" + target)
            out_links.append({"path": show(full), "kind": "page" if self._is_page(full) else "entry"})
        shown, cut = self.reg.budget.fit(text)
        if cut:
            shown += f"\n{MARKER}: read the rest with read_text_file path={show(file)} offset={len(shown.encode())}]"
        return result(shown, path=show(file), page=page, links=out_links, truncated=cut)

    def _is_page(self, path: bytes) -> bool:
        """Whether a TOC link to ``path`` leads to a generated TOC page: one under a ``.index/`` directory, or
        an ``INDEX.md`` that is generated (:meth:`LibraryOps.generated`). A user's own stored ``INDEX.md``,
        which a TOC lists as an entry (docs/posix.md "INDEX.md is the user's"), is an entry: it was labelled a
        page by its name alone."""
        if b"/" + PAGES_DIR + b"/" in path:
            return True
        parent, _, name = path.rpartition(b"/")
        return name == INDEX_FILE.encode() and self.ops.generated(name, parent or b"/")

    def find(self, term: str, limit: int = 20) -> CallToolResult:
        """Find library entries and directories without knowing their section (deterministic, no model):
        exact file names, then entries defining `term` (`json.dumps`, `lru_cache`), then BM25 over names,
        defined names and content (the term index, :mod:`libraryfs.index.termindex`)."""
        check_term(term)  # the CLI's rule: 1–255 bytes, not blank, no NUL (EINVAL / ENAMETOOLONG)
        if not 1 <= limit <= 200:
            raise ValueError("limit must be 1–200")
        with self.ops.lock, self.ops.view.store.read() as t:
            found = find_ranked(t, self.terms.get(), term, limit)
        paths = found.paths
        hits = []
        for p in paths:
            try:
                meta = self.ops.entry_meta(p)
            except LibraryError:
                continue
            hits.append({"path": show(p), "summary": meta.get("summary"), "tokens": meta.get("tokens")})
        lines = [f"{h['path']} — {h['summary'] or ''}".rstrip(" —") for h in hits]
        text, shown = self.reg.budget.fit_lines(lines)
        cut = shown < len(hits) or found.cut
        if cut:
            text += f"\n{MARKER}: {found.total - shown} more; raise limit or narrow the term]"
        return result(text or f"No entries match {term!r}", term=term, matches=hits[:shown], truncated=cut)

    def status(self) -> CallToolResult:
        """The library's state: the indexer (running, backlog, last pass), the TOC generation, the mount if
        any, and what this server has read (pages, entries, tokens)."""
        with self.ops.lock, self.ops.view.store.read() as t:
            st = self.ops.view.status(t)
            backlog = index_backlog(t)
        st.pop("mount_started_ns", None)
        st["backlog"] = backlog
        st["indexer_pid"] = indexer_pid(self.reg.libdir)
        st["mount"] = mount_info(self.reg.libdir, self.ops.view.store)
        st["mcp"] = {"pid": os.getpid(), "read_only": self.ops.read_only, "tools": len(self.reg.names)}
        st["reads"] = self.ops.view.stats.to_json()
        doc = json.loads(json.dumps(st, default=str))
        return result(json.dumps(doc, indent=1), **doc)


def register_features(reg: ToolRegistry) -> list[str]:
    """Add the tools of every installed feature that has some (``Feature.mcp_tools``, ``"module:fn"``,
    ``fn(registry)``); returns the features whose tools were added. A feature that fails is logged."""
    from libraryfs.hooks import features, missing_extra

    added = []
    for f in features():
        spec = getattr(f, "mcp_tools", None)
        if not spec or missing_extra(f):
            continue
        module, _, attr = spec.partition(":")
        try:
            getattr(importlib.import_module(module), attr)(reg)
            added.append(f.name)
        except Exception as e:  # a broken feature must not stop the server
            log.warning("%s: MCP tools not added: %s", f.name, e)
    return added


class LegacySubscriptions:
    """``resources/subscribe`` / ``unsubscribe`` for clients on protocol versions before 2026-07-28 (which
    have no ``subscriptions/listen``): which session listens to which URI; :meth:`publish` sends each a
    ``notifications/resources/updated``. A session whose send fails is forgotten."""

    def __init__(self) -> None:
        self.sessions: dict[int, tuple[Any, set[str]]] = {}

    def install(self, server: MCPServer) -> None:
        """Serve the two methods on ``server`` (through its low-level server: ``MCPServer`` has no public
        hook for them in mcp 2.x, pinned ``<3``); the capability ``resources.subscribe`` follows."""
        low = server._lowlevel_server
        low.add_request_handler("resources/subscribe", types.SubscribeRequestParams, self.subscribe)
        low.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, self.unsubscribe)

    async def subscribe(self, ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        """Remember that this session listens to ``params.uri``."""
        self.sessions.setdefault(id(ctx.session), (ctx.session, set()))[1].add(str(params.uri))
        return types.EmptyResult()

    async def unsubscribe(self, ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        """Forget that this session listens to ``params.uri``."""
        entry = self.sessions.get(id(ctx.session))
        if entry is not None:
            entry[1].discard(str(params.uri))
        return types.EmptyResult()

    async def publish(self, uri: str) -> None:
        """Tell every session subscribed to ``uri`` that it changed."""
        for key, (session, uris) in list(self.sessions.items()):
            if uri not in uris:
                continue
            try:
                await session.send_resource_updated(uri)
            except Exception:  # the session is gone (client disconnected): forget it
                self.sessions.pop(key, None)


class Served:
    """One server over one library: the store, the view, the :class:`MCPServer`, its subscription bus."""

    def __init__(self, libdir: str, opts: ServerOptions) -> None:
        self.libdir = os.path.abspath(libdir)
        self.opts = opts
        self.store = Store(self.libdir, readonly=False)
        self.view = LibraryView(
            self.store,
            read_only=opts.read_only,
            finder=finder_for(self.libdir),
            count_tokens=None,
            mount_alive=self._mount_alive,
        )
        self.ops = LibraryOps(self.view, mount_probe=self._mountpoint)
        self.bus = InMemorySubscriptionBus()
        self.server = MCPServer(
            "libraryfs",
            title="libraryfs",
            instructions=INSTRUCTIONS,
            version=__version__,
            subscriptions=self.bus,
            log_level="WARNING",
        )
        self.registry = ToolRegistry(
            self.server, self.ops, self.libdir, Budget(opts.response_tokens), inline=opts.inline_tools
        )
        FsTools(self.registry, max_write_bytes=opts.max_write_bytes).register()
        LibraryTools(self.registry).register()
        self.features = register_features(self.registry)
        self._resources()
        self.legacy = LegacySubscriptions()
        self.legacy.install(self.server)
        self.keeper: IndexerKeeper | None = None  #: the indexer this server started (set by its transport)

    def _mount_alive(self) -> bool:
        """Whether a mount server of this library may be running now: a process holds ``mount.lock`` (taken
        before the server opens the store, held until it exits; an unreadable lock counts as held)."""
        try:
            return lock_holder(self.libdir, MOUNT_LOCK) is not None
        except OSError:
            return True

    def _mountpoint(self) -> str | None:
        info = mount_info(self.libdir, self.store)
        return info["mountpoint"] if info else None

    def _resources(self) -> None:
        ops = self.ops

        def page(path: bytes) -> str:
            """A TOC page's text (UTF-8, replacement for bad bytes) at ``path``; a :class:`LibraryError`
            becomes the MCP SDK's ``ResourceError``."""
            try:
                return ops.read(path).decode("utf-8", "replace")
            except LibraryError as e:
                raise ResourceError(f"{show(path)}: {e}") from None

        @self.server.resource(URI_ROOT + INDEX_FILE, name="INDEX.md", mime_type="text/markdown")
        def master_toc() -> str:
            """The library's master TOC: one line per section."""
            return page(ops.page0_path(b"/"))

        @self.server.resource(
            URI_ROOT + "{+path}/" + INDEX_FILE, name="section INDEX.md", mime_type="text/markdown"
        )
        def section_toc(path: str) -> str:
            """A section's TOC: one line per entry (name, summary, tokens)."""
            try:
                p = clean_path(path)
            except LibraryError as e:
                raise ResourceError(str(e)) from None
            return page(ops.page0_path(p))  # INDEX.md, or .index/INDEX.md where INDEX.md is the user's

    async def notify_tocs(self) -> None:
        """Publish ``ResourceUpdated`` for each TOC page the indexer rewrites (polls the TOC generation);
        runs until cancelled, once per process (beside the transport, not per session)."""
        watcher = TocWatcher(self.store)
        while True:
            if self.keeper is not None:
                await self.keeper.check()
            try:
                with self.ops.lock:
                    paths = watcher.poll()
            except LibraryError as e:
                log.warning("TOC watch failed: %s", e)
                paths = []
            for p in paths:
                await self.bus.publish(ResourceUpdated(uri=page_uri(p)))
                await self.legacy.publish(page_uri(p))
            await anyio.sleep(self.opts.poll_s)

    def close(self) -> None:
        """Sync and close the store."""
        with contextlib.suppress(LibraryError):
            if not self.opts.read_only:
                self.store.sync()
        self.store.close()


@dataclass
class IndexerChild:
    """The indexer an MCP server started: its ``pid`` and ``tie_fd``, the write end of the pipe that ties it
    to this server (:func:`libraryfs.layout.tie_pipe`): when this process exits, however (``kill -9``
    included), the kernel closes it and the indexer stops instead of outliving the server."""

    pid: int
    tie_fd: int


def start_indexer_if_needed(
    libdir: str, opts: ServerOptions, store: Store, wait_s: float = 10.0
) -> IndexerChild | None:
    """Start an indexer for ``libdir`` when none runs (to stop on exit: :func:`stop_indexer`), else None. One
    shutting down (its lock says ``<pid> stopping``) is waited for (up to ``wait_s`` seconds), then replaced
    if it is gone by then. Blocks that long: not for an event loop (:class:`IndexerKeeper` runs it in a
    thread).

    ``indexer.lock`` is taken here and handed to the indexer (:func:`~libraryfs.layout.adopt_lock`), as
    ``libraryfs mount`` does: from the first read on, no TOC says "the indexer is not running" while the
    indexer process starts up. A lock another process took meanwhile (``libraryfs index``) is left to it."""
    if opts.read_only or not opts.indexer:
        return None
    dying = lock_stopping(libdir, INDEXER_LOCK)
    if dying and wait_s > 0:
        wait_exit(dying, wait_s)
    if indexer_pid(libdir):
        return None
    try:
        lock_fd = acquire_lock(libdir, INDEXER_LOCK)
    except Busy:
        return None
    # the file names no holder until the indexer's pid is known (hand_over_lock): this server's pid there
    # would be read as the indexer's (`status`, a stop that kills it) while the indexer is being spawned
    os.ftruncate(lock_fd, 0)
    from libraryfs.daemon.launcher import start_indexer

    info = mount_info(libdir, store)
    read_fd, write_fd = tie_pipe()
    try:
        pid = start_indexer(libdir, info["mountpoint"] if info else None, tie_fd=read_fd, lock_fd=lock_fd)
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
        os.close(lock_fd)  # the indexer holds it now (or, if it never started, nobody does)
    log.info("started the indexer (pid %d)", pid)
    return IndexerChild(pid, write_fd)


def stop_indexer(child: IndexerChild | None) -> None:
    """Stop the indexer this server started: SIGTERM and untie it (it finishes its pass and exits)."""
    if child:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGTERM)
        os.close(child.tie_fd)


class IndexerKeeper:
    """The indexer an MCP server started, kept running: :meth:`check` (each TOC poll) notices that it
    exited — killed, crashed, stopped by a lost lease — says so in the server's log with the last line of
    ``logs/indexer.log``, and starts another (unless an indexer of someone else runs by then, e.g. a
    mount's). At most :data:`RESTARTS` restarts in :data:`RESTART_WINDOW_S` seconds; then it gives up,
    logged once (``status`` shows no indexer). Without it, TOCs silently stopped following writes.

    An indexer this server did not start — one that ran when it started (a mount's, a user's ``libraryfs
    indexer``) — is not its to restart, but when it is gone and no other runs (its mount was unmounted,
    which stops it), :meth:`check` starts one (:meth:`take_over`, counted like a restart): before, the
    server went on taking writes that no indexer would ever index.

    A restart may wait up to ``opts.indexer_restart_wait_s`` seconds (``mcp.indexer_restart_wait_s``,
    default :data:`RESTART_WAIT_S`) for an indexer that is shutting down (its lock says ``<pid> stopping``)
    before starting one, so it runs in a worker thread: on the event loop it stalled every MCP request
    meanwhile. :attr:`lock` orders a restart against :meth:`stop` (the
    server's shutdown, on another thread): once :meth:`stop` has run, no indexer is started, and one
    started just before is the one it stops. ``store_lock`` is held while the store is read (the
    mountpoint the new indexer files through): the server's :attr:`LibraryOps.lock`. A restart that cannot
    spawn (``OSError``: fork/exec, the indexer's log cannot be opened) is logged and tried again at the next
    TOC poll (within the same restart count); the server keeps serving meanwhile."""

    RESTARTS = 5
    RESTART_WINDOW_S = 60.0

    def __init__(
        self,
        libdir: str,
        opts: ServerOptions,
        store: Store,
        store_lock: contextlib.AbstractContextManager[Any] | None = None,
    ) -> None:
        self.libdir, self.opts, self.store = libdir, opts, store
        self.store_lock = store_lock if store_lock is not None else threading.RLock()
        self.lock = threading.Lock()  #: held while :attr:`child` changes (restart, stop)
        self.stopping = threading.Event()  #: set by :meth:`stop`: start nothing after it
        self.child = start_indexer_if_needed(libdir, opts, store)
        self.restarts: list[float] = []  # monotonic times of the restarts in the window
        self.failed: tuple[IndexerChild, str] | None = None  #: the exited child whose restart failed to spawn
        self.gave_up = False  #: too many restarts in the window: start nothing more (logged once)

    async def check(self) -> None:
        """Restart the indexer if it exited (see the class doc). Cheap while it runs (one ``waitpid`` on the
        event loop); the restart itself runs in a worker thread (:meth:`restart`), awaited: the next TOC poll
        waits for it, MCP requests do not. Cancelling the caller abandons that thread to finish on its own
        (it starts nothing once :meth:`stop` has run)."""
        if self.stopping.is_set():
            return
        failed, self.failed = self.failed, None
        if failed is not None:  # the last restart could not spawn: try again (counted in the window)
            await anyio.to_thread.run_sync(self.restart, *failed, abandon_on_cancel=True)
            return
        child = self.child
        if child is None:
            if (
                not self.gave_up
                and self.opts.indexer
                and not self.opts.read_only
                and not indexer_pid(self.libdir)
            ):
                await anyio.to_thread.run_sync(self.take_over, abandon_on_cancel=True)
            return
        how = child_exit(child.pid)  # reaps it: its pid is free for reuse from now on, so forget it now
        if how is None:
            return
        with self.lock:  # held only briefly by anyone (never across the restart's wait)
            if self.child is not child:
                return
            self.child = None
        os.close(child.tie_fd)
        await anyio.to_thread.run_sync(self.restart, child, how, abandon_on_cancel=True)

    def restart(self, child: IndexerChild, how: str) -> None:
        """Replace ``child``, which exited (``how``: :func:`child_exit`'s words) and which :meth:`check` has
        forgotten: log it, wait for an indexer that is shutting down (up to ``opts.indexer_restart_wait_s``
        seconds, cut short by :meth:`stop`), start another unless :meth:`stop` ran meanwhile. Blocks: call it
        from a worker thread."""
        from libraryfs.layout import log_path, pid_alive
        from libraryfs.probes import last_log_line

        last = last_log_line(log_path(self.libdir, "indexer")) or "(no log line)"
        now = time.monotonic()
        if self._budget_spent(now, f"the indexer (pid {child.pid}) {how}: {last}; not restarted"):
            return
        self.restarts.append(now)
        log.warning("the indexer (pid %d) %s: %s; starting another", child.pid, how, last)
        dying = lock_stopping(self.libdir, INDEXER_LOCK)
        wait_s = self.opts.indexer_restart_wait_s
        if dying:
            log.info("waiting up to %g s for the indexer (pid %d) that is shutting down", wait_s, dying)
        deadline = time.monotonic() + wait_s
        while dying and pid_alive(dying) and time.monotonic() < deadline:
            if self.stopping.wait(0.05):
                return
        with self.lock:
            if self.stopping.is_set():
                return
            try:
                with self.store_lock:
                    self.child = start_indexer_if_needed(self.libdir, self.opts, self.store, wait_s=0)
            except (OSError, LibraryError) as e:  # fork/exec failed, store unreadable: keep serving
                log.error("could not start another indexer for pid %d: %s (the next TOC poll retries)",
                          child.pid, e)  # fmt: skip
                self.child = None
                self.failed = (child, how)
                return
            new = self.child
        if new:
            log.info("started another indexer (pid %d) for pid %d", new.pid, child.pid)
        else:
            log.warning("did not start another indexer for pid %d: another indexer runs now", child.pid)

    def _budget_spent(self, now: float, what: str) -> bool:
        """Drop the restarts older than :data:`RESTART_WINDOW_S` from the window; when :data:`RESTARTS` remain,
        log ``what`` with the count as an error, give up for good (:attr:`gave_up`) and return True."""
        self.restarts = [t for t in self.restarts if now - t < self.RESTART_WINDOW_S]
        if len(self.restarts) < self.RESTARTS:
            return False
        log.error(
            "%s (%d restarts in %.0f s): TOCs no longer follow writes until an indexer runs"
            " (`libraryfs mount` or restart this server)",
            what, len(self.restarts), self.RESTART_WINDOW_S,
        )  # fmt: skip
        self.gave_up = True
        return True

    def take_over(self) -> None:
        """Start an indexer when this server has none of its own and none runs: the one that ran when it
        started (not its to restart) is gone — e.g. its mount was unmounted, which stops it. Counted in the
        restart window like :meth:`restart`; one that is shutting down is left to finish (the next TOC poll
        looks again). Blocks while spawning: call it from a worker thread."""
        now = time.monotonic()
        if self._budget_spent(now, "no indexer runs; none started"):
            return
        with self.lock:
            if self.stopping.is_set() or self.child is not None:
                return
            try:
                with self.store_lock:
                    self.child = start_indexer_if_needed(self.libdir, self.opts, self.store, wait_s=0)
            except (OSError, LibraryError) as e:  # fork/exec failed, store unreadable: keep serving
                self.restarts.append(now)
                log.error("no indexer runs, and starting one failed: %s (the next TOC poll retries)", e)
                return
            new = self.child
        if new:
            self.restarts.append(now)
            log.warning("no indexer runs (the one that ran when this server started is gone): started one"
                        " (pid %d)", new.pid)  # fmt: skip

    def stop(self) -> None:
        """Stop the indexer (:func:`stop_indexer`) and start none after this, even from a restart under way
        in its thread (which gives up its wait within 0.05 s). Waits for a restart's start, not its wait."""
        self.stopping.set()
        with self.lock:
            child, self.child = self.child, None
        stop_indexer(child)
