"""The indexer's share of a bulk write: untar + sync on fresh libraries, with and without the indexer, and
with another ``libraryfs`` command's mount (main's), interleaved (issue 18 item 2, docs/benchmarks.md "The
indexer's share of a bulk write").

Each cell: ``libraryfs init`` + ``mount`` of a fresh library on a tmpfs backing, 1 s for the daemons to
start, then ``tar -xf`` of the python3 HTML docs + ``sync`` (:func:`workload_steps.untar`), timed with the
CPU of the server and the indexer *during* the untar and the foreign CPU (:class:`workloads.Meter`), then
``umount`` (the indexer stops mid-pass; nothing waits for it to settle). Unlike ``bench/workloads.py
--workloads docs`` there is no ``ls``/``rg`` and no wait for the indexer to finish after each cell, so a
repetition takes seconds, not minutes, on a loaded machine where a niced indexer settles slowly.

::

    python bench/indexer_share.py --runs 6 --variant main=/path/to/main/venv/bin/libraryfs [--out OUT.jsonl]

Prints one JSON line per cell and a summary (median seconds and indexer CPU per filesystem). Root only
(tmpfs backing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import workload_fs as wfs  # noqa: E402
import workload_steps as ws  # noqa: E402
from workloads import Meter  # noqa: E402

DOCS = "/usr/share/doc/python3/html"


def main(argv: list[str] | None = None) -> int:
    """Run the cells; returns the exit status (2: not root or no docs)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=6, help="interleaved repetitions")
    ap.add_argument("--variant", default=None, help="LABEL=COMMAND: also libraryfs@LABEL mounted by COMMAND")
    ap.add_argument("--docs", default=DOCS, help="tree to tar and untar")
    ap.add_argument("--out", default=None, help="append the cells to this JSONL file")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("indexer_share: run as root (mounts a tmpfs)", file=sys.stderr)
        return 2
    names = ["libraryfs", "libraryfs-noidx"]
    variants: dict = {}
    if args.variant:
        label, _, cmd = args.variant.partition("=")
        variants[label] = ([cmd], [])
        names.insert(1, f"libraryfs@{label}")
    docs = os.path.realpath(args.docs)
    if not os.path.isdir(docs):
        print(f"indexer_share: {docs} is missing (apt-get install python3-doc)", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="indexer-share-")
    backing = os.path.join(work, "backing")
    os.mkdir(backing)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8g,mode=0700", "share-backing", backing], check=True)
    tar = os.path.join(work, "docs.tar")
    subprocess.run(["tar", "-cf", tar, "-C", os.path.dirname(docs), os.path.basename(docs)], check=True)
    inputs = ws.Inputs(tar, 0, "", ws.Sizes())
    cells: list[dict] = []
    try:
        for rep in range(args.runs):
            k = rep % len(names)
            for name in names[k:] + names[:k]:
                fs = wfs.make(name, work, os.path.join(work, "servers.log"), backing, variants)
                fs.setup()
                try:
                    time.sleep(1.0)  # the daemons' start-up (imports) is not the untar's
                    meter = Meter(fs.processes())
                    seconds, _parts = ws.untar(fs.root, inputs)
                    cell = {"run": rep, "fs": name, "seconds": round(seconds, 3), **meter.finish(0.5, 0.1)}
                finally:
                    fs.teardown()
                cells.append(cell)
                print(json.dumps(cell), flush=True)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(json.dumps(cell) + "\n")
    finally:
        subprocess.run(["umount", backing], check=False)
        shutil.rmtree(work, ignore_errors=True)
    for name in names:
        mine = [c for c in cells if c["fs"] == name]
        idx = [c["indexer_cpu_s"] for c in mine if "indexer_cpu_s" in c]
        print(
            f"{name:20s} untar+sync median {statistics.median(c['seconds'] for c in mine):7.2f} s"
            f"  server CPU {statistics.median(c['server_cpu_s'] for c in mine):5.2f} s"
            + (f"  indexer CPU {statistics.median(idx):5.2f} s" if idx else "")
            + f"  foreign CPUs {statistics.median(c['foreign_cpus'] for c in mine):4.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
