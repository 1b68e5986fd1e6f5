"""The read-only control plane at ``/.libraryfs/``: ``status.json``, ``stats.json``, ``journal``, ``budget``.

Each file's bytes are computed at ``open`` (the view snapshots them into the handle) from the store and the
mount's own state. Names come from :mod:`libraryfs.fs.generated`. Nothing here writes the store.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from libraryfs.errors import NotFound
from libraryfs.fs import generated as G
from libraryfs.fs import schema as S
from libraryfs.fs.holder import standby_facts
from libraryfs.fs.stats import ReadAccounting
from libraryfs.fs.store import Store, Txn

JOURNAL_TAIL_RECORDS = 100  #: records shown by ``/.libraryfs/journal``


class ControlPlane:
    """The files of ``/.libraryfs/`` for one mount.

    ``status_provider() -> dict`` (optional, from the daemon) adds mount-process facts to ``status.json``;
    ``accounting`` supplies ``stats.json`` and the read budget behind ``budget``; ``started_ns`` is when the
    mount started (ns since the epoch); ``requests`` (set by the mount: the FUSE adapter's counters) are the
    requests served per operation, shown as ``fuse_requests``.
    """

    def __init__(
        self,
        store: Store,
        accounting: ReadAccounting,
        *,
        read_only: bool,
        started_ns: int,
        status_provider: Callable[[], dict] | None = None,
    ) -> None:
        self.store = store
        self.accounting = accounting
        self.read_only = read_only
        self.started_ns = started_ns
        self.status_provider = status_provider
        self.requests: Mapping[str, int] | None = None

    def files(self) -> list[bytes]:
        """Names in ``/.libraryfs/`` (``budget`` only when the mount has a read budget)."""
        names = list(G.CTL_FILES)
        if self.accounting.budget is not None:
            names.append(G.BUDGET_FILE)
        return names

    def content(self, t: Txn, name: bytes) -> bytes:
        """Bytes of control file ``name`` now (``journal``: the last records as JSON lines). Raises NotFound."""
        if name == G.STATUS_FILE:
            return _json_bytes(self.status(t))
        if name == G.STATS_FILE:
            return _json_bytes(self.accounting.stats.to_json())
        if name == G.JOURNAL_FILE:
            tail = t.journal_tail()
            recs = t.journal_since(max(0, tail - JOURNAL_TAIL_RECORDS), JOURNAL_TAIL_RECORDS)
            return "".join(json.dumps({"seq": s, **r.to_json()}) + "\n" for s, r in recs).encode()
        budget = self.accounting.budget
        if name == G.BUDGET_FILE and budget is not None:
            return (budget.to_json() + "\n").encode()
        raise NotFound("no such control file")

    def status(self, t: Txn) -> dict:
        """The facts of ``.libraryfs/status.json`` (indexer status, journal backlog, TOC generation). On etcd,
        ``indexer`` is the active indexer's record (whichever host runs it) and ``indexer_standby`` says
        whether this library directory's indexer waits for it (``{"state": "standby", ...}``, else None)."""
        tail = t.journal_tail()
        cursor = t.cfg_int(S.CFG_CURSOR)
        out = {
            "library": self.store.libdir,
            "read_only": self.read_only,
            "journal_tail": tail,
            "indexer_cursor": cursor,
            "pending_records": max(0, tail - cursor),
            "toc_generation": t.cfg_int(S.CFG_TOC_GEN),
            "indexer": t.cfg_json(S.CFG_INDEXER_STATUS),
            # this library directory's indexer waiting for another host's (etcd lease), else None
            "indexer_standby": standby_facts(self.store.libdir),
            "inodes": t.count(S.DB_INODES),
            "map": self.store.map_info(),
            "mount_started_ns": self.started_ns,
            # write transactions this process committed since it opened the store (Store.write_seq)
            "write_transactions": self.store.write_seq,
        }
        if self.status_provider is not None:
            out["mount"] = self.status_provider()
        if self.requests is not None:
            out["fuse_requests"] = dict(self.requests)
        return out


def _json_bytes(doc: dict) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
