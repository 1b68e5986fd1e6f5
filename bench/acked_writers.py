"""Writers whose every acknowledged change is recorded, and the check that each one is there afterwards.

A writer process (``python bench/acked_writers.py MOUNTPOINT WRITER_ID LEDGER [--ops N | --duration-s S |
--until-file PATH]``; ``--until-file``: until PATH exists, for tests that end the writers on a condition)
creates, rewrites, renames and unlinks its own files in the shared directories ``d0`` … ``d{dirs-1}`` of a
mount (every writer uses the same directories, so their directory-entry changes conflict in the store; the
names are the writer's own, so the final state of each name is known). A change is *acknowledged* when every
call returned: ``open``/``write``/``fsync``/``close`` for a write (content up to ``--max-bytes``, sometimes
over one 64 KiB chunk), ``rename``, ``unlink``. The ledger (JSON) maps each path to the SHA-256 of its
acknowledged content, or null once it was unlinked or renamed away; ``errors`` lists every call that failed
(a path whose change failed is left out: its state is unknown). :func:`verify` reads every ledger path
through each given mount. Used by ``tests/integration/test_etcd_multimount.py`` and
``bench/etcd_multimount.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def run_writer(
    mount: str,
    wid: str,
    *,
    ops: int | None,
    duration_s: float | None,
    dirs: int,
    max_bytes: int,
    seed: int,
    until_file: str | None = None,
) -> dict:
    """Run one writer (module doc) for ``ops`` changes, ``duration_s`` seconds or until ``until_file`` exists
    (checked before each change); returns its ledger
    ``{"writer", "ops", "acked", "errors": [..], "paths": {path: sha256 hex | None}, "latency_s": [...]}``
    (paths relative to the mount)."""
    rnd = random.Random(seed)
    paths: dict[str, str | None] = {}
    live: list[str] = []
    errors: list[str] = []
    latency: list[float] = []
    end = time.monotonic() + duration_s if duration_s is not None else None
    n = acked = 0
    while (
        (ops is None or n < ops)
        and (end is None or time.monotonic() < end)
        and (until_file is None or not os.path.exists(until_file))
    ):
        n += 1
        roll = rnd.random()
        t0 = time.monotonic()
        try:
            if not live or roll < 0.55:  # a new file
                rel = f"d{rnd.randrange(dirs)}/{wid}-{n:06d}.txt"
                data = _content(rnd, wid, n, max_bytes)
                _write(os.path.join(mount, rel), data)
                paths[rel] = hashlib.sha256(data).hexdigest()
                live.append(rel)
            elif roll < 0.80:  # rewrite one of ours (another size)
                rel = rnd.choice(live)
                data = _content(rnd, wid, n, max_bytes)
                _write(os.path.join(mount, rel), data)
                paths[rel] = hashlib.sha256(data).hexdigest()
            elif roll < 0.90:  # rename one of ours, maybe into another directory
                rel = live.pop(rnd.randrange(len(live)))
                new = f"d{rnd.randrange(dirs)}/{wid}-{n:06d}-r.txt"
                os.rename(os.path.join(mount, rel), os.path.join(mount, new))
                paths[new], paths[rel] = paths[rel], None
                live.append(new)
            else:  # unlink one of ours
                rel = live.pop(rnd.randrange(len(live)))
                os.unlink(os.path.join(mount, rel))
                paths[rel] = None
        except OSError as e:
            errors.append(f"op {n}: {e!r}")
            paths.pop(rel, None)  # its state is unknown now
            if rel in live:
                live.remove(rel)
            continue
        latency.append(time.monotonic() - t0)
        acked += 1
    return {"writer": wid, "ops": n, "acked": acked, "errors": errors, "paths": paths, "latency_s": latency}


def _content(rnd: random.Random, wid: str, n: int, max_bytes: int) -> bytes:
    """Bytes unique to (writer, op): mostly small, one write in 10 over a 64 KiB chunk."""
    size = rnd.randint(1, min(max_bytes, 150_000)) if rnd.random() < 0.1 else rnd.randint(1, 4096)
    head = f"{wid}:{n}:".encode()
    return (head + rnd.randbytes(size))[:size] if size > len(head) else head


def verify(mounts: list[str], ledgers: list[dict]) -> dict:
    """Read every ledger path through every mount: ``{"checked", "present", "absent", "wrong": [..]}``
    (``wrong``: ``"mount path: why"`` for content that differs, a file missing or one that should be gone)."""
    wrong: list[str] = []
    present = absent = 0
    for led in ledgers:
        for rel, sha in led["paths"].items():
            for m in mounts:
                p = os.path.join(m, rel)
                try:
                    with open(p, "rb") as f:
                        got = hashlib.sha256(f.read()).hexdigest()
                except FileNotFoundError:
                    got = None
                except OSError as e:
                    wrong.append(f"{m} {rel}: {e!r}")
                    continue
                if got != sha:
                    what = (
                        "missing" if got is None else "present after unlink" if sha is None else "wrong bytes"
                    )
                    wrong.append(f"{m} {rel}: {what}")
                elif sha is None:
                    absent += 1
                else:
                    present += 1
    return {"checked": present + absent + len(wrong), "present": present, "absent": absent, "wrong": wrong}


def main(argv: list[str] | None = None) -> int:
    """The writer process: run it and write its ledger (module doc). Exit status 0 (errors are in the
    ledger)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mount")
    ap.add_argument("writer")
    ap.add_argument("ledger")
    ap.add_argument("--ops", type=int)
    ap.add_argument("--duration-s", type=float)
    ap.add_argument("--until-file")
    ap.add_argument("--dirs", type=int, default=4)
    ap.add_argument("--max-bytes", type=int, default=150_000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if [a.ops, a.duration_s, a.until_file].count(None) != 2:
        ap.error("give one of --ops, --duration-s and --until-file")
    led = run_writer(
        a.mount,
        a.writer,
        ops=a.ops,
        duration_s=a.duration_s,
        dirs=a.dirs,
        max_bytes=a.max_bytes,
        seed=a.seed,
        until_file=a.until_file,
    )
    with open(a.ledger + ".tmp", "w") as f:
        json.dump(led, f)
    os.replace(a.ledger + ".tmp", a.ledger)
    return 0


if __name__ == "__main__":
    sys.exit(main())
