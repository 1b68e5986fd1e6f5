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
5. commit: TOC generation + the list of rewritten directories (the mount invalidates their kernel caches),
   advance the cursor, trim consumed records.

It never writes to the journal itself (except by filing inbox entries, which are real moves), so it never
re-triggers on its own output. Builder (LLM) calls happen outside any transaction. Idle cost: one LMDB read
every ``poll_s`` seconds.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import traceback
from dataclasses import dataclass, field, replace

from libraryfs.daemon.filing import (  # noqa: F401 (re-exported)
    INBOX,
    UNSORTED,
    InboxFiler,
    _is_live,
    is_hidden,
)
from libraryfs.errors import LibraryError
from libraryfs.fs import schema as S
from libraryfs.fs.store import Store, Txn, now_ns
from libraryfs.index.jobs import DeterministicBuilder, EntryDoc, IndexBuilder, SectionDoc
from libraryfs.index.toc import DEFAULT_MAX_TOKENS, Item, render
from libraryfs.index.tokens import count_tokens

log = logging.getLogger("libraryfs.indexer")

HASH_LIMIT_BYTES = 64 << 20  #: larger files are identified by (size, generation) instead of a content hash
TOKEN_LIMIT_BYTES = 1 << 20  #: larger files get an estimated token count (bytes / 4), marked "~"


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


