"""The etcd store backend: a library as a key space ``/<PREFIX>/`` in a Raft-replicated etcd 3.4 cluster.

``EtcdBackend.open("etcd://127.0.0.1:2379,127.0.0.1:2380/PREFIX")`` implements the Backend interface of
docs/BACKEND.md (read snapshots, write transactions with retry, open_table, info), plus what many hosts
need: a single-holder election on an etcd lease (``acquire_lease``) and a watch of a table's changes from a
revision (``watch_prefix``), for the journal and cross-host cache invalidation.

Commits and their outcome: run_write commits with one etcd txn that also sets a per-writer *commit
marker* key (``/<PREFIX>/\\0TXM`` + writer id + slot) and compares its mod_revision. When a commit's answer
is lost (member killed, quorum lost after the request was sent), the marker tells whether it applied;
because every attempt compares the marker, a lost attempt that applies late makes the retry conflict
instead of applying twice (the "commit_unknown_result" problem of FoundationDB clients). Markers are
deleted by close().

Time bounds: every request is bounded by ``timeout_s`` (default ``etcd_gateway.TIMEOUT_S``, 10 s) including
failover between members; without quorum a call raises Unavailable (EIO) after at most that long (etcd itself
answers a minority member's requests with "request timed out" after 7 s = 5 s + 2 × election timeout).
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from libraryfs import errors
from libraryfs.fs.etcd_gateway import TIMEOUT_S, Ambiguous, Gateway, LeaseNotFound, b64, unb64
from libraryfs.fs.etcd_txn import EtcdReadTxn, EtcdWriteTxn, Keyspace, prefix_end

T = TypeVar("T")


# The interface implemented here (Backend, ReadTxn, WriteTxn) is defined in libraryfs/fs/backend.py.


#: table → 4-byte tag (docs/BACKEND.md); extension tables get a registered tag b"\x01" + 3-byte number
TABLE_TAGS: dict[bytes, bytes] = {
    b"inodes": b"INOD",
    b"dirents": b"DENT",
    b"dirparent": b"DPAR",
    b"data": b"CHNK",
    b"xattrs": b"XATR",
    b"meta": b"META",
    b"journal": b"JRNL",
    b"toc": b"TOCP",
    b"names": b"NAME",
    b"config": b"CONF",
    b"llmcache": b"LLMC",
    b"units": b"UNIT",
    b"extra": b"XTRA",
}
TAG_REGISTRY, TAG_COUNTER, MARKERS, LEASES = b"\x00TBL", b"\x00TBC", b"\x00TXM", b"\x00LSE"
OWN_REVISIONS = 4096  #: commits of this process remembered by :meth:`EtcdBackend.committed_here`
UNREGISTERED_TAG = b"\x00NIL"  #: read-only view of a table never registered: no key carries this tag
_PREFIX_RE = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
_HOSTPORT_RE = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})$")


def parse_url(url: str) -> tuple[list[str], str]:
    """``etcd://host:port[,host:port...]/PREFIX`` → (["host:port", ...], "PREFIX").

    PREFIX: one or more ``/``-separated segments of [A-Za-z0-9._-] (several libraries share a cluster by
    prefix). Raises InvalidArgument with a one-line message for anything else."""
    m = re.match(r"^etcd://([^/]+)/(.+)$", url)
    if not m:
        raise errors.InvalidArgument(f"not an etcd store URL: {url!r} (want etcd://host:port,.../PREFIX)")
    eps = [e.strip() for e in m.group(1).split(",") if e.strip()]
    for e in eps:
        hp = _HOSTPORT_RE.match(e)
        if not hp or not 0 < int(hp.group(2)) < 65536:
            raise errors.InvalidArgument(f"bad etcd endpoint {e!r} in {url!r} (want host:port)")
    prefix = m.group(2).strip("/")
    if not eps or not _PREFIX_RE.match(prefix):
        raise errors.InvalidArgument(f"bad etcd store URL {url!r}: prefix must be segments of [A-Za-z0-9._-]")
    return eps, prefix


@dataclass
class _Slot:
    """One writer's commit marker: every commit compares the marker's mod_revision with :attr:`mod` and puts
    :attr:`seq` into it, so a commit whose answer was lost can be told applied or not (:meth:`EtcdBackend._resolve`)."""

    key: bytes
    mod: int = 0  # mod_revision of the marker key as last seen (0: absent)
    seq: int = 0
    #: a commit was sent and its answer never came (timeout, lost quorum): etcd may still apply it, which moves
    #: the marker, so :attr:`mod` is re-read before the slot's next commit — else every later commit's compare
    #: fails and the writer conflicts until it gives up
    unsure: bool = False


@dataclass
class WatchEvent:
    """One change in a watched table: kind "put" or "delete", table key, value (b"" for delete), revision."""

    kind: str
    key: bytes
    value: bytes
    revision: int


class Lease:
    """A held single-holder lease (etcd lease + key attached to it): keepalive() before ttl_s runs out."""

    def __init__(self, backend: EtcdBackend, name: bytes, lease_id: int, ttl_s: int) -> None:
        self.backend, self.name, self.id, self.ttl_s = backend, name, lease_id, ttl_s

    def keepalive(self) -> bool:
        """Renew the lease; False if it has expired or was revoked (another holder may have it now)."""
        try:
            r = self.backend.gw.call("lease/keepalive", {"ID": str(self.id)})
        except LeaseNotFound:
            return False
        return int(r.get("result", {}).get("TTL", 0) or 0) > 0

    def release(self) -> bool:
        """Give the lease up at once (revoke: its key is deleted). Idempotent. False when etcd did not answer
        within 3 s (the lease then ends when its TTL runs out)."""
        try:
            self.backend.gw.call("lease/revoke", {"ID": str(self.id)}, timeout_s=3.0)
        except LeaseNotFound:
            pass
        except errors.Unavailable:
            return False
        return True


class Watch:
    """Iterator of WatchEvent for one table from a revision; reconnects to another member transparently.

    Raises Compacted when the revision is older than the cluster's compaction point, Unavailable when no
    member accepts the watch within the backend's timeout. close() (any thread) ends the iteration."""

    def __init__(self, backend: EtcdBackend, table: bytes, from_revision: int) -> None:
        self.backend, self.table, self.next_revision = backend, table, from_revision
        self._conn: Any = None
        self._closed = False

    def close(self) -> None:
        """Stop the watch (the iterator ends)."""
        self._closed = True
        c = self._conn
        if c is not None and c.sock is not None:
            try:
                c.sock.shutdown(2)
            except OSError:
                pass

    def __iter__(self) -> Iterator[WatchEvent]:
        """Events of the table in revision order until :meth:`close`; raises Compacted / Unavailable as the
        class says."""
        lo, hi = self.backend.ks.bounds(self.table, b"", None)
        while not self._closed:
            body = {
                "create_request": {
                    "key": b64(lo),
                    "range_end": b64(hi),
                    "start_revision": str(self.next_revision),
                }
            }
            self._conn, msgs = self.backend.gw.stream("watch", body)
            try:
                for m in msgs:
                    res = m.get("result") or {}
                    if res.get("canceled"):
                        if int(res.get("compact_revision", 0) or 0):
                            raise errors.Compacted(
                                f"watch from revision {self.next_revision} was compacted",
                                int(res["compact_revision"]),
                            )
                        break  # e.g. the member lost its leader: reconnect
                    for ev in res.get("events") or []:
                        kv = ev["kv"]
                        rev = int(kv["mod_revision"])
                        self.next_revision = rev + 1
                        yield WatchEvent(
                            "delete" if ev.get("type") == "DELETE" else "put",
                            self.backend.ks.strip(self.table, unb64(kv["key"])),
                            unb64(kv.get("value")),
                            rev,
                        )
            except (OSError, ValueError):
                pass  # stream broken: reconnect from next_revision
            finally:
                self._conn.close()


