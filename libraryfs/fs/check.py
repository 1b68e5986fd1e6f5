"""fsck for a library: verify every invariant of :mod:`libraryfs.fs.schema` and optionally repair.

Each check has a code (``I1`` … ``I10`` as in the schema docstring; ``I0`` for an undecodable inode).
``check(store)`` returns a :class:`Report`; tests end by asserting ``report.problems == []`` (s3ql's t3_fsck
habit). Repairs are conservative: a missing root is recreated empty (a salvaged store), dangling dirents
are removed, wrong dirent types rewritten, wrong link counts corrected, unreachable directories and files
still linked reconnected under ``/lost+found`` (e2fsck's convention; their data kept), files unlinked while
open (nlink 0) freed, stray data chunks past EOF dropped,
``next_ino`` raised, stale or undecodable meta/TOC records dropped (the indexer rebuilds them), a directory
the indexer dropped without its TOC queued for the next pass (I10, :mod:`libraryfs.fs.check_tocs`). The report
carries the store's schema version and the migrations still pending (a read-only check of an older store).
Reads the store only through the typed layer and its backend transaction (no engine import).
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from libraryfs.errors import Corrupt
from libraryfs.fs import migrations
from libraryfs.fs import schema as S
from libraryfs.fs.check_tocs import missing_tocs
from libraryfs.fs.lmdb_pages import WalkReport
from libraryfs.fs.meta import SectionMeta, decode_meta
from libraryfs.fs.store import Store, Txn
from libraryfs.words import count


def _later(kv, method: str, *args):
    """A repair to run later: ``kv.<method>(*args)``, looked up when it runs (a read transaction of some
    backends, etcd's, has no write methods; only a repairing check runs its fixes, in a write transaction)."""
    return lambda: getattr(kv, method)(*args)


@dataclass
class Problem:
    """One invariant violation: ``code`` (e.g. ``"I4"``), the inode concerned and a message."""

    code: str
    ino: int
    message: str
    repaired: bool = False

    def __str__(self) -> str:
        """The problem's line as ``libraryfs check`` prints it: ``I8 ino 11: <message>[ (repaired)]``."""
        return f"{self.code} ino {self.ino}: {self.message}{' (repaired)' if self.repaired else ''}"


REPAIR_HINT = "run `libraryfs check --repair` to repair what can be (the library must not be mounted)"


@dataclass
class Report:
    """Result of :func:`check`: the problems found and how many were repaired; counts of what was seen;
    the schema version checked and the summaries of the migrations still pending for it."""

    problems: list[Problem] = field(default_factory=list)
    repaired: int = 0
    inodes: int = 0
    dirents: int = 0
    chunks: int = 0
    schema_version: int = S.SCHEMA_VERSION
    pending_migrations: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """True when no problem remains unrepaired."""
        return all(p.repaired for p in self.problems)

    def to_json(self) -> dict:
        """JSON-able summary."""
        return {
            "clean": self.clean,
            "schema_version": self.schema_version,
            "pending_migrations": self.pending_migrations,
            "inodes": self.inodes,
            "dirents": self.dirents,
            "chunks": self.chunks,
            "repaired": self.repaired,
            "problems": [
                {"code": p.code, "ino": p.ino, "message": p.message, "repaired": p.repaired}
                for p in self.problems
            ],
        }


def check(store: Store, repair: bool = False) -> Report:
    """Verify invariants I1–I10 at the store's schema version; with ``repair`` fix what can be fixed in one
    write transaction (a read-write open has migrated the store to the current version first)."""
    if repair:
        return store.run_write(lambda t: _Checker(t, True, store.schema_version).run())
    with store.read() as t:
        return _Checker(t, False, store.schema_version).run()


class _Checker:
    """One pass of every check over one transaction. Repairs are queued while a range is being read and
    applied after each scan (a backend iterator must not see its own range change)."""

    def __init__(self, t: Txn, repair: bool, version: int) -> None:
        self.t = t
        self.repair = repair
        self.version = version
        self.r = Report(schema_version=version)
        self.r.pending_migrations = [
            f"{m.source} → {m.source + 1}: {m.summary}" for m in migrations.pending(version)
        ]
        self.fixes: list[Callable[[], object]] = []
        self.inodes: dict[int, S.Inode] = {}
        self.links: dict[int, int] = {}  # ino → dirents naming it
        self.subdirs: dict[int, int] = {}  # directory → child directories
        self.dir_names: dict[int, list[tuple[int, bytes]]] = {}  # directory → (parent, name) naming it

    def problem(self, code: str, ino: int, msg: str, fix: Callable[[], object] | None = None) -> None:
        """Record a :class:`Problem` ``code`` for inode ``ino``; when repairing and a ``fix`` is given, queue
        it for :meth:`apply_fixes` and count the problem as repaired."""
        p = Problem(code, ino, msg)
        if self.repair and fix is not None:
            self.fixes.append(fix)
            p.repaired = True
            self.r.repaired += 1
        self.r.problems.append(p)

    def apply_fixes(self) -> None:
        """Run the queued repairs in order and empty the queue (called between scans, never during one)."""
        for fix in self.fixes:
            fix()
        self.fixes.clear()

    def run(self) -> Report:
        """Every check in order (inodes, root I1, dirents, tree, links, data, counters, derived), applying
        the queued repairs after each; returns the :class:`Report`. Without ``repair`` a bad root ends the
        check early."""
        self.check_inodes()
        root = self.inodes.get(S.ROOT_INO)
        if root is None or not root.is_dir:
            now = time.time_ns()
            new = S.Inode(S.ROOT_INO, S.S_IFDIR | 0o755, os.getuid(), os.getgid(), 2, 0, now, now, now)
            self.problem(
                "I1", S.ROOT_INO, "root inode missing or not a directory", lambda: self.t.put_inode(new)
            )
            if not self.repair:
                return self.r
            self.apply_fixes()  # a salvaged store whose inodes were lost: an empty root to hang the rest on
            self.inodes[S.ROOT_INO] = new
        for step in (
            self.check_dirents,
            self.check_tree,
            self.check_orphans,
            self.check_links,
            self.check_data,
        ):
            step()
            self.apply_fixes()
        self.check_counters()
        self.check_derived()
        self.apply_fixes()
        self.check_tocs()
        self.apply_fixes()
        return self.r

    def check_tocs(self) -> None:
        """I10: every reachable directory with entries has its TOC, or the indexer still owes it one
        (:mod:`libraryfs.fs.check_tocs`); repairing queues the others in ``config[toc_pending]``."""
        dirs = [i for i, n in self.inodes.items() if n.is_dir and (i == S.ROOT_INO or self.dir_names.get(i))]
        for ino in missing_tocs(self.t, dirs):
            fix = lambda ino=ino: self.t.put_toc_pending(self.t.toc_pending() | {ino})  # noqa: E731
            self.problem("I10", ino, "directory with entries but no TOC, and the indexer owes it none", fix)

    def check_inodes(self) -> None:
        """I0: every inode record unpacks; fills ``inodes`` (ino → :class:`Inode`) and the inode count, and
        (repairing) deletes the undecodable records."""
        kv = self.t.kv
        for k, v in self.t.kv.range(S.DB_INODES):
            ino = S.from_u64(k)
            try:
                self.inodes[ino] = S.Inode.unpack(ino, v)
            except struct.error as e:  # not Exception: a RecursionError or MemoryError is no corrupt record
                self.problem("I0", ino, f"undecodable inode: {e}", _later(kv, "delete", S.DB_INODES, k))
        self.apply_fixes()
        self.r.inodes = len(self.inodes)

    def check_dirents(self) -> None:
        """I2: each dirent names a live inode from a directory, with a valid name and the child's type."""
        kv = self.t.kv
        for k, v in kv.range(S.DB_DIRENTS):
            self.r.dirents += 1
            parent, name, child = S.from_u64(k), k[8:], S.from_u64(v)
            pnode, cnode = self.inodes.get(parent), self.inodes.get(child)
            bad = None
            if pnode is None or not pnode.is_dir:
                bad = f"dirent {name!r} in non-directory {parent}"
            elif cnode is None:
                bad = f"dirent {name!r} in {parent} names missing inode {child}"
            elif not (1 <= len(name) <= S.NAME_MAX) or b"/" in name or b"\0" in name or name in (b".", b".."):
                bad = f"invalid name {name!r} in {parent}"
            if bad:
                self.problem("I2", child, bad, _later(kv, "delete", S.DB_DIRENTS, k))
                continue
            ftype, want = S.dirent_type(v), cnode.mode & S.S_IFMT  # type: ignore[union-attr]
            if ftype != want and (ftype is not None or self.version >= 2):
                value = S.dirent_value(child, want)
                self.problem(
                    "I2",
                    child,
                    f"dirent {name!r} in {parent} records file type {ftype!r}, the inode has {want:o}",
                    _later(kv, "put", S.DB_DIRENTS, k, value),
                )
            self.links[child] = self.links.get(child, 0) + 1
            if cnode.is_dir:  # type: ignore[union-attr]
                self.subdirs[parent] = self.subdirs.get(parent, 0) + 1
                self.dir_names.setdefault(child, []).append((parent, name))

    def check_tree(self) -> None:
        """I3: directories named once, ``dirparent`` mirrors the dirent, every directory reaches the root."""
        for ino, node in self.inodes.items():
            if not node.is_dir or ino == S.ROOT_INO:
                continue
            names = self.dir_names.get(ino, [])
            if not names:  # unreachable: check_orphans reconnects it
                continue
            if len(names) != 1:
                self.problem("I3", ino, f"directory named by {len(names)} dirents")
                continue
            if self.t.dirparent(ino) != names[0]:
                key, value = S.u64(ino), S.u64(names[0][0]) + names[0][1]
                fix = lambda key=key, value=value: self.t.kv.put(S.DB_DIRPARENT, key, value)  # noqa: E731
                self.problem("I3", ino, "dirparent does not mirror the dirent", fix)
        # whether a directory's walk up ends without a cycle (at the root, or at an unreachable directory,
        # which check_orphans reconnects), learnt once per directory: each walk stops at a directory an
        # earlier one settled, so a tree of any depth costs one step per directory (a walk per directory to
        # the root cost depth² steps on a deep chain, and a length limit called a deep chain a cycle)
        settled: dict[int, bool] = {S.ROOT_INO: True}
        for ino, node in self.inodes.items():
            if node.is_dir and ino != S.ROOT_INO and self.dir_names.get(ino):
                path: list[int] = []
                on_path: set[int] = set()
                cur = ino
                while True:
                    if cur in settled:
                        ok = settled[cur]
                        break
                    if cur in on_path:
                        ok = False
                        break
                    parents = self.dir_names.get(cur)
                    if not parents:
                        ok = True
                        break
                    path.append(cur)
                    on_path.add(cur)
                    cur = parents[0][0]
                for d in path:
                    settled[d] = ok
                if not ok:
                    self.problem("I3", ino, "directory not reachable from the root (cycle)")

    def check_orphans(self) -> None:
        """I4: inodes no dirent names. A directory, or a file whose ``nlink`` says it still has names, was
        cut off by damage: repairing reconnects it under ``/lost+found`` as ``#<ino>`` (e2fsck's
        convention), with its data and everything below it. A file with ``nlink`` 0 was unlinked while
        open when the mount stopped: it is freed."""
        lost: list[int] = []
        for ino, node in self.inodes.items():
            if ino == S.ROOT_INO or ino in self.links:
                continue
            if not node.is_dir and node.nlink == 0:
                fix = partial(self.t.del_inode, ino, is_dir=False)
                self.problem("I4", ino, "orphaned inode (nlink 0, no dirent)", fix)
            else:
                lost.append(ino)
        if not lost:
            return
        lf = self._lost_found() if self.repair else 0
        for ino in lost:
            node = self.inodes[ino]
            what = (
                "unreachable directory" if node.is_dir else f"orphaned inode (nlink {node.nlink}, no dirent)"
            )
            if not self.repair:
                self.problem("I4", ino, what)
                continue
            name = self._free_name(lf, f"#{ino}".encode())
            self.links[ino] = 1
            if node.is_dir:
                self.dir_names[ino] = [(lf, name)]
                self.subdirs[lf] = self.subdirs.get(lf, 0) + 1
            add = partial(self.t.add_dirent, lf, name, ino, node.is_dir, node.mode)
            self.problem("I4", ino, f"{what}: reconnected as /lost+found/{name.decode()}", add)

    def _lost_found(self) -> int:
        """The inode of ``/lost+found``, made (mode 0700, e2fsck's) when the root has none; the checker's
        counts are updated as if it had always been there (its own write is queued as a fix)."""
        name = b"lost+found"
        ino = self.t.lookup(S.ROOT_INO, name)
        if ino is not None and ino in self.inodes and self.inodes[ino].is_dir:
            return ino
        name = self._free_name(S.ROOT_INO, name)
        ino = max(self.t.alloc_ino(), max(self.inodes) + 1)
        self.t.put_cfg(S.CFG_NEXT_INO, S.u64(ino + 1))
        now = time.time_ns()
        node = S.Inode(ino, S.S_IFDIR | 0o700, os.getuid(), os.getgid(), 2, 0, now, now, now)
        self.inodes[ino] = node
        self.links[ino] = 1
        self.dir_names[ino] = [(S.ROOT_INO, name)]
        self.subdirs[S.ROOT_INO] = self.subdirs.get(S.ROOT_INO, 0) + 1

        def make() -> None:
            """Write the directory's inode (its final ``nlink``) and its dirent in the root."""
            node.nlink = 2 + self.subdirs.get(ino, 0)
            self.t.put_inode(node)
            self.t.add_dirent(S.ROOT_INO, name, ino, True, node.mode)

        self.fixes.append(make)
        return ino

    def _free_name(self, parent: int, name: bytes) -> bytes:
        """``name``, or ``name.1``, ``name.2``, … when a dirent of ``parent`` has it already (one lookup per
        try; names queued this pass are ``#<ino>``, unique by construction, so the store alone decides)."""
        cand, i = name, 0
        while self.t.lookup(parent, cand) is not None:
            i += 1
            cand = name + b".%d" % i
        return cand

    def check_links(self) -> None:
        """I4: link counts (after :meth:`check_orphans` gave every inode a name or freed it)."""
        for ino, node in self.inodes.items():
            if node.is_dir:
                want = 2 + self.subdirs.get(ino, 0)
                if ino != S.ROOT_INO and not self.dir_names.get(ino):
                    continue  # unreachable, reported by check_orphans (not repairing)
            else:
                want = self.links.get(ino, 0)
                if want == 0:
                    continue  # orphaned, reported (and freed or reconnected) by check_orphans
            if node.nlink != want:

                def fix(node=node, want=want):
                    """Repair I4: set the inode's ``nlink`` to the count the dirents give, ``want``."""
                    node.nlink = want
                    self.t.put_inode(node)

                self.problem("I4", ino, f"nlink {node.nlink}, expected {want}", fix)

    def check_data(self) -> None:
        """I5: data chunks only of files and symlinks, only below their size; I9: ``blocks`` of each regular
        file is the sum of its chunks' pages (0 for other types)."""
        kv = self.t.kv
        last_ino, max_chunk = -1, -1
        blocks: dict[int, int] = {}
        for k, v in kv.range(S.DB_DATA):
            self.r.chunks += 1
            ino, chunk = S.from_u64(k[:8]), S.from_u64(k[8:16])
            node = self.inodes.get(ino)
            if ino != last_ino:
                last_ino = ino
                max_chunk = -(-node.size // S.CHUNK_SIZE) if node else -1
            if node is None or node.is_dir or chunk >= max_chunk:
                self.problem("I5", ino, f"stray data chunk {chunk}", _later(kv, "delete", S.DB_DATA, k))
            elif node.is_reg:
                blocks[ino] = blocks.get(ino, 0) + S.chunk_blocks(len(v))
        if self.r.schema_version < 3:
            return  # schema ≤ 2 records carry no blocks (migration 2 → 3 adds them)
        for ino, node in self.inodes.items():
            want = blocks.get(ino, 0)
            if node.blocks != want:

                def fix(node=node, want=want):
                    """Repair I9: set the inode's ``blocks`` to ``want``, the sum of its data chunks'
                    pages."""
                    node.blocks = want
                    self.t.put_inode(node)

                self.problem("I9", ino, f"blocks {node.blocks}, expected {want} from its data chunks", fix)

    def check_counters(self) -> None:
        """I6 (next_ino above every inode) and I7 (indexer cursor not beyond the journal)."""
        t = self.t
        nxt = t.cfg_int(S.CFG_NEXT_INO)
        if self.inodes and nxt <= max(self.inodes):
            top = max(self.inodes)
            fix = lambda: t.put_cfg(S.CFG_NEXT_INO, S.u64(top + 1))  # noqa: E731
            self.problem("I6", top, f"next_ino {nxt} not above the largest inode", fix)
        tail = t.journal_tail()
        if t.cfg_int(S.CFG_CURSOR) > tail and t.count(S.DB_JOURNAL):
            fix = lambda: t.put_cfg(S.CFG_CURSOR, S.u64(tail))  # noqa: E731
            self.problem("I7", 0, "indexer cursor beyond the journal tail", fix)

    def check_derived(self) -> None:
        """I8: meta records decode, match their inode's kind and refer to live inodes; TOC pages belong to
        live directories."""
        kv = self.t.kv
        for k, v in kv.range(S.DB_META):
            ino = S.from_u64(k)
            if ino in S.PSEUDO_INOS:  # the catalogue's or subject index's pseudo directory: no inode
                self._check_catalogue_meta(ino, v)
                continue
            node = self.inodes.get(ino)
            drop = lambda k=k: kv.delete(S.DB_META, k)  # noqa: E731
            if node is None:
                self.problem("I8", ino, "meta of a missing inode", drop)
                continue
            try:
                rec = decode_meta(v)
            except Corrupt as e:
                self.problem("I8", ino, f"undecodable meta record: {e}", drop)
                continue
            if isinstance(rec, SectionMeta) != node.is_dir:
                kind = "section" if isinstance(rec, SectionMeta) else "entry"
                self.problem(
                    "I8", ino, f"a {kind} meta record on a {'non-' * (not node.is_dir)}directory", drop
                )
        for k, _ in kv.range(S.DB_TOC, keys_only=True):
            ino = S.from_u64(k)
            if ino in S.PSEUDO_INOS:
                continue
            if ino not in self.inodes or not self.inodes[ino].is_dir:
                self.problem("I8", ino, "TOC page of a missing directory", _later(kv, "delete", S.DB_TOC, k))

    def _check_catalogue_meta(self, ino: int, raw: bytes) -> None:
        """I8 for the section record of the name catalogue or the subject index (pseudo directory ``ino``):
        it decodes as a section record (derived data: a damaged one is dropped with its pages and the
        indexer rebuilds them)."""
        kv = self.t.kv
        what = "catalogue" if ino == S.CATALOGUE_INO else "subject index"

        def drop() -> None:
            """Repair I8: delete the pseudo directory's section record and its TOC pages (the indexer
            rebuilds them)."""
            kv.delete(S.DB_META, S.u64(ino))
            kv.delete_range(S.DB_TOC, S.u64(ino), S.u64(ino + 1))

        try:
            rec = decode_meta(raw)
        except Corrupt as e:
            self.problem("I8", ino, f"undecodable {what} record: {e}", drop)
            return
        if not isinstance(rec, SectionMeta):
            self.problem("I8", ino, f"the {what} record is not a section record", drop)


def describe(report: Report) -> str:
    """Human-readable multi-line report (first line: the schema version and any pending migration)."""
    schema = f"schema {report.schema_version}"
    if report.pending_migrations:
        schema += (
            f" (this release writes {S.SCHEMA_VERSION}; pending, run at the next read-write open: "
            + "; ".join(report.pending_migrations)
            + ")"
        )
    lines = [
        schema,
        f"{count(report.inodes, 'inode')}, {count(report.dirents, 'dirent')}, {count(report.chunks, 'data chunk')}",
    ]
    lines += [f"  {p}" for p in report.problems]
    lines.append(
        "clean"
        if not report.problems
        else ("repaired" if report.clean else f"{count(len(report.problems), 'problem')} found")
    )
    return os.linesep.join(lines)


def damage_json(pages: WalkReport) -> dict:
    """JSON-able report of a damaged store (:func:`libraryfs.fs.lmdb_pages.walk`'s findings)."""
    return {
        "clean": False,
        "damaged": True,
        "problems": pages.problems,
        "records_readable": pages.records,
        "records_expected": pages.expected,
    }


def describe_damage(pages: WalkReport, max_lines: int = 20) -> str:
    """Human-readable report of a damaged store: a first line saying so, the problems (at most
    ``max_lines``), what could be read per table, and how to salvage it."""
    lines = [f"the library's store is damaged: {count(len(pages.problems), 'problem')} in its data file"]
    lines += [f"  {p}" for p in pages.problems[:max_lines]]
    if len(pages.problems) > max_lines:
        lines.append(f"  … {len(pages.problems) - max_lines} more")
    if pages.expected:
        readable = ", ".join(f"{t} {pages.records.get(t, 0)}/{n}" for t, n in sorted(pages.expected.items()))
        lines.append(f"readable records (read/expected): {readable}")
    else:
        lines.append("no table could be reached from the current meta page")
    lines.append(
        "run `libraryfs check --repair` to salvage what is readable into a new store (the damaged one is kept)"
    )
    return os.linesep.join(lines)
