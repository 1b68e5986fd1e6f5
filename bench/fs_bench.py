"""Filesystem benchmark: the same tree on tmpfs, on the binding's floor (bench/memfs.py) and on libraryfs.

Issue 2 item 9; ARCHITECTURE §7. One run measures, for N = 10³, 10⁴ (and 10⁵ with ``--full``) entries of
1 KiB in sections of ≤ 1,000 entries (``sNNNN/eNNNNNNN.md``):

* ``stat`` of an entry path, ``read`` (open + read to EOF + close of a 1 KiB entry), ``readdir`` (opendir +
  readdir to the end + closedir of a 1,000-entry section), ``create`` (open O_CREAT|O_EXCL + write 1 KiB +
  close, new names in a fresh directory);
* **cold** = first access since a fresh mount: the FUSE filesystems (memfs and libraryfs) are mounted anew
  for every round (≥ 3 rounds per placement, more at small N to get ≥ 10 cold listings; samples are pooled
  over rounds), so the kernel holds no dentry, attribute or page of the paths touched. The library's
  LMDB file stays in the OS page cache (no disk I/O is measured; ``drop_caches`` is not used: it took 6.8 s
  here and evicts other users' caches). tmpfs has no cold state (its dentries and pages *are* the storage):
  its cold rows are first accesses in this run. ``create`` is only measured cold (no cache can serve a
  create);
* **warm** = kernel-cached: after the cold passes of a round, paths in batches of 100, each batch touched
  once unmeasured, then measured at once (well inside the 1 s entry/attr timeouts both FUSE filesystems
  use; libraryfs's default). FUSE readdir is never kernel-cached (no ``cache_readdir``): warm readdir is
  still served by the server;
* two CPU placements: ``pinned`` (server and client both on CPU 0, as ``taskset -c 0`` does, via
  ``sched_setaffinity``) and ``free`` (no affinity);
* p50/p99 latency in µs, single-client throughput (ops/s = measured ops / sum of their latencies), and the
  ratios to tmpfs and to memfs of each p50; plus libraryfs's lookup cost at each N, both through the mount
  (cold stat = one FUSE LOOKUP) and in-process (``LibraryView.getattr``: path walk in LMDB, no FUSE).

The client is a small C program compiled at start (``cc``), so client overhead is one ``clock_gettime``
pair (0.02 µs, measured and reported) for every filesystem alike; ``--client python`` uses ``os`` calls in
a Python subprocess instead: it adds a constant (~0.7 µs per stat here) to all three, which dilutes every
ratio unless subtracted first. libraryfs runs without its indexer
(``python -m libraryfs.daemon.mountd`` spawned directly: the indexer is off during timing).

``--breakdown`` adds, at the largest N, the server-side cost of each FUSE callback per client operation
(both servers re-run with every mfusepy callback timed: ``--as-timed-server``), which says where libraryfs
spends its time above the floor.

Run (root: mounts tmpfs and FUSE): ``python bench/fs_bench.py [--full] [--breakdown] [--sizes 1000,10000]``.
Prints a table and writes ``bench/results/fs_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from array import array

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from memfs import entry_bytes, tree_names  # noqa: E402

FS_NAMES = ("tmpfs", "memfs", "libraryfs")
OPS_COLD = ("stat", "read", "readdir", "create")
OPS_WARM = ("stat", "read", "readdir")
WARM_BATCH = 100

C_CLIENT = r"""
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char buf[65536], wbuf[1024];

static int64_t now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int op(const char *k, const char *p) {
  if (!strcmp(k, "stat")) { struct stat st; return stat(p, &st); }
  if (!strcmp(k, "read")) {
    int fd = open(p, O_RDONLY); if (fd < 0) return -1;
    ssize_t n, t = 0;
    while ((n = read(fd, buf, sizeof buf)) > 0) t += n;
    close(fd);
    return n < 0 || t == 0 ? -1 : 0;
  }
  if (!strcmp(k, "readdir")) {
    DIR *d = opendir(p); if (!d) return -1;
    int c = 0;
    while (readdir(d)) c++;
    closedir(d);
    return c > 2 ? 0 : -1;
  }
  if (!strcmp(k, "create")) {
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644); if (fd < 0) return -1;
    ssize_t n = write(fd, wbuf, sizeof wbuf);
    if (close(fd) < 0) return -1;
    return n == sizeof wbuf ? 0 : -1;
  }
  errno = EINVAL;
  return -1;
}

