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
import errno
import json
import mmap
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from helpers.mount import mount
from helpers.wait import wait_until

from libraryfs.fs.filedata import DIRECT_IO_SUFFIXES

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


def _requests(mnt: str) -> dict[str, int]:
    """The mount server's FUSE requests served so far, per operation (``status.json``)."""
    with open(os.path.join(mnt, ".libraryfs", "status.json")) as f:
        return json.load(f)["fuse_requests"]


def test_sqlite_logs_take_one_write_request_per_write_and_no_xattr_query(libdir, tmp_path):
    """SQLite's ``-wal`` and ``-journal`` files (beside their database) are served with ``direct_io``: a
    ``write(2)`` of a 4 KiB page
    at an unaligned offset (as SQLite writes a WAL frame's page, 24 bytes after its header) is one WRITE
    request, with no ``security.capability`` query before it. Through the page cache the kernel asked that
    xattr before each write and split the page write in two where it crosses into a page it does not hold
    (two WRITE requests, two store transactions). The bytes read back the same from another descriptor,
    and after a remount."""
    with mount(libdir, tmp_path / "mnt", indexer=False) as m:
        with open(m.p("db"), "wb") as f:  # the database beside its logs
            f.write(b"SQLite format 3\0")
        for suffix in DIRECT_IO_SUFFIXES:
            path = m.p("db" + suffix.decode())
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.write(fd, b"H" * 32)  # the file's header; commits the create
                before = _requests(m.mnt)
                for i in range(8):  # frames: a 24-byte header, then the page 24 bytes after it
                    os.pwrite(fd, bytes([i]) * 24, 32 + i * 4120)
                    os.pwrite(fd, bytes([65 + i]) * 4096, 56 + i * 4120)
                os.fsync(fd)
                after = _requests(m.mnt)
            finally:
                os.close(fd)
            delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
            assert delta["write"] == 16, (suffix, delta)
            assert delta.get("find_xattr", 0) == delta.get("getxattr", 0) == 0, (suffix, delta)
            with open(path, "rb") as f:
                data = f.read()
            assert len(data) == 56 + 7 * 4120 + 4096
            assert all(data[56 + i * 4120 : 56 + i * 4120 + 4096] == bytes([65 + i]) * 4096 for i in range(8))
    with mount(libdir, tmp_path / "mnt", indexer=False) as m:
        for suffix in DIRECT_IO_SUFFIXES:
            with open(m.p("db" + suffix.decode()), "rb") as f:
                data = f.read()
            assert data[:32] == b"H" * 32 and data[32 + 7 * 4120 : 56 + 7 * 4120] == bytes([7]) * 24


def test_wal_database_keeps_every_acknowledged_commit_when_the_server_is_killed(libdir, tmp_path):
    """``kill -9`` of the mount server while a WAL writer commits (each commit's frames are WRITE requests
    of the ``direct_io`` ``-wal`` file, then its FSYNC): after a remount the database passes
    ``integrity_check`` and holds every commit the writer saw return (docs/reliability.md: every
    acknowledged write is committed before its reply)."""
    with (
        mount(libdir, tmp_path / "mnt", indexer=False, server_alive=False) as m,
        _writer(os.path.join(m.mnt, "crash.db"), 5000, 50) as p,
    ):
        acked = 0
        while acked < 300:
            assert p.stdout.readline() == f"{acked}\n"  # type: ignore[union-attr]
            acked += 1
        os.kill(m.info["server_pid"], signal.SIGKILL)
        # the writer fails at its next request (the mount is gone); what it printed was acknowledged
        acked += sum(1 for line in p.stdout if line[:-1].isdigit())  # type: ignore[union-attr]
        p.wait(timeout=30)
    with mount(libdir, tmp_path / "mnt", indexer=False) as m:
        _check(m.p("crash.db"), acked)


def test_only_a_log_beside_its_database_skips_the_page_cache(libdir, tmp_path):
    """``direct_io`` is for SQLite's logs: ``notes-journal`` with no ``notes`` beside it is an ordinary
    file (a shared ``mmap`` of it works, as of every file served through the page cache), while
    ``db-journal`` beside ``db`` cannot be mapped shared (ENODEV: the kernel refuses ``MAP_SHARED`` of a
    ``direct_io`` file without ``FUSE_DIRECT_IO_ALLOW_MMAP``, which libfuse 3.14 cannot ask for) and is
    read and written as before."""
    with mount(libdir, tmp_path / "mnt", indexer=False) as m:
        for name in ("notes-journal", "db", "db-journal"):
            with open(m.p(name), "wb") as f:
                f.write(name.encode().ljust(4096, b"."))
        with open(m.p("notes-journal"), "r+b") as f, mmap.mmap(f.fileno(), 4096) as mm:
            assert mm[:13] == b"notes-journal"
        with open(m.p("db-journal"), "r+b") as f:
            with pytest.raises(OSError) as e:
                mmap.mmap(f.fileno(), 4096).close()
            assert e.value.errno == errno.ENODEV
            assert f.read(10) == b"db-journal"
