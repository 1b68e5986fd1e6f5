"""A real SQLite database in WAL mode on a real mount (issue 18: SQLite's WAL commit path).

WAL mode writes each commit's pages as frames to ``DB-wal`` with ``write(2)`` and ``fdatasync``s it
(``synchronous=FULL``), keeps its wal-index in ``DB-shm``, which every connection maps ``MAP_SHARED`` and
stores into (the kernel writes the dirty pages back to the server as FUSE writes), and checkpoints the WAL
into the database file. A client killed with SIGKILL leaves the WAL and the wal-index behind without a
checkpoint; the next connection recovers the committed frames from the WAL. These tests check what a
database on the mount must keep through that and through an unmount: every acknowledged commit, and
``PRAGMA integrity_check``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator

from helpers.mount import mount
from helpers.wait import wait_until

WRITER = textwrap.dedent(
    """
    import sqlite3, sys
    db, n, checkpoint = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    con = sqlite3.connect(db, isolation_level=None)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    con.execute("PRAGMA synchronous=FULL")
    con.execute("PRAGMA wal_autocheckpoint=%d" % checkpoint)
    con.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    for i in range(n):
        con.execute("INSERT INTO t VALUES (?, ?)", (i, "v%d" % i * 20))
        print(i, flush=True)  # acknowledged: the commit returned
    print("done", flush=True)
    sys.stdin.readline()  # held open (no checkpoint at close) until killed
    """
)


@contextlib.contextmanager
def _writer(db: str, n: int, checkpoint: int) -> Iterator[subprocess.Popen]:
    """The :data:`WRITER` process on ``db`` (``n`` commits, ``wal_autocheckpoint`` ``checkpoint`` pages),
    killed and reaped, its pipes closed, when the block ends."""
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, db, str(n), str(checkpoint)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as p:
        try:
            yield p
        finally:
            p.kill()


def _check(db: str, acked: int) -> None:
    """The database at ``db`` passes ``integrity_check`` and holds rows 0..acked-1 with their values."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = con.execute("SELECT id, v FROM t ORDER BY id").fetchall()
        assert [r[0] for r in rows[:acked]] == list(range(acked))
        assert all(v == f"v{i}" * 20 for i, v in rows)
    finally:
        con.close()


def test_wal_database_killed_writer_survives_remount_with_every_commit(libdir, tmp_path):
    """A WAL writer killed after its commits (its WAL and -shm left as they were, no checkpoint at close),
    the mount unmounted and mounted again: a new connection recovers every acknowledged commit and the
    database passes ``PRAGMA integrity_check``; ``wal_autocheckpoint`` 50 makes the writer checkpoint and
    restart the WAL several times on the way (overwriting frames in place)."""
    n = 400
    with mount(libdir, tmp_path / "mnt", indexer=False) as m:
        db = m.p("wal.db")
        with _writer(db, n, 50) as p:
            lines = [p.stdout.readline() for _ in range(n + 1)]  # type: ignore[union-attr]
            assert lines[-1] == "done\n", lines[-3:]
            assert os.path.getsize(db + "-wal") > 0 and os.path.exists(db + "-shm")
            p.send_signal(signal.SIGKILL)
    with mount(libdir, tmp_path / "mnt", indexer=False) as m:
        db = m.p("wal.db")
        assert os.path.getsize(db + "-wal") > 0  # the WAL was left for recovery
        _check(db, n)


def test_wal_database_written_and_read_by_two_connections(libdir, tmp_path):
    """Two connections in two processes share the wal-index through the mapped ``-shm`` file: each sees
    the other's commits at once (the mapping is one page cache), and after both close and a remount the
    database holds every row and passes ``integrity_check``."""
    with mount(libdir, tmp_path / "mnt", indexer=False) as m:
        db = m.p("two.db")
        with _writer(db, 100, 1000) as p:
            assert p.stdout.readline() == "0\n"  # type: ignore[union-attr]
            con = sqlite3.connect(db, isolation_level=None, timeout=30)
            try:
                con.execute("PRAGMA synchronous=FULL")
                # the reader sees the writer's commits as they come, through the shared wal-index
                wait_until(
                    lambda: con.execute("SELECT count(*) FROM t").fetchone()[0] == 100,
                    60,
                    "the writer's 100 commits",
                    ignore=(sqlite3.OperationalError,),
                )
                con.execute("INSERT INTO t VALUES (?, ?)", (100, "v100" * 20))
            finally:
                con.close()
            p.stdin.write("\n")  # type: ignore[union-attr]
            p.stdin.flush()  # type: ignore[union-attr]
            assert p.wait(timeout=30) == 0
    with mount(libdir, tmp_path / "mnt", indexer=False) as m:
        _check(m.p("two.db"), 101)