/* fsops OP cold|warm BATCH < paths (one a line) > latencies (int64 ns, one per path) */
int main(int argc, char **argv) {
  if (argc < 4) return 2;
  const char *k = argv[1];
  int warm = argv[2][0] == 'w', batch = atoi(argv[3]);
  memset(wbuf, 'x', sizeof wbuf);
  size_t cap = 1024, n = 0, ln = 0;
  char **ps = malloc(cap * sizeof *ps), *line = NULL;
  ssize_t r;
  while ((r = getline(&line, &ln, stdin)) > 0) {
    if (line[r - 1] == '\n') line[r - 1] = 0;
    if (!line[0]) continue;
    if (n == cap) ps = realloc(ps, (cap *= 2) * sizeof *ps);
    ps[n++] = strdup(line);
  }
  int64_t *lat = malloc((n + 1000) * sizeof *lat);
  if (!strcmp(k, "timer")) {  /* the client's own cost: two clock reads */
    for (size_t i = 0; i < 1000; i++) { int64_t a = now(); lat[i] = now() - a; }
    fwrite(lat, 8, 1000, stdout);
    return 0;
  }
  for (size_t b = 0; b < n; b += warm ? batch : n) {
    size_t e = warm ? (b + batch < n ? b + batch : n) : n;
    for (size_t i = b; warm && i < e; i++)
      if (op(k, ps[i])) { fprintf(stderr, "%s %s: %s\n", k, ps[i], strerror(errno)); return 1; }
    for (size_t i = b; i < e; i++) {
      int64_t a = now();
      int rc = op(k, ps[i]);
      lat[i] = now() - a;
      if (rc) { fprintf(stderr, "%s %s: %s\n", k, ps[i], strerror(errno)); return 1; }
    }
  }
  fwrite(lat, 8, n, stdout);
  return 0;
}
"""


# -- clients -------------------------------------------------------------------------------------------------
def build_c_client(workdir: str) -> str | None:
    """Compile the C client into ``workdir``; returns its path, or None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None
    src = os.path.join(workdir, "fsops.c")
    exe = os.path.join(workdir, "fsops")
    with open(src, "w") as f:
        f.write(C_CLIENT)
    subprocess.run([cc, "-O2", "-o", exe, src], check=True)
    return exe


def python_client(argv: list[str]) -> int:
    """The same protocol as the C client, with ``os`` calls (``fs_bench.py --as-client OP MODE BATCH``)."""
    kind, warm, batch = argv[0], argv[1].startswith("w"), int(argv[2])
    paths = [p for p in sys.stdin.buffer.read().split(b"\n") if p]
    wbuf = b"x" * 1024
    clock = time.perf_counter_ns

    def op(p: bytes) -> None:
        if kind == "stat":
            os.stat(p)
        elif kind == "read":
            fd = os.open(p, os.O_RDONLY)
            while os.read(fd, 65536):
                pass
            os.close(fd)
        elif kind == "readdir":
            with os.scandir(p) as it:
                for _ in it:
                    pass
        elif kind == "create":
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, wbuf)
            os.close(fd)

    if kind == "timer":
        lat = array("q", (-(clock() - clock()) for _ in range(1000)))
        sys.stdout.buffer.write(lat.tobytes())
        return 0
    lat = array("q", bytes(8 * len(paths)))
    step = batch if warm else max(1, len(paths))
    for b in range(0, len(paths), step):
        chunk = range(b, min(b + step, len(paths)))
        if warm:
            for i in chunk:
                op(paths[i])
        for i in chunk:
            a = clock()
            op(paths[i])
            lat[i] = clock() - a
    sys.stdout.buffer.write(lat.tobytes())
    return 0


FUSE_CALLBACKS = (
    "getattr_fuse_3",
    "create",
    "open",
    "read",
    "write",
    "flush",
    "release",
    "getxattr",
    "opendir",
    "readdir_fuse_3",
    "releasedir",
    "mkdir",
    "unlink",
    "rmdir",
    "statfs",
)


