"""What one indexer pass costs after a change at the bottom of a chain of d nested directories (new-user trial).

A new file d levels down makes the pass re-render the TOCs of the d + 1 directories above it. Each render
needs its directory's path and exclusion placement (dot-paths, ``.gitignore`` files, git work trees):
walked from the root for each directory, that is O(d²) store lookups per pass; built from the parent's
(:meth:`libraryfs.fs.exclude.TocExclusion.chain`), O(d).

For each depth, one library is built in-process (``StoreTree``), indexed once (unmeasured), then ``--repeat``
times a new file is written at the bottom and one pass is measured: wall seconds, CPU seconds of this
process (``time.process_time``) and the store lookups (``Txn.lookup`` + ``Txn.dirparent``) it made. No
mount: the indexer's own cost. Run the same script under two venvs (this code and a worktree of the
baseline) in the same session for before/after, and record the load average.

Run: ``python bench/deep_tree.py [--depths 100,200,400] [--repeat 3] [--label NAME]``. Prints a table and
writes ``bench/results/deep_tree[-LABEL].json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

from libraryfs.daemon.indexer import Indexer
from libraryfs.fs.store import Store, Txn
from libraryfs.fs.tree import StoreTree

_CALLS = {"n": 0}


def _count(f):
    """``f`` (a ``Txn`` method) counting its calls in :data:`_CALLS`."""

    def call(self, *a):
        _CALLS["n"] += 1
        return f(self, *a)

    return call


def measure(depth: int, repeat: int) -> dict:
    """Median wall s, CPU s and lookups of one pass after a new file at the bottom of ``depth`` directories."""
    tmp = tempfile.mkdtemp(prefix="deep-tree-")
    try:
        lib = os.path.join(tmp, "lib")
        Store.create(lib, {"toc_max_tokens": 2000}).close()
        st = Store(lib)
        tree = StoreTree(st)
        bottom = "/".join(["d"] * depth)
        tree.makedirs(bottom)
        tree.write_bytes(f"{bottom}/first.md", b"# First\n\nThe first note.\n")
        idx = Indexer(lib, store=st)
        idx.run_once(full=True)
        rows = []
        for k in range(repeat):
            tree.write_bytes(f"{bottom}/n{k}.md", b"# Note %d\n\nAnother note.\n" % k)
            _CALLS["n"] = 0
            t0, c0 = time.perf_counter(), time.process_time()
            rep = idx.run_once()
            rows.append((time.perf_counter() - t0, time.process_time() - c0, _CALLS["n"], rep.dirs_rendered))
        st.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "depth": depth,
        "tocs": rows[-1][3],
        "wall_s": statistics.median(r[0] for r in rows),
        "cpu_s": statistics.median(r[1] for r in rows),
        "lookups": round(statistics.median(r[2] for r in rows)),
    }


def main() -> None:
    """Parse the flags, measure each depth, print the table, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--depths", default="100,200,400")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    Txn.lookup = _count(Txn.lookup)  # type: ignore[method-assign]
    Txn.dirparent = _count(Txn.dirparent)  # type: ignore[method-assign]
    load = os.getloadavg()[0]
    results = [measure(int(d), args.repeat) for d in args.depths.split(",")]
    print(
        f"| depth | TOCs | wall s | CPU s | lookups |   (load {load:.1f}{', ' + args.label if args.label else ''})"
    )
    print("|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['depth']} | {r['tocs']} | {r['wall_s']:.3f} | {r['cpu_s']:.3f} | {r['lookups']:,} |")
    out = os.path.join(
        os.path.dirname(__file__), "results", f"deep_tree{'-' + args.label if args.label else ''}.json"
    )
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"load_1m": load, "label": args.label, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
