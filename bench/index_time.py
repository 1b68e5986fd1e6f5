"""Indexing time of the demo corpus: the indexer's cost per pass, in process, without a mount.

The corpus is the one ``libraryfs demo`` builds: the python3-doc reStructuredText sources in
``python-docs/`` and GCIDE entries (``gcide_entries(N, seed=2026)``) in ``dictionary/<letter>/``. It is
written into a fresh library through :class:`~libraryfs.fs.tree.StoreTree` (the view's write path, one
transaction per create/write/close, no FUSE), then timed:

* ``full``: the first pass (every entry examined, outlined, summarised; every TOC rendered);
* ``one_write``: a pass after one entry of ``python-docs/library/`` is rewritten (its section and the
  ancestors re-rendered);
* ``one_create``: a pass after one new dictionary entry.

Each is measured ``--repeat`` times on fresh libraries (the first pass) or successive writes; the table
shows the median and the minimum (s). Process CPU time is reported beside wall time: the machine may be
shared. Works against any libraryfs with ``Indexer(libdir, store=)``/``run_once(full=)`` so that a
before/after comparison runs the same script in two environments::

    python bench/index_time.py --out bench/results/index_time.json [--words 600] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time


def _build(libdir: str, words: int) -> int:
    from libraryfs.daemon.corpus import PYTHON_DOC_SOURCES, gcide_available, gcide_entries
    from libraryfs.fs.store import Store
    from libraryfs.fs.tree import StoreTree

    Store.create(libdir, {"toc_max_tokens": 2000}).close()
    st = Store(libdir)
    tree = StoreTree(st)
    n = 0
    for top, dirs, files in os.walk(PYTHON_DOC_SOURCES):  # what `libraryfs ingest` copies, in name order
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(top, name)
            with open(path, "rb") as f:
                tree.write_bytes(
                    os.path.join("python-docs", os.path.relpath(path, PYTHON_DOC_SOURCES)), f.read()
                )
            n += 1
    if gcide_available():
        for w, d in gcide_entries(words, seed=2026):
            tree.write_bytes(f"dictionary/{w[0].lower()}/{w.lower()}.md", f"# {w}\n\n{d}\n".encode())
            n += 1
    st.close()
    return n


def _timed(fn) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def run(words: int, repeat: int) -> dict:
    """Build and time the passes; returns ``{"entries", "passes": {name: [(wall_s, cpu_s), …]}}``."""
    from libraryfs.daemon.indexer import Indexer
    from libraryfs.fs.store import Store
    from libraryfs.fs.tree import StoreTree

    passes: dict[str, list[tuple[float, float]]] = {"full": [], "one_write": [], "one_create": []}
    entries = 0
    for r in range(repeat):
        with tempfile.TemporaryDirectory(prefix="index-time-") as tmp:
            libdir = os.path.join(tmp, "lib")
            entries = _build(libdir, words)
            st = Store(libdir)
            idx = Indexer(libdir, store=st)
            passes["full"].append(_timed(lambda idx=idx: idx.run_once(full=True)))
            tree = StoreTree(st)
            target = "python-docs/library/json.rst.txt"
            if tree.exists(target):
                tree.write_bytes(target, tree.read_bytes(target) + f"\n\nEdit {r}.\n".encode())
                passes["one_write"].append(_timed(idx.run_once))
            tree.write_bytes(
                f"dictionary/z/zzbench{r}.md", b"# zzbench\n\nA word made up for the benchmark.\n"
            )
            passes["one_create"].append(_timed(idx.run_once))
            st.close()
    return {"entries": entries, "passes": passes}


def main(argv: list[str] | None = None) -> int:
    """Command line: print the table, write the JSON (``--out``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--words", type=int, default=600, help="GCIDE entries (the demo's default: 600)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None, help="JSON output file")
    args = ap.parse_args(argv)
    import libraryfs

    src = os.path.dirname(os.path.dirname(os.path.abspath(libraryfs.__file__)))
    try:
        commit = subprocess.run(
            ["git", "-C", src, "describe", "--always", "--dirty"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "?"
    res = run(args.words, args.repeat)
    res.update(
        commit=commit,
        source=src,
        python=platform.python_version(),
        load_avg=os.getloadavg(),
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    print(f"libraryfs {commit} ({src}); {res['entries']} entries; load {os.getloadavg()[0]:.1f}")
    print("| pass | n | wall median s | wall min s | cpu median s |")
    print("|---|---|---|---|---|")
    for name, xs in res["passes"].items():
        if xs:
            walls, cpus = [w for w, _c in xs], [c for _w, c in xs]
            print(
                f"| {name} | {len(xs)} | {statistics.median(walls):.3f} | {min(walls):.3f} | "
                f"{statistics.median(cpus):.3f} |"
            )
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
