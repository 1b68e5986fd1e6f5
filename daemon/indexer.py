"""The indexer daemon: tails the journal and keeps every directory's TOC current (ARCHITECTURE §1, §4).

One pass (:meth:`Indexer.run_once`):

1. read the journal records after the persisted cursor;
2. for each changed entry, hash its content; if the hash changed, count its tokens and ask the builder for a
   one-line summary (results stored in ``meta``, keyed by inode, with the content hash: unchanged content is
   never summarised again); keep the ``names`` DB used by ``find``;
3. file settled entries of ``/inbox`` into sections (through the mount when it is mounted, so the kernel
   sees the move);
4. re-render the TOCs of the changed directories and of their ancestors only — deepest first, since a
   section's line in its parent carries its description and totals — each into bounded pages
   (:mod:`libraryfs.index.toc`);
5. bring the finder's term index (SQLite FTS5, :mod:`libraryfs.index.termindex`) in line for the inodes the
   pass touched (every inode at a process's first pass: reconcile after a crash);
6. commit: TOC generation + the list of rewritten directories (the mount invalidates their kernel caches),
   advance the cursor, trim consumed records, and store the directories still owed a TOC (deferred until
   they settle: ``CFG_TOC_PENDING``) in the same transaction — their records are consumed, so a process
   killed before it renders them must find them there at its restart.

A stop (SIGTERM: :attr:`Indexer.stop_event`) is honoured inside a pass, between entries, builder batches
and TOCs (:class:`~libraryfs.daemon.entries.PassStopped`): the pass ends without committing its cursor, so
the next process redoes its records (the entries' meta it already stored makes that cheap). A stop that
arrives once every TOC is rendered skips only the derived term and subject indexes (a new process
reconciles them at its first pass) and commits.

Excluded directories (dot-directories such as ``.git/``, paths an ignore file matches:
:mod:`libraryfs.fs.exclude`, the same decision the view makes) cost nothing: their entries are never hashed
or summarised and their TOCs never computed; ignored entries are left out of their directory's TOC. Nothing
derived from an entry (its term-index row, ``names`` row, catalogue rows) outlives its exclusion: an ignore
file written, edited or removed, or a directory moved, makes the pass walk that subtree and drop what is
excluded now (meta included, as if excluded from the start) or examine what is included again
(:meth:`Indexer._rescope`).

It never writes to the journal itself (except by filing inbox entries, which are real moves), so it never
re-triggers on its own output. Builder (LLM) calls happen outside any transaction. Idle cost: one LMDB read
every ``poll_s`` seconds.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from libraryfs.daemon.entries import EntryUpdater, PassStopped
from libraryfs.daemon.filing import FilingFailure, InboxFiler, is_hidden
from libraryfs.daemon.llm_refresh import Refresh
from libraryfs.daemon.tocs import TocWriter
from libraryfs.errors import LibraryError, is_disk_full
from libraryfs.fs import schema as S
from libraryfs.fs.exclude import IGNORE_FILE, Chain, TocExclusion
from libraryfs.fs.store import Store, Txn, now_ns
from libraryfs.fs.tocwatch import record_rendered
from libraryfs.hooks import IndexerHook
from libraryfs.index import catalogue, names, subjects, termindex
from libraryfs.index.jobs import DeterministicBuilder, IndexBuilder
from libraryfs.index.lines import TOC_FORMAT
from libraryfs.index.names import links_of
from libraryfs.index.toc import DEFAULT_MAX_TOKENS
from libraryfs.index.tokens import count_tokens
from libraryfs.layout import term_index_path

log = logging.getLogger("libraryfs.indexer")

__all__ = ["Indexer", "PassReport", "needs_full_pass"]


@dataclass
class PassReport:
    """What one pass did (counts; seconds)."""

    records: int = 0
    entries_seen: int = 0
    summarized: int = 0
    dirs_rendered: int = 0
    pages_written: int = 0
    filed: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    cursor: int = 0

    def to_json(self) -> dict:
        """JSON-able dict."""
        return {
            "records": self.records,
            "entries_seen": self.entries_seen,
            "summarized": self.summarized,
            "dirs_rendered": self.dirs_rendered,
            "pages_written": self.pages_written,
            "filed": [list(f) for f in self.filed],
            "seconds": round(self.seconds, 4),
            "cursor": self.cursor,
        }


class Indexer(EntryUpdater, InboxFiler, TocWriter):
    """Keeps the TOCs of one library current. ``builder`` defaults to :class:`DeterministicBuilder`.

    ``mountpoint``: when the library is mounted there, inbox moves go through the mount.
    ``toc_max_tokens``: the page bound C (default: the library setting, else 2,000).
    ``hooks``: the features' indexer hooks (:mod:`libraryfs.hooks`), run by :meth:`run_forever` after each
    pass. ``heartbeat``: called at every step of a pass and of the idle loop (each read of the journal,
    each builder call, each TOC written, each hook) — the daemon's watchdog counts these as progress.
    :meth:`ask_in_background` makes the LLM builder's requests never hold up a pass (the daemon does).
    """

    def __init__(
        self,
        libdir: str,
        *,
        builder: IndexBuilder | None = None,
        mountpoint: str | None = None,
        toc_max_tokens: int | None = None,
        store: Store | None = None,
        settle_s: float = 1.0,
        batch: int = 32,
        hooks: list[IndexerHook] | None = None,
        heartbeat: Callable[[], None] | None = None,
    ) -> None:
        self.libdir = os.path.abspath(libdir)
        self.store = store or Store(self.libdir)
        self.builder: IndexBuilder = builder or DeterministicBuilder()
        self.fallback = DeterministicBuilder()
        settings = self.store.settings()
        self.max_tokens = int(toc_max_tokens or settings.get("toc_max_tokens") or DEFAULT_MAX_TOKENS)
        self.mountpoint = mountpoint
        self.settle_s = settle_s
        self.batch = batch
        self.passes = 0
        self._last_error: str | None = None
        self.last_error_time: float | None = None  # time.time() when :attr:`last_error` was recorded
        self.passes_since_error = 0  # passes begun after it that committed
        self._pass_began = 0.0  # time.time() at the start of the pass in progress
        self.last_report: PassReport | None = None
        self.state = "starting"
        self.hooks = list(hooks or [])
        self.beat = heartbeat or (lambda: None)
        self._hooks_again = False  # a hook has work left (e.g. its view's writer lock was busy)
        self._terms = None  # the term index (sqlite3 connection), opened at the first pass
        self._terms_retry: set[int] = set()  # inodes whose term-index rows a failed pass did not write
        self._terms_behind = False  # a pass began and its term-index rows are not written yet
        self._subjects = subjects.Upkeep()  # when the subject index is rebuilt (amortised)
        self.refresh = Refresh()  # provisional lines while the model's answers are on their way
        self.call_deferred: set[int] = set()
        catalogue.open_table(self.store)
        self._catalogue = catalogue.Settle()  # when an idle pass re-plans the name catalogue (amortised)
        self._catalogue_unsettled = False  # its pages changed incrementally since its last bulk plan
        self.exclusion = TocExclusion()
        self._term_scope = termindex.Scope(self.exclusion)  # what the term index may hold: the TOCs' rule
        self._hid = False  # this pass excluded what was indexed: the subject index is rebuilt at once
        self._chains: dict[int, Chain | None] = {}  # directory ino → what its ancestors say, for one pass
        self._deferred: set[int] = set()  # new directories not settled yet (daemon/tocs.py)
        self._filing_failed: dict[bytes, FilingFailure] = {}  # inbox names whose filing failed (filing.py)
        self._settle = False  # this pass defers directories that have not settled (run_once)
        self.stop_event: threading.Event | None = None  # set: end the pass in progress (run_forever sets it)

    @property
    def last_error(self) -> str | None:
        """The last error of a pass, a hook or derived-data upkeep (one line), or None; shown by ``status``
        with its age (:attr:`last_error_time`) and the passes begun after it that committed
        (:attr:`passes_since_error`), so an error that later passes got past (a disk that was full, then
        freed) does not read as a current one."""
        return self._last_error

    @last_error.setter
    def last_error(self, message: str | None) -> None:
        """Record ``message`` (None clears it) with the time; no pass has got past it yet."""
        self._last_error = message
        self.last_error_time = None if message is None else time.time()
        self.passes_since_error = 0

    def _is_excluded(self, t: Txn, dir_ino: int) -> bool:
        """Whether directory ``dir_ino`` gets no TOC (:mod:`libraryfs.fs.exclude`); cached for one pass."""
        ch = self.exclusion.chain(t, dir_ino, self._chains)
        return ch is not None and ch.place.excluded

    def _entry_excluded(self, t: Txn, parent: int, name: bytes) -> bool:
        """Whether file ``name`` of directory ``parent`` is left out of its TOC (an excluded directory, a
        name an ignore file matches: :meth:`TocExclusion.entry_excluded`); cached for one pass."""
        return self.exclusion.entry_excluded(t, parent, name, False, self._chains)

    def _rescope(
        self,
        records: list,
        dirty_dirs: set[int],
        dirty_entries: dict[int, tuple[int, bytes]],
        named: dict[int, set[tuple[int, bytes]]],
    ) -> set[int]:
        """Follow the records that can change what is excluded below a directory: an ignore file made,
        written, renamed or removed (a write to an open one names no directory: its directory is the one
        :attr:`TocExclusion.files` recorded), or a directory renamed (moved into or out of an ignored or
        dot path). Walks each such directory's subtree once (O(its inodes) reads; never for other records)
        and queues what changed side: a name excluded now that the entry's meta holds, or one included now
        that it does not (or without a summary), into ``dirty_entries`` and ``named``
        (:meth:`_update_entries` then drops or examines it); a directory
        excluded now that has TOC pages loses them (as if excluded from the start) and its parent is
        re-rendered; one included now without a TOC into ``dirty_dirs``. Returns every directory and entry
        walked: the term index syncs them (:mod:`libraryfs.index.termindex` applies the same rule)."""
        roots: set[int] = set()
        with self.store.read() as t:
            for _seq, r in records:
                if r.name == IGNORE_FILE and r.parent:
                    roots.add(r.parent)
                if r.old_name == IGNORE_FILE and r.old_parent:
                    roots.add(r.old_parent)
                if r.op == S.OP_WRITE and not r.parent and r.ino in self.exclusion.files:
                    roots.add(self.exclusion.files[r.ino])
                if r.op == S.OP_RENAME and (node := t.inode(r.ino)) is not None and node.is_dir:
                    roots.add(r.ino)
        if not roots:
            return set()
        walked: set[int] = set()
        drop: list[int] = []
        with self.store.read() as t:
            stack = list(roots)
            while stack:
                d = stack.pop()
                node = t.inode(d)
                if d in walked or node is None or not node.is_dir:
                    continue
                chain = self.exclusion.chain(t, d, self._chains)
                if chain is None:
                    continue  # detached: nothing to match
                walked.add(d)
                if d != S.ROOT_INO:
                    has_toc = t.toc_page(d, 0) is not None
                    if chain.place.excluded and has_toc:
                        drop.append(d)
                        link = t.dirparent(d)
                        if link is not None:
                            dirty_dirs.add(link[0])
                    elif not chain.place.excluded and not has_toc:
                        dirty_dirs.add(d)
                for name, child in t.iter_dir(d):
                    cn = t.inode(child)
                    if cn is None:
                        continue
                    if cn.is_dir:
                        stack.append(child)
                        continue
                    walked.add(child)
                    m = t.entry_meta(child)
                    out = chain.place.excluded or is_hidden(name) or chain.ignored(name, False)
                    held = (d, name) in links_of(m)  # a hard-linked file's other names may differ
                    if held if out else (m is None or m.summary is None or not held):
                        dirty_entries[child] = (d, name)
                        named.setdefault(child, set()).add((d, name))
                self.beat()

        def drop_pages(t: Txn) -> None:
            """The write transaction body: forget the TOC pages of the directories excluded now."""
            for d in drop:
                if t.inode(d) is not None:
                    t.put_toc_pages(d, [])

        if drop:
            self.store.run_write(drop_pages)
            self._hid = True
        return walked

    # ------------------------------------------------------------------------------------------------
    def ask_in_background(self) -> bool:
        """Write deterministic lines at once and let the model's text replace them when it arrives
        (:mod:`libraryfs.daemon.llm_refresh`); True when the builder can (an LLM builder). Call again after
        replacing :attr:`builder`."""
        return self.refresh.attach(self.builder)

    def pending(self) -> int:
        """Journal records not yet processed."""
        with self.store.read() as t:
            return max(0, t.journal_tail() - t.cfg_int(S.CFG_CURSOR))

    def run_forever(
        self, stop: threading.Event | None = None, poll_s: float = 0.2, debounce_s: float = 0.25, on_pass=None
    ) -> None:
        """Loop until ``stop`` is set: wait for journal records (polling every ``poll_s`` seconds), debounce
        (``debounce_s``, at most 2 s), run a pass, then the hooks. The state is published ``idle`` only when
        the pass and every hook are done (:func:`libraryfs.layout.wait_until_idle` relies on it)."""
        stop = self.stop_event = stop or threading.Event()
        self._write_status()
        first = True
        while not stop.is_set():
            try:
                self.beat()
                with self.store.read() as t:
                    tail, cursor = t.journal_tail(), t.cfg_int(S.CFG_CURSOR)
                    owed = t.cfg(S.CFG_TOC_PENDING) is not None  # e.g. queued by `check --repair`
                    never = needs_full_pass(t)
                    inbox = self._inbox_ino(t)
                    inbox_busy = inbox is not None and not t.dir_is_empty(inbox)
                if tail > cursor or never or first or inbox_busy or self._deferred or owed:
                    self._debounce(stop, tail, debounce_s)
                    report = self.run_once(
                        full=never,
                        final_state="hooks" if self.hooks else "idle",
                        refresh=self.refresh.ready(),
                        settle=True,
                    )
                    first = False
                    if report.records or report.dirs_rendered or report.filed or not self._deferred:
                        self._after_pass()
                    else:  # a pass that only waited for a new directory to settle: nothing for the hooks
                        self.state = "settling"
                        self._write_status()
                    if on_pass:
                        on_pass(report)
                    if inbox_busy and not report.filed and report.records == 0:
                        stop.wait(self.settle_s)
                elif self.refresh.ready():  # the model's answers arrived: replace provisional lines
                    self.run_once(refresh=True, final_state="hooks" if self.hooks else "idle")
                    self._after_pass()
                elif self._subjects.overdue() or (self._catalogue_unsettled and self._catalogue.allowed()):
                    # changes waiting for the subject index's amortised rebuild, or the catalogue's re-plan
                    self.run_once(final_state="hooks" if self.hooks else "idle")
                    self._after_pass()
                elif self._hooks_again:
                    stop.wait(poll_s)
                    self._after_pass()
                else:
                    stop.wait(poll_s)
            except PassStopped:
                log.info("pass stopped before its commit: its records are left for the next pass")
                break
            except Exception as e:  # the indexer never dies on one bad pass; the last good TOC stays
                self.last_error = f"{type(e).__name__}: {e}"
                if is_disk_full(e):  # expected: writes resume once space is freed
                    log.warning("indexer pass not committed: the disk is full (%s); retrying in 2 s", e)
                else:
                    log.error("indexer pass failed: %s\n%s", e, traceback.format_exc())
                self._write_status()
                stop.wait(2.0)
        self.publish_stopped()

    def publish_stopped(self) -> None:
        """Publish the state ``stopped`` (the loop ended; a pass stopped inside is not committed). When a
        pass left term-index rows unwritten (a stop inside it, or a failed write), note it in the index
        (:func:`libraryfs.index.termindex.mark_behind`): ``check`` then leaves that drift to the next
        process's first pass, which reconciles it."""
        if self._terms_behind or self._terms_retry:
            path = term_index_path(self.libdir)
            try:
                if self._terms is None and os.path.exists(path):  # stopped inside this process's first pass
                    self._terms = termindex.connect(path)
                if self._terms is not None:
                    termindex.mark_behind(self._terms)
            except Exception as e:  # a full disk: check reports the drift (T2) instead
                log.warning("term index: cannot note that it trails the store (%s)", e)
        self.state = "stopped"
        self._write_status()

    def _debounce(self, stop: threading.Event, tail: int, debounce_s: float) -> None:
        """Let a burst of writes finish: wait while the journal tail still moves (at most 2 s)."""
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not stop.is_set():
            stop.wait(debounce_s)
            self.beat()
            with self.store.read() as t:
                t2 = t.journal_tail()
            if t2 == tail:
                return
            tail = t2

    # ------------------------------------------------------------------------------------------------
    def run_once(
        self, full: bool = False, final_state: str = "idle", refresh: bool = False, settle: bool = False
    ) -> PassReport:
        """One indexing pass (see module docstring); ``full`` re-examines every entry and directory;
        ``refresh`` also the entries and sections whose lines are provisional (:mod:`.llm_refresh`).
        ``final_state`` is the state published at its end (``"hooks"`` while hooks are still to run).
        ``settle`` (the daemon's passes beside a live mount): a directory never indexed is rendered only
        once nothing in it changed for ``settle_s`` seconds (daemon/tocs.py); a one-shot pass renders all."""
        self._settle = settle
        t0, self._pass_began = time.monotonic(), time.time()
        if self.state != "indexing":  # `status` says so while a long pass runs (not "starting" or "idle")
            self.state = "indexing"
            self._write_status()
        rep = PassReport()
        self.beat()
        self._terms_behind = True  # until _refresh_terms: a stop from here on may leave rows behind
        self._hid = False
        self._chains.clear()
        with self.store.read() as t:
            cursor = t.cfg_int(S.CFG_CURSOR)
            records = t.journal_since(cursor, 100_000)
            owed = t.toc_pending()  # directories whose records an earlier pass consumed unrendered
        self._deferred |= owed
        rep.records = len(records)
        upto = records[-1][0] if records else cursor
        dirty_dirs, dirty_entries, dead_names, renamed, named = _changes(records)
        if full:
            self._add_everything(dirty_dirs, dirty_entries, named)
        # an ignore file or a path changed
        rescoped = self._rescope(records, dirty_dirs, dirty_entries, named)
        if refresh:
            entries, sections = self.refresh.take()
            dirty_dirs |= sections
            for ino, where in entries.items():
                dirty_entries.setdefault(ino, where)
        # 2. entries (a content-only WRITE record names no directory: the entry's names come from meta)
        dirty_dirs |= self._update_entries(dirty_entries, dead_names, rep, force=full, named=named)
        if full:  # every entry's names are written: drop the rows no name has (of an older format too)
            self._check_stop()
            names.reconcile(self.store, self.exclusion)
        # 3. inbox
        self._check_stop()
        self._file_inbox(rep)
        self._check_stop()
        self._refresh_catalogue(renamed, full, upto)
        # 4. TOCs: changed dirs and their ancestors, deepest first
        rendered: list[int] = []
        for d in self._deepest_first(dirty_dirs | self._deferred):
            self._check_stop()
            try:
                if self._render_dir(d, rep, upto):
                    rendered.append(d)
            except PassStopped:
                raise
            except Exception as e:  # one directory's failure must not stall every other directory's TOC
                if is_disk_full(e):  # the pass fails: its records stay for the next one
                    raise
                self.last_error = f"{type(e).__name__}: {e} (TOC of inode {d}; its last good TOC stays)"
                log.error("TOC of inode %d not rendered: %s\n%s", d, e, traceback.format_exc())
            self.beat()
        rep.dirs_rendered = len(rendered)
        # 5. the term index (derived: the entries' meta and the sections it reads are committed; a crash
        # before its own commit is reconciled at the next start), then the commit: the cursor and the state
        # it leaves the indexer in are published together, so a reader never sees every record consumed
        # beside the previous pass's "idle" (before this pass's hooks ran) — nor before the finder's index
        touched = set(dirty_entries) | {ino for _p, _n, ino in dead_names} | set(rendered) | renamed
        if not self._stopping():  # stopping: the next process reconciles both at its first pass
            # every directory the records name, rendered or not: one excluded now (a dot-directory, an ignored
            # path) loses its row (termindex.wanted), and no render would bring it in line; and every inode
            # below an ignore file or a directory whose path changed (_rescope)
            self._refresh_terms(touched | dirty_dirs | rescoped, full)
            # what an ignore file hides now leaves /.subjects/ in this pass, not after the amortised wait
            self._refresh_subjects(touched, full or self._hid, rep, upto, rendered)
        rep.cursor = upto
        rep.seconds = time.monotonic() - t0
        before = (self.passes, self.last_report)
        self.passes, self.last_report, self.state = (
            self.passes + 1,
            rep,
            ("settling" if self._deferred or self._catalogue_unsettled else final_state),
        )
        try:
            self._commit(upto, rendered, full, owed)
        except BaseException:
            (self.passes, self.last_report), self.state = before, "indexing"
            raise
        if self.last_error_time is not None and self._pass_began > self.last_error_time:
            self.passes_since_error += 1
        if rep.records or rep.dirs_rendered or rep.filed:
            log.info(
                "pass: %d records, %d summaries, %d TOCs, %d filed in %.3f s",
                rep.records,
                rep.summarized,
                rep.dirs_rendered,
                len(rep.filed),
                rep.seconds,
            )
        return rep

    def _add_everything(
        self,
        dirty_dirs: set[int],
        dirty_entries: dict[int, tuple[int, bytes]],
        named: dict[int, set[tuple[int, bytes]]],
    ) -> None:
        """A full pass: every directory and every entry of the library counts as changed, under every one of
        its names (``named``)."""
        with self.store.read() as t:
            for k, v in t.kv.range(S.DB_DIRENTS):
                parent, name, child = S.from_u64(k), k[8:], S.from_u64(v)
                node = t.inode(child)
                if node is None:
                    continue
                if node.is_dir:
                    dirty_dirs.add(child)
                else:
                    dirty_entries[child] = (parent, name)
                    named.setdefault(child, set()).add((parent, name))
        dirty_dirs.add(S.ROOT_INO)

    def _deepest_first(self, dirty_dirs: set[int]) -> list[int]:
        """The changed directories and all their ancestors, deepest first (a section's line in its parent
        carries its description and totals). Directories no longer reachable from the root are dropped, and
        so are excluded ones (a change inside ``.git/`` changes no TOC)."""
        expanded: dict[int, int] = {}
        with self.store.read() as t:
            for d in dirty_dirs:
                if self._is_excluded(t, d):
                    self._deferred.discard(d)  # e.g. moved into a dot-directory while it settled
                    continue
                ino = d
                depth_path = []
                while True:
                    node = t.inode(ino)
                    if node is None or not node.is_dir:
                        break
                    depth_path.append(ino)
                    if ino == S.ROOT_INO:
                        break
                    link = t.dirparent(ino)
                    if link is None:
                        depth_path = []
                        break
                    ino = link[0]
                if not depth_path:
                    self._deferred.discard(d)  # gone while it settled
                for k, a in enumerate(depth_path):
                    expanded[a] = len(depth_path) - 1 - k
        return sorted(expanded, key=lambda i: -expanded[i])

    def _stopping(self) -> bool:
        """Whether a stop was asked (:attr:`stop_event`)."""
        return self.stop_event is not None and self.stop_event.is_set()

    def _check_stop(self) -> None:
        """Raise :class:`PassStopped` when a stop was asked (the pass then ends without its commit)."""
        if self._stopping():
            raise PassStopped()

    def _commit(
        self, upto: int, rendered: list[int], full: bool = False, owed: set[int] | None = None
    ) -> None:
        """End of a pass in one write transaction: TOC generation + 1, the list of rewritten directories (the
        mount invalidates their kernel caches), cursor advanced to ``upto``, consumed records trimmed, the
        directories still owed a TOC (``CFG_TOC_PENDING``: those deferred now, plus any queued since the pass
        read ``owed``), and the indexer's status (:attr:`state` as the caller set it) —
        :func:`libraryfs.layout.wait_until_idle` reads the cursor and the state in one transaction and relies
        on them changing together; a full pass also records the TOC text rules it used
        (``config[toc_format]``). The cursor never covers a record whose directory is neither rendered nor
        owed: a crash after this commit loses no TOC."""
        status = self._status_json()
        deferred = set(self._deferred)

        def fin(t: Txn) -> None:
            """The write transaction body of :meth:`_commit`: status, TOC generation + 1, dirty list (first
            5000; and the log of the last commits, :func:`~libraryfs.fs.tocwatch.record_rendered`), cursor (never backwards), TOC format on a full pass, journal trimmed to ``upto``."""
            t.put_cfg(S.CFG_INDEXER_STATUS, status)
            gen = t.cfg_int(S.CFG_TOC_GEN) + 1
            t.put_cfg(S.CFG_TOC_GEN, S.u64(gen))
            record_rendered(t, gen, rendered)  # the last commit's and the log of the last ones
            if upto > t.cfg_int(S.CFG_CURSOR):
                t.put_cfg(S.CFG_CURSOR, S.u64(upto))
            if full:
                t.put_cfg(S.CFG_TOC_FORMAT, b"%d" % TOC_FORMAT)
            t.put_toc_pending((t.toc_pending() - (owed or set())) | deferred)
            t.journal_trim(upto)

        self.store.run_write(fin)

    def _refresh_catalogue(self, renamed: set[int], full: bool, upto: int) -> None:
        """Bring the name catalogue up to date (:mod:`libraryfs.index.catalogue`); a renamed directory or a
        full pass rebuilds it (paths below moved). When no journal record arrived after ``upto`` (the
        indexer is about to go idle) and :class:`~libraryfs.index.catalogue.Settle` allows, pages changed
        incrementally are re-planned in bulk, so they depend on the names alone, not on how passes cut
        them; until then the indexer says ``settling``. A failure is recorded and never stops the pass."""
        try:
            with self.store.read() as t:
                moved_dir = any((node := t.inode(i)) is not None and node.is_dir for i in renamed)
                idle = t.journal_tail() <= upto
            if moved_dir or full:
                self.store.run_write(catalogue.mark_rebuild)
            settle = idle and self._catalogue.allowed()
            t0 = time.monotonic()
            with self.store.read() as t:
                before = catalogue.unsettled(t)
            catalogue.refresh(self.store, self.max_tokens, count_tokens, settle=settle)
            with self.store.read() as t:
                self._catalogue_unsettled = catalogue.unsettled(t)
            if settle and before and not self._catalogue_unsettled:
                self._catalogue.done(time.monotonic() - t0)
        except Exception as e:  # derived data: the next pass (or a full one) retries
            self._derived_failed("catalogue", "name catalogue not refreshed", e)
        self.beat()

    def resync_terms(self) -> None:
        """Reconcile every row of the term index at the next pass, as at this process's first (after standing
        by: another host's indexer changed the store meanwhile, and this directory's term index is local)."""
        if self._terms is not None:
            self._terms.close()
            self._terms = None
        self._subjects.built = False

    def _refresh_terms(self, touched: set[int], full: bool) -> None:
        """Bring the term index in line with the store for ``touched`` inodes (every inode at this
        process's first pass and at a full pass: :func:`libraryfs.index.termindex.upkeep`). A failure is
        recorded and never stops the pass; the inodes it did not write are synced again at the next pass (a
        full disk: SQLite rolled the whole transaction back)."""
        pending = self._terms_retry | touched
        try:
            self._terms, fixed = termindex.upkeep(
                self.store, term_index_path(self.libdir), self._terms, pending, full, self._term_scope
            )
            self._terms_retry = set()
            self._terms_behind = False
            if fixed:
                log.info("term index: %d rows out of line fixed", fixed)
        except Exception as e:
            self._terms_retry = pending
            self._derived_failed("term index", "term index not updated", e)
        self.beat()

    def _refresh_subjects(
        self, touched: set[int], full: bool, rep: PassReport, upto: int, rendered: list[int]
    ) -> None:
        """Rebuild the subject index from the term index when due (amortised:
        :class:`libraryfs.index.subjects.Upkeep`); when its line in the master ``INDEX.md`` changed, render
        the root again (its TOC was rendered before the term index caught up). A failure is recorded and
        never stops the pass (derived data: the next pass retries)."""
        self._subjects.note(touched - set(rendered))  # entries changed (a re-rendered TOC changes no word)
        if self._terms is None:
            self._subjects.retry_later()
            return
        try:
            with self.store.read() as t:
                if not self._subjects.due(t, self.max_tokens, full):
                    return
                before = subjects.master_lines(t)
            subjects.rebuild(self.store, self._terms, self.max_tokens, count_tokens)
            self._subjects.done()
            with self.store.read() as t:
                changed = subjects.master_lines(t) != before
            if changed and self._render_dir(S.ROOT_INO, rep, upto) and S.ROOT_INO not in rendered:
                rendered.append(S.ROOT_INO)
        except Exception as e:
            self._subjects.retry_later()
            self._derived_failed("subject index", "subject index not rebuilt", e)
        self.beat()

    def _derived_failed(self, what: str, message: str, e: Exception) -> None:
        """Record that the upkeep of derived data ``what`` failed. A full disk is expected (the store's map
        or the disk holding the term index cannot grow): one line, retried at the next pass; anything else
        is logged with its traceback."""
        self.last_error = f"{what}: {type(e).__name__}: {e}"
        if is_disk_full(e):
            log.warning("%s: the disk is full (%s); retrying at the next pass", message, e)
        else:
            log.warning("%s: %s\n%s", message, e, traceback.format_exc())

    # ------------------------------------------------------------------------------------------------
    def _after_pass(self) -> None:
        """Run the hooks, then publish ``idle`` (or ``hooks`` while one has work left)."""
        if not self.hooks:
            return
        self._hooks_again = self._run_hooks()
        settling = self._deferred or self._catalogue_unsettled
        self.state = "hooks" if self._hooks_again else "settling" if settling else "idle"
        self._write_status()

    def _run_hooks(self) -> bool:
        """Each feature hook once (:meth:`libraryfs.hooks.IndexerHook.after_pass`); True if one has work left.

        A hook writes its derived view through the mount, so the kernel and the journal see it (the next
        pass indexes it). A failing hook is logged and recorded in ``last_error``; it never stops the indexer.
        """
        again = False
        for hook in self.hooks:
            if self._stopping():
                break
            self.beat()
            try:
                result = hook.after_pass()
            except Exception as e:
                self.last_error = f"{hook.name}: {type(e).__name__}: {e}"
                log.warning("%s hook failed: %s", hook.name, e)
                continue
            for line in result.lines:
                log.info("%s: %s", hook.name, line)
            again = again or result.again
        self.beat()
        return again

    # ------------------------------------------------------------------------------------------------
    def _write_status(self) -> None:
        """Publish :meth:`_status_json` (its own write transaction; a store error is logged, never raised)."""
        status = self._status_json()
        try:
            self.store.run_write(lambda t: t.put_cfg(S.CFG_INDEXER_STATUS, status))
        except LibraryError as e:
            log.warning("could not write indexer status: %s", e)

    def _status_json(self) -> bytes:
        """The ``CFG_INDEXER_STATUS`` record: pid, state, passes, last pass, last error, builder, TOC bound."""
        rep = self.last_report
        builder_status = {}
        try:
            builder_status = self.builder.status()
        except Exception as e:  # pragma: no cover - a broken builder must not break status
            builder_status = {"error": str(e)}
        status = {
            "pid": os.getpid(),
            "state": self.state,
            "passes": self.passes,
            "last_pass": rep.to_json() if rep else None,
            "last_error": self.last_error,
            "last_error_time": self.last_error_time,
            "passes_since_error": self.passes_since_error,
            # inodes whose term-index rows a failed write left out (a full disk): the finder adds the store's
            # own scan while this is not 0 (libraryfs.index.find.find_ranked)
            "terms_pending": len(self._terms_retry),
            "builder": builder_status,
            "llm_refresh": self.refresh.status(),
            "toc_max_tokens": self.max_tokens,
            "updated_ns": now_ns(),
        }
        return S.dumps(status)


