"""Crash safety by fault injection (issue 6 item 2): kill -9 the mount server or the indexer at random moments
during a mixed write workload, restart, and verify that nothing acknowledged was lost.

Run: ``python bench/crash_run.py [--iterations 1000] [--workers 2] [--seed 1]``
     ``python bench/crash_run.py --sync-cost``   (measured cost of LMDB's sync settings, for docs/reliability.md)

One iteration:

1. ``--workers`` workload processes (``--workload`` mode of this script) create, append, rename, unlink (some
   while the file is open) and fsync files through the mount, each in its own directories. Every operation
   is logged *before* it is issued (intent, with the data) and *after* it returned (ack; for a close or an
   fsync with the SHA-256 of the content the workload believes the file now has). The log lives on the
   local disk, written unbuffered, so it survives the kill of the mount.
2. After a random delay (``--min-delay-s`` … ``--max-delay-s``) the harness sends SIGKILL to the mount
   server or to the indexer (``--mount-share`` of the kills go to the mount).
3. With the workload stopped, the store is checked *before* any repair (only ``I4`` orphans of files that
   were open-and-unlinked at the kill are expected), then the killed process is restarted
   (:func:`libraryfs.daemon.launcher.start` clears the stale mount), the indexer is made to catch up.
4. Verified: every acknowledged file is there byte for byte (renames/unlinks after its close are followed
   through the log); the one operation in flight per worker left an allowed state (absent or present for a
   create, a prefix of what was being appended, one of the two names for a rename); no name is visible
   that the model does not have; ``check`` is clean; every directory's TOC lists exactly its entries.

Prints a table and writes ``bench/results/crash_run.json``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import errno
import hashlib
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from libraryfs.fs import generated as G

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def sha(b: bytes) -> str:
    """Hex SHA-256 of ``b`` (first 32 hex digits)."""
    return hashlib.sha256(b).hexdigest()[:32]


# =====================================================================================================
# the workload process
# =====================================================================================================


class _Log:
    """Append-only JSON-lines log on the local disk, one ``os.write`` per line (survives our own kill)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def __call__(self, **rec) -> None:
        os.write(self.fd, (json.dumps(rec) + "\n").encode())


def _names(rng: random.Random, worker: int, n: int) -> str:
    kind = rng.random()
    if kind < 0.08:
        return f"w{worker}-{n:06d}.tmp"  # a hidden (temporary) name: must never show in a TOC
    if kind < 0.2:
        return f"é-notes {worker}-{n:06d}.md"
    return f"w{worker}-{n:06d}" + rng.choice([".md", ".txt", ".json", ""])


