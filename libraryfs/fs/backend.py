"""The store-backend seam: the ordered, transactional key-value interface every backend implements.

A backend stores the tables of :mod:`libraryfs.fs.schema` as opaque bytes; the typed layer
(:mod:`libraryfs.fs.store`: ``Store``, ``Txn``) is the same over every backend. Backends: LMDB, embedded,
the default (:mod:`libraryfs.fs.lmdb_backend`); etcd, replicated (:mod:`libraryfs.fs.etcd_backend`). Only
the backend modules import their engine (``lmdb``, an etcd client); a test scans the tree for that.

Semantics every backend keeps (the LMDB behaviour; issue 15 item 1):

* Tables are named by bytes; keys are non-empty bytes compared as unsigned bytes (integers inside keys are
  big-endian); values are bytes. A table must be known before use: the core tables are opened with the
  backend, extension tables with :meth:`Backend.open_table`.
* :meth:`Backend.read` yields a consistent snapshot; :meth:`Backend.run_write` runs a function in one
  atomic write transaction that sees its own writes, and may run it again (LMDB after growing the map,
  etcd after a conflict), so the function must have no side effects outside the transaction.
* ``range(table, start, end)`` covers ``start <= key < end`` (``end`` None: to the table's end) in
  ascending key order, descending with ``reverse``, at most ``limit`` pairs; ``keys_only`` yields b"" as
  values. Iterators are valid only inside their transaction and only while the range they cover is not
  modified by the same transaction: collect first, then write.
* Errors: :class:`~libraryfs.errors.NoSpace` (ENOSPC) when the store cannot grow,
  :class:`~libraryfs.errors.Corrupt` for undecodable stores; an engine's own errors for a store it cannot
  read (the CLI prints :data:`libraryfs.fs.store.StoreError` on one line).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class ReadTxn(Protocol):
    """Reads of one consistent snapshot (or of a write transaction, seeing its own writes)."""

    def get(self, table: bytes, key: bytes) -> bytes | None:
        """The value of ``key`` in ``table``, or None."""
        ...

    def range(
        self,
        table: bytes,
        start: bytes = b"",
        end: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
        keys_only: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < end`` in key order (see the module docstring)."""
        ...

    def prefix(self, table: bytes, prefix: bytes, **kw: Any) -> Iterator[tuple[bytes, bytes]]:
        """:meth:`range` over the keys starting with ``prefix`` (``kw``: reverse, limit, keys_only)."""
        ...

    def count(self, table: bytes) -> int:
        """Number of keys in ``table``."""
        ...


class WriteTxn(ReadTxn, Protocol):
    """A write transaction: reads plus buffered changes, committed atomically by :meth:`Backend.run_write`."""

    def put(self, table: bytes, key: bytes, value: bytes, *, append: bool = False) -> None:
        """Set ``key`` to ``value``; ``append`` is a hint that ``key`` sorts after every key of the table."""
        ...

    def delete(self, table: bytes, key: bytes) -> bool:
        """Remove ``key``; False if it was absent."""
        ...

    def delete_range(self, table: bytes, start: bytes, end: bytes | None) -> int:
        """Remove every key with ``start <= key < end`` (``end`` None: to the table's end); returns how many."""
        ...


class Backend(Protocol):
    """One library's store on some engine (see the module docstring for the shared semantics)."""

    name: str  #: "lmdb" | "etcd"

    def read(self) -> AbstractContextManager[ReadTxn]:
        """A context manager yielding a read transaction on a consistent snapshot."""
        ...

    def run_write(self, fn: Callable[[WriteTxn], T]) -> T:
        """Run ``fn`` in one write transaction, commit, return its result (``fn`` may run more than once).

        Raises NoSpace (ENOSPC), Corrupt, or an error ``fn`` raised (the transaction is then aborted)."""
        ...

    def sync(self) -> None:
        """Durability point: committed transactions survive an OS crash once this returns."""
        ...

    def close(self) -> None:
        """Flush (if writable) and release the store."""
        ...

    def info(self) -> dict:
        """Facts for ``status`` and ``statfs``; always ``used_bytes`` (bytes the store occupies)."""
        ...

    def open_table(self, name: bytes) -> None:
        """Make an extension table known (created if absent and the backend is writable)."""
        ...

    def tables(self) -> list[bytes]:
        """Names of every table the store may hold rows in (core and extension tables), sorted."""
        ...


def prefix_end(prefix: bytes) -> bytes | None:
    """The first key after every key starting with ``prefix`` (None: no such key, i.e. the table's end).

    ``b"ab"`` → ``b"ac"``; ``b"a\\xff"`` → ``b"b"``; ``b""`` and ``b"\\xff\\xff"`` → None.
    """
    p = prefix.rstrip(b"\xff")
    return p[:-1] + bytes((p[-1] + 1,)) if p else None


def bound_getter(txn: ReadTxn, table: bytes) -> Callable[[bytes], bytes | None]:
    """``get`` of one table as a one-argument callable: the hot path's per-component lookup.

    A backend's transaction may offer a faster ``getter(table)`` of its own; this is the fallback.
    """
    own = getattr(txn, "getter", None)
    return own(table) if own is not None else functools.partial(txn.get, table)
