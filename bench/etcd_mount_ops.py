"""Per-operation latency through a real mount: a library on etcd (3-member loopback cluster) against one on
LMDB, kernel caches cold and warm (issue 15 "Measured").

``python bench/etcd_mount_ops.py [--n 100] [--endpoints A,B,C]`` (without ``--endpoints`` a cluster is started
with scripts/etcd-cluster.sh and stopped). For each store it mounts the library twice, one after the other:
**cold** with kernel timeouts 0,0,0 (every call reaches the mount server) and **warm** with 60,60,60 (after
one untimed pass that fills the kernel's caches), and times with ``time.perf_counter`` in this process:

- getattr: ``fstat`` of an open file (FUSE GETATTR when the attributes are not cached);
- lookup: ``stat`` of a name in a directory of 1,000 files (LOOKUP when the entry is not cached);
- create: ``open(O_CREAT|O_EXCL)`` + ``close`` of a new empty file; unlink: ``unlink`` of one; rename:
  ``rename`` to a new name in the same directory (always reach the server: no cold/warm);
- readdir 10 / 1,000: ``os.listdir`` of a directory of 10 / 1,000 files (the kernel does not cache
  directory listings here: ``cache_readdir`` is off).

Prints a table (p50 and p99 ms per op, etcd/LMDB ratio) and writes ``bench/results/etcd_mount_ops.json``.
JuiceFS's published etcd figures (3 replicas on 3 hosts) are printed beside it for reference.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid

from etcd_kv import SCRIPT, start_cluster

HERE = os.path.dirname(os.path.abspath(__file__))
#: JuiceFS "Metadata engines benchmark", etcd with 3 replicas on 3 hosts (ms per op)
JUICEFS_ETCD_MS = {"getattr": 0.54, "lookup": 1.05, "create": 1.85, "readdir_1000": 15.8}
OPS = ["getattr", "lookup", "create", "rename", "unlink", "readdir_10", "readdir_1000"]
WARM_OPS = {"getattr", "lookup", "readdir_10", "readdir_1000"}


def _cli(*args: str) -> None:
    subprocess.run(["libraryfs", *args], check=True, capture_output=True, text=True)


def _q(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def _timed(fn, args: list) -> list[float]:
    out = []
    for a in args:
        t0 = time.perf_counter()
        fn(a)
        out.append(time.perf_counter() - t0)
    return out


def _fill(mnt: str, n_big: int) -> None:
    """``small/`` (10 files), ``big/`` (``n_big`` files), ``work/`` (empty), ``open.txt``."""
    for d, n in (("small", 10), ("big", n_big)):
        os.mkdir(os.path.join(mnt, d))
        for i in range(n):
            os.close(os.open(os.path.join(mnt, d, f"f{i:05d}"), os.O_CREAT | os.O_WRONLY, 0o644))
    os.mkdir(os.path.join(mnt, "work"))
    with open(os.path.join(mnt, "open.txt"), "wb") as f:
        f.write(b"x" * 100)


def _measure(mnt: str, n: int, n_big: int, warm: bool) -> dict[str, list[float]]:
    """Seconds per call for each op in OPS (module doc); ``warm``: one untimed pass first. Names are resolved
    relative to an open directory (``dir_fd``), so a call costs one path component's LOOKUP, not two."""
    names = [f"f{i:05d}" for i in range(0, n_big, max(1, n_big // n))][:n]
    fd = os.open(os.path.join(mnt, "open.txt"), os.O_RDONLY)
    big = os.open(os.path.join(mnt, "big"), os.O_RDONLY | os.O_DIRECTORY)
    work = os.open(os.path.join(mnt, "work"), os.O_RDONLY | os.O_DIRECTORY)
    try:
        reads = {
            "getattr": (os.fstat, [fd] * n),
            "lookup": (lambda name: os.stat(name, dir_fd=big), names),
            "readdir_10": (os.listdir, [os.path.join(mnt, "small")] * n),
            "readdir_1000": (os.listdir, [os.path.join(mnt, "big")] * max(5, n // 5)),
        }
        out = {}
        for op, (fn, args) in reads.items():
            if warm:
                _timed(fn, args)
            out[op] = _timed(fn, args)
        new = [f"{uuid.uuid4().hex[:6]}-{i}" for i in range(n)]
        flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY
        out["create"] = _timed(lambda p: os.close(os.open(p, flags, 0o644, dir_fd=work)), new)
        out["rename"] = _timed(lambda p: os.rename(p, p + "-r", src_dir_fd=work, dst_dir_fd=work), new)
        out["unlink"] = _timed(lambda p: os.unlink(p + "-r", dir_fd=work), new)
    finally:
        for f in (fd, big, work):
            os.close(f)
    return out


def _run_store(name: str, init_args: list[str], tmp: str, n: int, n_big: int) -> dict:
    lib = os.path.join(tmp, name)
    _cli("init", lib, *init_args)
    res = {}
    for mode, timeouts in (("cold", "0,0,0"), ("warm", "60,60,60")):
        mnt = os.path.join(tmp, f"m-{name}-{mode}")
        os.makedirs(mnt)
        _cli("mount", lib, mnt, "--no-indexer", "--no-llm", "--timeouts", timeouts)
        try:
            if mode == "cold":
                _fill(mnt, n_big)
            samples = _measure(mnt, n, n_big, warm=mode == "warm")
        finally:
            _cli("umount", mnt)
        res[mode] = {
            op: {
                "p50_ms": _q(xs, 0.5),
                "p99_ms": _q(xs, 0.99),
                "mean_ms": statistics.fmean(xs) * 1000,
                "n": len(xs),
            }
            for op, xs in samples.items()
        }
    return res


def _report(out: dict) -> None:
    print(f"load {out['load'][0]:.1f} -> {out['load'][1]:.1f}; p50 / p99 ms per call through the mount")
    print(
        f"{'op':<14}{'cache':<6}{'etcd p50':>10}{'p99':>9}{'LMDB p50':>10}{'p99':>9}{'etcd/LMDB':>11}{'JuiceFS':>9}"
    )
    for op in OPS:
        for mode in ("cold", "warm") if op in WARM_OPS else ("cold",):
            e, m = out["etcd"][mode][op], out["lmdb"][mode][op]
            jfs = JUICEFS_ETCD_MS.get(op, "") if mode == "cold" else ""
            ratio = e["p50_ms"] / m["p50_ms"] if m["p50_ms"] else float("nan")
            print(
                f"{op:<14}{mode:<6}{e['p50_ms']:>10.3f}{e['p99_ms']:>9.2f}{m['p50_ms']:>10.3f}{m['p99_ms']:>9.2f}"
                f"{ratio:>11.1f}{jfs!s:>9}"
            )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (module doc)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100, help="calls per op (readdir 1,000: n/5)")
    ap.add_argument("--big", type=int, default=1000, help="files in the large directory")
    ap.add_argument("--endpoints", help="an existing cluster's client endpoints host:port,...")
    ap.add_argument("--json", default=os.path.join(HERE, "results", "etcd_mount_ops.json"))
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="etcd-mount-ops-")
    eps = a.endpoints or ",".join(start_cluster(os.path.join(tmp, "cluster")))
    out: dict = {"args": vars(a), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    load0 = os.getloadavg()[0]
    try:
        url = f"etcd://{eps}/bench/ops-{uuid.uuid4().hex[:8]}"
        out["etcd"] = _run_store("etcd", ["--store", url], tmp, a.n, a.big)
        out["lmdb"] = _run_store("lmdb", [], tmp, a.n, a.big)
    finally:
        if not a.endpoints:
            subprocess.run(["bash", SCRIPT, "stop", os.path.join(tmp, "cluster")], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    out["load"] = [load0, os.getloadavg()[0]]
    out["juicefs_etcd_ms"] = JUICEFS_ETCD_MS
    _report(out)
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"\nwrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