class EtcdBackend:
    """The Backend of docs/BACKEND.md on an etcd 3.4 cluster (see the module docstring)."""

    name = "etcd"

    def __init__(
        self,
        endpoints: list[str],
        prefix: str,
        *,
        timeout_s: float = TIMEOUT_S,
        max_txn_ops: int = 128,
        max_conflicts: int = 200,
        readonly: bool = False,
    ) -> None:
        self.readonly = readonly
        self.gw = Gateway(endpoints, timeout_s=timeout_s, attempt_timeout_s=min(3.0, timeout_s))
        self.prefix = prefix
        self.ks = Keyspace(prefix, dict(TABLE_TAGS))
        self.max_txn_ops = max_txn_ops
        self.max_conflicts = max_conflicts
        self.writer_id = os.urandom(8)
        self._slots: list[_Slot] = []
        self._nslots = 0
        self._lock = threading.Lock()
        self.conflicts = 0  # commits retried after a conflict (benchmarks and tests read it)
        self.ambiguous = 0  # commits whose answer was lost and that the commit marker resolved
        #: revisions of this process's recent commits (a watch of the journal skips them: our own changes)
        self._own_revisions: deque[int] = deque(maxlen=OWN_REVISIONS)
        self._own_set: set[int] = set()
        self.gw.call(
            "kv/range", {"key": b64(self.ks.base), "count_only": True}
        )  # reachable, else Unavailable

    @classmethod
    def open(cls, url: str, **kw: Any) -> EtcdBackend:
        """Connect to the library at an ``etcd://`` URL (parse_url). Raises InvalidArgument, Unavailable."""
        eps, prefix = parse_url(url)
        return cls(eps, prefix, **kw)

    # -- Backend -------------------------------------------------------------------------------------
    @contextmanager
    def read(self) -> Iterator[EtcdReadTxn]:
        """A consistent snapshot: every read inside sees one etcd revision (fixed by the first read)."""
        yield EtcdReadTxn(self.gw, self.ks)

    def run_write(self, fn: Callable[[EtcdWriteTxn], T]) -> T:
        """Run ``fn`` in a write transaction and commit it atomically; on a conflict run it again.

        ``fn`` may run several times and must have no effect outside the transaction. Raises NoSpace (etcd
        quota), FileTooBig (over etcd's per-txn limits), Unavailable (no quorum within timeout_s, commit
        outcome unknown, or still conflicting after max_conflicts attempts), Compacted, NotPermitted (the
        backend was opened read-only)."""
        if self.readonly:
            raise errors.NotPermitted(f"the etcd store {self.prefix} was opened read-only")
        slot = self._take_slot()
        unknown: dict[int, T] = {}  # seq of attempts whose answer was lost -> their result
        try:
            if slot.unsure:  # an earlier call lost a commit's answer: learn where the marker is now
                self._resolve(slot)
            for attempt in range(self.max_conflicts):
                txn = EtcdWriteTxn(self.gw, self.ks, self.max_txn_ops)
                try:
                    result = fn(txn)
                    ops = txn.txn_ops(extra=1)
                except errors.Compacted:
                    continue  # the snapshot was compacted under a long transaction: run on a new one
                if ops is None:
                    return result
                slot.seq += 1
                try:
                    if self._commit(slot, ops):
                        return result
                except Ambiguous:
                    self.ambiguous += 1
                    unknown[slot.seq] = result
                if unknown:
                    applied = self._resolve(slot)
                    if applied in unknown:
                        return unknown[applied]
                self.conflicts += 1
                _sleep_backoff(attempt)
            raise errors.Unavailable(f"etcd write still conflicting after {self.max_conflicts} attempts")
        finally:
            self._give_slot(slot)

    def _commit(self, slot: _Slot, ops: tuple[list[dict], list[dict]]) -> bool:
        compare, success = ops
        if slot.mod:
            mc = {"key": b64(slot.key), "target": "MOD", "result": "EQUAL", "mod_revision": str(slot.mod)}
        else:
            mc = {"key": b64(slot.key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
        success = success + [{"request_put": {"key": b64(slot.key), "value": b64(str(slot.seq).encode())}}]
        slot.unsure = True  # until etcd answers: Ambiguous or Unavailable leave it set
        r = self.gw.call("kv/txn", {"compare": compare + [mc], "success": success}, idempotent=False)
        slot.unsure = False
        if r.get("succeeded"):
            slot.mod = int(r["header"]["revision"])
            self._note_own(slot.mod)
            return True
        return False

    def _note_own(self, revision: int) -> None:
        with self._lock:
            if len(self._own_revisions) == self._own_revisions.maxlen:
                self._own_set.discard(self._own_revisions[0])
            self._own_revisions.append(revision)
            self._own_set.add(revision)

    def committed_here(self, revision: int) -> bool:
        """Whether the commit at etcd ``revision`` was one of this backend's last :data:`OWN_REVISIONS`
        commits (a journal watch skips the records a mount wrote itself; a commit whose answer is still on
        its way reads as another process's, which only costs an extra invalidation)."""
        with self._lock:
            return revision in self._own_set

    def _resolve(self, slot: _Slot) -> int:
        """Read the marker (linearizable): the seq of this slot's last applied commit; updates slot.mod."""
        try:
            kvs = self.gw.call("kv/range", {"key": b64(slot.key)}).get("kvs")
        except errors.Unavailable as e:
            raise errors.Unavailable(f"etcd commit outcome unknown: {e}") from None
        slot.mod = int(kvs[0]["mod_revision"]) if kvs else 0
        slot.unsure = False
        if slot.mod:
            self._note_own(slot.mod)
        return int(unb64(kvs[0].get("value"))) if kvs else 0

    def _take_slot(self) -> _Slot:
        with self._lock:
            if self._slots:
                return self._slots.pop()
            self._nslots += 1
            n = self._nslots
        return _Slot(self.ks.base + MARKERS + self.writer_id + n.to_bytes(4, "big"))

    def _give_slot(self, slot: _Slot) -> None:
        with self._lock:
            self._slots.append(slot)

    def sync(self) -> None:
        """Durability point: a no-op (a commit returns once a Raft quorum has it on disk)."""

    def close(self) -> None:
        """Delete this writer's commit markers (best effort, 2 s) and close the connections."""
        lo = self.ks.base + MARKERS + self.writer_id
        try:
            self.gw.call("kv/deleterange", {"key": b64(lo), "range_end": b64(prefix_end(lo))}, timeout_s=2.0)
        except (errors.LibraryError, Ambiguous):
            pass
        self.gw.close()

    def info(self) -> dict:
        """Backend facts for ``status``: endpoints, prefix, and per member its name, client URLs, health,
        db size and whether it leads (healthy: answers within 2 s and knows a leader); ``used_bytes``: the
        cluster database's bytes in use (shared by every library on the cluster)."""
        out: dict[str, Any] = {"backend": "etcd", "endpoints": self.gw.endpoints, "prefix": self.prefix}
        members = self.gw.call("cluster/member/list", {}).get("members", [])
        rows = []
        for m in members:
            urls = [u.split("//", 1)[-1] for u in m.get("clientURLs", [])]
            row: dict[str, Any] = {"name": m.get("name", ""), "client_urls": urls, "healthy": False}
            if urls:
                g = Gateway(urls, timeout_s=2.0, attempt_timeout_s=2.0)
                try:
                    st = g.call("maintenance/status", {})
                    # answering is not enough: a member cut off from the quorum has no leader ("0")
                    row.update(
                        healthy=st.get("leader", "0") != "0",
                        db_size_bytes=int(st.get("dbSize", 0)),
                        db_size_in_use_bytes=int(st.get("dbSizeInUse", 0)),
                        leader=st.get("leader") == st.get("header", {}).get("member_id"),
                        version=st.get("version", ""),
                    )
                except (errors.LibraryError, Ambiguous):
                    pass
                finally:
                    g.close()
            rows.append(row)
        out["members"] = rows
        # the cluster's database holds every library on it: its size is what this one can grow into
        out["used_bytes"] = max((r.get("db_size_in_use_bytes", 0) for r in rows), default=0)
        return out

    def open_table(self, name: bytes) -> None:
        """Make an extension table known: its tag is registered in etcd once, shared by every host.

        Read-only: a table never registered gets a tag under which nothing is stored (it reads empty)."""
        if name in self.ks.tags:
            return
        reg = self.ks.base + TAG_REGISTRY + name
        if self.readonly:
            kvs = self.gw.call("kv/range", {"key": b64(reg)}).get("kvs")
            self.ks.tags[name] = unb64(kvs[0].get("value")) if kvs else UNREGISTERED_TAG
            return

        counter = self.ks.base + TAG_COUNTER

        def register(t: EtcdWriteTxn) -> bytes:
            """The write transaction: the tag already registered for ``name``, else the next number of the
            tag counter as a 4-byte tag (``0x01`` + 3 bytes big-endian), recorded with the counter; both keys
            are read-tracked, so two hosts racing for one number conflict and one retries."""
            values: dict[bytes, bytes | None] = {}
            for k in (reg, counter):  # both recorded as read: two hosts cannot take one number
                values[k], t.read_keys[k] = t._get_kv(k)
            known = values[reg]
            if known is not None:
                return known
            n = int(values[counter] or b"0") + 1
            tag = b"\x01" + n.to_bytes(3, "big")
            t.buf[counter] = str(n).encode()
            t.buf[reg] = tag
            return tag

        self.ks.tags[name] = self.run_write(register)

    def tables(self) -> list[bytes]:
        """Names of every table of the library: the fixed tags' tables and the registered extension tables."""
        lo = self.ks.base + TAG_REGISTRY
        kvs = self.gw.call("kv/range", {"key": b64(lo), "range_end": b64(prefix_end(lo)), "keys_only": True})
        registered = [unb64(kv["key"])[len(lo) :] for kv in kvs.get("kvs") or []]
        return sorted(set(TABLE_TAGS) | set(registered))

    # -- many hosts ----------------------------------------------------------------------------------
    def acquire_lease(self, name: str | bytes, ttl_s: int, holder: bytes = b"") -> Lease | None:
        """Become the single holder of ``name`` for ``ttl_s`` seconds (renew with Lease.keepalive), or
        None if another live holder has it. A holder that dies loses it when its TTL runs out."""
        key = self.ks.base + LEASES + (name.encode() if isinstance(name, str) else name)
        lease_id = int(self.gw.call("lease/grant", {"TTL": str(int(ttl_s)), "ID": "0"})["ID"])
        body = {
            "compare": [{"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": {"key": b64(key), "value": b64(holder), "lease": str(lease_id)}}],
        }
        try:
            ok = bool(self.gw.call("kv/txn", body, idempotent=False).get("succeeded"))
        except Ambiguous:
            kvs = self.gw.call("kv/range", {"key": b64(key)}).get("kvs") or []
            ok = bool(kvs) and int(kvs[0].get("lease", 0) or 0) == lease_id
        if not ok:
            Lease(self, key, lease_id, ttl_s).release()
            return None
        return Lease(self, key, lease_id, int(ttl_s))

    def lease_holder(self, name: str | bytes) -> bytes | None:
        """The holder value of lease ``name``, or None when nobody holds it."""
        key = self.ks.base + LEASES + (name.encode() if isinstance(name, str) else name)
        kvs = self.gw.call("kv/range", {"key": b64(key)}).get("kvs")
        return unb64(kvs[0].get("value")) if kvs else None

    def lease_holders(self, prefix: str) -> dict[str, bytes]:
        """``{name: holder value}`` of every held lease whose name starts with ``prefix`` (one range read):
        the read-write mounts of a library hold one lease each, named ``mount/…``."""
        lo = self.ks.base + LEASES + prefix.encode()
        kvs = self.gw.call("kv/range", {"key": b64(lo), "range_end": b64(prefix_end(lo))}).get("kvs") or []
        n = len(self.ks.base + LEASES)
        return {unb64(kv["key"])[n:].decode(errors="replace"): unb64(kv.get("value")) for kv in kvs}

    def watch_prefix(self, table: bytes, from_revision: int) -> Watch:
        """Changes to ``table`` with revision >= ``from_revision``, in commit order (see Watch)."""
        self.ks.tag(table)
        return Watch(self, table, from_revision)

    def revision(self) -> int:
        """The cluster's current revision (linearizable)."""
        return int(
            self.gw.call("kv/range", {"key": b64(self.ks.base), "count_only": True})["header"]["revision"]
        )


def _sleep_backoff(attempt: int) -> None:
    time.sleep(min(0.2, 0.001 * 2 ** min(attempt, 8)) * random.random())
