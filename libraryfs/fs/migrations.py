"""Numbered migrations of the store format: a registry of steps N → N+1 run when a writer opens an old store.

History of the format (``schema_version`` in ``config``):

1  the first release's layout. Dirents written since commit f0cb335 carry the child's file type byte;
   older ones are 8 bytes.
2  every dirent carries the type byte (``check`` requires it; step 1 → 2 adds the missing ones).
3  every inode record carries ``blocks`` (72 bytes): the allocated size in 512-byte units, summed over the
   file's data chunks in whole 4 KiB pages (``st_blocks``; invariant I9). Before, ``stat`` derived it from
   the size, so ``du`` counted holes. Step 2 → 3 rewrites each 64-byte record with the count from its
   chunks; read-compatible (a schema-2 store is served read-only with the old estimate).

Policy (:func:`on_open`, called by :class:`~libraryfs.fs.store.Store` on every open):

* current version: nothing to do. Newer than :data:`~libraryfs.fs.schema.SCHEMA_VERSION`:
  :class:`~libraryfs.errors.SchemaMismatch` ("upgrade libraryfs"); a store is never reinterpreted.
* older, read-write open (the mount, the indexer, ``libraryfs index``, ``check --repair``, ``init``'s
  callers...): the pending steps run in order, announced by a WARNING log line (releases before this one
  can no longer open the store afterwards) and recorded in ``config[schema_history]``.
* older, read-only open (``status``, ``find``, a plain ``check``): served as it is when every pending step
  is ``read_compatible`` (this release reads the old form: true of 1 → 2); otherwise SchemaMismatch with the
  command that migrates. A read-only open never writes.

A step is a function ``step(t, resume, batch) -> (next resume key | None when done, records changed)`` over
one write transaction: it examines at most ``batch`` records starting at key ``resume`` (``b""`` first) and
says where the next batch starts. Each batch commits with its progress (``config[migration_progress]``),
so a large store migrates in bounded transactions, an interrupted migration resumes where it stopped, and
steps are idempotent (a batch run twice changes nothing the second time). The version is bumped in the
same transaction as the last batch. Two processes migrating at once interleave safely: every batch
re-reads the version and progress inside its transaction.

To add step N → N+1: write ``@migration(N, "what changes", read_compatible=...)`` below, set
``schema.SCHEMA_VERSION = N + 1``, describe the new form in :mod:`libraryfs.fs.schema` and in the history
above, and add a test that a version-N store migrates (``tests/unit/test_migrations.py``).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from libraryfs import __version__
from libraryfs.errors import Corrupt, SchemaMismatch
from libraryfs.fs import schema as S
from libraryfs.words import count

if TYPE_CHECKING:
    from libraryfs.fs.store import Store, Txn

log = logging.getLogger("libraryfs.migrations")

BATCH_RECORDS = 10_000  #: records a step examines per write transaction

#: ``step(t, resume, batch) -> (next resume key or None when done, records changed)``
Step = Callable[["Txn", bytes, int], tuple[bytes | None, int]]


@dataclass(frozen=True)
class Migration:
    """Step ``source`` → ``source + 1``: what it changes, its function, and whether this release can
    serve a store still at ``source`` read-only."""

    source: int
    summary: str
    step: Step
    read_compatible: bool


#: source version → its step; contiguous from 1 to SCHEMA_VERSION - 1 (a test checks)
MIGRATIONS: dict[int, Migration] = {}


def migration(source: int, summary: str, *, read_compatible: bool) -> Callable[[Step], Step]:
    """Register the decorated function as step ``source`` → ``source + 1`` of :data:`MIGRATIONS`."""

    def register(fn: Step) -> Step:
        """Record ``fn`` as the step from ``source`` in :data:`MIGRATIONS` and return it unchanged; raises
        ValueError if that step is already registered."""
        if source in MIGRATIONS:
            raise ValueError(f"migration {source} → {source + 1} is registered twice")
        MIGRATIONS[source] = Migration(source, summary, fn, read_compatible)
        return fn

    return register


# ---- the steps ----------------------------------------------------------------------------------------
@migration(1, "dirents record the child's file type", read_compatible=True)
def _dirent_types(t: Txn, resume: bytes, batch: int) -> tuple[bytes | None, int]:
    """Give every 8-byte dirent its type byte. A dirent whose child is missing or undecodable is left as it
    is for ``check`` to report (I2): a migration never fails on damage it does not need to resolve."""
    rows = list(t.kv.range(S.DB_DIRENTS, resume, limit=batch))
    changed = 0
    for key, value in rows:
        if len(value) > 8:
            continue
        try:
            node = t.inode(S.from_u64(value))
        except Corrupt:
            node = None
        if node is not None:
            t.kv.put(S.DB_DIRENTS, key, S.dirent_value(node.ino, node.mode))
            changed += 1
    return (rows[-1][0] + b"\0" if len(rows) == batch else None), changed


@migration(2, "inodes record their allocated blocks (st_blocks without holes)", read_compatible=True)
def _inode_blocks(t: Txn, resume: bytes, batch: int) -> tuple[bytes | None, int]:
    """Rewrite each 64-byte inode record as 72 bytes with ``blocks`` counted from its data chunks (regular
    files; 0 for the rest). A record already 72 bytes long is left alone (idempotent); an undecodable one
    is left for ``check`` to report (I0)."""
    rows = list(t.kv.range(S.DB_INODES, resume, limit=batch))
    changed = 0
    for key, value in rows:
        if len(value) != S.INODE_SIZE_V2:
            continue
        try:
            node = S.Inode.unpack(S.from_u64(key), value)
        except struct.error:  # not Exception: a RecursionError or MemoryError is no corrupt record
            continue
        node.blocks = allocated_blocks(t, node.ino) if node.is_reg else 0
        t.put_inode(node)
        changed += 1
    return (rows[-1][0] + b"\0" if len(rows) == batch else None), changed


def allocated_blocks(t: Txn, ino: int) -> int:
    """``blocks`` (I9) of inode ``ino`` counted from its stored data chunks."""
    return sum(S.chunk_blocks(len(v)) for _k, v in t.kv.prefix(S.DB_DATA, S.u64(ino)))


# ---- running them -------------------------------------------------------------------------------------
def pending(
    version: int, target: int | None = None, registry: dict[int, Migration] | None = None
) -> list[Migration]:
    """The steps that take a store from ``version`` to ``target`` (default: :data:`SCHEMA_VERSION`), in
    order; Corrupt if one is missing."""
    registry = MIGRATIONS if registry is None else registry
    target = S.SCHEMA_VERSION if target is None else target
    try:
        return [registry[v] for v in range(version, target)]
    except KeyError as e:
        raise Corrupt(f"no migration from schema {e.args[0]} (this release: {target})") from e


def on_open(store: Store, version: int | None) -> int:
    """Apply the open policy of the module docstring to ``store`` at ``version``; returns the version the
    store is served at. Raises SchemaMismatch or Corrupt (no version recorded)."""
    if version is None:
        raise Corrupt(f"{store.libdir}: the store records no schema version; restore it from a backup")
    if version == S.SCHEMA_VERSION:
        return version
    if version > S.SCHEMA_VERSION:
        raise SchemaMismatch(
            f"{store.libdir} has schema {version}, newer than this release of libraryfs knows "
            f"({S.SCHEMA_VERSION}): upgrade libraryfs"
        )
    if not store.readonly:
        return migrate(store)
    steps = pending(version)
    blocking = [m for m in steps if not m.read_compatible]
    if blocking:
        raise SchemaMismatch(
            f"{store.libdir} has schema {version} and this release reads only {blocking[-1].source + 1} or "
            f"later: open it read-write once to migrate (`libraryfs check --repair {store.libdir}`)"
        )
    log.info(
        "%s: schema %d served read-only; migration to %d runs at the next read-write open",
        store.libdir,
        version,
        S.SCHEMA_VERSION,
    )
    return version


def migrate(
    store: Store,
    target: int | None = None,
    registry: dict[int, Migration] | None = None,
    batch: int | None = None,
) -> int:
    """Run the pending steps of a writable ``store`` up to ``target`` (default: :data:`SCHEMA_VERSION`),
    ``batch`` records per transaction (default :data:`BATCH_RECORDS`); returns the version reached.

    Each step runs in batches of ``batch`` records, one write transaction each (module docstring).
    Raises whatever a step or the backend raises (NoSpace...); the steps done so far stay done.
    """
    target = S.SCHEMA_VERSION if target is None else target
    batch = BATCH_RECORDS if batch is None else batch
    with store.read() as t:
        version = t.cfg_int(S.CFG_SCHEMA_VERSION)
    for m in pending(version, target, registry):
        log.warning(
            "%s: migrating the library from schema %d to %d (%s); releases before %s cannot open it afterwards",
            store.libdir,
            m.source,
            m.source + 1,
            m.summary,
            __version__,
        )
        t0 = time.monotonic()
        done = None
        while done is None:
            done = store.run_write(partial(_run_batch, m=m, batch=batch))
        log.warning(
            "%s: schema %d → %d done: %s changed in %.2f s",
            store.libdir,
            m.source,
            m.source + 1,
            count(done, "record"),
            time.monotonic() - t0,
        )
    return max(version, target)


def _run_batch(t: Txn, m: Migration, batch: int) -> int | None:
    """One batch of step ``m``; returns the records it changed in all when the step is complete (the
    version is bumped then), None while batches remain. Another process's progress is picked up."""
    if t.cfg_int(S.CFG_SCHEMA_VERSION) != m.source:
        return 0  # another process finished this step
    raw = t.cfg(S.CFG_MIGRATION)
    resume, total = b"", 0
    if raw is not None and S.from_u64(raw) == m.source:
        total, resume = S.from_u64(raw[8:16]), raw[16:]
    nxt, changed = m.step(t, resume, batch)
    total += changed
    if nxt is not None:
        t.put_cfg(S.CFG_MIGRATION, S.u64(m.source) + S.u64(total) + nxt)
        return None
    t.kv.delete(S.DB_CONFIG, S.CFG_MIGRATION)
    t.put_cfg(S.CFG_SCHEMA_VERSION, S.u64(m.source + 1))
    history = S.loads(t.cfg(S.CFG_SCHEMA_HISTORY), [])
    history.append(  # type: ignore[attr-defined]
        {
            "from": m.source,
            "to": m.source + 1,
            "at_ns": time.time_ns(),
            "release": __version__,
            "records": total,
        }
    )
    t.put_cfg(S.CFG_SCHEMA_HISTORY, S.dumps(history))
    return total