class Indexer(InboxFiler):
    """Keeps the TOCs of one library current. ``builder`` defaults to :class:`DeterministicBuilder`.

    ``mountpoint``: when the library is mounted there, inbox moves go through the mount.
    ``toc_max_tokens``: the page bound C (default: the library setting, else 2,000).
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
        self.last_error: str | None = None
        self.last_report: PassReport | None = None
        self.state = "starting"
        self._episodes = None  # the episode builder, created when an episodes/ section appears

    # ------------------------------------------------------------------------------------------------
    def pending(self) -> int:
        """Journal records not yet processed."""
        with self.store.read() as t:
            return max(0, t.journal_tail() - t.cfg_int(S.CFG_CURSOR))

    def run_forever(
        self, stop: threading.Event | None = None, poll_s: float = 0.2, debounce_s: float = 0.25, on_pass=None
    ) -> None:
        """Loop until ``stop`` is set: wait for journal records, debounce, run a pass."""
        stop = stop or threading.Event()
        self._write_status()
        first = True
        while not stop.is_set():
            try:
                with self.store.read() as t:
                    tail, cursor = t.journal_tail(), t.cfg_int(S.CFG_CURSOR)
                    never = t.cfg(S.CFG_TOC_GEN) is None
                    inbox = self._inbox_ino(t)
                    inbox_busy = inbox is not None and not t.dir_is_empty(inbox)
                if tail > cursor or never or first or inbox_busy:
                    # debounce: let a burst of writes finish (bounded)
                    deadline = time.monotonic() + 2.0
                    while time.monotonic() < deadline and not stop.is_set():
                        stop.wait(debounce_s)
                        with self.store.read() as t:
                            t2 = t.journal_tail()
                        if t2 == tail:
                            break
                        tail = t2
                    report = self.run_once(full=never)
                    self._run_hooks()
                    first = False
                    if on_pass:
                        on_pass(report)
                    if inbox_busy and not report.filed and report.records == 0:
                        stop.wait(self.settle_s)
                else:
                    stop.wait(poll_s)
            except Exception as e:  # the indexer never dies on one bad pass; the last good TOC stays
                self.last_error = f"{type(e).__name__}: {e}"
                log.error("indexer pass failed: %s\n%s", e, traceback.format_exc())
                self._write_status()
                stop.wait(2.0)
        self.state = "stopped"
        self._write_status()

    # ------------------------------------------------------------------------------------------------
    def run_once(self, full: bool = False) -> PassReport:
        """One indexing pass (see module docstring); ``full`` re-examines every entry and directory."""
        t0 = time.monotonic()
        self.state = "indexing"
        rep = PassReport()
        with self.store.read() as t:
            cursor = t.cfg_int(S.CFG_CURSOR)
            records = t.journal_since(cursor, 100_000)
        rep.records = len(records)
        upto = records[-1][0] if records else cursor
        dirty_dirs: set[int] = set()
        dirty_entries: dict[int, tuple[int, bytes]] = {}
        dead_names: list[tuple[bytes, int]] = []
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
            if r.op in (S.OP_MKDIR, S.OP_RENAME):
                dirty_dirs.add(r.ino)
            if r.op == S.OP_RENAME and r.old_name:
                dead_names.append((r.old_name, r.ino))
            if r.op in (S.OP_UNLINK, S.OP_RMDIR):
                dead_names.append((r.name, r.ino))
        if full:
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
            dirty_dirs.add(S.ROOT_INO)

        # 2. entries (a content-only WRITE record names no directory: the entry's parent comes from meta)
        dirty_dirs |= self._update_entries(dirty_entries, dead_names, rep, force=full)
        # 3. inbox
        self._file_inbox(rep)
        # 4. TOCs: changed dirs and their ancestors, deepest first
        with self.store.read() as t:
            expanded: dict[int, int] = {}
            for d in dirty_dirs:
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
                for k, a in enumerate(depth_path):
                    expanded[a] = len(depth_path) - 1 - k
        order = sorted(expanded, key=lambda i: -expanded[i])
        rendered: list[int] = []
        for d in order:
            if self._render_dir(d, rep, upto):
                rendered.append(d)
        rep.dirs_rendered = len(rendered)

        # 5. commit
        def fin(t: Txn) -> None:
            gen = t.cfg_int(S.CFG_TOC_GEN) + 1
            t.put_cfg(S.CFG_TOC_GEN, S.u64(gen))
            t.put_cfg(S.CFG_TOC_DIRTY, S.dumps(rendered[:5000]))
            if upto > t.cfg_int(S.CFG_CURSOR):
                t.put_cfg(S.CFG_CURSOR, S.u64(upto))
            t.journal_trim(upto)

        self.store.run_write(fin)
        rep.cursor = upto
        rep.seconds = time.monotonic() - t0
        self.passes += 1
        self.last_report = rep
        self.state = "idle"
        self._write_status()
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

    # ------------------------------------------------------------------------------------------------
    def _run_hooks(self) -> None:
        """Builders of other memory kinds that react to the journal: episodes (``episodes/<id>/steps.jsonl``
        appended through the mount become units and anchor views; ``ask/`` questions get answers).

        Only while mounted: their views are written through the mount so the kernel and the journal see
        them (the next pass indexes them). A failing hook is logged and never stops the indexer."""
        if not self.mountpoint or not _is_live(self.mountpoint):
            return
        with self.store.read() as t:
            if t.lookup(S.ROOT_INO, b"episodes") is None:
                return
        try:
            if self._episodes is None:
                from libraryfs.features.episodes.builder import EpisodeBuilder
                from libraryfs.fs.tree import DirTree

                self._episodes = EpisodeBuilder(DirTree(self.mountpoint), self.store)
            for line in self._episodes.poll():
                log.info("episodes: %s", line)
        except Exception as e:
            self.last_error = f"episodes: {type(e).__name__}: {e}"
            log.warning("episode builder failed: %s", e)

    def _update_entries(
        self,
        dirty: dict[int, tuple[int, bytes]],
        dead_names: list[tuple[bytes, int]],
        rep: PassReport,
        force: bool = False,
    ) -> set[int]:
        """Refresh meta (hash, tokens, summary) of changed entries; returns their parent directories."""
        todo: list[tuple[int, S.EntryMeta, EntryDoc | None]] = []
        parents: set[int] = set()
        with self.store.read() as t:
            for ino, (parent, name) in dirty.items():
                node = t.inode(ino)
                if node is None or node.is_dir:
                    continue
                meta = t.entry_meta(ino) or S.EntryMeta()
                if not parent:
                    parent, name = meta.parent, os.fsencode(meta.name)
                    if not parent:
                        continue
                if t.lookup(parent, name) != ino:
                    continue  # renamed or removed since; a later record covers it
                if is_hidden(name):
                    continue
                rep.entries_seen += 1
                parents.add(parent)
                try:
                    m, doc = self._examine(t, node, parent, name, meta, force)
                except Exception as e:  # one bad entry must never stop the index: record it, move on
                    self.last_error = f"entry {os.fsdecode(name)}: {type(e).__name__}: {e}"
                    log.warning("skipping entry %s: %s", os.fsdecode(name), e)
                    continue
                todo.append((ino, m, doc))
        need = [(i, m, d) for i, m, d in todo if d is not None]
        for k in range(0, len(need), self.batch):
            chunk = need[k : k + self.batch]
            docs = [d for _i, _m, d in chunk]
            summaries = self._call("summarize", docs)
            # results the builder could only give by falling back are marked so a later pass re-asks
            fell_back = set(getattr(self.builder, "last_fallbacks", []) or [])
            for j, ((_i, m, _d), s) in enumerate(zip(chunk, summaries, strict=False)):
                m.summary = s
                m.by = "deterministic" if j in fell_back else getattr(self.builder, "name", "?")
            rep.summarized += len(chunk)

        def write(t: Txn) -> None:
            for name, ino in dead_names:
                t.del_name(name, ino)
                if t.inode(ino) is None:
                    t.del_meta(ino)
            for ino, m, _d in todo:
                if t.inode(ino) is None:
                    continue
                t.put_meta(ino, m)
                t.put_name(os.fsencode(m.name), ino, m.parent)

        self.store.run_write(write)
        return parents

    def _examine(
        self, t: Txn, node: S.Inode, parent: int, name: bytes, meta: S.EntryMeta, force: bool
    ) -> tuple[S.EntryMeta, EntryDoc | None]:
        """New meta for an entry, and the doc to summarise if its content changed."""
        rel = (t.path_of(parent) or b"/").rstrip(b"/") + b"/" + name
        m = replace(meta, name=os.fsdecode(name), parent=parent, size=node.size, gen=node.generation)
        m.extra = dict(meta.extra)
        if node.is_lnk:
            target = t.read_data(node.ino, 0, node.size, node.size)
            m.summary = f"symbolic link → {target.decode('utf-8', 'backslashreplace')}"
            m.tokens = 0
            m.hash = "link:" + hashlib.sha256(target).hexdigest()[:16]
            m.link = True
            return m, None  # a link's target is never read or sent to a builder
        if node.size > HASH_LIMIT_BYTES:
            h = f"big:{node.size}:{node.generation}"
            sample = t.read_data(node.ino, 0, 8192, node.size)
        else:
            data = t.read_data(node.ino, 0, node.size, node.size)
            h = hashlib.sha256(data).hexdigest()
            sample = data[:8192]
        retry_fallback = meta.by == "deterministic" and self.builder.name != "deterministic"
        if (
            h == meta.hash
            and meta.summary is not None
            and not retry_fallback
            and not (force and meta.by != self.builder.name)
        ):
            return m, None
        binary = b"\0" in sample[:4096] or _mostly_binary(sample)
        text = "" if binary else sample.decode("utf-8", "replace")
        if binary or node.size > TOKEN_LIMIT_BYTES:
            tokens, approx = (node.size + 3) // 4, True
        else:
            tokens, approx = count_tokens(data), False  # type: ignore[possibly-undefined]
        m.hash, m.tokens, m.approx, m.link = h, tokens, approx, False
        doc = EntryDoc(
            path=os.fsdecode(rel.lstrip(b"/")),
            name=os.fsdecode(name),
            content_hash=h,
            text=text,
            size_bytes=node.size,
            is_binary=binary,
        )
        return m, doc

    def _call(self, job: str, *args):
        """Call a builder job; on any exception use the deterministic result (and record the error)."""
        try:
            out = getattr(self.builder, job)(*args)
            if job != "group" and (not isinstance(out, list) or len(out) != len(args[0])):
                raise ValueError(f"builder returned {len(out) if isinstance(out, list) else out!r} results")
            return out
        except Exception as e:
            self.last_error = f"{job}: {type(e).__name__}: {e}"
            log.warning("builder %s failed (%s); using the deterministic result", job, e)
            return getattr(self.fallback, job)(*args)

    # ------------------------------------------------------------------------------------------------
    def _render_dir(self, ino: int, rep: PassReport, upto: int, _retry: bool = True) -> bool:
        with self.store.read() as t:
            node = t.inode(ino)
            if node is None or not node.is_dir:
                return False
            path = t.path_of(ino)
            if path is None:
                return False
            items: list[Item] = []
            missing: dict[int, tuple[int, bytes]] = {}
            for name, child in t.iter_dir(ino):
                if is_hidden(name):
                    continue
                cn = t.inode(child)
                if cn is None:
                    continue
                if cn.is_dir:
                    sm = t.section_meta(child) or S.SectionMeta()
                    desc = sm.description if sm.description is not None else "section"
                    items.append(Item(name, desc, sm.tokens_total, True, sm.entries_total))
                else:
                    em = t.entry_meta(child) or S.EntryMeta()
                    if em.summary is None or em.size != cn.size:
                        missing[child] = (ino, name)
                    items.append(
                        Item(
                            name,
                            em.summary or "",
                            em.tokens or 0,
                            False,
                            is_link=cn.is_lnk,
                            approx=em.approx,
                        )
                    )
        if missing and _retry:  # entries never journaled to us (e.g. a crash lost their record)
            self._update_entries(missing, [], rep)
            return self._render_dir(ino, rep, upto, _retry=False)
        title = "/" if ino == S.ROOT_INO else os.fsdecode(path.rsplit(b"/", 1)[-1])
        sect = SectionDoc(
            path=os.fsdecode(path.lstrip(b"/")), entries=[(os.fsdecode(i.name), i.summary) for i in items]
        )
        description = self._call("describe", [sect])[0] if items else "empty section"
        groups = None
        if len(items) > 40:
            groups = self._call("group", sect, 200)
        total_tokens = sum(i.tokens for i in items)
        total_entries = sum((i.entries if i.is_dir else 1) for i in items)
        gen = node.generation
        facts = f"generation={gen} journal_seq={upto} builder={getattr(self.builder, 'name', '?')}"
        out = render(
            title,
            description,
            items,
            max_tokens=self.max_tokens,
            count_tokens=count_tokens,
            header_facts=facts,
            groups=groups,
        )

        def write(t: Txn) -> None:
            if t.inode(ino) is None:
                return
            t.put_toc_pages(ino, out.pages)
            old = t.section_meta(ino) or S.SectionMeta()
            m = S.SectionMeta(
                description=description,
                tokens_total=total_tokens,
                entries_total=total_entries,
                toc_generation=gen,
                toc_journal_seq=upto,
                toc_pages=len(out.pages),
                toc_levels=out.levels,
                toc_max_page_tokens=max(out.page_tokens),
                toc_page_tokens=list(out.page_tokens),
                extra=old.extra,
            )
            t.put_meta(ino, m)

        self.store.run_write(write)
        rep.pages_written += len(out.pages)
        return True

    # ------------------------------------------------------------------------------------------------
    def _write_status(self) -> None:
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
            "builder": builder_status,
            "toc_max_tokens": self.max_tokens,
            "updated_ns": now_ns(),
        }
        try:
            self.store.run_write(lambda t: t.put_cfg(S.CFG_INDEXER_STATUS, S.dumps(status)))
        except LibraryError as e:
            log.warning("could not write indexer status: %s", e)


def _mostly_binary(sample: bytes) -> bool:
    """Binary if more than 2.5% of the sample does not decode as UTF-8 (one stray byte is still text)."""
    if not sample:
        return False
    bad = sample.decode("utf-8", "replace").count("\ufffd")
    return bad * 10 > len(sample) // 4 + 1


def main(argv: list[str] | None = None) -> int:
    """Command-line entry of the indexer process (``python -m libraryfs.daemon.indexer LIBDIR``).

    Settings: flags > ``LIBRARYFS_*`` environment > ``<libdir>/config.toml`` > defaults
    (:mod:`libraryfs.settings`). Under systemd: ``READY=1`` once the store is open and the indexer lock is
    held, a ``STATUS=`` line after each pass, ``WATCHDOG=1`` every ``WatchdogSec/2`` while the loop makes
    progress (a store transaction or a builder call within ``index.stall_s`` seconds), ``STOPPING=1`` on
    SIGTERM/SIGINT (the pass in progress finishes first). SIGHUP reloads the settings and the builder
    (the LLM endpoint) between passes. Errors: one line on stderr, exit status 1.
    """
    import argparse
    import signal
    import sys

    from libraryfs import notify
    from libraryfs.daemon.mountd import acquire_lock
    from libraryfs.settings import configure_logging, load_settings

    ap = argparse.ArgumentParser(prog="libraryfs-indexer")
    ap.add_argument("libdir")
    ap.add_argument("--mountpoint", default=None)
    ap.add_argument("--once", action="store_true", help="one pass, then exit")
    ap.add_argument("--full", action="store_true", help="re-examine every entry and directory")
    ap.add_argument("--llm", action="store_true", help="use the configured LLM endpoint (see docs/llm.md)")
    ap.add_argument("--no-llm", action="store_true", help="deterministic builder only")
    ap.add_argument("--poll-s", type=float, default=None, help="idle journal poll interval, seconds")
    ap.add_argument("--toc-max-tokens", type=int, default=None, help="TOC page bound C, tokens")
    ap.add_argument("--log-level", default=None)
    a = ap.parse_args(argv)
    overrides = {"log.level": a.log_level, "index.poll_s": a.poll_s, "index.toc_max_tokens": a.toc_max_tokens}
    use_llm = None if not (a.llm or a.no_llm) else a.llm
    try:
        settings = load_settings(a.libdir, overrides)
    except LibraryError as e:
        print(f"libraryfs-indexer: {e}", file=sys.stderr)
        return 1
    configure_logging(settings)
    # background work: the single-threaded mount server must win the CPU when both want it (2 cores)
    try:
        os.nice(int(os.environ.get("LIBRARYFS_INDEXER_NICE", "10")))
    except (OSError, ValueError):
        pass
    try:
        lock = acquire_lock(os.path.abspath(a.libdir), "indexer.lock")
    except LibraryError as e:
        print(f"libraryfs-indexer: {e}", file=sys.stderr)
        return 1
    try:
        store = Store(a.libdir)
        builder = make_builder(a.libdir, store, use_llm=use_llm)
        idx = Indexer(
            a.libdir,
            builder=builder,
            mountpoint=a.mountpoint,
            store=store,
            toc_max_tokens=settings["index"]["toc_max_tokens"],
        )
    except LibraryError as e:
        os.close(lock)
        print(f"libraryfs-indexer: {e}", file=sys.stderr)
        return 1

    # liveness for the watchdog: every store transaction and builder call is a beat
    beat = notify.Heartbeat()
    orig_read, orig_write, orig_call = store.read, store.run_write, idx._call

    def read(*args, **kw):
        beat.beat()
        return orig_read(*args, **kw)

    def run_write(*args, **kw):
        beat.beat()
        return orig_write(*args, **kw)

    def call(*args, **kw):
        beat.beat()
        try:
            return orig_call(*args, **kw)
        finally:
            beat.beat()

    store.read, store.run_write, idx._call = read, run_write, call  # type: ignore[method-assign]
    current: dict = {"settings": settings, "stop": threading.Event(), "reload": False, "quit": False}
    dog = notify.Watchdog(lambda: beat.age_s() < current["settings"]["index"]["stall_s"])

    def on_pass(rep: PassReport) -> None:
        with store.read() as t:
            gen, pending = t.cfg_int(S.CFG_TOC_GEN), max(0, t.journal_tail() - t.cfg_int(S.CFG_CURSOR))
        notify.status(
            f"idle: TOC generation {gen}, {pending} record(s) pending; last pass {rep.records} "
            f"record(s), {rep.dirs_rendered} TOC(s) in {rep.seconds:.2f} s"
            + (f"; last error: {idx.last_error}" if idx.last_error else "")
        )

    def on_stop(signum, _frame) -> None:
        current["quit"] = True
        notify.stopping(f"stopping ({signal.Signals(signum).name})")
        current["stop"].set()

    def on_hup(_signum, _frame) -> None:
        current["reload"] = True
        current["stop"].set()

    try:
        if a.once:
            idx.run_once(full=a.full)
            return 0
        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, on_hup)
        dog.start()
        notify.ready(f"indexing {idx.libdir}")
        full = a.full
        while True:
            if full:
                idx.run_once(full=True)
                full = False
            idx.run_forever(current["stop"], poll_s=current["settings"]["index"]["poll_s"], on_pass=on_pass)
            if current["quit"] or not current["reload"]:
                break
            current["reload"] = False
            current["stop"] = threading.Event()
            notify.reloading("reloading settings")
            try:
                new = load_settings(a.libdir, overrides)
                configure_logging(new)
                bound = int(
                    new["index"]["toc_max_tokens"]
                    or store.settings().get("toc_max_tokens")
                    or DEFAULT_MAX_TOKENS
                )
                new_builder = make_builder(a.libdir, store, use_llm=use_llm)
            except LibraryError as e:
                log.error("reload failed, keeping the current settings: %s", e)
                notify.notify(f"READY=1\nSTATUS=reload failed: {e}")
                continue
            old_builder, idx.builder = idx.builder, new_builder
            close = getattr(old_builder, "close", None)
            if close is not None and old_builder is not new_builder:
                close()
            full = bound != idx.max_tokens  # a new page bound re-renders every TOC
            idx.max_tokens = bound
            current["settings"] = new
            log.info(
                "settings reloaded (SIGHUP): builder %s, TOC bound %d tokens, poll %.2f s",
                getattr(new_builder, "name", "?"),
                bound,
                new["index"]["poll_s"],
            )
            notify.notify(f"READY=1\nSTATUS=indexing {idx.libdir} (settings reloaded)")
        return 0
    finally:
        dog.stop()
        close = getattr(idx.builder, "close", None)
        if close is not None:
            close()
        store.close()
        os.close(lock)


def make_builder(
    libdir: str, store: Store, use_llm: bool | None = None, overrides: dict | None = None
) -> IndexBuilder:
    """The builder for a library: the LLM builder when an endpoint is configured (and ``use_llm`` is not
    False), else the deterministic one. ``use_llm=True`` without an endpoint raises :class:`LibraryError`."""
    if use_llm is False:
        return DeterministicBuilder()
    try:
        from libraryfs.llm import make_builder as llm_make_builder
    except ImportError:
        if use_llm:
            raise LibraryError("the LLM builder is not available in this installation") from None
        return DeterministicBuilder()
    builder = llm_make_builder(libdir, store, overrides)
    if use_llm and isinstance(builder, DeterministicBuilder):
        raise LibraryError(
            "no LLM endpoint configured (set LIBRARYFS_LLM_BASE_URL and LIBRARYFS_LLM_MODEL; "
            "see docs/llm.md)"
        )
    return builder


if __name__ == "__main__":
    import sys

    sys.exit(main())