def needs_full_pass(t: Txn) -> bool:
    """Whether the library's next pass must be a full one: never indexed, TOCs rendered under other text
    rules (``config[toc_format]``), or ``names`` rows of an older format (``config[names_format]``)."""
    return (
        t.cfg(S.CFG_TOC_GEN) is None or t.cfg(S.CFG_TOC_FORMAT) != b"%d" % TOC_FORMAT or not names.current(t)
    )


def _changes(
    records: list,
) -> tuple[
    set[int],
    dict[int, tuple[int, bytes]],
    list[tuple[int, bytes, int]],
    set[int],
    dict[int, set[tuple[int, bytes]]],
]:
    """What journal ``records`` (``[(seq, record)]``) changed: directories to re-render, entries to
    re-examine (``{ino: (parent, name)}``; ``(0, b"")`` for a content-only write, or an unlink that left
    the inode other names), names that died (``[(parent, name, ino)]``, to drop from the ``names`` DB),
    renamed inodes (a renamed directory moves the catalogue's paths below it), and every name the records
    gave each inode (``{ino: {(parent, name)}}``: a create and a link in one pass are two names)."""
    dirty_dirs: set[int] = set()
    dirty_entries: dict[int, tuple[int, bytes]] = {}
    dead_names: list[tuple[int, bytes, int]] = []
    renamed: set[int] = set()
    named: dict[int, set[tuple[int, bytes]]] = {}
    for _seq, r in records:
        if r.parent:
            dirty_dirs.add(r.parent)
        if r.old_parent:
            dirty_dirs.add(r.old_parent)
        if r.op in (S.OP_CREATE, S.OP_WRITE, S.OP_SYMLINK, S.OP_LINK, S.OP_RENAME):
            if r.op == S.OP_WRITE and not r.parent:
                dirty_entries.setdefault(r.ino, (0, b""))
            else:
                dirty_entries[r.ino] = (r.parent, r.name)
                named.setdefault(r.ino, set()).add((r.parent, r.name))
        if r.op in (S.OP_MKDIR, S.OP_RENAME):
            dirty_dirs.add(r.ino)
        if r.op == S.OP_RENAME and r.old_name:
            dead_names.append((r.old_parent, r.old_name, r.ino))
            renamed.add(r.ino)
        if r.op in (S.OP_UNLINK, S.OP_RMDIR):
            dead_names.append((r.parent, r.name, r.ino))
        if r.op == S.OP_UNLINK:  # a hard-linked file keeps its other names: its meta drops this one
            dirty_entries.setdefault(r.ino, (0, b""))
    return dirty_dirs, dirty_entries, dead_names, renamed, named


# the process entry: `python -m libraryfs.daemon.indexer LIBDIR [options]` (flags parsed by the CLI)
if __name__ == "__main__":
    from libraryfs.cli.mount_cmds import indexer_main

    indexer_main()
