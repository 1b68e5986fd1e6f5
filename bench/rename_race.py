"""Opens racing rename-overs of one name through a real mount (docs/posix.md C03).

Run: ``python bench/rename_race.py [--runs 3] [--renames 300] [--threads 1]``

Each run, in a fresh library mounted with the real launcher (mount server and indexer):

1. bash writes a temp file and ``mv -f``\\ s it over ``target``, ``--renames`` times, while this process opens
   ``target`` with ``O_WRONLY|O_APPEND``, ``fstat``\\ s and closes it in a loop (an editor's, git's, SQLite's
   pattern beside a reader);
2. the same renames beside a bash loop of ``cat target``.

POSIX rename(2) allows no moment at which ``target`` is missing, so every open and every ``cat`` must
succeed, as on ext4. Prints one line per loop (opens or cats, failures by errno) and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import collections
import errno
import os
import subprocess
import sys
import tempfile

from libraryfs.daemon import launcher
from libraryfs.fs.store import Store

#: bash: N × (write a temp file, ``mv -f`` it over ``target``) in directory $1
RENAMER = 'cd "$1" && for i in $(seq 1 "$2"); do echo "v$i" > "tmp.$i"; mv -f "tmp.$i" target; done'
#: bash: ``cat target`` in directory $1 until ``done`` exists, errors appended to file $2; prints the count
CATTER = (
    'n=0; cd "$1" && while [ ! -e done ]; do n=$((n+1)); cat target > /dev/null 2>> "$2"; done; echo "$n"'
)


def open_loop(d: str, renames: int) -> tuple[int, collections.Counter]:
    """Open ``d/target`` in a loop while bash renames over it ``renames`` times: (opens, failures by errno)."""
    target = os.path.join(d, "target")
    failed: collections.Counter = collections.Counter()
    opens = 0
    sh = subprocess.Popen(["bash", "-c", RENAMER, "_", d, str(renames)])
    while sh.poll() is None:
        opens += 1
        try:
            fd = os.open(target, os.O_WRONLY | os.O_APPEND)
            try:
                os.fstat(fd)
            finally:
                os.close(fd)
        except OSError as e:
            failed[errno.errorcode.get(e.errno, str(e.errno))] += 1
    if sh.returncode != 0:
        raise SystemExit(f"the renaming loop failed ({sh.returncode})")
    return opens, failed


def cat_loop(d: str, renames: int, errors: str) -> tuple[int, collections.Counter]:
    """``cat d/target`` in a bash loop while bash renames over it (``cat``'s errors go to the file
    ``errors``, off the mount): (cats, failures by message)."""
    done = os.path.join(d, "done")
    open(errors, "w").close()
    cat = subprocess.Popen(["bash", "-c", CATTER, "_", d, errors], stdout=subprocess.PIPE, text=True)
    try:
        subprocess.run(["bash", "-c", RENAMER, "_", d, str(renames)], check=True)
    finally:
        open(done, "w").close()
        out, _ = cat.communicate(timeout=120)
    os.unlink(done)
    with open(errors) as f:
        failed = collections.Counter(line.rsplit(": ", 1)[-1].strip() for line in f if line.strip())
    return int(out.strip() or 0), failed


def main(argv: list[str] | None = None) -> int:
    """Run the loops (module doc); 0 when nothing failed, else 1."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--renames", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1, help="FUSE worker threads of the mount")
    args = ap.parse_args(argv)
    bad = 0
    with tempfile.TemporaryDirectory(prefix="rename-race-") as tmp:
        libdir, mnt = os.path.join(tmp, "lib"), os.path.join(tmp, "mnt")
        Store.create(libdir).close()
        launcher.start(libdir, mnt, llm=False, overrides={"mount.threads": args.threads})
        try:
            os.makedirs(os.path.join(mnt, "d"))
            d = os.path.join(mnt, "d")
            with open(os.path.join(d, "target"), "w") as f:
                f.write("v0\n")
            for run in range(1, args.runs + 1):
                opens, failed = open_loop(d, args.renames)
                cats, cat_failed = cat_loop(d, args.renames, os.path.join(tmp, "cat.err"))
                bad += sum(failed.values()) + sum(cat_failed.values())
                print(
                    f"threads {args.threads} run {run}: {args.renames} renames; "
                    f"opens failed {sum(failed.values())} / {opens} {dict(failed) or ''}; "
                    f"cats failed {sum(cat_failed.values())} / {cats} {dict(cat_failed) or ''}",
                    flush=True,
                )
        finally:
            launcher.stop(mnt)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
