"""Cross-mount visibility on one etcd library: a write through mount A (read-write) seen through mount B
(read-only, another library directory joined to the same store: a second host's mount on this host).

For each of ``--n`` files: create ``vis/fN`` through A (write + close), then poll B every ``--poll-ms`` until
(1) ``stat`` finds it, (2) a read returns its content, (3) B's ``vis/INDEX.md`` lists it (after A's indexer
ran). Then ``--n`` rewrites (a new size each time) of a file that B and C have just stat'ed: the delay until
``stat`` on B (journal watch on: libraryfs/fs/remote_inval.py) and on C (the same read-only mount with
``LIBRARYFS_REMOTE_INVAL=0``: the kernel's attribute timeout alone, the baseline) shows the new size. Prints
p50/p99/max of each delay and writes ``bench/results/etcd_visibility.json``. Timeouts: ``--timeouts``
(default 1,1,1 s) on every mount.

Run: ``python bench/etcd_visibility.py [--n 30] [--endpoints h:p,h:p,h:p]`` (as root or a user allowed to
mount FUSE; without ``--endpoints`` a cluster is started with scripts/etcd-cluster.sh and stopped).
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

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "etcd-cluster.sh")


def _cli(*args: str) -> None:
    subprocess.run(["libraryfs", *args], check=True, capture_output=True, text=True)


def _wait(pred, poll_s: float, timeout_s: float = 30.0) -> float:
    """Seconds until ``pred()`` is true (polled every ``poll_s``); raises TimeoutError."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"not visible within {timeout_s:.0f} s")
        time.sleep(poll_s)
    return time.monotonic() - t0


def _exists(p: str) -> bool:
    try:
        os.stat(p)
        return True
    except OSError:
        return False


def _reads(p: str, want: bytes) -> bool:
    try:
        with open(p, "rb") as f:
            return f.read() == want
    except OSError:
        return False


def _listed(index: str, name: str) -> bool:
    try:
        with open(index) as f:
            return f"({name})" in f.read()
    except OSError:
        return False


def measure(ma: str, mb: str, n: int, poll_s: float) -> dict[str, list[float]]:
    """The three delays (s) for ``n`` files written through ``ma`` and watched through ``mb``."""
    os.makedirs(os.path.join(ma, "vis"), exist_ok=True)
    _wait(lambda: _exists(os.path.join(mb, "vis")), poll_s)
    out: dict[str, list[float]] = {"stat": [], "read": [], "index_line": []}
    for i in range(n):
        name, data = f"f{i:03d}.md", f"# file {i}\n\n{uuid.uuid4().hex}\n".encode()
        with open(os.path.join(ma, "vis", name), "wb") as f:
            f.write(data)
        t0 = time.monotonic()
        pb = os.path.join(mb, "vis", name)
        _wait(lambda pb=pb: _exists(pb), poll_s)
        out["stat"].append(time.monotonic() - t0)
        _wait(lambda pb=pb, data=data: _reads(pb, data), poll_s)
        out["read"].append(time.monotonic() - t0)
        _wait(lambda name=name: _listed(os.path.join(mb, "vis", "INDEX.md"), name), poll_s)
        out["index_line"].append(time.monotonic() - t0)
    return out


def _size_is(p: str, size: int) -> bool:
    try:
        return os.stat(p).st_size == size
    except OSError:
        return False


def measure_rewrites(ma: str, watchers: dict[str, str], n: int, poll_s: float) -> dict[str, list[float]]:
    """Delay until each watcher mount's ``stat`` shows a rewrite (new size) of a file it has just stat'ed
    (so its kernel caches the old attributes), for ``n`` rewrites through ``ma``."""
    path = os.path.join(ma, "vis", "rewritten.md")
    with open(path, "wb") as f:
        f.write(b"0")
    out: dict[str, list[float]] = {k: [] for k in watchers}
    for i in range(1, n + 1):
        for m in watchers.values():
            _wait(lambda m=m, i=i: _size_is(os.path.join(m, "vis", "rewritten.md"), i), poll_s)
        with open(path, "wb") as f:
            f.write(b"x" * (i + 1))
        t0 = time.monotonic()
        pending = dict(watchers)
        while pending:
            for k, m in list(pending.items()):
                if _size_is(os.path.join(m, "vis", "rewritten.md"), i + 1):
                    out[k].append(time.monotonic() - t0)
                    del pending[k]
            if time.monotonic() - t0 > 30:
                raise TimeoutError(f"rewrite {i} not seen by {sorted(pending)} within 30 s")
            time.sleep(poll_s)
    return out


