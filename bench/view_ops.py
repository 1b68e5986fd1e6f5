"""Server-side cost of create + write 1 KiB + release, and of unlink, through ``LibraryView`` in process (no
FUSE, no kernel): what the mount server's Python and LMDB spend per request (issue 18 item 2).

Each round makes a fresh library, creates ``--files`` files of ``--bytes`` bytes in one directory (create,
getattr of the handle, write, release: the requests an ``open(O_CREAT)`` + ``write`` + ``close`` sends), then
unlinks them; µs per file of each phase (wall, and CPU of this process: steadier under load) and the store write and read transactions per file (counted by
wrapping ``Store.run_write``, ``Store.read`` and, where it exists, ``Store.read_committed``). Then
``--commits`` times the requests of one SQLite rollback-journal autocommit (``synchronous=FULL``, as strace
shows them for one INSERT into a 64 KiB database: create the journal, fchown it, 8 writes to it, 2 page
writes to the database, close and unlink the journal; the kernel's getattrs and fsyncs left out): µs and
transactions per autocommit.
Prints one JSON line; run it under two interpreters (this checkout's and another's) for a before/after:

    python bench/view_ops.py --files 5000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

#: (offset, bytes) of the journal writes of one autocommit: header, then page 2 and page 1 each as page number
#: + page + checksum, then the header's record count
JOURNAL_WRITES = ((0, 512), (512, 4), (516, 4096), (4612, 4), (4616, 4), (4620, 4096), (8716, 4), (0, 12))


def one_round(files: int, size_bytes: int, commits: int) -> dict:
    """µs per file of the create phase and of the unlink phase, and write transactions per file; µs and
    transactions per SQLite-like autocommit."""
    from libraryfs.fs.store import Store
    from libraryfs.fs.view import LibraryView

    with tempfile.TemporaryDirectory(prefix="view-ops-") as tmp:
        st = Store.create(os.path.join(tmp, "lib"))
        writes, reads = [0], [0]
        run_write, read = st.run_write, st.read

        def counted(fn):
            writes[0] += 1
            return run_write(fn)

        def counted_read():
            reads[0] += 1
            return read()

        st.run_write = counted  # type: ignore[method-assign]
        st.read = counted_read  # type: ignore[method-assign]
        if hasattr(st, "read_committed"):
            read_committed = st.read_committed

            def counted_read_committed():
                reads[0] += 1
                return read_committed()

            st.read_committed = counted_read_committed  # type: ignore[method-assign]
        try:
            v = LibraryView(st)
            uid, gid = os.getuid(), os.getgid()
            v.mkdir(b"/d", 0o755, uid, gid)
            body = os.urandom(size_bytes)
            paths = [b"/d/f%06d.md" % i for i in range(files)]
            writes[0] = reads[0] = 0
            t0, c0 = time.perf_counter(), time.process_time()
            for p in paths:
                fh = v.create(p, 0o644, os.O_WRONLY | os.O_CREAT | os.O_EXCL, uid, gid)
                v.getattr(p, fh)  # libfuse's entry reply of CREATE
                v.write(fh, body, 0)
                v.release(fh)
            t1, c1 = time.perf_counter(), time.process_time()
            create_writes, create_reads = writes[0], reads[0]
            writes[0] = reads[0] = 0
            for p in paths:
                v.unlink(p)
            t2, c2 = time.perf_counter(), time.process_time()
            unlink_writes, unlink_reads = writes[0], reads[0]
            db = v.create(b"/d/t.db", 0o644, os.O_RDWR | os.O_CREAT, uid, gid)
            v.write(db, os.urandom(65536), 0)
            page = os.urandom(4096)
            writes[0] = reads[0] = 0
            t3, c3 = time.perf_counter(), time.process_time()
            for i in range(commits):
                j = v.create(b"/d/t.db-journal", 0o644, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, uid, gid)
                v.getattr(b"/d/t.db-journal", j)
                v.chown(None, uid, gid, j)
                for off, n in JOURNAL_WRITES:
                    v.write(j, page[:n], off)
                v.write(db, page, 0)
                v.write(db, page, 4096 * (1 + i % 15))
                v.release(j)
                v.unlink(b"/d/t.db-journal")
            t4, c4 = time.perf_counter(), time.process_time()
            v.release(db)
            return {
                "create_us": (t1 - t0) / files * 1e6,
                "unlink_us": (t2 - t1) / files * 1e6,
                "create_cpu_us": (c1 - c0) / files * 1e6,
                "unlink_cpu_us": (c2 - c1) / files * 1e6,
                "create_write_txns": create_writes / files,
                "create_read_txns": create_reads / files,
                "unlink_write_txns": unlink_writes / files,
                "unlink_read_txns": unlink_reads / files,
                "sqlite_commit_us": (t4 - t3) / commits * 1e6,
                "sqlite_commit_cpu_us": (c4 - c3) / commits * 1e6,
                "sqlite_commit_write_txns": writes[0] / commits,
                "sqlite_commit_read_txns": reads[0] / commits,
            }
        finally:
            st.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--bytes", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--commits", type=int, default=1000, help="SQLite-like autocommits per round")
    args = ap.parse_args()
    rounds = [one_round(args.files, args.bytes, args.commits) for _ in range(args.rounds)]
    import libraryfs

    out = {k: round(statistics.median(r[k] for r in rounds), 2) for k in rounds[0]}
    out.update(
        files=args.files,
        commits=args.commits,
        rounds=args.rounds,
        loadavg=os.getloadavg(),
        libraryfs=os.path.dirname(libraryfs.__file__),
    )
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
