"""fsck for a library: verify every invariant of :mod:`libraryfs.fs.schema` and optionally repair.

Each check has a code (``I1`` … ``I8`` as in the schema docstring). ``check(store)`` returns a
:class:`Report`; tests end by asserting ``report.problems == []`` (s3ql's t3_fsck habit). Repairs are
conservative: dangling dirents are removed, wrong link counts corrected, orphaned inodes (nlink 0 or
unreachable) freed, stray data chunks past EOF dropped, ``next_ino`` raised, stale meta/TOC records dropped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from libraryfs.fs import schema as S
from libraryfs.fs.store import Store, Txn


@dataclass
class Problem:
    """One invariant violation: ``code`` (e.g. ``"I4"``), the inode concerned and a message."""

    code: str
    ino: int
    message: str
    repaired: bool = False


@dataclass
class Report:
    """Result of :func:`check`: the problems found and how many were repaired; counts of what was seen."""

    problems: list[Problem] = field(default_factory=list)
    repaired: int = 0
    inodes: int = 0
    dirents: int = 0
    chunks: int = 0

    @property
    def clean(self) -> bool:
        """True when no problem remains unrepaired."""
        return all(p.repaired for p in self.problems)

    def to_json(self) -> dict:
        """JSON-able summary."""
        return {
            "clean": self.clean,
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
    """Verify invariants I1–I8; with ``repair`` fix what can be fixed in one write transaction."""
    if repair:
        return store.run_write(lambda t: _check(t, True))
    with store.read() as t:
        return _check(t, False)


def _check(t: Txn, repair: bool) -> Report:
    r = Report()

    def problem(code: str, ino: int, msg: str, fix=None) -> None:
        p = Problem(code, ino, msg)
        if repair and fix is not None:
            fix()
            p.repaired = True
            r.repaired += 1
        r.problems.append(p)

    s = t.s
    inodes: dict[int, S.Inode] = {}
    for k, v in t.t.cursor(db=s.db_inodes):
        ino = S.from_u64(k)
        try:
            inodes[ino] = S.Inode.unpack(ino, v)
        except Exception as e:
            problem(
                "I0", ino, f"undecodable inode: {e}", lambda ino=ino: t.t.delete(S.u64(ino), db=s.db_inodes)
            )
    r.inodes = len(inodes)
    root = inodes.get(S.ROOT_INO)
    if root is None or not root.is_dir:
        problem("I1", S.ROOT_INO, "root inode missing or not a directory")
        return r
    # I2: dirents
    links: dict[int, int] = {}
    subdirs: dict[int, int] = {}
    dir_names: dict[int, list[tuple[int, bytes]]] = {}
    bad_dirents: list[bytes] = []
    for k, v in t.t.cursor(db=s.db_dirents):
        r.dirents += 1
        parent, name, child = S.from_u64(k), k[8:], S.from_u64(v)
        pnode, cnode = inodes.get(parent), inodes.get(child)
        bad = None
        if pnode is None or not pnode.is_dir:
            bad = f"dirent {name!r} in non-directory {parent}"
        elif cnode is None:
            bad = f"dirent {name!r} in {parent} names missing inode {child}"
        elif not (1 <= len(name) <= S.NAME_MAX) or b"/" in name or b"\0" in name or name in (b".", b".."):
            bad = f"invalid name {name!r} in {parent}"
        if bad:
            problem("I2", child, bad, lambda k=bytes(k): bad_dirents.append(k))
            continue
        links[child] = links.get(child, 0) + 1
        if cnode.is_dir:  # type: ignore[union-attr]
            subdirs[parent] = subdirs.get(parent, 0) + 1
            dir_names.setdefault(child, []).append((parent, name))
    for k in bad_dirents:  # deleted after the scan: never delete under a live cursor
        t.t.delete(k, db=s.db_dirents)
    # I3: directories named once, dirparent mirrors, reach root
    for ino, node in inodes.items():
        if not node.is_dir or ino == S.ROOT_INO:
            continue
        names = dir_names.get(ino, [])
        if len(names) != 1:
            problem("I3", ino, f"directory named by {len(names)} dirents")
            continue
        link = t.dirparent(ino)
        if link != names[0]:
            problem(
                "I3",
                ino,
                "dirparent does not mirror the dirent",
                lambda ino=ino, n=names[0]: t.t.put(S.u64(ino), S.u64(n[0]) + n[1], db=s.db_dirparent),
            )
    for ino, node in inodes.items():
        if node.is_dir and ino != S.ROOT_INO and dir_names.get(ino):
            seen, cur = set(), ino
            while cur != S.ROOT_INO:
                if cur in seen or len(seen) > 100000:
                    problem("I3", ino, "directory not reachable from the root (cycle)")
                    break
                seen.add(cur)
                parents = dir_names.get(cur)
                if not parents:
                    problem("I3", ino, "directory detached from the root")
                    break
                cur = parents[0][0]
    # I4: link counts; orphans
    for ino, node in inodes.items():
        if node.is_dir:
            want = 2 + subdirs.get(ino, 0)
            if ino != S.ROOT_INO and not dir_names.get(ino):
                problem("I4", ino, "unreachable directory", lambda ino=ino: _free(t, ino))
                continue
        else:
            want = links.get(ino, 0)
            if want == 0:
                problem(
                    "I4",
                    ino,
                    f"orphaned inode (nlink {node.nlink}, no dirent)",
                    lambda ino=ino: _free(t, ino),
                )
                continue
        if node.nlink != want:

            def fix(node=node, want=want):
                node.nlink = want
                t.put_inode(node)

            problem("I4", ino, f"nlink {node.nlink}, expected {want}", fix)
    # I5: data chunks
    last_ino, max_chunk = -1, -1
    for k in t.t.cursor(db=s.db_data).iternext(keys=True, values=False):
        r.chunks += 1
        ino, chunk = S.from_u64(k[:8]), S.from_u64(k[8:16])
        node = inodes.get(ino)
        if ino != last_ino:
            last_ino = ino
            max_chunk = -(-node.size // S.CHUNK_SIZE) if node else -1
        if node is None or node.is_dir or chunk >= max_chunk:
            problem("I5", ino, f"stray data chunk {chunk}", lambda k=bytes(k): t.t.delete(k, db=s.db_data))
    # I6: next_ino
    nxt = t.cfg_int(S.CFG_NEXT_INO)
    if inodes and nxt <= max(inodes):
        problem(
            "I6",
            max(inodes),
            f"next_ino {nxt} not above the largest inode",
            lambda: t.put_cfg(S.CFG_NEXT_INO, S.u64(max(inodes) + 1)),
        )
    # I7: journal order and cursor
    tail = t.journal_tail()
    if t.cfg_int(S.CFG_CURSOR) > tail and t.count(s.db_journal):
        problem(
            "I7", 0, "indexer cursor beyond the journal tail", lambda: t.put_cfg(S.CFG_CURSOR, S.u64(tail))
        )
    # I8: meta and toc refer to live inodes
    for db, code in ((s.db_meta, "I8"),):
        for k in t.t.cursor(db=db).iternext(keys=True, values=False):
            ino = S.from_u64(k)
            if ino not in inodes:
                problem(code, ino, "meta of a missing inode", lambda k=bytes(k): t.t.delete(k, db=s.db_meta))
    for k in t.t.cursor(db=s.db_toc).iternext(keys=True, values=False):
        ino = S.from_u64(k)
        if ino not in inodes or not inodes[ino].is_dir:
            problem(
                "I8", ino, "TOC page of a missing directory", lambda k=bytes(k): t.t.delete(k, db=s.db_toc)
            )
    return r


def _free(t: Txn, ino: int) -> None:
    t.del_inode(ino)


def describe(report: Report) -> str:
    """Human-readable multi-line report."""
    lines = [f"{report.inodes} inodes, {report.dirents} dirents, {report.chunks} data chunks"]
    for p in report.problems:
        lines.append(f"  {p.code} ino {p.ino}: {p.message}{' (repaired)' if p.repaired else ''}")
    lines.append(
        "clean"
        if not report.problems
        else ("repaired" if report.clean else f"{len(report.problems)} problem(s) found")
    )
    return os.linesep.join(lines)
