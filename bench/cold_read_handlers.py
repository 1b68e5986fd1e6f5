"""In-process cost of the four handlers of a cold read (docs/benchmarks.md "Cold reads"): ``FuseOps.getattr``
(the kernel's LOOKUP), ``open``, ``read`` and ``release`` over a real LMDB store, no mount, no kernel; the
files are ``/procs/p00/f000000``… as in ``bench/workloads.py``'s ``procs_read``.

Run with the interpreter of the code to measure (e.g. another worktree's venv, from a directory that holds
no ``libraryfs`` package)::

    python bench/cold_read_handlers.py [--files 2000] [--passes 7]

Prints where ``libraryfs`` was imported from and, per handler, the µs of process CPU per call: the best of
``--passes`` passes over the files, each pass starting from a cold resolver (``Resolver.seen`` emptied, as
in a freshly mounted server).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import libraryfs
from libraryfs.fs import fuse_adapter
from libraryfs.fs.fuse_adapter import FuseOps
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView

HANDLERS = ("getattr", "open", "read", "release")


class _FileInfo:
    """The fields of libfuse's ``fuse_file_info`` the handlers use."""

    def __init__(self) -> None:
        self.flags = os.O_RDONLY
        self.fh = 0
        self.direct_io = 0
        self.keep_cache = 0


def main() -> None:
    """Build a library of ``--files`` 1 KiB files in a temporary directory and time the handlers."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--passes", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        st = Store.create(os.path.join(d, "lib"))
        view = LibraryView(st)
        ops = FuseOps(view)
        view.mkdir(b"/procs", 0o755, 0, 0)
        view.mkdir(b"/procs/p00", 0o755, 0, 0)
        for i in range(args.files):
            fh = view.create(b"/procs/p00/f%06d" % i, 0o644, os.O_WRONLY | os.O_CREAT, 0, 0)
            view.write(fh, b"x" * 1024, 0)
            view.release(fh)
        fuse_adapter.mfusepy.fuse_get_context = lambda: (
            0,
            0,
            os.getpid(),
        )  # outside a request: no libfuse context
        paths = ["/procs/p00/f%06d" % i for i in range(args.files)]
        best = dict.fromkeys(HANDLERS, float("inf"))
        clk = time.process_time
        for _ in range(args.passes):
            acc = dict.fromkeys(HANDLERS, 0.0)
            getattr(view.resolver, "seen", {}).clear()
            for p in paths:
                t0 = clk()
                ops.getattr(p, None)
                t1 = clk()
                fi = _FileInfo()
                ops.open(p, fi)
                t2 = clk()
                ops.read(None, 65536, 0, fi)
                t3 = clk()
                ops.release(None, fi)
                t4 = clk()
                acc["getattr"] += t1 - t0
                acc["open"] += t2 - t1
                acc["read"] += t3 - t2
                acc["release"] += t4 - t3
            for k in HANDLERS:
                best[k] = min(best[k], acc[k] / args.files * 1e6)
        st.close()
    print(os.path.dirname(libraryfs.__file__))
    print("  ".join(f"{k} {v:.1f}" for k, v in best.items()), f" sum {sum(best.values()):.1f} µs")


if __name__ == "__main__":
    main()
