"""What checking a store's file with plain reads costs, beside LMDB reading the same store (issue 14).

For stores of N files (written in-process through ``StoreTree``, each file 1–40 KiB, 100 per directory)
one run measures, median of ``--repeat`` rounds after one unmeasured warm-up, page cache warm:

* ``meta``: :func:`libraryfs.fs.lmdb_pages.check_meta` (both meta pages, the file size: every open does it);
* ``walk``: :func:`libraryfs.fs.lmdb_pages.walk` (every reachable page: the mount server, the indexer,
  ``index``, ``status`` and ``check`` do it);
* baselines in the same run: ``open`` (``Store(readonly=True)`` without the walk, then close) and
  ``scan`` (LMDB reading every record of every core table through one read transaction).

Run: ``python bench/store_walk.py [--n 1000,10000] [--repeat 5]``. Prints a table and writes
``bench/results/store_walk.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time

from libraryfs.fs import lmdb_pages
from libraryfs.fs import schema as S
from libraryfs.fs.store import Store
from libraryfs.fs.tree import StoreTree


def build(libdir: str, n: int) -> None:
    """A library of ``n`` files of 1–40 KiB, 100 per directory."""
    rng = random.Random(n)
    st = Store.create(libdir)
    tree = StoreTree(st)
    try:
        for i in range(n):
            tree.write_bytes(f"d{i // 100}/f{i}.md", rng.randbytes(rng.randint(1024, 40 * 1024)))
    finally:
        st.close()


def timed(fn, repeat: int) -> float:
    """Median seconds of ``fn()`` over ``repeat`` rounds after one warm-up."""
    fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def scan(libdir: str) -> int:
    st = Store(libdir, readonly=True)
    try:
        with st.read() as t:
            return sum(1 for name in S.CORE_DBS for _ in t.kv.range(name))
    finally:
        st.close()


def measure(n: int, repeat: int) -> dict:
    tmp = tempfile.mkdtemp(prefix="store-walk-")
    try:
        lib = os.path.join(tmp, "lib")
        build(lib, n)
        store = os.path.join(lib, "store")
        report = lmdb_pages.walk(store)
        assert report.clean, report.problems
        return {
            "files": n,
            "data_file_bytes": os.path.getsize(lmdb_pages.data_path(store)),
            "pages_walked": report.pages,
            "records": sum(report.records.get(t, 0) for t in report.expected),
            "meta_s": timed(lambda: lmdb_pages.check_meta(store), repeat),
            "walk_s": timed(lambda: lmdb_pages.walk(store), repeat),
            "open_s": timed(lambda: Store(lib, readonly=True).close(), repeat),
            "scan_s": timed(lambda: scan(lib), repeat),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="1000,10000", help="store sizes in files (comma-separated)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default="bench/results/store_walk.json")
    args = ap.parse_args()
    rows = [measure(int(n), args.repeat) for n in args.n.split(",")]
    print(
        f"{'files':>7} {'MiB':>7} {'pages':>7} {'records':>8} {'meta ms':>8} {'walk ms':>8} {'open ms':>8} {'scan ms':>8}"
    )
    for r in rows:
        print(
            f"{r['files']:>7} {r['data_file_bytes'] / 2**20:>7.1f} {r['pages_walked']:>7} {r['records']:>8} "
            f"{r['meta_s'] * 1e3:>8.2f} {r['walk_s'] * 1e3:>8.1f} {r['open_s'] * 1e3:>8.2f} {r['scan_s'] * 1e3:>8.1f}"
        )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"rows": rows, "load_avg": os.getloadavg()}, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