def timed_server(argv: list[str]) -> int:
    """``--as-timed-server memfs|LIBDIR MNT OUT.json N TIMEOUTS``: serve memfs or a library with every mfusepy
    callback timed (ns in the server, from the ctypes entry to the return: Python binding + filesystem
    work, no kernel); writes ``{callback: [ns, …]}`` to OUT.json after unmount."""
    import atexit

    target, mnt, out, n, timeouts = argv[0], argv[1], argv[2], int(argv[3]), argv[4]
    os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")
    import mfusepy

    classes = [mfusepy.FUSE]
    if target != "memfs":
        from libraryfs.fs.fuse_adapter import LibraryFUSE

        classes.insert(0, LibraryFUSE)
    acc: dict[str, list[int]] = {}

    def wrap(name, fn):
        def timed(*a, **k):
            t = time.perf_counter_ns()
            try:
                return fn(*a, **k)
            finally:
                acc.setdefault(name, []).append(time.perf_counter_ns() - t)

        return timed

    for name in FUSE_CALLBACKS:
        for cls in classes:
            if name in cls.__dict__:
                setattr(cls, name, wrap(name, cls.__dict__[name]))
                break

    def dump() -> None:
        with open(out, "w") as f:
            json.dump(acc, f)

    atexit.register(dump)
    if target == "memfs":
        import memfs

        return memfs.main([mnt, "--populate", str(n), "--timeouts", timeouts])
    from libraryfs.daemon import mountd
    from libraryfs.settings import parse_timeouts

    return mountd.run_process(target, mnt, parse_timeouts(timeouts))


def breakdown(
    n: int,
    lib: str,
    mnt: dict,
    client,
    work: str,
    log_path: str,
    timeouts: str,
    paths: dict,
    cpus: set[int] | None,
) -> dict:
    """Server-side cost per client operation: for each FUSE filesystem and each cold op, one fresh timed
    server; returns ``{fs: {op: {callback: {"per_op": calls per op, "p50_us": …}}}}``."""
    out: dict = {}
    for fs in ("memfs", "libraryfs"):
        for op in ("stat", "read", "create"):
            dump = os.path.join(work, f"timed-{fs}-{op}.json")
            cmd = [
                sys.executable,
                os.path.abspath(__file__),
                "--as-timed-server",
                "memfs" if fs == "memfs" else lib,
                mnt[fs],
                dump,
                str(n),
                timeouts,
            ]
            srv = FuseServer(cmd, mnt[fs], log_path, cpus)
            try:
                p = paths.get(op, [])
                if op == "create":
                    os.mkdir(os.path.join(mnt[fs], "new-breakdown"))
                    p = [f"new-breakdown/c{j:05d}" for j in range(len(paths["stat"]))]
                client.run(op, "cold", p, mnt[fs], cpus)  # (the created files die with the run's library)
            finally:
                srv.stop()
            with open(dump) as f:
                acc = json.load(f)
            nops = len(paths["stat"])
            out.setdefault(fs, {})[op] = {
                cb: {"per_op": round(len(v) / nops, 2), "p50_us": round(pct(sorted(v), 50), 1)}
                for cb, v in acc.items()
                if len(v) >= nops // 2
            }
    return out


def _pin(cpus: set[int] | None):
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


class Client:
    """Runs one measured pass in a subprocess (C or Python); returns latencies in ns."""

    def __init__(self, exe: str | None) -> None:
        self.exe = exe

    @property
    def kind(self) -> str:
        return "c" if self.exe else "python"

    def run(self, op: str, mode: str, paths: list[str], cwd: str, cpus: set[int] | None) -> list[int]:
        cmd = [self.exe] if self.exe else [sys.executable, os.path.abspath(__file__), "--as-client"]
        r = subprocess.run(
            cmd + [op, mode, str(WARM_BATCH)],
            input="\n".join(paths).encode() + b"\n",
            capture_output=True,
            cwd=cwd,
            preexec_fn=_pin(cpus),
        )
        if r.returncode != 0:
            raise RuntimeError(f"client {op}/{mode} in {cwd} failed: {r.stderr.decode().strip()}")
        return list(array("q", r.stdout))


# -- filesystems ---------------------------------------------------------------------------------------------
def _mounted(mnt: str) -> bool:
    with open("/proc/mounts") as f:
        if not any(line.split()[1] == mnt for line in f):
            return False
    try:
        os.statvfs(mnt)
        return True
    except OSError:
        return False


