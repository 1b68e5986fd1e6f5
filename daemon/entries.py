"""Examining changed entries, a part of the indexer's pass: content hash, token count, outline, summary.

A mixin of :class:`libraryfs.daemon.indexer.Indexer` (split out to keep modules short). An entry whose
content hash, outline version and builder are unchanged is not summarised again; a symlink's target is never
read or sent to a builder; files over :data:`HASH_LIMIT_BYTES` are identified by (size, generation). A
summary the LLM builder could only give by falling back is marked ``by="deterministic"`` (a later pass asks
again) and, when its answer is on its way in the background, provisional (:mod:`libraryfs.daemon.llm_refresh`).
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import replace
from typing import TYPE_CHECKING

from libraryfs.daemon.filing import is_hidden
from libraryfs.errors import FileTooBig
from libraryfs.fs import schema as S
from libraryfs.fs.store import Txn
from libraryfs.index import catalogue
from libraryfs.index.jobs import EntryDoc
from libraryfs.index.names import links_of, set_links, write_rows
from libraryfs.index.outline import OUTLINE_VERSION, extract
from libraryfs.index.tokens import count_tokens
from libraryfs.shown import escape_controls, show_name

if TYPE_CHECKING:
    from libraryfs.daemon.indexer import PassReport

log = logging.getLogger("libraryfs.indexer")

HASH_LIMIT_BYTES = 64 << 20  #: larger files are identified by (size, generation) instead of a content hash
TOKEN_LIMIT_BYTES = 1 << 20  #: larger files get an estimated token count (bytes / 4), marked "~"
WRITE_CHUNK = 256  #: entries whose meta one write transaction stores (halved while the backend refuses it)


class PassStopped(Exception):
    """A stop (SIGTERM) was asked during an indexer pass: the pass ends without committing its cursor (what
    it stored so far — entries' meta, TOC pages — is redone or confirmed by the next pass)."""


class EntryUpdater:
    """Mixin of :class:`libraryfs.daemon.indexer.Indexer`: the entries part of a pass.

    Uses the indexer's ``store``, ``builder``, ``fallback``, ``batch``, ``refresh``, ``last_error``,
    ``beat``, ``_entry_excluded`` (the TOCs' rule), ``_hid`` (set when an entry indexed before is excluded
    now) and ``_stopping``/``_check_stop`` (a stop ends the pass between entries and between builder
    batches: :class:`PassStopped`).
    """

    def _update_entries(
        self,
        dirty: dict[int, tuple[int, bytes]],
        dead_names: list[tuple[int, bytes, int]],
        rep: PassReport,
        force: bool = False,
        named: dict[int, set[tuple[int, bytes]]] | None = None,
    ) -> set[int]:
        """Refresh meta (hash, tokens, summary, names) of changed entries; returns the directories listing
        them. ``dirty``: ``{ino: (parent, name)}``, one name the change gave (``(0, b"")``: none, a
        content-only write); ``named``: every name the pass's records gave an inode (a create and a link in
        one pass are two); ``dead_names``: ``(parent, name, ino)`` of the names that died (their ``names``
        rows go). An entry's names are those its meta record holds plus those given, each confirmed by its
        live dirent (:mod:`libraryfs.index.names`: every link of a hard-linked file, found without a scan).
        A link that is excluded (a hidden name, an excluded directory, a name an ignore file matches) is
        not indexed; an entry with no indexed link is not examined, and one examined before loses its meta,
        ``names`` rows and catalogue rows (its term-index row goes at the pass's sync) — as does one whose
        every known name died in this pass (what is left of it is excluded, or nothing: open and unlinked):
        it is then as if it had been excluded from the start, and is examined afresh once it is included
        again."""
        todo: list[tuple[int, S.EntryMeta, EntryDoc | None]] = []
        gone: list[tuple[int, S.EntryMeta]] = []
        parents: set[int] = set()
        named = named or {}
        died = {ino for _p, _n, ino in dead_names}
        with self.store.read() as t:
            for ino, (parent, name) in dirty.items():
                self._check_stop()
                node = t.inode(ino)
                if node is None or node.is_dir:
                    continue
                known = t.entry_meta(ino)
                meta = known or S.EntryMeta()
                given = set(links_of(known)) | named.get(ino, set())
                if parent:
                    given.add((parent, name))
                live = sorted(link for link in given if t.lookup(*link) == ino)
                if not live:
                    # every name it was indexed under died in this pass and none it was given lives: what
                    # is left is excluded (``ln`` into a dot-directory) or nothing (open, unlinked), or —
                    # rarely — a rename after this pass read the journal, which examines it afresh
                    if known is not None and ino in died:
                        gone.append((ino, known))
                    continue  # else renamed or removed since; a later record covers it
                parents.update(p for p, _n in live)  # each directory listing it
                links = [(p, n) for p, n in live if not (is_hidden(n) or self._entry_excluded(t, p, n))]
                if not links:
                    if known is not None:
                        gone.append((ino, known))
                    continue
                rep.entries_seen += 1
                first_parent, first_name = links[0]
                try:
                    m, doc = self._examine(t, node, first_parent, first_name, meta, force)
                except Exception as e:  # one bad entry must never stop the index: record it, move on
                    why = escape_controls(str(e))  # an error may quote the name: one line, as the name
                    self.last_error = f"entry {show_name(first_name)}: {type(e).__name__}: {why}"
                    log.warning("skipping entry %s: %s", show_name(first_name), why)
                    continue
                set_links(m, links)
                todo.append((ino, m, doc))
        need = [(i, m, d) for i, m, d in todo if d is not None]
        for k in range(0, len(need), self.batch):
            if self._stopping():  # keep what was summarised (the meta is independent of the cursor)
                done = {i for i, _m, _d in need[:k]}
                self._write_entries([], [x for x in todo if x[2] is None or x[0] in done])
                raise PassStopped()
            chunk = need[k : k + self.batch]
            docs = [d for _i, _m, d in chunk]
            summaries = self._call("summarize", docs)
            # results the builder could only give by falling back are marked so a later pass re-asks
            fell_back = set(getattr(self.builder, "last_fallbacks", []) or [])
            for j, ((i, m, _d), s) in enumerate(zip(chunk, summaries, strict=False)):
                m.summary = s
                m.by = "deterministic" if j in fell_back else getattr(self.builder, "name", "?")
                self.refresh.entry(i, m.parent, os.fsencode(m.name), j in self.call_deferred)
            rep.summarized += len(chunk)

        self._write_entries(dead_names, todo, gone)
        if gone:
            self._hid = True  # the indexer rebuilds the subject index in this pass
        return parents

    def _write_entries(
        self,
        dead_names: list[tuple[int, bytes, int]],
        todo: list[tuple[int, S.EntryMeta, EntryDoc | None]],
        gone: list[tuple[int, S.EntryMeta]] | None = None,
    ) -> None:
        """Drop the dead names (``(parent, name, ino)``; and the catalogue rows, meta and other names of gone
        inodes) and everything of the ``gone`` entries (excluded now: their meta, every name it was indexed
        under, catalogue rows), then store each still-live entry's new meta, catalogue rows and ``names``
        rows (those of names it lost dropped) — in transactions of up to :data:`WRITE_CHUNK` items (on a
        backend with ``max_txn_ops``, etcd's 128 operations per transaction: an eighth of that), a chunk halved
        while the backend refuses it as too large. The items are independent and the journal cursor moves only
        at the pass's end, so a crash between two chunks only makes the next pass write them again. Raises
        FileTooBig for one item over the limit."""
        items: list = (
            [("dead", x) for x in dead_names]
            + [("gone", x) for x in gone or []]
            + [("live", x) for x in todo]
        )

        def write(t: Txn, chunk: list) -> None:
            """The write transaction body of one chunk (see above)."""
            for kind, item in chunk:
                if kind == "dead":
                    parent, name, ino = item
                    t.del_name(name, ino, parent)
                    if t.inode(ino) is None:
                        write_rows(t, ino, links_of(t.entry_meta(ino)), [])
                        catalogue.forget(t, ino)
                        t.del_meta(ino)
                    continue
                if kind == "gone":
                    ino, old = item
                    write_rows(t, ino, links_of(t.entry_meta(ino) or old), [])
                    catalogue.forget(t, ino)
                    t.del_meta(ino)
                    continue
                ino, m, _d = item
                if t.inode(ino) is None:
                    continue
                old = t.entry_meta(ino)
                catalogue.record(t, ino, old, m)
                t.put_meta(ino, m)
                write_rows(t, ino, links_of(old), links_of(m))

        limit = getattr(self.store.backend, "max_txn_ops", 0)  # etcd: a few operations per item
        size, k = max(1, limit // 8) if limit else WRITE_CHUNK, 0
        while k < len(items):
            chunk = items[k : k + size]
            try:
                self.store.run_write(lambda t, chunk=chunk: write(t, chunk))
            except FileTooBig:
                if size == 1:
                    raise
                size = max(1, size // 2)
                continue
            k += len(chunk)

    def _examine(
        self, t: Txn, node: S.Inode, parent: int, name: bytes, meta: S.EntryMeta, force: bool
    ) -> tuple[S.EntryMeta, EntryDoc | None]:
        """New meta for an entry, and the doc to summarise if its content changed."""
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
            and meta.outline == OUTLINE_VERSION
            and not retry_fallback
            and not (force and meta.by != self.builder.name)
        ):
            return m, None
        ext = extract(os.fsdecode(name), data if node.size <= HASH_LIMIT_BYTES else sample, node.size)  # type: ignore[possibly-undefined]
        if ext.binary or node.size > TOKEN_LIMIT_BYTES:
            tokens, approx = (node.size + 3) // 4, True
        else:
            tokens, approx = count_tokens(data), False  # type: ignore[possibly-undefined]
        m.hash, m.tokens, m.approx, m.link = h, tokens, approx, False
        m.defines, m.keywords, m.outline = ext.outline.names, ext.keywords, OUTLINE_VERSION
        rel = (t.path_of(parent) or b"/").rstrip(b"/") + b"/" + name  # walked only for a doc to summarise
        doc = EntryDoc(
            path=os.fsdecode(rel.lstrip(b"/")),
            name=os.fsdecode(name),
            content_hash=h,
            text=ext.text,
            size_bytes=node.size,
            is_binary=ext.binary,
            outline=ext.outline,
            head=ext.head,
        )
        return m, doc

    def _call(self, job: str, *args):
        """Call a builder job; on any exception use the deterministic result (and record the error).
        ``call_deferred`` is then the set of input positions whose model answer is on its way."""
        self.beat()
        self.call_deferred: set[int] = set()
        try:
            out = getattr(self.builder, job)(*args)
            self.call_deferred = set(getattr(self.builder, "last_deferred", None) or [])
            if job != "group" and (not isinstance(out, list) or len(out) != len(args[0])):
                raise ValueError(f"builder returned {len(out) if isinstance(out, list) else out!r} results")
            return out
        except Exception as e:
            self.last_error = f"{job}: {type(e).__name__}: {e}"
            log.warning("builder %s failed (%s); using the deterministic result", job, e)
            return getattr(self.fallback, job)(*args)
        finally:
            self.beat()  # a builder call that returned, however long it took, was progress
