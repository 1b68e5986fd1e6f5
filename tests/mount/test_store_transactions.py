"""Store write transactions per request through a real mount (issue 18 item 2): SQLite's rollback-journal
autocommit, the pattern whose every FUSE request the server pays for. Counts come from the server's own
counters (``status.json``: ``write_transactions``, the store's commits since the mount started, and
``fuse_requests``), not from timing.

Per autocommit SQLite creates its journal, ``fchown``s it (as root: to the database's owner), writes it,
fsyncs it and the directory, writes the database, fsyncs it, closes and unlinks the journal. Every ``write``
is a committed transaction before it returns (docs/reliability.md); what else a commit costs is the close
(one journal record for the writes after the file's first) and the unlink.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat

from helpers.mount import mount

COMMITS = 30


def status(mnt: str) -> dict:
    """The mount server's ``status.json`` now."""
    with open(os.path.join(mnt, ".libraryfs", "status.json")) as f:
        return json.load(f)


def test_sqlite_autocommit_costs_a_transaction_per_write_plus_close_and_unlink(libdir, tmp_path):
    with mount(libdir, tmp_path / "mnt", indexer=False) as m:
        db = m.p("t.db")
        con = sqlite3.connect(db, isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode=DELETE")
            con.execute("PRAGMA synchronous=FULL")
            con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
            con.execute("INSERT INTO t VALUES (?, ?)", (-1, "warm"))
            before = status(m.mnt)
            for i in range(COMMITS):
                con.execute("INSERT INTO t VALUES (?, ?)", (i, "v" * 100))
            after = status(m.mnt)
            assert con.execute("SELECT count(*), sum(id) FROM t").fetchone() == (
                COMMITS + 1,
                sum(range(COMMITS)) - 1,
            )
        finally:
            con.close()
        requests = {
            k: after["fuse_requests"].get(k, 0) - before["fuse_requests"].get(k, 0)
            for k in after["fuse_requests"]
        }
        txns = after["write_transactions"] - before["write_transactions"]
        assert requests["create"] == requests["unlink"] == COMMITS, requests
        if os.geteuid() == 0:
            assert requests["chown"] == COMMITS, requests  # SQLite's fchown of its new journal
        # one per write, one per close of the journal (its last writes' record) and one per unlink; before:
        # two more per commit (the fchown committed the pending create, then itself)
        assert txns <= requests["write"] + 2 * COMMITS + 2, (txns, requests)
        assert not os.path.exists(db + "-journal")
        st = os.stat(db)
        assert stat.S_ISREG(st.st_mode) and st.st_size % 4096 == 0 and st.st_mtime_ns <= st.st_ctime_ns
