"""Server-side cost of create + write 1 KiB + release, and of unlink, through ``LibraryView`` in process (no
FUSE, no kernel): what the mount server's Python and LMDB spend per request (issue 18 item 2).

Each round makes a fresh library, creates ``--files`` files of ``--bytes`` bytes in one directory (create,
getattr of the handle, write, release: the requests an ``open(O_CREAT)`` + ``write`` + ``close`` sends), then
unlinks them; µs per file of each phase (wall, and CPU of this process: steadier under load) and the store write and read transactions per file (counted by
wrapping ``Store.run_write`` and ``Store.read``).
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


def one_round(files: int, size_bytes: int) -> dict:
    """µs per file of the create phase and of the unlink phase, and write transactions per file."""
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
            return {
                "create_us": (t1 - t0) / files * 1e6,
                "unlink_us": (t2 - t1) / files * 1e6,
                "create_cpu_us": (c1 - c0) / files * 1e6,
                "unlink_cpu_us": (c2 - c1) / files * 1e6,
                "create_write_txns": create_writes / files,
                "create_read_txns": create_reads / files,
                "unlink_write_txns": writes[0] / files,
                "unlink_read_txns": reads[0] / files,
            }
        finally:
            st.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--bytes", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rounds = [one_round(args.files, args.bytes) for _ in range(args.rounds)]
    import libraryfs

    out = {k: round(statistics.median(r[k] for r in rounds), 2) for k in rounds[0]}
    out.update(
        files=args.files,
        rounds=args.rounds,
        loadavg=os.getloadavg(),
        libraryfs=os.path.dirname(libraryfs.__file__),
    )
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
