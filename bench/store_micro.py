"""In-process cost of the store layer under the view: CPU µs per operation, no FUSE, no kernel.

Builds a library of 1,000 entries of 1 KiB in ``/s/a/b`` (indexed once, deterministically), then times with
``time.process_time`` (CPU time of this process: less disturbed than wall time on a shared machine) the best
and median of 7 rounds of: a read transaction with one inode fetch; ``LibraryView.getattr`` of a 4-deep path
(the raw path walk); opendir + readdir of 1,000 entries; open + read 1 KiB + release (with the read's token
accounting from the entry's ``meta`` record); open + write 100 B + release; create + write 100 B + release;
and the finder's fallback scan of every ``meta`` record.

Compare two checkouts by running this same script with each one's interpreter, interleaved
(docs/architecture.md has the figures of the store-seam change):
``python bench/store_micro.py [--rounds 7] [--out bench/results/store_micro.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from libraryfs.daemon.indexer import Indexer
from libraryfs.fs import schema as S
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView
from libraryfs.index.find import find

HERE = os.path.dirname(os.path.abspath(__file__))


def _build(lib: str) -> tuple[Store, LibraryView]:
    st = Store.create(lib, {"toc_max_tokens": 2000})
    view = LibraryView(st)
    for d in (b"/s", b"/s/a", b"/s/a/b"):
        view.mkdir(d, 0o755, 0, 0)
    for i in range(1000):
        fh = view.create(b"/s/a/b/e%04d.md" % i, S.S_IFREG | 0o644, os.O_WRONLY, 0, 0)
        view.write(fh, b"x" * 1024, 0)
        view.release(fh)
    Indexer(lib, store=st).run_once(full=True)
    return st, view


def _ops(st: Store, view: LibraryView) -> dict:
    paths = [b"/s/a/b/e%04d.md" % i for i in range(0, 1000, 7)]
    with st.read() as t:
        ino = t.lookup(t.lookup(t.lookup(t.lookup(S.ROOT_INO, b"s"), b"a"), b"b"), b"e0000.md")
    counter = iter(range(10**9))

    def read_inode():
        with st.read() as t:
            t.inode(ino)

    def getattr_path():
        view.getattr(paths[next(counter) % len(paths)])

    def readdir():
        fh = view.opendir(b"/s/a/b")
        for _ in view.readdir(fh, 0):
            pass
        view.releasedir(fh)

    def read_file():
        fh, _ = view.open(paths[3], os.O_RDONLY)
        view.read(fh, 4096, 0)
        view.release(fh)

    def write_file():
        fh, _ = view.open(paths[5], os.O_WRONLY)
        view.write(fh, b"y" * 100, 0)
        view.release(fh)

    def create_file():
        fh = view.create(b"/s/new%07d.md" % next(counter), S.S_IFREG | 0o644, os.O_WRONLY, 0, 0)
        view.write(fh, b"z" * 100, 0)
        view.release(fh)

    def find_scan():
        with st.read() as t:
            find(t, "nothing matches this")

    return {  # name: (function, calls per round)
        "read txn + inode": (read_inode, 5000),
        "getattr, 4-deep path": (getattr_path, 2000),
        "opendir + readdir 1,000": (readdir, 100),
        "open + read 1 KiB + release": (read_file, 2000),
        "open + write 100 B + release": (write_file, 500),
        "create + write 100 B + release": (create_file, 300),
        "find fallback scan, 1,003 meta": (find_scan, 20),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "store_micro.json"))
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="lfs-store-micro-")
    try:
        st, view = _build(os.path.join(tmp, "lib"))
        rows = {}
        for name, (fn, n) in _ops(st, view).items():
            per_call = []
            for _ in range(a.rounds):
                t0 = time.process_time()
                for _ in range(n):
                    fn()
                per_call.append((time.process_time() - t0) / n * 1e6)
            rows[name] = {
                "best_us": round(min(per_call), 2),
                "median_us": round(statistics.median(per_call), 2),
            }
        st.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("| op | best CPU µs | median CPU µs |\n|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['best_us']} | {r['median_us']} |")
    print(f"# load average {os.getloadavg()[0]:.1f}; python {sys.version.split()[0]}")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"load_1m": os.getloadavg()[0], "ops": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
