"""The LMDB reference for the backend conformance suite: ReadTxn/WriteTxn semantics (docs/BACKEND.md) on
py-lmdb named databases, written as plainly as possible (until libraryfs/fs/lmdb_backend.py lands)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import lmdb


class LmdbTxn:
    """ReadTxn + WriteTxn over one lmdb transaction."""

    def __init__(self, env: lmdb.Environment, dbs: dict[bytes, object], txn: lmdb.Transaction) -> None:
        self.env, self.dbs, self.txn = env, dbs, txn

    def get(self, table: bytes, key: bytes) -> bytes | None:
        return self.txn.get(key, db=self.dbs[table])

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
        with self.txn.cursor(db=self.dbs[table]) as cur:
            items = []
            if cur.set_range(start) if start else cur.first():
                for k, v in cur:
                    if end is not None and k >= end:
                        break
                    items.append((bytes(k), b"" if keys_only else bytes(v)))
        if reverse:
            items.reverse()
        return iter(items if limit is None else items[: max(limit, 0)])

    def prefix(self, table: bytes, prefix: bytes, **kw) -> Iterator[tuple[bytes, bytes]]:
        limit = kw.pop("limit", None)
        items = [kv for kv in self.range(table, prefix, **kw) if kv[0].startswith(prefix)]
        return iter(items if limit is None else items[:limit])

    def count(self, table: bytes) -> int:
        return self.txn.stat(self.dbs[table])["entries"]

    def put(self, table: bytes, key: bytes, value: bytes, *, append: bool = False) -> None:
        self.txn.put(key, value, db=self.dbs[table])

    def delete(self, table: bytes, key: bytes) -> bool:
        return self.txn.delete(key, db=self.dbs[table])

    def delete_range(self, table: bytes, start: bytes, end: bytes | None) -> int:
        keys = [k for k, _ in self.range(table, start, end, keys_only=True)]
        for k in keys:
            self.txn.delete(k, db=self.dbs[table])
        return len(keys)


class LmdbReference:
    """A Backend-shaped LMDB store in ``path`` with the given tables."""

    name = "lmdb"

    def __init__(self, path: str, tables: list[bytes]) -> None:
        self.env = lmdb.open(path, max_dbs=len(tables) + 1, map_size=1 << 28)
        self.dbs = {t: self.env.open_db(t) for t in tables}

    @contextmanager
    def read(self):
        with self.env.begin() as txn:
            yield LmdbTxn(self.env, self.dbs, txn)

    def run_write(self, fn):
        with self.env.begin(write=True) as txn:
            return fn(LmdbTxn(self.env, self.dbs, txn))

    def close(self) -> None:
        self.env.close()