def _data(rng: random.Random, big: bool) -> bytes:
    n = rng.randint(64 << 10, 400 << 10) if big else rng.randint(1, 12 << 10)
    unit = f"line {rng.random():.12f} — données\n".encode()
    out = (unit * (n // len(unit) + 1))[:n]
    return out


def workload(mnt: str, state_path: str, log_path: str, worker: int, seed: int) -> int:
    """Run the workload of one worker until SIGTERM or until the mount dies (ENOTCONN). Exit status 0
    when it stopped for one of those reasons, 3 on an unexpected error (logged as ``{"error": ...}``)."""
    with open(state_path) as f:
        st = json.load(f)
    files: dict[str, bytes] = {p: base64.b64decode(c) for p, c in st["files"].items()}
    dirs: list[str] = st["dirs"]
    counter: int = st["counter"]
    rng = random.Random(seed)
    log = _Log(log_path)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    op_id = 0

    def full(p: str) -> str:
        return os.path.join(mnt, p)

    def write_all(fd: int, data: bytes, pieces: int) -> None:
        cut = sorted(rng.sample(range(1, len(data)), min(pieces - 1, len(data) - 1))) if len(data) > 1 else []
        pos = 0
        for c in cut + [len(data)]:
            view = memoryview(data)[pos:c]
            while view:
                n = os.write(fd, view)
                view = view[n:]
            pos = c

    try:
        while not stop:
            op_id += 1
            r = rng.random()
            names = sorted(files)
            if len(files) > 60 and r < 0.25:
                r = 0.85  # keep the population near 60 files per worker: unlink instead of create
            if r < 0.35 or len(files) < 5:
                counter += 1
                p = os.path.join(rng.choice(dirs), _names(rng, worker, counter))
                data = _data(rng, rng.random() < 0.05)
                log(i=op_id, op="create", path=p, data=base64.b64encode(data).decode(), n=counter)
                fd = os.open(full(p), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                write_all(fd, data, rng.randint(1, 3))
                if rng.random() < 0.4:
                    os.fsync(fd)
                    log(fsync=op_id, sha=sha(data))
                os.close(fd)
                files[p] = data
                log(ack=op_id, sha=sha(data))
            elif r < 0.65:
                p = rng.choice(names)
                if len(files[p]) > (512 << 10):
                    continue
                data = _data(rng, False)
                log(i=op_id, op="append", path=p, data=base64.b64encode(data).decode())
                fd = os.open(full(p), os.O_WRONLY | os.O_APPEND)
                write_all(fd, data, rng.randint(1, 2))
                new = files[p] + data
                if rng.random() < 0.4:
                    os.fsync(fd)
                    log(fsync=op_id, sha=sha(new))
                os.close(fd)
                files[p] = new
                log(ack=op_id, sha=sha(new))
            elif r < 0.82:
                src = rng.choice(names)
                if rng.random() < 0.25 and len(names) > 1:
                    dst = rng.choice([n for n in names if n != src])  # atomic replace of an existing file
                else:
                    counter += 1
                    dst = os.path.join(rng.choice(dirs), _names(rng, worker, counter))
                log(i=op_id, op="rename", src=src, dst=dst, n=counter)
                os.rename(full(src), full(dst))
                files[dst] = files.pop(src)
                log(ack=op_id, sha=sha(files[dst]))
            elif r < 0.95 and len(files) > 40 or r < 0.90:
                p = rng.choice(names)
                held = rng.random() < 0.3
                log(i=op_id, op="unlink", path=p, held=held)
                fd = os.open(full(p), os.O_RDWR) if held else None
                os.unlink(full(p))
                if fd is not None:
                    os.write(fd, b"written after unlink\n")  # an orphan with data at a crash
                    time.sleep(rng.random() * 0.02)
                    os.close(fd)
                del files[p]
                log(ack=op_id)
            else:
                p = rng.choice(names)  # read back and compare (the workload is also a reader)
                with open(full(p), "rb") as f:
                    got = f.read()
                if got != files[p]:
                    log(error=f"read-back mismatch on {p}: {len(got)} bytes, want {len(files[p])}")
                    return 3
    except OSError as e:
        alive = _alive(mnt)
        if not alive:
            # the kernel fails calls in flight when the server dies: ENOTCONN, ECONNABORTED, and EIO for
            # some (the harness counts each errno; only errors while the mount is alive are failures)
            log(stopped="mount gone", errno=e.errno, errname=errno.errorcode.get(e.errno, "?"))
            return 0
        log(error=f"{type(e).__name__}: {e} (mount alive)", errno=e.errno)
        return 3
    log(stopped="sigterm")
    return 0


def _alive(mnt: str) -> bool:
    try:
        os.statvfs(mnt)
        return True
    except OSError:
        return False


# =====================================================================================================
# the harness
# =====================================================================================================


class Model:
    """What the harness knows each worker's files hold: ``files[path] = bytes`` (acknowledged state)."""

    def __init__(self, worker: int, dirs: list[str]) -> None:
        self.worker = worker
        self.dirs = dirs
        self.files: dict[str, bytes] = {}
        self.counter = 0

    def state(self) -> dict:
        return {
            "files": {p: base64.b64encode(c).decode() for p, c in self.files.items()},
            "dirs": self.dirs,
            "counter": self.counter,
        }


class Stats:
    """Counters of one run (all summed over iterations)."""

    def __init__(self) -> None:
        self.c: dict[str, int] = {}
        self.failures: list[str] = []
        self.restart_s: list[float] = []
        self.catchup_s: list[float] = []

    def inc(self, k: str, n: int = 1) -> None:
        self.c[k] = self.c.get(k, 0) + n

    def fail(self, it: int, msg: str) -> None:
        msg = f"{msg} [kill -9 of the {getattr(self, 'victim', '?')}]"
        self.failures.append(f"iteration {it}: {msg}")
        print(f"  FAIL iteration {it}: {msg}", file=sys.stderr, flush=True)


def _read(mnt: str, p: str) -> bytes | None:
    try:
        with open(os.path.join(mnt, p), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def replay(model: Model, log_path: str, mnt: str, stats: Stats, it: int) -> None:
    """Apply a worker's log to its model; resolve the (at most one) operation in flight against the mount."""
    recs = []
    if not os.path.exists(log_path):
        return  # the worker was stopped before it started
    with open(log_path) as f:
        for line in f:
            if line.strip():
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    pass  # a torn last line cannot happen (one write per line), but never trust it
    pending = None
    fsynced = None
    for r in recs:
        if "i" in r:
            pending, fsynced = r, None
            if "n" in r:
                model.counter = max(model.counter, r["n"])
        elif "fsync" in r:
            fsynced = r
            stats.inc("fsyncs_acknowledged")
        elif "ack" in r:
            op = pending
            assert op is not None and op["i"] == r["ack"]
            _apply(model, op, r, stats, it)
            pending = None
        elif "error" in r:
            stats.fail(it, f"worker {model.worker}: {r['error']}")
        elif r.get("stopped") == "mount gone":
            stats.inc(f"workload_stopped_by_{r.get('errname', r.get('errno'))}")
    if pending is not None:
        _resolve_in_flight(model, pending, fsynced, mnt, stats, it)


def _apply(model: Model, op: dict, ack: dict, stats: Stats, it: int) -> None:
    kind = op["op"]
    if kind == "create":
        model.files[op["path"]] = base64.b64decode(op["data"])
        stats.inc("closes_acknowledged")
    elif kind == "append":
        model.files[op["path"]] = model.files[op["path"]] + base64.b64decode(op["data"])
        stats.inc("closes_acknowledged")
    elif kind == "rename":
        model.files[op["dst"]] = model.files.pop(op["src"])
        stats.inc("renames_acknowledged")
    elif kind == "unlink":
        del model.files[op["path"]]
        stats.inc("unlinks_acknowledged")
    want = ack.get("sha")
    if want is not None:
        path = op.get("dst") or op["path"]
        if sha(model.files[path]) != want:
            stats.fail(it, f"log replay disagrees with the workload's hash for {path}")


def _resolve_in_flight(model: Model, op: dict, fsynced: dict | None, mnt: str, stats: Stats, it: int) -> None:
    """The operation the kill interrupted: check the mount shows one of its allowed outcomes, adopt it."""
    kind = op["op"]
    stats.inc(f"in_flight_{kind}")
    if kind in ("create", "append"):
        p = op["path"]
        old = model.files.get(p, b"") if kind == "append" else b""
        new = old + base64.b64decode(op["data"])
        got = _read(mnt, p)
        if got is None:
            if kind == "append" or fsynced:
                stats.fail(
                    it, f"in-flight {kind} of {p}: file missing" + (" after its fsync" if fsynced else "")
                )
                return
            stats.inc("in_flight_create_absent")
            return
        if fsynced and sha(got) != fsynced["sha"]:
            stats.fail(
                it, f"in-flight {kind} of {p}: {len(got)} bytes after an acknowledged fsync of {len(new)}"
            )
        elif not (got.startswith(old) and new.startswith(got)):
            stats.fail(
                it, f"in-flight {kind} of {p}: {len(got)} bytes are not old content + a prefix of the new"
            )
        else:
            stats.inc(
                f"in_flight_{kind}_"
                + ("complete" if got == new else "partial" if len(got) > len(old) else "not_started")
            )
        model.files[p] = got  # nobody writes it any more: from now on this is its state
    elif kind == "rename":
        src, dst = op["src"], op["dst"]
        gs, gd = _read(mnt, src), _read(mnt, dst)
        if gs is not None and gs == model.files[src] and (gd == model.files.get(dst)):
            stats.inc("in_flight_rename_not_done")
        elif gs is None and gd == model.files[src]:
            model.files[dst] = model.files.pop(src)
            stats.inc("in_flight_rename_done")
        else:
            stats.fail(
                it,
                f"in-flight rename {src} → {dst}: neither state (src {gs is not None}, dst "
                f"{gd is not None})",
            )
    elif kind == "unlink":
        p = op["path"]
        got = _read(mnt, p)
        if got is None:
            del model.files[p]
            stats.inc("in_flight_unlink_done")
        elif got == model.files[p] or (op.get("held") and got == model.files[p] + b"written after unlink\n"):
            model.files[p] = got
            stats.inc("in_flight_unlink_not_done")
        else:
            stats.fail(it, f"in-flight unlink of {p}: content changed")


def verify(models: list[Model], mnt: str, stats: Stats, it: int) -> None:
    """Every modelled file byte for byte; no name visible that the model lacks."""
    want_names: dict[str, set[str]] = {}
    for m in models:
        for d in m.dirs:
            want_names[d] = set()
        for p, content in m.files.items():
            want_names[os.path.dirname(p)].add(os.path.basename(p))
            got = _read(mnt, p)
            stats.inc("files_verified")
            if got is None:
                stats.inc("lost")
                stats.fail(it, f"lost {p} ({len(content)} bytes)")
            elif got != content:
                stats.inc("corrupted")
                stats.fail(
                    it,
                    f"corrupted {p}: {len(got)} bytes, want {len(content)} (sha {sha(got)} vs "
                    f"{sha(content)})",
                )
    for d, names in want_names.items():
        seen = set(os.listdir(os.path.join(mnt, d))) - {G.INDEX_FILE, G.PAGES_DIRNAME}
        if seen != names:
            stats.inc("unexpected_names", len(seen - names))
            stats.fail(it, f"{d}: extra {sorted(seen - names)[:5]}, missing {sorted(names - seen)[:5]}")


def verify_tocs(models: list[Model], mnt: str, stats: Stats, it: int) -> None:
    """Each directory's TOC pages name exactly its visible, non-hidden entries."""
    from libraryfs.daemon.filing import is_hidden
    from libraryfs.index.toc import links

    for m in models:
        for d in m.dirs:
            want = {os.fsencode(os.path.basename(p)) for p in m.files if os.path.dirname(p) == d}
            want = {n for n in want if not is_hidden(n)}
            base = os.path.join(mnt, d)
            pages = [open(os.path.join(base, G.INDEX_FILE), "rb").read()]
            idx = os.path.join(base, G.PAGES_DIRNAME)
            if os.path.isdir(idx):
                pages += [open(os.path.join(idx, n), "rb").read() for n in sorted(os.listdir(idx))]
            got = set()
            for page in pages:
                for target in links(page):
                    if (
                        target.startswith(G.PAGES_DIR + b"/")
                        or G.page_number(target)
                        or target.endswith(G.INDEX_NAME)
                    ):
                        continue
                    got.add(target.removeprefix(b"../"))
            stats.inc("tocs_verified")
            if got != want:
                stats.inc("toc_mismatch")
                stats.fail(
                    it, f"TOC of {d}: extra {sorted(got - want)[:3]}, missing {sorted(want - got)[:3]}"
                )


def store_check(libdir: str) -> list:
    """Problems ``libraryfs check`` finds (read-only, no repair) — the same function the CLI runs."""
    from libraryfs.fs.check import check
    from libraryfs.fs.store import Store

    st = Store(libdir)
    try:
        return check(st).problems
    finally:
        st.close()


def wait_indexed(libdir: str, timeout_s: float = 60.0) -> float:
    """Seconds until the indexer consumed the journal and is idle; raises TimeoutError."""
    from libraryfs.layout import wait_until_idle

    return wait_until_idle(libdir, timeout_s)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kill9(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    from libraryfs.layout import pid_alive

    while pid_alive(pid) and time.monotonic() < deadline:  # reaping as it goes: not layout.wait_exit
        _reap()
        time.sleep(0.005)


def _restart_mount(launcher, libdir: str, mnt: str, stats: Stats, it: int, attempts: int = 30) -> int:
    """Start the mount server again; returns its pid. A refused start is counted, retried every 2 s."""
    for k in range(attempts):
        try:
            return launcher.start(libdir, mnt, indexer=False, llm=False)["server_pid"]
        except FileExistsError:
            # an older launcher.preflight called os.makedirs before probing for the stale mount, and
            # os.path.exists() is False on ENOTCONN (fixed; tests/test_hostile.py covers it)
            stats.inc("launcher_stale_mount_errors")
            with contextlib.suppress(Exception):
                launcher.clear_stale(mnt)
        except Exception as e:  # e.g. the server exiting on a core module caught mid-edit
            stats.inc("restart_refused")
            stats.fail(it, f"restart {k + 1} refused: {type(e).__name__}: {str(e)[:160]}")
            time.sleep(2)
    raise RuntimeError("the mount server could not be restarted")


def run(args: argparse.Namespace) -> dict:
    """The fault-injection loop; returns the JSON result."""
    from libraryfs.daemon import launcher
    from libraryfs.fs.store import Store
    from libraryfs.layout import pid_alive

    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="lfs-crash-", dir=args.tmp)
    libdir, mnt = os.path.join(work, "lib"), os.path.join(work, "mnt")
    Store.create(libdir, {"toc_max_tokens": 2000}).close()
    os.makedirs(mnt)
    info = launcher.start(libdir, mnt, indexer=False, llm=False)
    server = info["server_pid"]
    indexer = launcher.start_indexer(libdir, mnt, llm=False)
    models = []
    for w in range(args.workers):
        dirs = [f"w{w}-a", f"w{w}-b"]
        for d in dirs:
            os.mkdir(os.path.join(mnt, d))
        models.append(Model(w, dirs))
    stats = Stats()
    t_start = time.monotonic()
    try:
        for it in range(1, args.iterations + 1):
            procs = []
            logs = []
            for m in models:
                sp = os.path.join(work, f"state{m.worker}.json")
                lp = os.path.join(work, f"log{m.worker}.jsonl")
                with open(sp, "w") as f:
                    json.dump(m.state(), f)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lp)
                logs.append(lp)
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            os.path.abspath(__file__),
                            "--workload",
                            mnt,
                            sp,
                            lp,
                            str(m.worker),
                            str(rng.randrange(1 << 30)),
                        ]
                    )
                )
            time.sleep(rng.uniform(args.min_delay_s, args.max_delay_s))
            victim = "mount" if rng.random() < args.mount_share else "indexer"
            stats.inc(f"kills_{victim}")
            stats.victim = victim
            _kill9(server if victim == "mount" else indexer)
            if victim == "indexer":
                for p in procs:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    rc = p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    rc = p.wait()
                    stats.fail(it, "workload hung after the kill")
                if rc not in (0, -signal.SIGTERM):
                    stats.inc("workload_errors")
            # the store as the crash left it, before anything repairs it
            problems = store_check(libdir)
            orphans = [p for p in problems if p.code == "I4" and "orphaned inode (nlink 0" in p.message]
            stats.inc("post_crash_orphans", len(orphans))
            other = [p for p in problems if p not in orphans]
            if other:
                stats.inc("post_crash_check_failed")
                stats.fail(
                    it, "check right after the kill: " + "; ".join(f"{p.code} {p.message}" for p in other)
                )
            # restart what was killed
            t0 = time.monotonic()
            if victim == "mount":
                server = _restart_mount(launcher, libdir, mnt, stats, it)
            if not pid_alive(indexer):
                indexer = launcher.start_indexer(libdir, mnt, llm=False)
            stats.restart_s.append(time.monotonic() - t0)
            for m, lp in zip(models, logs, strict=False):
                replay(m, lp, mnt, stats, it)
            verify(models, mnt, stats, it)
            try:
                stats.catchup_s.append(wait_indexed(libdir))
                time.sleep(0.3)  # the mount's invalidator drops cached TOC attributes
                verify_tocs(models, mnt, stats, it)
            except TimeoutError:
                stats.inc("toc_rebuild_timeouts")
                stats.fail(it, "indexer did not catch up within 60 s")
            problems = store_check(libdir)
            if problems:
                stats.inc("check_failed")
                stats.fail(
                    it, "check after restart: " + "; ".join(f"{p.code} {p.message}" for p in problems[:5])
                )
            if it % args.cli_check_every == 0 or it == args.iterations:
                r = subprocess.run(
                    [sys.executable, "-m", "libraryfs.cli.main", "check", libdir],
                    capture_output=True,
                    text=True,
                )
                stats.inc("cli_checks")
                if r.returncode != 0:
                    stats.inc("cli_check_failed")
                    stats.fail(it, f"`libraryfs check` exit {r.returncode}: {r.stdout[-300:]}")
            _reap()
            if it % 50 == 0 and args.partial_out:
                with open(args.partial_out, "w") as f:  # interim figures, in case the run is cut short
                    json.dump(
                        {
                            "iterations_done": it,
                            "counts": dict(sorted(stats.c.items())),
                            "failures": stats.failures[:200],
                        },
                        f,
                        indent=2,
                    )
            if it % 10 == 0 or it == args.iterations:
                n = sum(len(m.files) for m in models)
                print(
                    f"[{it}/{args.iterations}] {time.monotonic() - t_start:.0f} s, {n} files, "
                    f"{stats.c.get('closes_acknowledged', 0)} closes acked, failures {len(stats.failures)}",
                    flush=True,
                )
    finally:
        with contextlib.suppress(Exception):
            launcher.stop(mnt)
        for pid in (indexer, server):
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        _reap()
    out = {
        "iterations": args.iterations,
        "workers": args.workers,
        "seed": args.seed,
        "delay_s": [args.min_delay_s, args.max_delay_s],
        "seconds": round(time.monotonic() - t_start, 1),
        "counts": dict(sorted(stats.c.items())),
        "failures": stats.failures[:200],
        "n_failures": len(stats.failures),
        "restart_s": _dist(stats.restart_s),
        "catchup_s": _dist(stats.catchup_s),
        "library_files_at_end": sum(len(m.files) for m in models),
    }
    if not args.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    else:
        out["workdir"] = work
    return out