def _q(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def add_visibility_args(ap: argparse.ArgumentParser) -> None:
    """The options shared with bench/etcd_multimount.py: --n, --poll-ms, --timeouts, --endpoints."""
    ap.add_argument("--n", type=int, default=30, help="files (and rewrites) for the visibility delays")
    ap.add_argument("--poll-ms", type=float, default=5.0)
    ap.add_argument(
        "--timeouts", default="1,1,1", help="every mount's kernel cache timeouts entry,attr,negative (s)"
    )
    ap.add_argument("--endpoints", help="an existing cluster (h:p,h:p,h:p); default: start one")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_visibility_args(ap)
    ap.add_argument("--json", default=os.path.join(HERE, "results", "etcd_visibility.json"))
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="etcd-vis-")
    cluster = os.path.join(tmp, "cluster")
    started = False
    try:
        if a.endpoints:
            eps = a.endpoints
        else:
            out = subprocess.run(
                ["bash", SCRIPT, "start", cluster], check=True, capture_output=True, text=True
            )
            started = True
            eps = ",".join(u.split("//", 1)[1] for u in out.stdout.strip().splitlines()[-1].split(","))
        url = f"etcd://{eps}/bench/vis-{uuid.uuid4().hex[:8]}"
        la, lb, lc, ma, mb, mc = (os.path.join(tmp, x) for x in ("a", "b", "c", "ma", "mb", "mc"))
        _cli("init", la, "--store", url)
        for d, m in ((lb, mb), (lc, mc)):
            _cli("init", d, "--store", url, "--join")
            os.makedirs(m)
        os.makedirs(ma)
        _cli("mount", la, ma, "--no-llm", "--timeouts", a.timeouts)
        try:
            _cli("mount", lb, mb, "--read-only", "--timeouts", a.timeouts)
            # C: the same read-only mount without the journal watch (the baseline: kernel timeouts alone)
            os.environ["LIBRARYFS_REMOTE_INVAL"] = "0"
            _cli("mount", lc, mc, "--read-only", "--timeouts", a.timeouts)
            del os.environ["LIBRARYFS_REMOTE_INVAL"]
            try:
                res = measure(ma, mb, a.n, a.poll_ms / 1000)
                rw = measure_rewrites(
                    ma, {"rewrite_watch": mb, "rewrite_no_watch": mc}, a.n, a.poll_ms / 1000
                )
                res.update(rw)
            finally:
                _cli("umount", mb)
                _cli("umount", mc)
        finally:
            _cli("umount", ma)
    finally:
        if started:
            subprocess.run(["bash", SCRIPT, "stop", cluster], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"write on mount A (read-write) → visible on mount B (read-only), same etcd library; n={a.n}, "
        f"B's timeouts {a.timeouts} s, poll {a.poll_ms:g} ms, load {os.getloadavg()[0]:.1f}"
    )
    print(f"{'seen by':<12} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'mean ms':>8}")
    summary = {}
    for k, xs in res.items():
        row = {
            "p50_ms": _q(xs, 0.5) * 1e3,
            "p99_ms": _q(xs, 0.99) * 1e3,
            "max_ms": max(xs) * 1e3,
            "mean_ms": statistics.fmean(xs) * 1e3,
        }
        summary[k] = row
        print(
            f"{k:<12} {row['p50_ms']:>8.0f} {row['p99_ms']:>8.0f} {row['max_ms']:>8.0f} {row['mean_ms']:>8.0f}"
        )
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(
            {"n": a.n, "timeouts": a.timeouts, "poll_ms": a.poll_ms, "summary": summary, "raw_s": res},
            f,
            indent=1,
        )
    print(f"\nwrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
