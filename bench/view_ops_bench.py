"""In-process cost of the view operations behind FUSE requests, in CPU time (no kernel, no scheduler noise).

Builds a library of 1,000 entries of 1 KiB in one section and times, with ``time.process_time`` (CPU seconds
of this process: preemption by other processes is not counted), ``stat``, ``open + read + release`` of an
entry, ``create + write 1 KiB + release``, ``readdir`` of the section, a 128 KiB append, and
``stat + open + read`` of the section's ``INDEX.md`` (after one ``libraryfs index`` pass). Each cell is the mean over its operations, the best of
``--repeats`` passes. Compare two trees by running it with each on ``PYTHONPATH`` (docs/benchmarks.md).

Run: ``python bench/view_ops_bench.py [--repeats 7] [--out FILE.json]``. Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView


def best_us(fn: Callable[[int], None], n: int, repeats: int) -> float:
    """Best over ``repeats`` passes of the mean CPU µs per operation of ``fn(n)``."""
    out = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn(n)
        out.append((time.process_time() - t0) / n * 1e6)
    return round(min(out), 2)


def measure(v: LibraryView, repeats: int) -> dict[str, float]:
    """The cells of the table (µs per operation) over view ``v`` holding ``/s/e0000.md`` … ``e0999.md``."""
    paths = [b"/s/e%04d.md" % i for i in range(1000)]
    created = [0]

    def stat(n: int) -> None:
        for i in range(n):
            v.getattr(paths[i % 1000])

    def read(n: int) -> None:
        for i in range(n):
            fh, _ = v.open(paths[i % 1000], os.O_RDONLY)
            v.read(fh, 131072, 0)
            v.release(fh)

    def create(n: int) -> None:
        for _ in range(n):
            created[0] += 1
            fh = v.create(b"/s/n%07d" % created[0], 0o644, os.O_RDWR, 0, 0)
            v.write(fh, b"y" * 1024, 0)
            v.release(fh)

    def readdir(n: int) -> None:
        for _ in range(n):
            fh = v.opendir(b"/s")
            list(v.readdir(fh, 0))
            v.releasedir(fh)

    def append(n: int) -> None:
        fh = v.create(b"/big", 0o644, os.O_RDWR, 0, 0)
        for i in range(n):
            v.write(fh, b"z" * 131072, i * 131072)
        v.release(fh)
        v.unlink(b"/big")

    def toc(n: int) -> None:
        for _ in range(n):
            v.getattr(b"/s/INDEX.md")
            fh, _ = v.open(b"/s/INDEX.md", os.O_RDONLY)
            v.read(fh, 131072, 0)
            v.release(fh)

    return {
        "stat": best_us(stat, 2000, repeats),
        "open+read+release 1KiB": best_us(read, 1000, repeats),
        "create+write 1KiB+release": best_us(create, 300, repeats),
        "readdir 1,000 entries": best_us(readdir, 20, repeats),
        "write 128 KiB (append)": best_us(append, 100, repeats),
        "TOC stat+open+read": best_us(toc, 500, repeats),
    }


def main() -> None:
    """Build the library in a temporary directory, measure, print the table, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7, help="passes per cell (the best is kept)")
    ap.add_argument("--out", default=None, help="JSON file to write (default: print only)")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="viewops-")
    try:
        st = Store.create(os.path.join(d, "lib"))
        v = LibraryView(st)
        v.mkdir(b"/s", 0o755, 0, 0)
        for i in range(1000):
            fh = v.create(b"/s/e%04d.md" % i, 0o644, os.O_RDWR, 0, 0)
            v.write(fh, b"x" * 1024, 0)
            v.release(fh)
        # one indexing pass, so /s/INDEX.md exists (an unindexed section's page is ENOENT, "not indexed yet")
        subprocess.run(
            [sys.executable, "-m", "libraryfs.cli.main", "index", os.path.join(d, "lib")],
            check=True,
            capture_output=True,
        )
        cells = measure(v, args.repeats)
        st.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("| view operation (in-process, CPU time) | µs/op |\n|---|---|")
    for k, us in cells.items():
        print(f"| {k} | {us} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"cells_us": cells, "repeats": args.repeats, "load": os.getloadavg()}, f, indent=1)


if __name__ == "__main__":
    main()