def _dist(xs: list[float]) -> dict:
    if not xs:
        return {}
    xs = sorted(xs)
    return {
        "median": round(statistics.median(xs), 3),
        "p95": round(xs[min(len(xs) - 1, math.ceil(0.95 * len(xs)) - 1)], 3),  # nearest rank
        "max": round(xs[-1], 3),
    }


def table(res: dict) -> str:
    c = res["counts"]
    rows = [
        ("iterations (kills)", res["iterations"]),
        ("  kill -9 of the mount server", c.get("kills_mount", 0)),
        ("  kill -9 of the indexer", c.get("kills_indexer", 0)),
        ("closes acknowledged (create/append)", c.get("closes_acknowledged", 0)),
        ("fsyncs acknowledged", c.get("fsyncs_acknowledged", 0)),
        (
            "renames / unlinks acknowledged",
            f"{c.get('renames_acknowledged', 0)} / {c.get('unlinks_acknowledged', 0)}",
        ),
        ("file verifications (byte for byte)", c.get("files_verified", 0)),
        ("lost closed files", c.get("lost", 0)),
        ("corrupted closed files", c.get("corrupted", 0)),
        ("names visible but not in the model", c.get("unexpected_names", 0)),
        (
            "ops in flight at the kill",
            sum(
                v
                for k, v in c.items()
                if k in ("in_flight_create", "in_flight_append", "in_flight_rename", "in_flight_unlink")
            ),
        ),
        (
            "  create: absent / partial / complete",
            f"{c.get('in_flight_create_absent', 0)} / "
            f"{c.get('in_flight_create_partial', 0) + c.get('in_flight_create_not_started', 0)} / "
            f"{c.get('in_flight_create_complete', 0)}",
        ),
        (
            "  append: none / partial / complete",
            f"{c.get('in_flight_append_not_started', 0)} / "
            f"{c.get('in_flight_append_partial', 0)} / {c.get('in_flight_append_complete', 0)}",
        ),
        (
            "  rename: before / after",
            f"{c.get('in_flight_rename_not_done', 0)} / {c.get('in_flight_rename_done', 0)}",
        ),
        (
            "  unlink: before / after",
            f"{c.get('in_flight_unlink_not_done', 0)} / {c.get('in_flight_unlink_done', 0)}",
        ),
        ("check right after the kill: failed", c.get("post_crash_check_failed", 0)),
        ("  orphans of open+unlinked files (expected)", c.get("post_crash_orphans", 0)),
        ("check after restart: failed", c.get("check_failed", 0)),
        ("`libraryfs check` CLI runs / failed", f"{c.get('cli_checks', 0)} / {c.get('cli_check_failed', 0)}"),
        ("TOCs verified / mismatched", f"{c.get('tocs_verified', 0)} / {c.get('toc_mismatch', 0)}"),
        ("TOC rebuild timeouts", c.get("toc_rebuild_timeouts", 0)),
        ("workload errors", c.get("workload_errors", 0)),
        ("restarts refused by launcher.start (stale mount bug)", c.get("launcher_stale_mount_errors", 0)),
        (
            "restart s (median / p95 / max)",
            "{median} / {p95} / {max}".format(**res["restart_s"]) if res["restart_s"] else "-",
        ),
        (
            "indexer catch-up s (median / p95 / max)",
            "{median} / {p95} / {max}".format(**res["catchup_s"]) if res["catchup_s"] else "-",
        ),
        ("all failures", res["n_failures"]),
        ("wall time s", res["seconds"]),
    ]
    w = max(len(r[0]) for r in rows)
    return "\n".join(f"| {k:<{w}} | {v!s:>20} |" for k, v in rows)


