"""Several read-write mounts of one etcd library: cross-mount visibility, and 8 writers over 2 mounts.

Library directories A, B and C are joined to one etcd library (three hosts' mounts on this host) and mounted
**read-write** at once, every mount with kernel cache timeouts ``--timeouts`` (default 1,1,1 s). C runs with
``LIBRARYFS_REMOTE_INVAL=0`` (no journal watch: the kernel's timeouts alone), the baseline in the same run.

1. Visibility (``bench/etcd_visibility.py``'s measures, A → B): for ``--n`` files, the delay from A's
   ``close`` until B's ``stat`` finds the file, a read returns its content, B's ``INDEX.md`` lists it; then
   ``--n`` rewrites of a file B and C have just stat'ed, until their ``stat`` shows the new size.
2. Writers: ``--writers`` processes (default 8) split over A and B, each creating, rewriting (write + fsync
   + close), renaming and unlinking its own files in 4 shared directories for ``--duration-s`` (default 60)
   (``bench/acked_writers.py``); afterwards every acknowledged change is read back through **both** mounts
   (content SHA-256, or absence after unlink/rename). The same writers on one mount (A) for the same
   duration are the baseline (``--no-baseline`` skips it). Then the wait until the indexer (A's, the active
   one; B's stands by) has consumed the journal, and after unmounting ``libraryfs check`` runs (it also
   compares A's term index with the store).

Prints tables and writes ``bench/results/etcd_multimount.json``. Run: ``python bench/etcd_multimount.py
[--n 30] [--duration-s 60] [--endpoints h:p,h:p,h:p]`` (as a user allowed to mount FUSE; without
``--endpoints`` a cluster is started with scripts/etcd-cluster.sh and stopped).
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
import uuid

import acked_writers
from etcd_visibility import SCRIPT, _q, add_visibility_args, measure, measure_rewrites

from libraryfs.layout import wait_until_idle

HERE = os.path.dirname(os.path.abspath(__file__))


def _cli(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["libraryfs", *args], check=check, capture_output=True, text=True, env=dict(os.environ, **(env or {}))
    )


def run_writers(mounts: list[str], writers: int, duration_s: float, tag: str, tmp: str) -> dict:
    """``writers`` writer processes round-robin over ``mounts`` for ``duration_s``; every acknowledged change
    verified through every mount. Returns the counts, throughput and per-op latency (s)."""
    for d in range(4):
        os.makedirs(os.path.join(mounts[0], tag, f"d{d}"), exist_ok=True)
    procs, ledgers_at = [], []
    t0 = time.monotonic()
    for w in range(writers):
        m = mounts[w % len(mounts)]
        wid, ledger = f"{tag}w{w}", os.path.join(tmp, f"{tag}-w{w}.json")
        cmd = [sys.executable, os.path.join(HERE, "acked_writers.py"), os.path.join(m, tag), wid, ledger]
        cmd += ["--duration-s", str(duration_s), "--seed", str(w)]
        procs.append(subprocess.Popen(cmd))
        ledgers_at.append(ledger)
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError(f"writer exited with status {p.returncode}")
    wall_s = time.monotonic() - t0
    ledgers = []
    for path in ledgers_at:
        with open(path) as f:
            ledgers.append(json.load(f))
    res = acked_writers.verify([os.path.join(m, tag) for m in mounts], ledgers)
    lat = [x for led in ledgers for x in led["latency_s"]]
    acked = sum(led["acked"] for led in ledgers)
    return {
        "mounts": len(mounts),
        "writers": writers,
        "duration_s": duration_s,
        "wall_s": wall_s,
        "acked": acked,
        "failed_calls": sum(len(led["errors"]) for led in ledgers),
        "errors": [e for led in ledgers for e in led["errors"]][:20],
        "acked_per_s": acked / wall_s,
        "op_p50_ms": _q(lat, 0.5) * 1e3 if lat else None,
        "op_p99_ms": _q(lat, 0.99) * 1e3 if lat else None,
        "paths_checked": res["checked"],
        "present_ok": res["present"],
        "absent_ok": res["absent"],
        "wrong": res["wrong"][:20],
        "wrong_count": len(res["wrong"]),
    }


def wait_for_indexer(libdir: str, timeout_s: float = 120.0) -> None:
    """Wait until an indexer holds the library's indexer lease (``status --json``: ``holders.indexer``)."""
    deadline = time.monotonic() + timeout_s
    while not json.loads(_cli("status", libdir, "--json").stdout)["holders"]["indexer"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no indexer took the lease of {libdir} within {timeout_s:g} s")
        time.sleep(0.2)


def _start_cluster(tmp: str) -> str:
    out = subprocess.run(
        ["bash", SCRIPT, "start", os.path.join(tmp, "cluster")], check=True, capture_output=True, text=True
    )
    return ",".join(u.split("//", 1)[1] for u in out.stdout.strip().splitlines()[-1].split(","))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (module doc); exit status 1 when an acknowledged change is missing or wrong, a call
    failed, or ``check`` is not clean."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_visibility_args(ap)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--duration-s", type=float, default=60.0)
    ap.add_argument("--no-baseline", action="store_true", help="skip the writers-on-one-mount baseline")
    ap.add_argument("--json", default=os.path.join(HERE, "results", "etcd_multimount.json"))
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="etcd-multi-")
    eps = a.endpoints or _start_cluster(tmp)
    load0 = os.getloadavg()[0]
    out: dict = {"args": vars(a), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    try:
        url = f"etcd://{eps}/bench/multi-{uuid.uuid4().hex[:8]}"
        libs = {k: os.path.join(tmp, k) for k in "abc"}
        mnts = {k: os.path.join(tmp, "m" + k) for k in "abc"}
        _cli("init", libs["a"], "--store", url)
        for k in "abc":
            if k != "a":
                _cli("init", libs[k], "--store", url, "--join")
            os.makedirs(mnts[k])
        _cli("mount", libs["a"], mnts["a"], "--no-llm", "--timeouts", a.timeouts)
        wait_for_indexer(libs["a"])  # A's indexer is the active one, B's stands by (checked: A's term index)
        _cli("mount", libs["b"], mnts["b"], "--no-llm", "--timeouts", a.timeouts)
        _cli(
            "mount",
            libs["c"],
            mnts["c"],
            "--no-indexer",
            "--timeouts",
            a.timeouts,
            env={"LIBRARYFS_REMOTE_INVAL": "0"},
        )
        try:
            poll_s = a.poll_ms / 1000
            vis = measure(mnts["a"], mnts["b"], a.n, poll_s)
            vis.update(
                measure_rewrites(
                    mnts["a"], {"rewrite_watch": mnts["b"], "rewrite_no_watch": mnts["c"]}, a.n, poll_s
                )
            )
            out["visibility_s"] = vis
            _cli("umount", mnts["c"])
            out["two_mounts"] = run_writers([mnts["a"], mnts["b"]], a.writers, a.duration_s, "two", tmp)
            if not a.no_baseline:
                out["one_mount"] = run_writers([mnts["a"]], a.writers, a.duration_s, "one", tmp)
            # the indexer (A's: the active one) catches up before the mounts go; B's stood by throughout
            out["index_catchup_s"] = wait_until_idle(libs["a"], 600)
        finally:
            for k in "cba":  # the standby's mount first: A's indexer stays the active one to the end
                _cli("umount", mnts[k], check=False)
        chk = _cli("check", libs["a"], check=False)
        out["check"] = {"exit_status": chk.returncode, "report": chk.stdout.strip().splitlines()[-10:]}
    finally:
        if not a.endpoints:
            subprocess.run(["bash", SCRIPT, "stop", os.path.join(tmp, "cluster")], capture_output=True)
        if out.get("check", {}).get("exit_status") == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        else:  # kept to look at (the library directories; the store stays on the cluster)
            print(f"check failed or did not run: kept {tmp} (store {url})", file=sys.stderr)
    out["load"] = [load0, os.getloadavg()[0]]
    _report(a, out)
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"\nwrote {a.json}")
    runs = [out[k] for k in ("two_mounts", "one_mount") if k in out]
    bad = any(r["failed_calls"] or r["wrong_count"] for r in runs) or out["check"]["exit_status"] != 0
    return 1 if bad else 0


