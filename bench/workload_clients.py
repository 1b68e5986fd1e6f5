"""Client side of ``bench/workloads.py``: the timed loops, each run in its own process on the filesystem under test.

Every command prints one JSON object on stdout: ``{"seconds": float, ...}``, timed in the client with
``time.perf_counter`` around the loop only (no interpreter start-up). Names are deterministic, so a later
command (``stat``, ``read``, ``unlink``) finds what an earlier one (``create``) made.

Commands (``python bench/workload_clients.py CMD ARGS``):

* ``files create|stat|read|unlink DIR N SIZE_BYTES`` — N files ``fNNNNNN`` in DIR: create = ``open(O_CREAT |
  O_EXCL | O_WRONLY)`` + one ``write`` of SIZE_BYTES + ``close``; stat = ``stat``; read = ``open`` + ``read``
  to EOF + ``close``; unlink = ``unlink``;
* ``sqlite rollback|wal|bulk DB COMMITS ROWS`` — Python's ``sqlite3`` on a new database file DB with
  ``synchronous=FULL``: rollback = COMMITS single-row autocommit INSERTs with ``journal_mode=DELETE``;
  wal = the same with ``journal_mode=WAL``; bulk = ROWS INSERTs in one transaction (rollback journal);
* ``worker create|read DIR N SIZE_BYTES`` — one of the concurrent processes: makes (create) or uses (read) its
  own directory DIR, prints ``ready``, waits for one line on stdin (the start signal, sent to all workers at
  once), runs the loop of ``files create``/``files read`` and prints its JSON.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time


def file_names(n: int) -> list[str]:
    """The N file names every command agrees on (``f000000`` …)."""
    return [f"f{i:06d}" for i in range(n)]


def files(op: str, d: str, n: int, size_bytes: int) -> float:
    """One pass of ``op`` over the N files of directory ``d``; returns seconds."""
    names = [os.path.join(d, x) for x in file_names(n)]
    data = b"x" * size_bytes
    t = time.perf_counter()
    if op in ("create", "fsync"):  # fsync: each file made durable before its close (an agent saving its work)
        for p in names:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, data)
            if op == "fsync":
                os.fsync(fd)
            os.close(fd)
    elif op == "stat":
        for p in names:
            os.stat(p)
    elif op == "read":
        for p in names:
            fd = os.open(p, os.O_RDONLY)
            while os.read(fd, 65536):
                pass
            os.close(fd)
    elif op == "unlink":
        for p in names:
            os.unlink(p)
    else:
        raise SystemExit(f"unknown files op {op!r}")
    return time.perf_counter() - t


def sqlite(mode: str, db: str, commits: int, rows: int) -> float:
    """One SQLite workload on a new database ``db``; returns seconds (schema creation excluded)."""
    con = sqlite3.connect(db, isolation_level=None)  # autocommit: every INSERT is its own transaction
    try:
        con.execute("PRAGMA journal_mode=" + ("WAL" if mode == "wal" else "DELETE"))
        con.execute("PRAGMA synchronous=FULL")
        con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        value = "v" * 100
        t = time.perf_counter()
        if mode in ("rollback", "wal"):
            for i in range(commits):
                con.execute("INSERT INTO t VALUES (?, ?)", (i, value))
        elif mode == "bulk":
            con.execute("BEGIN")
            con.executemany("INSERT INTO t VALUES (?, ?)", ((i, value) for i in range(rows)))
            con.execute("COMMIT")
        else:
            raise SystemExit(f"unknown sqlite mode {mode!r}")
        elapsed = time.perf_counter() - t
        want = commits if mode != "bulk" else rows
        got = con.execute("SELECT count(*) FROM t").fetchone()[0]
        if got != want:
            raise SystemExit(f"sqlite {mode}: {got} rows, expected {want}")
        return elapsed
    finally:
        con.close()


def worker(op: str, d: str, n: int, size_bytes: int) -> float:
    """A concurrent process: set up, say ``ready``, wait for the start line, run, return seconds."""
    if op in ("create", "fsync"):
        os.makedirs(d, exist_ok=True)
    print("ready", flush=True)
    sys.stdin.readline()
    return files(op, d, n, size_bytes)


def main(argv: list[str]) -> int:
    """Dispatch one command (see the module docstring); prints ``{"seconds": …}``."""
    if len(argv) != 5 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    cmd, op, path, a, b = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    if cmd == "files":
        s = files(op, path, a, b)
    elif cmd == "sqlite":
        s = sqlite(op, path, a, b)
    elif cmd == "worker":
        s = worker(op, path, a, b)
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    print(json.dumps({"seconds": s}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
