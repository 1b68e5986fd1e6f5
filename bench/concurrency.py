"""Concurrency (issue 6 item 3): 8 processes for 60 s create, append (O_APPEND, many writers, one file),
rename, read and delete through one mount while the indexer runs; then many concurrent and killed LMDB
readers (no MDB_READERS_FULL).

Run: ``python bench/concurrency.py [--procs 8] [--duration-s 60] [--reader-rounds 12] [--readers 100]``

Phase 1 — every worker logs what the mount acknowledged: each ``write(2)`` of one record to the shared
O_APPEND file ``shared/log.txt`` (a line ``<worker> <seq> <payload> <crc32>``), and the content of each of its
own files at close. Afterwards: every acknowledged record is in the shared file exactly once and intact, no
other bytes are there, every worker's files hold exactly what it last wrote, no name is left that a worker
deleted, the indexer catches up, ``check`` is clean.

Phase 2 — ``--reader-rounds`` rounds of ``--readers`` processes that each open the store (as ``libraryfs
status`` does) and hold a read transaction, all at once; the mount serves stats and reads meanwhile; then all
of them are killed with SIGKILL. More readers are killed in total than LMDB has reader slots (1,024), so a
slot leak would surface as MDB_READERS_FULL.

Prints a table and writes ``bench/results/concurrency.json``.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import zlib

from libraryfs.fs import generated as G

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def record(wid: int, seq: int, rng: random.Random) -> bytes:
    """One shared-log line (≤ ~600 bytes: a single FUSE write)."""
    payload = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 500)))
    body = f"{wid:02d} {seq:08d} {payload}"
    return f"{body} {zlib.crc32(body.encode()):08x}\n".encode()


def worker(mnt: str, wid: int, duration_s: float, out_path: str, seed: int) -> int:
    """One worker process; writes its acknowledgements as JSON to ``out_path``."""
    rng = random.Random(seed)
    shared = os.path.join(mnt, "shared", "log.txt")
    own_dirs = [os.path.join(mnt, f"w{wid}"), os.path.join(mnt, "mix")]
    files: dict[str, bytes] = {}
    acked: list[int] = []
    counts: dict[str, int] = {}
    errors: list[str] = []
    seq = n = 0
    deadline = time.monotonic() + duration_s

    def bump(k: str) -> None:
        counts[k] = counts.get(k, 0) + 1

    while time.monotonic() < deadline:
        r = rng.random()
        try:
            if r < 0.40:
                seq += 1
                rec = record(wid, seq, rng)
                fd = os.open(shared, os.O_WRONLY | os.O_APPEND)
                try:
                    if os.write(fd, rec) != len(rec):
                        errors.append(f"short append {seq}")
                finally:
                    os.close(fd)
                acked.append(seq)
                bump("appends")
            elif r < 0.58 or len(files) < 3:
                n += 1
                p = os.path.join(rng.choice(own_dirs), f"w{wid}-{n:06d}.md")
                data = (f"# worker {wid} file {n}\n" + "x" * rng.randint(0, 20000)).encode()
                with open(p, "xb") as f:
                    f.write(data)
                files[p] = data
                bump("creates")
            elif r < 0.68:
                src = rng.choice(sorted(files))
                n += 1
                dst = os.path.join(rng.choice(own_dirs), f"w{wid}-{n:06d}.md")
                os.rename(src, dst)
                files[dst] = files.pop(src)
                bump("renames")
            elif r < 0.76:
                p = rng.choice(sorted(files))
                os.unlink(p)
                del files[p]
                bump("deletes")
            elif r < 0.80:
                p = rng.choice(sorted(files))
                with open(p, "ab") as f:
                    f.write(b"more\n")
                files[p] += b"more\n"
                bump("own_appends")
            else:
                d = rng.choice([os.path.join(mnt, f"w{rng.randrange(8)}"), os.path.join(mnt, "mix")])
                try:
                    names = [x for x in os.listdir(d) if x != G.PAGES_DIRNAME]  # a TOC page directory
                    if names:
                        with open(os.path.join(d, rng.choice(names)), "rb") as f:
                            f.read()
                except FileNotFoundError:
                    pass  # another worker renamed or deleted it meanwhile: fine
                p = rng.choice(sorted(files))
                with open(p, "rb") as f:
                    if f.read() != files[p]:
                        errors.append(f"read-back mismatch {p}")
                bump("reads")
        except OSError as e:
            errors.append(f"{type(e).__name__} {errno.errorcode.get(e.errno, e.errno)}: {e}")
            if len(errors) > 50:
                break
    with open(out_path, "w") as f:
        json.dump(
            {
                "wid": wid,
                "acked": acked,
                "counts": counts,
                "errors": errors,
                "files": {p: hashlib.sha256(c).hexdigest() for p, c in files.items()},
            },
            f,
        )
    return 0


def verify_shared(path: str, results: list[dict]) -> dict:
    """Every acknowledged record exactly once and intact; nothing else in the file."""
    data = open(path, "rb").read()
    lines = data.split(b"\n")
    tail = lines.pop()  # after the last newline: must be empty
    seen: dict[tuple[int, int], int] = {}
    torn = 0
    for ln in lines:
        try:
            body, crc = ln.rsplit(b" ", 1)
            ok = zlib.crc32(body) == int(crc, 16)
            wid, seq = int(body[:2]), int(body[3:11])
        except ValueError:
            ok = False
        if not ok:
            torn += 1
            continue
        seen[(wid, seq)] = seen.get((wid, seq), 0) + 1
    want = {(r["wid"], s) for r in results for s in r["acked"]}
    return {
        "bytes": len(data),
        "records": len(lines),
        "acknowledged": len(want),
        "missing": len(want - set(seen)),
        "duplicated": sum(1 for v in seen.values() if v > 1),
        "unacknowledged": len(set(seen) - want),
        "torn": torn + (1 if tail else 0),
    }


def readers_phase(libdir: str, mnt: str, rounds: int, per_round: int) -> dict:
    """Rounds of concurrent store readers, each round killed with SIGKILL; the mount serves meanwhile."""
    from libraryfs.fs import schema as S
    from libraryfs.fs.store import Store

    ok = full = other = mount_errors = 0
    samples = [os.path.join(mnt, "shared", "log.txt")]
    for d in ("mix", "w0", "w1"):
        samples += [
            os.path.join(mnt, d, x) for x in os.listdir(os.path.join(mnt, d))[:6] if x != G.PAGES_DIRNAME
        ]
    t0 = time.monotonic()
    for rnd in range(rounds):
        kids = []
        for _ in range(per_round):
            rfd, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:  # child: open the store like any CLI reader, hold a read transaction, wait
                os.close(rfd)
                try:
                    st = Store(libdir, readonly=True)
                    with st.read() as t:
                        t.count(S.DB_INODES)
                        os.write(wfd, b"1")
                        time.sleep(3600)
                except BaseException as e:  # noqa: BLE001 — report anything to the parent
                    os.write(wfd, b"F" if "READERS_FULL" in str(e) or "MDB_READERS_FULL" in repr(e) else b"E")
                    os.write(wfd, str(e).encode()[:200])
                os._exit(0)
            os.close(wfd)
            kids.append((pid, rfd))
        for _pid, rfd in kids:
            msg = os.read(rfd, 256)
            os.close(rfd)
            if msg[:1] == b"1":
                ok += 1
            elif msg[:1] == b"F":
                full += 1
            else:
                other += 1
                print("reader failed:", msg[1:].decode(errors="replace"), file=sys.stderr)
        for p in samples:  # the mount keeps serving with every reader slot of the round taken
            try:
                os.stat(p)
                with open(p, "rb") as f:
                    f.read(4096)
            except FileNotFoundError:
                pass
            except OSError as e:
                mount_errors += 1
                print("mount error during readers:", e, file=sys.stderr)
        with open(os.path.join(mnt, "mix", f"reader-round-{rnd}.md"), "w") as f:
            f.write(f"# round {rnd}\n")  # the indexer has to read the store too
        for pid, _ in kids:
            os.kill(pid, signal.SIGKILL)
        for pid, _ in kids:
            os.waitpid(pid, 0)
    return {
        "rounds": rounds,
        "readers_per_round": per_round,
        "killed": rounds * per_round,
        "ok": ok,
        "readers_full": full,
        "other_errors": other,
        "mount_errors": mount_errors,
        "seconds": round(time.monotonic() - t0, 1),
    }


def run(a: argparse.Namespace) -> dict:
    from libraryfs.daemon import launcher
    from libraryfs.fs.check import check
    from libraryfs.fs.store import Store

    work = tempfile.mkdtemp(prefix="lfs-conc-", dir=a.tmp)
    libdir, mnt = os.path.join(work, "lib"), os.path.join(work, "mnt")
    Store.create(libdir).close()
    os.makedirs(mnt)
    launcher.start(libdir, mnt, llm=False)
    out: dict = {"procs": a.procs, "duration_s": a.duration_s}
    try:
        for d in ["shared", "mix"] + [f"w{i}" for i in range(a.procs)]:
            os.mkdir(os.path.join(mnt, d))
        open(os.path.join(mnt, "shared", "log.txt"), "wb").close()
        procs = []
        t0 = time.monotonic()
        for i in range(a.procs):
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        os.path.abspath(__file__),
                        "--worker",
                        mnt,
                        str(i),
                        str(a.duration_s),
                        os.path.join(work, f"w{i}.json"),
                        str(a.seed * 100 + i),
                    ]
                )
            )
        for p in procs:
            p.wait()
        out["phase1_s"] = round(time.monotonic() - t0, 1)
        results = [json.load(open(os.path.join(work, f"w{i}.json"))) for i in range(a.procs)]
        counts: dict[str, int] = {}
        for r in results:
            for k, v in r["counts"].items():
                counts[k] = counts.get(k, 0) + v
        out["ops"] = counts
        out["ops_per_s"] = round(sum(counts.values()) / a.duration_s, 1)
        out["worker_errors"] = [e for r in results for e in r["errors"]][:50]
        out["shared_append"] = verify_shared(os.path.join(mnt, "shared", "log.txt"), results)
        lost = corrupt = extra = 0
        want_names = {}
        for r in results:
            for p, h in r["files"].items():
                want_names.setdefault(os.path.dirname(p), set()).add(os.path.basename(p))
                try:
                    got = hashlib.sha256(open(p, "rb").read()).hexdigest()
                    corrupt += got != h
                except FileNotFoundError:
                    lost += 1
        for d in ["mix"] + [f"w{i}" for i in range(a.procs)]:
            full = os.path.join(mnt, d)
            names = {x for x in os.listdir(full) if x not in (G.INDEX_FILE, G.PAGES_DIRNAME)}
            extra += len(names - want_names.get(full, set()))
        out["own_files"] = {
            "files": sum(len(r["files"]) for r in results),
            "lost": lost,
            "corrupted": corrupt,
            "deleted_but_present": extra,
        }
        t1 = time.monotonic()
        _wait_indexed(libdir)
        out["indexer_catchup_s"] = round(time.monotonic() - t1, 2)
        st = Store(libdir, readonly=True)
        try:
            out["check_problems_phase1"] = [f"{p.code} {p.message}" for p in check(st).problems]
        finally:
            st.close()
        out["readers"] = readers_phase(libdir, mnt, a.reader_rounds, a.readers)
        _wait_indexed(libdir)
    finally:
        launcher.stop(mnt)
    r = subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", "check", libdir], capture_output=True, text=True
    )
    out["cli_check"] = {"rc": r.returncode, "out": r.stdout.strip().splitlines()[-1:]}
    if not a.keep:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return out


def _wait_indexed(libdir: str, timeout_s: float = 120) -> None:
    """Until the indexer has consumed the journal and is idle (:func:`libraryfs.layout.wait_until_idle`)."""
    from libraryfs.layout import wait_until_idle

    wait_until_idle(libdir, timeout_s)


def table(o: dict) -> str:
    s, f, rd = o["shared_append"], o["own_files"], o["readers"]
    rows = [
        ("processes × seconds", f"{o['procs']} × {o['duration_s']}"),
        ("operations (all workers)", f"{sum(o['ops'].values()):,} ({o['ops_per_s']}/s)"),
        ("  appends to the one O_APPEND file", f"{o['ops'].get('appends', 0):,}"),
        (
            "  creates / renames / deletes / reads",
            "{creates} / {renames} / {deletes} / {reads}".format(
                **{k: o["ops"].get(k, 0) for k in ("creates", "renames", "deletes", "reads")}
            ),
        ),
        ("shared file: acknowledged records", f"{s['acknowledged']:,}"),
        (
            "  missing / duplicated / torn / unacked",
            f"{s['missing']} / {s['duplicated']} / {s['torn']} / " f"{s['unacknowledged']}",
        ),
        ("own files: checked / lost / corrupted", f"{f['files']} / {f['lost']} / {f['corrupted']}"),
        ("  deleted names still present", f["deleted_but_present"]),
        ("worker errors", len(o["worker_errors"])),
        ("indexer catch-up after the run (s)", o["indexer_catchup_s"]),
        ("check problems (mounted, after phase 1)", len(o["check_problems_phase1"])),
        ("`libraryfs check` after unmount (exit)", o["cli_check"]["rc"]),
        ("readers: rounds × concurrent", f"{rd['rounds']} × {rd['readers_per_round']}"),
        ("  killed with SIGKILL (> 1,024 slots)", rd["killed"]),
        ("  opened OK / READERS_FULL / other", f"{rd['ok']} / {rd['readers_full']} / {rd['other_errors']}"),
        ("  mount errors while readers held slots", rd["mount_errors"]),
    ]
    w = max(len(r[0]) for r in rows)
    return "\n".join(f"| {k:<{w}} | {v!s:>24} |" for k, v in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--duration-s", type=float, default=60.0)
    ap.add_argument("--reader-rounds", type=int, default=12)
    ap.add_argument("--readers", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if a.worker:
        mnt, wid, dur, outp, seed = a.worker
        return worker(mnt, int(wid), float(dur), outp, int(seed))
    o = run(a)
    print(table(o))
    for e in o["worker_errors"][:10]:
        print("  worker error:", e)
    os.makedirs(RESULTS, exist_ok=True)
    with open(a.out or os.path.join(RESULTS, "concurrency.json"), "w") as f:
        json.dump(o, f, indent=2)
    s, f_, rd = o["shared_append"], o["own_files"], o["readers"]
    bad = (
        s["missing"]
        + s["duplicated"]
        + s["torn"]
        + s["unacknowledged"]
        + f_["lost"]
        + f_["corrupted"]
        + f_["deleted_but_present"]
        + len(o["worker_errors"])
        + len(o["check_problems_phase1"])
        + o["cli_check"]["rc"]
        + rd["readers_full"]
        + rd["other_errors"]
        + rd["mount_errors"]
    )
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
