"""Micro-benchmark of the etcd backend on a 3-member loopback cluster, beside LMDB and JuiceFS's figures.

Issue 15. One run measures, each op repeated (``--n``, range 1,000 at n/5) after 10 unmeasured warm-ups:

* **backend ops** through ``EtcdBackend`` and, as the same-run baseline, through ``LmdbBackend`` on a
  temporary LMDB file (page cache, no fsync), the same code for both: ``get`` (read snapshot + one get: a getattr), ``lookup`` (dirent +
  inode get in one snapshot), ``put`` (one blind write), ``create`` (write txn: read parent inode and the
  absent dirent, put dirent + inode + parent inode + journal record: one etcd range ×2 + one txn),
  ``range10`` / ``range1000`` (read snapshot + range over a directory's dirents: a readdir);
* **client overhead**: the same gateway calls (``get``, ``put``, ``txn4`` = one compare + 4 puts,
  ``range1000``) through this project's client (``libraryfs.fs.etcd_gateway``, persistent http.client
  connection), ``etcd3gw`` 2.x (``requests.Session``; if installed) and a bare ``requests.Session``,
  interleaved round by round so machine load hits all three alike;
* **capacity**: bytes of etcd backend (bbolt file: ``dbSize``; pages in use: ``dbSizeInUse``) per stored
  file byte for files of 1 MiB in 64 KiB chunks (+ inode, dirent, journal keys), fresh and after every
  file was rewritten twice (history kept until compaction: the cluster compacts every 5 min), and per small
  key (45-byte etcd key, 100-byte value). etcd's quota compares ``dbSize`` with --quota-backend-bytes.

JuiceFS's published etcd figures (3 replicas on 3 hosts, over a real network; ours is loopback on one
2-core host shared with other work): getattr 0.54 ms, lookup 1.05 ms, create 1.85 ms, readdir of 1,000
entries 15.8 ms.

Run: ``python bench/etcd_kv.py [--n 300] [--endpoints h:p,h:p,h:p]`` (without ``--endpoints`` a cluster
is started with scripts/etcd-cluster.sh in a temporary directory and stopped at the end).
Prints tables and writes ``bench/results/etcd_kv.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import uuid

from libraryfs.fs.backend import Backend
from libraryfs.fs.etcd_backend import EtcdBackend
from libraryfs.fs.etcd_gateway import Gateway, b64, unb64
from libraryfs.fs.lmdb_backend import LmdbBackend

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "etcd-cluster.sh")
JUICEFS_MS = {"get": 0.54, "lookup": 1.05, "create": 1.85, "range1000": 15.8}
ROOT, DIR10, DIR1000 = 1, 2, 3


def u64(n: int) -> bytes:
    return struct.pack(">Q", n)


def timed(fn, n: int) -> dict:
    """p50/p99/mean in ms of n calls of fn (after 10 unmeasured)."""
    for _ in range(10):
        fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    ts.sort()
    return {
        "n": n,
        "p50_ms": round(ts[n // 2], 3),
        "p99_ms": round(ts[min(n - 1, int(n * 0.99))], 3),
        "mean_ms": round(sum(ts) / n, 3),
    }


# -- backend ops ----------------------------------------------------------------------------------------
def seed(put) -> None:
    """Root with dirs of 10 and 1,000 entries (inode 64 bytes, dirent value 9 bytes)."""
    put(b"inodes", u64(ROOT), b"i" * 64)
    for d, n in ((DIR10, 10), (DIR1000, 1000)):
        put(b"dirents", u64(ROOT) + b"d%d" % d, u64(d) + b"D")
        put(b"inodes", u64(d), b"i" * 64)
        for i in range(n):
            put(b"dirents", u64(d) + b"entry-%06d.md" % i, u64(1000 * d + i) + b"F")
            put(b"inodes", u64(1000 * d + i), b"i" * 64)


def backend_ops(b: Backend) -> dict:
    """The ops on any backend of libraryfs.fs.backend (the etcd one, and LMDB as the same-run baseline)."""
    items: list = []
    seed(lambda t, k, v: items.append((t, k, v)))
    for i in range(0, len(items), 100):  # txns of <= 100 puts (etcd: 128 ops per txn)
        b.run_write(lambda x, i=i: [x.put(t, k, v) for t, k, v in items[i : i + 100]])
    counter = iter(range(10**9))

    def get():
        with b.read() as x:
            x.get(b"inodes", u64(DIR1000 * 1000 + 7))

    def lookup():
        with b.read() as x:
            x.get(b"inodes", x.get(b"dirents", u64(DIR1000) + b"entry-000007.md")[:8])

    def put():
        b.run_write(lambda x: x.put(b"inodes", u64(7), b"i" * 64))

    def create():
        n = next(counter)

        def fn(x):
            x.get(b"inodes", u64(ROOT))
            x.get(b"dirents", u64(ROOT) + b"new-%d" % n)
            x.put(b"dirents", u64(ROOT) + b"new-%d" % n, u64(10**7 + n) + b"F")
            x.put(b"inodes", u64(10**7 + n), b"i" * 64)
            x.put(b"inodes", u64(ROOT), b"j" * 64)
            x.put(b"journal", u64(10**7 + n), b"create")

        b.run_write(fn)

    def rng(d):
        def f():
            with b.read() as x:
                list(x.prefix(b"dirents", u64(d)))

        return f

    return {
        "get": get,
        "lookup": lookup,
        "put": put,
        "create": create,
        "range10": rng(DIR10),
        "range1000": rng(DIR1000),
    }


# -- client overhead ------------------------------------------------------------------------------------
def client_calls(endpoint: str, prefix: bytes) -> dict[str, dict]:
    """Per client, the four gateway calls (same requests, same answers decoded to bytes)."""
    import requests

    host, port = endpoint.rsplit(":", 1)
    txn4 = {
        "compare": [{"key": b64(prefix + b"a"), "target": "VERSION", "result": "GREATER", "version": "-1"}],
        "success": [
            {"request_put": {"key": b64(prefix + b"t%d" % i), "value": b64(b"x" * 200)}} for i in range(4)
        ],
    }
    rng = {"key": b64(prefix + b"r/"), "range_end": b64(prefix + b"r0")}
    gw = Gateway([endpoint])
    for i in range(0, 1000, 100):
        gw.call(
            "kv/txn",
            {
                "success": [
                    {"request_put": {"key": b64(prefix + b"r/%06d" % j), "value": b64(b"v" * 100)}}
                    for j in range(i, i + 100)
                ]
            },
        )
    ours = {
        "get": lambda: gw.call("kv/range", {"key": b64(prefix + b"a")}),
        "put": lambda: gw.call("kv/put", {"key": b64(prefix + b"a"), "value": b64(b"x" * 200)}),
        "txn4": lambda: gw.call("kv/txn", txn4),
        "range1000": lambda: [unb64(kv["value"]) for kv in gw.call("kv/range", rng)["kvs"]],
    }
    s = requests.Session()
    base = f"http://{endpoint}/v3/"

    def rq(path, body):
        return s.post(base + path, data=json.dumps(body), timeout=10).json()

    req = {
        "get": lambda: rq("kv/range", {"key": b64(prefix + b"a")}),
        "put": lambda: rq("kv/put", {"key": b64(prefix + b"a"), "value": b64(b"x" * 200)}),
        "txn4": lambda: rq("kv/txn", txn4),
        "range1000": lambda: [unb64(kv["value"]) for kv in rq("kv/range", rng)["kvs"]],
    }
    out = {"libraryfs.etcd_gateway": ours, "requests.Session": req}
    try:
        import etcd3gw
    except ImportError:
        return out
    c = etcd3gw.client(host=host, port=int(port), api_path="/v3/", timeout=10)
    out["etcd3gw"] = {
        "get": lambda: c.get(prefix + b"a"),
        "put": lambda: c.put(prefix + b"a", b"x" * 200),
        "txn4": lambda: c.transaction(txn4),
        "range1000": lambda: c.get(prefix + b"r/", range_end=prefix + b"r0", metadata=True),
    }
    return out


def client_bench(endpoint: str, n: int) -> dict:
    calls = client_calls(endpoint, b"/bench-client-" + uuid.uuid4().hex[:8].encode() + b"/")
    samples: dict = {c: {op: [] for op in ops} for c, ops in calls.items()}
    rounds = 10
    for r in range(rounds):  # interleaved: each round runs every client, in rotating order
        order = list(calls)[r % len(calls) :] + list(calls)[: r % len(calls)]
        for c in order:
            for op, fn in calls[c].items():
                k = max(1, (n // 5 if op == "range1000" else n) // rounds)
                fn()
                for _ in range(k):
                    t = time.perf_counter()
                    fn()
                    samples[c][op].append((time.perf_counter() - t) * 1e3)
    out = {}
    for c, ops in samples.items():
        out[c] = {}
        for op, ts in ops.items():
            ts.sort()
            out[c][op] = {
                "n": len(ts),
                "p50_ms": round(ts[len(ts) // 2], 3),
                "p99_ms": round(ts[min(len(ts) - 1, int(len(ts) * 0.99))], 3),
            }
    return out


# -- capacity -------------------------------------------------------------------------------------------
def db_sizes(gw: Gateway) -> tuple[int, int]:
    st = gw.call("maintenance/status", {})
    return int(st["dbSize"]), int(st.get("dbSizeInUse", 0))


def write_file(b: EtcdBackend, f: int, version: int, chunk: bytes, chunks: int = 16) -> None:
    """One 1 MiB file (16 chunks of 64 KiB) with its inode, dirent and journal record, in one txn
    (1 MiB + keys: under --max-request-bytes, 1.5 MiB)."""

    def fn(x):
        for c in range(chunks):
            x.put(b"data", u64(10**8 + f) + u64(c), chunk)
        x.put(b"inodes", u64(10**8 + f), b"i" * 64)
        x.put(b"dirents", u64(ROOT) + b"file-%d.bin" % f, u64(10**8 + f) + b"F")
        x.put(b"journal", u64(10**9 + version * 10**6 + f), b"write")

    b.run_write(fn)


def write_small(x, ino: int, content: bytes) -> None:
    """A small file: one chunk, inode, dirent, journal record (4 keys)."""
    x.put(b"data", u64(ino) + u64(0), content)
    x.put(b"inodes", u64(ino), b"i" * 64)
    x.put(b"dirents", u64(ROOT) + b"small-%d.md" % ino, u64(ino) + b"F")
    x.put(b"journal", u64(ino), b"create")


def rewrites(b: EtcdBackend, endpoint: str) -> dict:
    """Pages in use per file byte after writing 16 files of 1 MiB, then after rewriting each twice
    (etcd keeps every revision until compaction)."""
    gw = Gateway([endpoint])
    chunk = os.urandom(65536)
    s0 = db_sizes(gw)
    for f in range(16):
        write_file(b, f, 0, chunk)
    s1 = db_sizes(gw)
    for v in (1, 2):
        for f in range(16):
            write_file(b, f, v, chunk)
    s2 = db_sizes(gw)
    stored = 16 * 16 * 65536
    return {
        "in_use_per_file_byte_fresh": round((s1[1] - s0[1]) / stored, 3),
        "in_use_per_file_byte_after_2_rewrites": round((s2[1] - s0[1]) / stored, 3),
    }


def capacity(tmp: str, quota_mib: int = 64) -> dict:
    """On a fresh cluster with --quota-backend-bytes = quota_mib: bytes per small key (20,000 keys of a
    33-byte etcd key and 100-byte value), per byte of 1 KiB files (2,000: chunk, inode, dirent, journal
    keys), then 1 MiB files written until etcd refuses (NoSpace): quota bytes per file byte."""
    from libraryfs import errors

    quota = quota_mib << 20
    eps = start_cluster(os.path.join(tmp, "quota"), quota)
    try:
        b = EtcdBackend(eps, "cap")
        gw = Gateway(eps[:1])
        s0 = db_sizes(gw)
        nkeys = 20000
        for i in range(0, nkeys, 100):
            b.run_write(
                lambda x, i=i: [
                    x.put(b"inodes", u64(2 * 10**9 + j) + b"-pad-pad-pad-pad", b"v" * 100)
                    for j in range(i, i + 100)
                ]
            )
        s1 = db_sizes(gw)
        small = os.urandom(1024)
        for f in range(0, 2000, 25):  # 2,000 files of 1 KiB (one chunk each), 25 files per txn
            b.run_write(lambda x, f=f: [write_small(x, 5 * 10**8 + g, small) for g in range(f, f + 25)])
        s1b = db_sizes(gw)
        chunk = os.urandom(65536)
        files = 0
        try:
            while True:
                write_file(b, files, 0, chunk)
                files += 1
        except errors.NoSpace:
            pass
        s2 = db_sizes(gw)
        stored = files << 20
        return {
            "quota_bytes": quota,
            "small_keys": nkeys,
            "small_etcd_key_bytes": len(b.ks.key(b"inodes", bytes(24))),
            "small_value_bytes": 100,
            "in_use_bytes_per_small_key": round((s1[1] - s0[1]) / nkeys, 1),
            "in_use_bytes_per_file_byte_1_kib_files": round((s1b[1] - s1[1]) / (2000 * 1024), 3),
            "files_of_1_mib_until_nospace": files,
            "db_size_at_nospace": s2[0],
            "quota_bytes_per_file_byte": round((quota - s1b[0]) / stored, 3),
        }
    finally:
        subprocess.run(["bash", SCRIPT, "stop", os.path.join(tmp, "quota")], capture_output=True)


# -- main -----------------------------------------------------------------------------------------------
def start_cluster(tmp: str, quota_bytes: int = 0) -> list[str]:
    env = dict(os.environ, LIBRARYFS_ETCD_QUOTA_BYTES=str(quota_bytes))
    out = subprocess.run(
        ["bash", SCRIPT, "start", tmp], check=True, capture_output=True, text=True, env=env
    ).stdout
    return [u.split("//", 1)[1] for u in out.strip().splitlines()[-1].split(",")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=300, help="repetitions per op (range1000: n/5)")
    ap.add_argument("--endpoints", help="an existing cluster (h:p,h:p,h:p); default: start one")
    ap.add_argument("--json", default=os.path.join(HERE, "results", "etcd_kv.json"))
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="etcd-kv-")
    try:
        eps = a.endpoints.split(",") if a.endpoints else start_cluster(os.path.join(tmp, "cluster"))
        b = EtcdBackend(eps, "bench/" + uuid.uuid4().hex[:8])
        res = {
            "machine": {
                "cpus": os.cpu_count(),
                "load_1m": os.getloadavg()[0],
                "python": platform.python_version(),
            },
            "endpoints": eps,
            "juicefs_published_ms": JUICEFS_MS,
            "ops": {},
        }
        store = LmdbBackend.create(os.path.join(tmp, "lmdb"))
        for name, ops in (("etcd", backend_ops(b)), ("lmdb", backend_ops(store))):
            for op, fn in ops.items():
                res["ops"].setdefault(op, {})[name] = timed(fn, a.n // 5 if op == "range1000" else a.n)
        res["clients"] = client_bench(eps[0], a.n)
        res["history"] = rewrites(b, eps[0])
        res["capacity"] = capacity(tmp)
        res["machine"]["load_1m_end"] = os.getloadavg()[0]
        b.close()
    finally:
        if not a.endpoints:
            subprocess.run(["bash", SCRIPT, "stop", os.path.join(tmp, "cluster")], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    report(res)
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)
    print(f"\nwrote {a.json}")
    return 0


def report(res: dict) -> None:
    print(
        f"etcd 3.4, 3 members on loopback; {res['machine']['cpus']} CPUs, load {res['machine']['load_1m']:.1f}"
        f" → {res['machine']['load_1m_end']:.1f}"
    )
    print(
        f"\n{'op':10} {'etcd p50':>9} {'p99':>8} {'lmdb p50':>9} {'etcd/lmdb':>10} {'JuiceFS':>8} {'etcd/JuiceFS':>13}"
    )
    for op, r in res["ops"].items():
        e, m = r["etcd"], r["lmdb"]
        j = JUICEFS_MS.get(op)
        vs_j = format(e["p50_ms"] / j, ".2f") if j else ""
        print(
            f"{op:10} {e['p50_ms']:9.3f} {e['p99_ms']:8.3f} {m['p50_ms']:9.4f} "
            f"{e['p50_ms'] / max(m['p50_ms'], 1e-6):10.0f} {j or '':>8} {vs_j:>13}"
        )
    print(f"\n{'client':24} {'op':10} {'p50 ms':>8} {'p99 ms':>8}")
    for c, ops in res["clients"].items():
        for op, r in ops.items():
            print(f"{c:24} {op:10} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f}")
    print("\nhistory:", json.dumps(res["history"]))
    print("capacity:", json.dumps(res["capacity"], indent=1))


if __name__ == "__main__":
    sys.exit(main())
