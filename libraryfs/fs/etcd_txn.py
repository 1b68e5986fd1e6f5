"""Snapshot reads and optimistic write transactions on etcd (the ReadTxn/WriteTxn of docs/BACKEND.md).

A read transaction is one etcd revision R: its first request is a linearizable range whose response
header fixes R; every later read asks for ``revision=R`` (serializable, so any member that has applied R
answers without a quorum round; a member behind R makes it fall back to a linearizable read).

A write transaction reads the same way, buffers its puts and deletes (reads see them), and records what
it read: for every key read with get(), its mod_revision (an absent key: create_revision 0); for every
range read, the key interval covered. The commit is one etcd txn whose compares are
``mod_revision(k) == m`` / ``create_revision(k) == 0`` per key and ``mod_revision < R+1`` over every range
interval (an insert or update in a range read since R fails it; a delete inside a range read is caught
only through the keys the typed layer also read — it touches the parent directory's inode on every
dirent change). If the compares do not fit etcd's --max-txn-ops (128), they are coalesced per table into
one interval each. This is the optimistic concurrency of FoundationDB/TiKV clients expressed in etcd's
compare-and-swap (etcd API reference, "Txn"; etcd clientv3 concurrency STM, "serializable" isolation).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from libraryfs import errors
from libraryfs.fs.etcd_gateway import FutureRevision, Gateway, b64, unb64

#: keys per range request when iterating (a page; 1,000 keys of <= 64 KiB stay far below the gRPC
#: message limit of the gateway's response)
PAGE_KEYS = 1000
_MISSING = object()


def next_key(key: bytes) -> bytes:
    """The smallest key greater than ``key`` (etcd ranges are half-open)."""
    return key + b"\x00"


class Keyspace:
    """Maps (table, key) to etcd keys: ``/<PREFIX>/`` + 4-byte table tag + key (docs/BACKEND.md)."""

    def __init__(self, prefix: str, tags: dict[bytes, bytes]) -> None:
        self.base = b"/" + prefix.encode() + b"/"
        self.tags = tags

    def tag(self, table: bytes) -> bytes:
        """The 4-byte tag of ``table``; raises InvalidArgument (EINVAL) for a table not opened."""
        try:
            return self.tags[table]
        except KeyError:
            raise errors.InvalidArgument(f"unknown table {table!r} (open_table it first)") from None

    def key(self, table: bytes, key: bytes) -> bytes:
        """The etcd key of ``key`` in ``table``."""
        return self.base + self.tag(table) + key

    def bounds(self, table: bytes, start: bytes, end: bytes | None) -> tuple[bytes, bytes]:
        """The etcd interval [lo, hi) of table keys start <= key < end (end None: the table's end)."""
        t = self.base + self.tag(table)
        return t + start, (t + end if end is not None else prefix_end(t))

    def strip(self, table: bytes, full: bytes) -> bytes:
        """The table key of an etcd key."""
        return full[len(self.base) + 4 :]


class EtcdReadTxn:
    """A consistent snapshot of the library at one etcd revision (ReadTxn of docs/BACKEND.md)."""

    def __init__(self, gw: Gateway, ks: Keyspace, revision: int | None = None) -> None:
        self.gw = gw
        self.ks = ks
        self.revision = revision  # fixed by the first read when None

    # -- requests ------------------------------------------------------------------------------------
    def _range_call(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.revision is None:
            resp = self.gw.call("kv/range", body)
            self.revision = int(resp["header"]["revision"])
            return resp
        body["revision"] = str(self.revision)
        try:
            return self.gw.call("kv/range", dict(body, serializable=True))
        except FutureRevision:  # this member has not applied R yet: ask for a quorum read
            return self.gw.call("kv/range", body)

    def _get_kv(self, full: bytes) -> tuple[bytes | None, int]:
        kvs = self._range_call({"key": b64(full)}).get("kvs")
        if not kvs:
            return None, 0
        return unb64(kvs[0].get("value")), int(kvs[0]["mod_revision"])

    def _pages(
        self, lo: bytes, hi: bytes, reverse: bool, limit: int | None, keys_only: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """(etcd key, value) in [lo, hi) at the snapshot, in pages; records coverage via _covered."""
        while lo < hi:
            page = PAGE_KEYS if limit is None else max(1, min(PAGE_KEYS, limit))
            body: dict[str, Any] = {"key": b64(lo), "range_end": b64(hi), "limit": page}
            if reverse:
                body.update(sort_order="DESCEND", sort_target="KEY")
            if keys_only:
                body["keys_only"] = True
            resp = self._range_call(body)
            kvs = resp.get("kvs") or []
            more = bool(resp.get("more")) and bool(kvs)
            keys = [unb64(kv["key"]) for kv in kvs]
            if not more:
                self._covered(lo, hi)
            elif reverse:
                self._covered(keys[-1], hi)
            else:
                self._covered(lo, next_key(keys[-1]))
            for k, kv in zip(keys, kvs, strict=False):
                yield k, unb64(kv.get("value"))
            if not more:
                return
            if limit is not None:
                limit -= len(kvs)
                if limit <= 0:
                    return
            if reverse:
                hi = keys[-1]
            else:
                lo = next_key(keys[-1])

    def _covered(self, lo: bytes, hi: bytes) -> None:
        """A range read covered [lo, hi) (a write transaction records it)."""

    # -- ReadTxn -------------------------------------------------------------------------------------
    def get(self, table: bytes, key: bytes) -> bytes | None:
        """The value of ``key`` in ``table`` at the snapshot, or None. Raises Unavailable, Compacted."""
        return self._get_kv(self.ks.key(table, key))[0]

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
        """(key, value) pairs with start <= key < end in unsigned-byte order (descending if ``reverse``),
        at most ``limit``; values are b"" when ``keys_only``. Raises Unavailable, Compacted."""
        lo, hi = self.ks.bounds(table, start, end)
        if limit is not None and limit <= 0:
            return
        for full, value in self._pages(lo, hi, reverse, limit, keys_only):
            yield self.ks.strip(table, full), value

    def prefix(self, table: bytes, prefix: bytes, **kw: Any) -> Iterator[tuple[bytes, bytes]]:
        """range() over the keys that start with ``prefix``."""
        end = _prefix_end(prefix)
        return self.range(table, prefix, end, **kw)

    def count(self, table: bytes) -> int:
        """Number of keys in ``table`` at the snapshot."""
        lo, hi = self.ks.bounds(table, b"", None)
        self._covered(lo, hi)
        return int(
            self._range_call({"key": b64(lo), "range_end": b64(hi), "count_only": True}).get("count", 0)
        )


def _prefix_end(prefix: bytes) -> bytes | None:
    """The first key after every key starting with ``prefix`` (None: no such key — to the table's end)."""
    p = prefix.rstrip(b"\xff")
    return p[:-1] + bytes([p[-1] + 1]) if p else None


def prefix_end(prefix: bytes) -> bytes:
    """The first etcd key after every key starting with ``prefix`` (a non-empty etcd prefix)."""
    end = _prefix_end(prefix)
    if end is None:
        raise errors.InvalidArgument(f"no key follows the prefix {prefix!r}")
    return end


class EtcdWriteTxn(EtcdReadTxn):
    """A write transaction: snapshot reads + buffered writes, committed by EtcdBackend.run_write."""

    def __init__(self, gw: Gateway, ks: Keyspace, max_txn_ops: int = 128) -> None:
        super().__init__(gw, ks)
        self.max_txn_ops = max_txn_ops
        self.buf: dict[bytes, bytes | None] = {}  # etcd key -> value, None = deleted
        self.deleted: list[tuple[bytes, bytes]] = []  # etcd intervals removed by delete_range
        self.read_keys: dict[bytes, int] = {}  # etcd key -> mod_revision seen (0: absent)
        self.read_ranges: list[tuple[bytes, bytes]] = []

    def _covered(self, lo: bytes, hi: bytes) -> None:
        self.read_ranges.append((lo, hi))

    def _in_deleted(self, full: bytes) -> bool:
        return any(lo <= full < hi for lo, hi in self.deleted)

    def get(self, table: bytes, key: bytes) -> bytes | None:
        """As EtcdReadTxn.get, seeing this transaction's own writes; records the key's mod_revision."""
        full = self.ks.key(table, key)
        v = self.buf.get(full, _MISSING)
        if v is not _MISSING:
            return v  # type: ignore[return-value]
        value, mod = self._get_kv(full)
        self.read_keys.setdefault(full, mod)
        return None if self._in_deleted(full) else value

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
        """As EtcdReadTxn.range, merged with this transaction's buffered puts and deletes."""
        lo, hi = self.ks.bounds(table, start, end)
        if limit is not None and limit <= 0:
            return
        mine = sorted(((k, v) for k, v in self.buf.items() if lo <= k < hi), reverse=reverse)
        overlap = bool(mine) or any(a < hi and lo < b for a, b in self.deleted)
        snap = (
            (k, v)
            for k, v in self._pages(lo, hi, reverse, None if overlap else limit, keys_only)
            if k not in self.buf and not self._in_deleted(k)
        )
        n = 0
        for full, value in _merge(snap, iter(mine), reverse):
            if value is None:
                continue
            yield self.ks.strip(table, full), (b"" if keys_only else value)
            n += 1
            if limit is not None and n >= limit:
                return

    def count(self, table: bytes) -> int:
        """Keys in ``table`` as this transaction sees them."""
        if not self.buf and not self.deleted:
            return super().count(table)
        return sum(1 for _ in self.range(table, keys_only=True))

    def put(self, table: bytes, key: bytes, value: bytes, *, append: bool = False) -> None:
        """Buffer ``key`` = ``value`` (``append`` is LMDB's MDB_APPEND hint; ignored here)."""
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"value must be bytes, not {type(value).__name__}")
        self.buf[self.ks.key(table, key)] = bytes(value)

    def delete(self, table: bytes, key: bytes) -> bool:
        """Buffer the removal of ``key``; True if it existed (as this transaction sees it)."""
        existed = self.get(table, key) is not None
        self.buf[self.ks.key(table, key)] = None
        return existed

    def delete_range(self, table: bytes, start: bytes, end: bytes | None) -> int:
        """Remove every key start <= key < end (end None: to the table's end); the number removed.

        One etcd DeleteRange op at commit, whatever the number of keys; the interval is recorded as read,
        so a concurrent insert into it makes the commit conflict and run again."""
        n = sum(1 for _ in self.range(table, start, end, keys_only=True))
        lo, hi = self.ks.bounds(table, start, end)
        for k in [k for k in self.buf if lo <= k < hi]:
            del self.buf[k]
        self.deleted.append((lo, hi))
        return n

    # -- commit --------------------------------------------------------------------------------------
    def txn_ops(self, extra: int = 0) -> tuple[list[dict], list[dict]] | None:
        """(compare, success) of the etcd txn that commits this transaction, or None if it wrote
        nothing. ``extra``: ops the caller adds (its commit marker). Raises FileTooBig beyond the limits."""
        if not self.buf and not self.deleted:
            return None
        success: list[dict] = []
        puts = sorted(k for k, v in self.buf.items() if v is not None)
        for k in puts:
            success.append({"request_put": {"key": b64(k), "value": b64(self.buf[k])}})  # type: ignore
        ranges = _merge_intervals(self.deleted)
        for k, v in self.buf.items():
            if v is None and not any(lo <= k < hi for lo, hi in ranges):
                success.append({"request_delete_range": {"key": b64(k)}})
        for lo, hi in _split_around(ranges, puts):  # etcd refuses a put inside a deleted range of one txn
            success.append({"request_delete_range": {"key": b64(lo), "range_end": b64(hi)}})
        if len(success) + extra > self.max_txn_ops:
            raise errors.FileTooBig(
                f"a transaction of {len(success) + extra} operations exceeds etcd's limit "
                f"of {self.max_txn_ops} (--max-txn-ops)"
            )
        return self._compares(extra), success

    def _compares(self, extra: int) -> list[dict]:
        if self.revision is None:
            return []
        keys = dict(self.read_keys)
        ranges = _merge_intervals(self.read_ranges)
        if len(keys) + len(ranges) + extra > self.max_txn_ops:
            keys, ranges = {}, self._coalesced()
            if len(ranges) + extra > self.max_txn_ops:
                raise errors.FileTooBig(
                    f"a transaction that read {len(ranges)} tables exceeds etcd's limit "
                    f"of {self.max_txn_ops} compares (--max-txn-ops)"
                )
        out = []
        for k, mod in keys.items():
            if mod == 0:
                out.append({"key": b64(k), "target": "CREATE", "result": "EQUAL", "create_revision": "0"})
            else:
                out.append({"key": b64(k), "target": "MOD", "result": "EQUAL", "mod_revision": str(mod)})
        for lo, hi in ranges:
            out.append(
                {
                    "key": b64(lo),
                    "range_end": b64(hi),
                    "target": "MOD",
                    "result": "LESS",
                    "mod_revision": str(self.revision + 1),
                }
            )
        return out

    def _coalesced(self) -> list[tuple[bytes, bytes]]:
        # one interval per table covering every key and range read in it (updates and inserts still
        # conflict; deletes of keys read then only through the keys the typed layer touches)
        n = len(self.ks.base) + 4
        per: dict[bytes, tuple[bytes, bytes]] = {}
        for lo, hi in [(k, next_key(k)) for k in self.read_keys] + self.read_ranges:
            t = lo[:n]
            a, b = per.get(t, (lo, hi))
            per[t] = (min(a, lo), max(b, hi))
        return _merge_intervals(list(per.values()))


def _merge(
    a: Iterator[tuple[bytes, Any]], b: Iterator[tuple[bytes, Any]], reverse: bool
) -> Iterator[tuple[bytes, Any]]:
    """Merge two key-sorted streams with distinct keys (b never repeats a key of a)."""
    x, y = next(a, None), next(b, None)
    while x is not None or y is not None:
        take_b = x is None or (y is not None and ((y[0] > x[0]) if reverse else (y[0] < x[0])))
        if take_b:
            assert y is not None  # take_b: x is exhausted or y sorts first
            yield y
            y = next(b, None)
        else:
            assert x is not None  # not take_b: x is there
            yield x
            x = next(a, None)


def _merge_intervals(ivs: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    for lo, hi in sorted(i for i in ivs if i[0] < i[1]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _split_around(ranges: list[tuple[bytes, bytes]], keys: list[bytes]) -> list[tuple[bytes, bytes]]:
    """The intervals minus the given (sorted) keys."""
    out = []
    for lo, hi in ranges:
        for k in keys:
            if lo <= k < hi:
                out.append((lo, k))
                lo = next_key(k)
        out.append((lo, hi))
    return [(a, b) for a, b in out if a < b]