def _report(a, out: dict) -> None:
    """Print the two tables (visibility delays; writers)."""
    print(
        f"\nwrite on mount A → seen on mount B (both read-write, one etcd library); n={a.n}, timeouts "
        f"{a.timeouts} s, poll {a.poll_ms:g} ms; load {out['load'][0]:.1f} → {out['load'][1]:.1f}"
    )
    print(f"{'seen by':<18} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'mean ms':>8}")
    summary = {}
    for k, xs in out["visibility_s"].items():
        row = {"p50_ms": _q(xs, 0.5) * 1e3, "p99_ms": _q(xs, 0.99) * 1e3, "max_ms": max(xs) * 1e3}
        row["mean_ms"] = statistics.fmean(xs) * 1e3
        summary[k] = row
        print(
            f"{k:<18} {row['p50_ms']:>8.0f} {row['p99_ms']:>8.0f} {row['max_ms']:>8.0f} {row['mean_ms']:>8.0f}"
        )
    out["visibility_summary"] = summary
    print(
        f"\n{a.writers} writers for {a.duration_s:g} s; every acknowledged change read back through every mount"
    )
    cols = (
        "mounts",
        "acked",
        "acked_per_s",
        "op_p50_ms",
        "op_p99_ms",
        "failed_calls",
        "present_ok",
        "absent_ok",
        "wrong_count",
    )
    print(" ".join(f"{c:>12}" for c in ("run",) + cols))
    for k in ("two_mounts", "one_mount"):
        if k in out:
            r = out[k]
            cells = [f"{r[c]:>12.1f}" if isinstance(r[c], float) else f"{r[c]:>12}" for c in cols]
            print(f"{k:>12} " + " ".join(cells))
    print(f"\nindexer idle {out['index_catchup_s']:.1f} s after the last writer ended")
    print(
        f"\nlibraryfs check after unmounting: exit status {out['check']['exit_status']} {out['check']['report']}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