class FuseServer:
    """One FUSE server process (memfs or libraryfs's mountd) mounted at ``mnt`` for one round."""

    def __init__(self, cmd: list[str], mnt: str, log_path: str, cpus: set[int] | None) -> None:
        self.mnt = mnt
        os.makedirs(mnt, exist_ok=True)
        env = dict(os.environ)
        env.pop("NOTIFY_SOCKET", None)
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
                preexec_fn=_pin(cpus),
            )
        deadline = time.monotonic() + 120
        while not _mounted(mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                with open(log_path, errors="replace") as f:
                    tail = "".join(f.readlines()[-5:])
                raise RuntimeError(f"{cmd[1:3]} did not mount {mnt}:\n{tail}")
            time.sleep(0.02)

    def stop(self) -> None:
        subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            subprocess.run(["fusermount3", "-uz", self.mnt], capture_output=True)
            self.proc.terminate()
            self.proc.wait(timeout=10)


def populate_tmpfs(mnt: str, n: int) -> None:
    """Mount a tmpfs at ``mnt`` and write the tree into it."""
    os.makedirs(mnt, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2g,mode=755", "fsbench", mnt], check=True)
    for i, (sec, ent) in enumerate(tree_names(n)):
        d = os.path.join(mnt, sec)
        if not os.path.isdir(d):
            os.mkdir(d)
        with open(os.path.join(d, ent), "wb") as f:
            f.write(entry_bytes(i))


def populate_library(lib: str, n: int) -> None:
    """``libraryfs init`` + write the tree through :class:`LibraryView` in this process (one write
    transaction per create/write/close, as through the mount, without FUSE round trips)."""
    from libraryfs.fs.store import Store
    from libraryfs.fs.view import LibraryView

    subprocess.run([sys.executable, "-m", "libraryfs.cli.main", "init", lib], check=True, capture_output=True)
    store = Store(lib)
    try:
        view = LibraryView(store)
        uid, gid = os.getuid(), os.getgid()
        for i, (sec, ent) in enumerate(tree_names(n)):
            if i % 1000 == 0:
                view.mkdir(b"/" + sec.encode(), 0o755, uid, gid)
            fh = view.create(f"/{sec}/{ent}".encode(), 0o644, os.O_WRONLY | os.O_CREAT, uid, gid)
            view.write(fh, entry_bytes(i), 0)
            view.release(fh)
    finally:
        store.close()


def library_lookup_inprocess(lib: str, paths: list[str]) -> dict:
    """p50/p99 µs of ``LibraryView.getattr`` (the path walk in LMDB) for ``paths``, no FUSE."""
    from libraryfs.fs.store import Store
    from libraryfs.fs.view import LibraryView

    store = Store(lib, readonly=True)
    try:
        view = LibraryView(store, read_only=True)
        bpaths = [("/" + p).encode() for p in paths]
        for p in bpaths[:200]:
            view.getattr(p)
        lat = []
        for p in bpaths:
            a = time.perf_counter_ns()
            view.getattr(p)
            lat.append(time.perf_counter_ns() - a)
    finally:
        store.close()
    return summarize(lat)


# -- statistics ----------------------------------------------------------------------------------------------
def pct(sorted_ns: list[int], q: float) -> float:
    """Nearest-rank percentile ``q`` (0..100) of sorted ns values, in µs."""
    k = max(0, min(len(sorted_ns) - 1, math.ceil(q / 100 * len(sorted_ns)) - 1))
    return sorted_ns[k] / 1000


def summarize(lat_ns: list[int]) -> dict:
    """``{n, p50_us, p99_us, mean_us, ops_per_s}`` of latencies in ns (ops/s: one sequential client)."""
    s = sorted(lat_ns)
    total = sum(s)
    return {
        "n": len(s),
        "p50_us": round(pct(s, 50), 2),
        "p99_us": round(pct(s, 99), 2),
        "mean_us": round(total / len(s) / 1000, 2),
        "ops_per_s": round(len(s) / (total / 1e9)),
    }


# -- one size ------------------------------------------------------------------------------------------
def bench_size(n: int, args, client: Client, work: str, log_path: str) -> tuple[list[dict], dict]:
    """All cells for ``n`` entries; returns (cells, lookup facts)."""
    rng = random.Random(n)
    names = [f"{s}/{e}" for s, e in tree_names(n)]
    k = min(args.samples, n // 2)
    picked = rng.sample(names, 2 * k)
    set_stat, set_read = picked[:k], picked[k:]
    sections = sorted({p.split("/")[0] for p in names})
    rounds = max(args.min_rounds, min(args.max_rounds, math.ceil(args.readdir_cold_min / len(sections))))
    create_per_round = max(50, args.create_samples // rounds)

    t0 = time.monotonic()
    mnt = {fs: os.path.join(work, f"{fs}-{n}") for fs in FS_NAMES}
    lib = os.path.join(work, f"lib-{n}")
    if "tmpfs" in args.fs:
        populate_tmpfs(mnt["tmpfs"], n)
    if "libraryfs" in args.fs:
        populate_library(lib, n)
    print(
        f"# N={n}: populated in {time.monotonic() - t0:.1f} s; {rounds} cold round(s) per placement, "
        f"{k} stat + {k} read paths, {len(sections)} sections, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )

    def server_cmd(fs: str) -> list[str]:
        if fs == "memfs":
            return [
                sys.executable,
                os.path.join(HERE, "memfs.py"),
                mnt[fs],
                "--populate",
                str(n),
                "--timeouts",
                args.timeouts,
            ]
        return [sys.executable, "-m", "libraryfs.daemon.mountd", lib, mnt[fs], "--timeouts", args.timeouts]

    lat: dict[tuple, list[int]] = {}
    try:
        for placement in args.placements:
            cpus = {0} if placement == "pinned" else None
            for rnd in range(rounds):
                servers: dict[str, FuseServer] = {}
                try:
                    for fs in args.fs:
                        if fs != "tmpfs":
                            servers[fs] = FuseServer(server_cmd(fs), mnt[fs], log_path, cpus)
                    order = list(args.fs)
                    for i, op in enumerate(OPS_COLD):
                        paths = {"stat": set_stat, "read": set_read, "readdir": sections}.get(op)
                        for fs in order[i % 3 :] + order[: i % 3]:  # rotate: load drift hits all alike
                            if op == "create":
                                d = f"new-{placement}-{rnd}"
                                os.mkdir(os.path.join(mnt[fs], d))
                                paths = [f"{d}/c{j:05d}" for j in range(create_per_round)]
                            got = client.run(op, "cold", paths, mnt[fs], cpus)
                            lat.setdefault((placement, fs, op, "cold"), []).extend(got)
                    # warm passes every round, pooled over rounds like the cold ones
                    for i, op in enumerate(OPS_WARM):
                        paths = {"stat": set_stat, "read": set_read}.get(op)
                        if op == "readdir":
                            paths = sections * math.ceil(args.readdir_warm / rounds / len(sections))
                        for fs in order[i % 3 :] + order[: i % 3]:
                            got = client.run(op, "warm", paths, mnt[fs], cpus)
                            lat.setdefault((placement, fs, op, "warm"), []).extend(got)
                    for fs in args.fs:  # keep the tree at N entries
                        shutil.rmtree(os.path.join(mnt[fs], f"new-{placement}-{rnd}"))
                finally:
                    for s in servers.values():
                        s.stop()
        lookup = {}
        if "libraryfs" in args.fs:
            lookup = library_lookup_inprocess(lib, set_stat)
        if args.breakdown and n == max(args.sizes_all) and {"memfs", "libraryfs"} <= set(args.fs):
            cpus = {0} if "pinned" in args.placements else None
            lookup["breakdown"] = breakdown(
                n, lib, mnt, client, work, log_path, args.timeouts, {"stat": set_stat, "read": set_read}, cpus
            )
    finally:
        if os.path.ismount(mnt["tmpfs"]):
            subprocess.run(["umount", mnt["tmpfs"]], check=False)
        shutil.rmtree(lib, ignore_errors=True)
    cells = [
        {"N": n, "placement": pl, "fs": fs, "op": op, "state": st, **summarize(v)}
        for (pl, fs, op, st), v in lat.items()
    ]
    print(f"# N={n}: measured in {time.monotonic() - t0:.1f} s", flush=True)
    return cells, lookup


# -- report --------------------------------------------------------------------------------------------------
def cell(cells: list[dict], **kw) -> dict | None:
    """The one cell matching ``kw`` (or None)."""
    for c in cells:
        if all(c.get(k) == v for k, v in kw.items()):
            return c
    return None


def ratio(a: dict | None, b: dict | None) -> float | None:
    """p50 of ``a`` over p50 of ``b``."""
    return round(a["p50_us"] / b["p50_us"], 2) if a and b and b["p50_us"] else None


def report(cells: list[dict], lookups: dict, sizes: list[int], placements: list[str]) -> tuple[str, dict]:
    """The markdown table and the target verdicts."""
    head = (
        "| N | CPUs | op | state | tmpfs p50/p99 µs | memfs p50/p99 µs | libraryfs p50/p99 µs | "
        "libraryfs ops/s | lib/tmpfs | lib/memfs | memfs/tmpfs |"
    )
    lines = [head, "|" + "---|" * 11]
    for n in sizes:
        for pl in placements:
            for st, ops in (("cold", OPS_COLD), ("warm", OPS_WARM)):
                for op in ops:
                    c = {fs: cell(cells, N=n, placement=pl, fs=fs, op=op, state=st) for fs in FS_NAMES}

                    def pp(x):
                        if not x:
                            return "–"
                        return f"{x['p50_us']:.{2 if x['p50_us'] < 10 else 0}f} / {x['p99_us']:.0f}"

                    lib = c["libraryfs"]
                    r = [ratio(lib, c["tmpfs"]), ratio(lib, c["memfs"]), ratio(c["memfs"], c["tmpfs"])]
                    lines.append(
                        f"| {n:,} | {pl} | {op} | {st} | {pp(c['tmpfs'])} | {pp(c['memfs'])} | "
                        f"{pp(lib)} | {format(lib['ops_per_s'], ',') if lib else '–'} | "
                        + " | ".join("–" if x is None else f"{x:.2f}" for x in r)
                        + " |"
                    )
    verdict: dict = {}
    lo, hi = min(sizes), max(sizes)
    for pl in placements:
        ws = ratio(
            cell(cells, N=hi, placement=pl, fs="libraryfs", op="stat", state="warm"),
            cell(cells, N=hi, placement=pl, fs="tmpfs", op="stat", state="warm"),
        )
        cold = {
            op: ratio(
                cell(cells, N=hi, placement=pl, fs="libraryfs", op=op, state="cold"),
                cell(cells, N=hi, placement=pl, fs="memfs", op=op, state="cold"),
            )
            for op in OPS_COLD
        }
        lk = ratio(
            cell(cells, N=hi, placement=pl, fs="libraryfs", op="stat", state="cold"),
            cell(cells, N=lo, placement=pl, fs="libraryfs", op="stat", state="cold"),
        )
        lk_floor = ratio(
            cell(cells, N=hi, placement=pl, fs="memfs", op="stat", state="cold"),
            cell(cells, N=lo, placement=pl, fs="memfs", op="stat", state="cold"),
        )
        verdict[pl] = {
            "warm_stat_lib_over_tmpfs": ws,
            "warm_stat_target": 1.2,
            "cold_lib_over_memfs": cold,
            "cold_target": 1.3,
            f"lookup_cold_stat_{hi}_over_{lo}": lk,
            f"memfs_cold_stat_{hi}_over_{lo}": lk_floor,
            "lookup_target": 1.5,
        }
    if lookups:
        verdict["lookup_inprocess_us"] = {str(k): v for k, v in lookups.items()}
        verdict[f"lookup_inprocess_{hi}_over_{lo}"] = round(lookups[hi]["p50_us"] / lookups[lo]["p50_us"], 2)
    return "\n".join(lines), verdict


def breakdown_table(bd: dict) -> str:
    """Markdown table of server-side callback costs per client op (memfs vs libraryfs)."""
    lines = [
        f"Server-side time per cold op at N={bd['N']:,} (p50 µs of each callback × calls per op):",
        "",
        "| op | callback | memfs calls/op | memfs p50 µs | libraryfs calls/op | libraryfs p50 µs |",
        "|---|---|---|---|---|---|",
    ]
    for op in ("stat", "read", "create"):
        m, lb = bd["memfs"].get(op, {}), bd["libraryfs"].get(op, {})
        tot = {"memfs": 0.0, "libraryfs": 0.0}
        for cb in sorted(set(m) | set(lb), key=FUSE_CALLBACKS.index):
            a, b = m.get(cb), lb.get(cb)
            for fs, x in (("memfs", a), ("libraryfs", b)):
                if x:
                    tot[fs] += x["per_op"] * x["p50_us"]
            lines.append(
                f"| {op} | {cb} | {a['per_op'] if a else '–'} | {a['p50_us'] if a else '–'} | "
                f"{b['per_op'] if b else '–'} | {b['p50_us'] if b else '–'} |"
            )
        lines.append(f"| {op} | **sum** | | {tot['memfs']:.1f} | | {tot['libraryfs']:.1f} |")
    return "\n".join(lines)


def machine() -> dict:
    """What the figures were measured on."""
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    from importlib import metadata

    os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")
    import mfusepy

    git = subprocess.run(
        ["git", "-C", os.path.dirname(HERE), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "mem_gib": round(mem_kib / 2**20, 1),
        "git": git,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "mfusepy": metadata.version("mfusepy"),
        "lmdb": metadata.version("lmdb"),
        "libfuse": f"{mfusepy.fuse_version_major}.{mfusepy.fuse_version_minor}",
    }


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--as-client"]:
        return python_client(argv[1:])
    if argv[:1] == ["--as-timed-server"]:
        return timed_server(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000", help="comma-separated entry counts")
    ap.add_argument("--full", action="store_true", help="add N = 100000 (populating takes minutes)")
    ap.add_argument("--samples", type=int, default=2000, help="stat and read paths per cell (≤ N/2)")
    ap.add_argument("--create-samples", type=int, default=1000, help="creates per cell (split over rounds)")
    ap.add_argument("--readdir-cold-min", type=int, default=10, help="cold readdirs wanted (fresh mounts)")
    ap.add_argument("--readdir-warm", type=int, default=200, help="warm readdirs per cell (over all rounds)")
    ap.add_argument("--max-rounds", type=int, default=10, help="most fresh mounts per placement")
    ap.add_argument("--min-rounds", type=int, default=3, help="fewest fresh mounts per placement")
    ap.add_argument(
        "--breakdown",
        action="store_true",
        help="at the largest N, also time every FUSE callback inside both servers (pinned)",
    )
    ap.add_argument("--placements", default="pinned,free")
    ap.add_argument("--fs", default=",".join(FS_NAMES))
    ap.add_argument("--timeouts", default="1,1,1", help="FUSE entry,attr,negative timeouts (s), both FUSE fs")
    ap.add_argument("--client", choices=("c", "python"), default="c")
    ap.add_argument("--workdir", default="/tmp/fsbench")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "fs_bench.json"))
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        ap.error("run as root: the benchmark mounts tmpfs and FUSE filesystems")
    sizes = [int(x) for x in args.sizes.split(",")] + ([100_000] if args.full else [])
    sizes = sorted(set(sizes))
    args.sizes_all = sizes
    args.placements = args.placements.split(",")
    args.fs = [f for f in FS_NAMES if f in args.fs.split(",")]
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    os.makedirs(args.workdir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="run-", dir=args.workdir)
    log_path = os.path.join(work, "servers.log")
    load_start = os.getloadavg()
    started = time.time()
    cells: list[dict] = []
    lookups: dict = {}
    server_breakdown: dict = {}
    try:
        client = Client(build_c_client(work) if args.client == "c" else None)
        timer = summarize(client.run("timer", "cold", [], work, None))
        for n in sizes:
            c, lk = bench_size(n, args, client, work, log_path)
            cells += c
            if "breakdown" in lk:
                server_breakdown = {"N": n, **lk.pop("breakdown")}
            if lk:
                lookups[n] = lk
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table, verdict = report(cells, lookups, sizes, args.placements)
    load_end = os.getloadavg()
    print(table)
    print(json.dumps(verdict, indent=1))
    if server_breakdown:
        print(breakdown_table(server_breakdown))
    print(
        f"# client: {client.kind}, timer overhead p50 {timer['p50_us']} µs; load average "
        f"{load_start[0]:.1f} at start, {load_end[0]:.1f} at end; {time.time() - started:.0f} s"
    )
    out = {
        "command": "python bench/fs_bench.py " + " ".join(argv),
        "machine": machine(),
        "load_avg_start": load_start,
        "load_avg_end": load_end,
        "started": started,
        "client": client.kind,
        "client_timer_overhead": timer,
        "sizes": sizes,
        "placements": args.placements,
        "timeouts": args.timeouts,
        "cold": "first access since a fresh FUSE mount (tmpfs: first access in this run)",
        "warm": f"batches of {WARM_BATCH}: touched once unmeasured, then measured",
        "indexer": "off (mountd spawned without it)",
        "cells": cells,
        "verdict": verdict,
        "table": table,
        "server_breakdown": server_breakdown,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"# wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
