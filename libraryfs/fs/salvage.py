"""Salvage a damaged LMDB store: copy every readable record into a new store and keep the old one.

``libraryfs check --repair`` on a store whose pages are damaged (:func:`libraryfs.fs.lmdb_pages.walk` found
problems) calls :func:`salvage`: the records are read with plain file reads, never through LMDB (which
could crash on the damage), damaged pages and the subtrees below them are skipped, and the rest is written
into a new environment; config keys an open needs and whose records were lost get a new library's
defaults (:func:`_restore_config`). The old store directory is renamed ``store.damaged-<UTC time>`` and kept; the new
one takes its place; the ordinary invariant check then repairs what the lost records left dangling
(dirents to lost inodes, orphans, link counts).

Which tree is read: the current meta page's. Only when it reaches no named table at all (its main DB is
lost) is the other meta page, one transaction older, tried: its pages may since have been reused.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field

from libraryfs.fs import lmdb_backend, lmdb_pages
from libraryfs.fs import schema as S
from libraryfs.words import count

BATCH_BYTES = 4 << 20  #: records written per transaction, in bytes of keys and values


@dataclass
class SalvageReport:
    """What :func:`salvage` did: records copied per table, what the damaged store's headers promised, the
    problems met, where the old store was kept and which meta slot's tree was read."""

    copied: dict[str, int] = field(default_factory=dict)
    expected: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    kept: str = ""
    slot: int | None = None
    restored: list[str] = field(default_factory=list)

    def lost(self) -> int:
        """Records the damaged store's headers promised that could not be copied (0: nothing lost)."""
        return max(0, sum(self.expected.values()) - sum(self.copied.values()))

    def lines(self) -> list[str]:
        """Human-readable summary: one line per table with a loss, then the totals and where the old store is."""
        out = []
        for table in sorted(set(self.copied) | set(self.expected)):
            got, want = self.copied.get(table, 0), self.expected.get(table, 0)
            if got != want:
                out.append(f"  {table}: {got} of {count(want, 'record')} salvaged")
        total, want = sum(self.copied.values()), sum(self.expected.values())
        out.append(
            f"salvaged {total} of {count(want, 'record')} into a new store; the damaged store is kept at {self.kept}"
        )
        return out


def _restore_config(t) -> list[str]:
    """Put back the config keys a store cannot open without, when their records were lost: the schema
    version (assumed current: a read-write open by this release migrated the store), the clean flag
    (set: the check that follows repairs), the settings and creation time (a new library's). Returns the
    names of the keys restored. ``next_ino`` is left to the check (I6 raises it above every inode)."""
    defaults = {
        S.CFG_SCHEMA_VERSION: S.u64(S.SCHEMA_VERSION),
        S.CFG_CLEAN: b"1",
        S.CFG_SETTINGS: S.dumps({}),
        S.CFG_CREATED: S.u64(time.time_ns()),
    }
    restored = []
    for key, value in defaults.items():
        if t.get(S.DB_CONFIG, key) is None:
            t.put(S.DB_CONFIG, key, value)
            restored.append(key.decode())
    return restored


def _choose_slot(store_dir: str) -> int | None:
    """None (the current meta page) unless its tree reaches no named table: then the slot whose tree
    reaches the most records (a truncated file or a bad meta page leaves no current tree)."""
    if lmdb_pages.walk(store_dir).expected:
        return None
    best, most = None, -1
    for slot in (0, 1):
        r = lmdb_pages.walk(store_dir, slot=slot)
        n = sum(r.records.get(t, 0) for t in r.expected)
        if r.expected and n > most:
            best, most = slot, n
    return best


def salvage(libdir: str) -> SalvageReport:
    """Copy the readable records of ``<libdir>/store`` into a new store that replaces it; the old one is
    renamed ``store.damaged-<YYYYmmddTHHMMSSZ>``. The library must not be in use (the caller holds or has
    checked its mount lock). Raises ``OSError`` when the new store cannot be written (nothing is replaced
    then), :class:`~libraryfs.errors.NoSpace` when the disk cannot hold it."""
    libdir = os.path.abspath(libdir)
    store_dir = lmdb_backend.store_path(libdir)
    report = SalvageReport(slot=_choose_slot(store_dir))
    tmp = os.path.join(libdir, ".salvage")
    shutil.rmtree(tmp, ignore_errors=True)
    size = os.path.getsize(lmdb_pages.data_path(store_dir))
    new = lmdb_backend.LmdbBackend.create(tmp, map_size=max(lmdb_backend.DEFAULT_MAP_SIZE, 2 * size))
    batch: list[tuple[bytes, bytes, bytes]] = []
    pending = [0]

    def flush() -> None:
        """Write the batched records to the new store in one write transaction and empty the batch."""
        rows = list(batch)

        def write(t) -> None:
            """The write transaction: put every batched ``(table, key, value)`` into the new store."""
            for table, key, value in rows:
                t.put(table, key, value)

        new.run_write(write)
        batch.clear()
        pending[0] = 0

    def visit(table: str, key: bytes, value: bytes) -> None:
        """The page walk's callback for one readable record: batch it for the new store (its table opened
        there), count it, and :func:`flush` once the batch holds BATCH_BYTES of keys and values."""
        name = table.encode()
        new.open_table(name)
        batch.append((name, key, value))
        report.copied[table] = report.copied.get(table, 0) + 1
        pending[0] += len(key) + len(value)
        if pending[0] >= BATCH_BYTES:
            flush()

    try:
        walked = lmdb_pages.walk(store_dir, visit, slot=report.slot)
        flush()
        report.restored = new.run_write(_restore_config)
        new.sync()
    finally:
        new.close()
    report.expected, report.problems = walked.expected, walked.problems
    for table in walked.expected:
        report.copied.setdefault(table, 0)
    report.kept = f"{store_dir}.damaged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    os.rename(store_dir, report.kept)
    os.rename(lmdb_backend.store_path(tmp), store_dir)
    shutil.rmtree(tmp, ignore_errors=True)
    return report