# =====================================================================================================
# the cost of the sync settings
# =====================================================================================================


def _create_write_us(directory: str, label: str, data: bytes, n: int, do_sync: bool) -> float:
    """Mean µs of ``n`` × (create ``<label>-<i>`` in ``directory``, write ``data``, fsync if ``do_sync``,
    close), wall clock."""
    t0 = time.perf_counter()
    for i in range(n):
        fd = os.open(os.path.join(directory, f"{label}-{i}"), os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, data)
        if do_sync:
            os.fsync(fd)
        os.close(fd)
    return (time.perf_counter() - t0) / n * 1e6


def sync_cost(args: argparse.Namespace) -> dict:
    """Measure commit cost of the LMDB backend with and without sync (a 4 KiB put per write transaction),
    and of close vs fsync through a real mount."""
    from libraryfs.daemon import launcher
    from libraryfs.fs import schema as S
    from libraryfs.fs.lmdb_backend import LmdbBackend
    from libraryfs.fs.store import Store

    n = args.sync_ops
    out: dict[str, float] = {}
    work = tempfile.mkdtemp(prefix="lfs-sync-", dir=args.tmp)
    tdir: str | None = None  # the local-disk comparison directory
    try:
        for label, kw in (
            ("nosync", dict(sync=False, metasync=False)),
            ("metasync_off", dict(sync=True, metasync=False)),
            ("sync", dict(sync=True, metasync=True)),
        ):
            backend = LmdbBackend.create(os.path.join(work, label), **kw)
            val = os.urandom(4096)
            t0 = time.perf_counter()
            for i in range(n):
                backend.run_write(lambda t, i=i, val=val: t.put(S.DB_DATA, b"%08d" % i, val))
            out[f"lmdb_commit_4k_{label}_us"] = (time.perf_counter() - t0) / n * 1e6
            t0 = time.perf_counter()
            for i in range(n):
                backend.run_write(lambda t, i=i, val=val: t.put(S.DB_DATA, b"%08d" % i, val))
                if label == "nosync":
                    backend.sync()
            if label == "nosync":
                out["lmdb_commit_4k_nosync_plus_env_sync_us"] = (time.perf_counter() - t0) / n * 1e6
            backend.close()
        libdir, mnt = os.path.join(work, "lib"), os.path.join(work, "mnt")
        Store.create(libdir).close()
        os.makedirs(mnt)
        launcher.start(libdir, mnt, indexer=False)
        try:
            data = os.urandom(4096)
            tdir = tempfile.mkdtemp(dir=args.tmp)  # removed below
            for where, directory in (("mount", mnt), ("local_disk", tdir)):
                for label, do_sync in (("close", False), ("fsync_close", True)):
                    us = _create_write_us(directory, label, data, n, do_sync)
                    out[f"{where}_create_write4k_{label}_us"] = us
        finally:
            launcher.stop(mnt)
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
        if tdir is not None:
            shutil.rmtree(tdir, ignore_errors=True)
    return {k: round(v, 1) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--workload", nargs=5, metavar=("MNT", "STATE", "LOG", "WORKER", "SEED"), help=argparse.SUPPRESS
    )
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mount-share", type=float, default=0.5, help="fraction of kills aimed at the mount")
    ap.add_argument("--min-delay-s", type=float, default=0.05)
    ap.add_argument("--max-delay-s", type=float, default=1.0)
    ap.add_argument("--cli-check-every", type=int, default=25)
    ap.add_argument("--tmp", default=None, help="where the library and mountpoint are created")
    ap.add_argument("--keep", action="store_true", help="keep the library for inspection")
    ap.add_argument("--sync-cost", action="store_true", help="measure the sync settings instead")
    ap.add_argument("--sync-ops", type=int, default=2000)
    ap.add_argument("--out", default=None)
    ap.add_argument("--partial-out", default=os.path.join(RESULTS, "crash_run.partial.json"))
    a = ap.parse_args(argv)
    if a.workload:
        mnt, state, log, worker, seed = a.workload
        return workload(mnt, state, log, int(worker), int(seed))
    os.makedirs(RESULTS, exist_ok=True)
    if a.sync_cost:
        res = sync_cost(a)
        for k, v in res.items():
            print(f"| {k:<45} | {v:>10} µs |")
        with open(a.out or os.path.join(RESULTS, "sync_cost.json"), "w") as f:
            json.dump(res, f, indent=2)
        return 0
    res = run(a)
    print(table(res))
    for fl in res["failures"][:20]:
        print("  ", fl)
    with open(a.out or os.path.join(RESULTS, "crash_run.json"), "w") as f:
        json.dump(res, f, indent=2)
    return 0 if res["n_failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
