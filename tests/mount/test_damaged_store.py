"""Damaged stores (issue 14): a truncated data.mdb and overwritten pages of a real library.

Before: ``status``/``check``/``find`` died of SIGBUS (exit 135) on a truncated file, ``check`` aborted on an
LMDB assertion (134) on overwritten pages, and ``mount`` served a damaged store (files gave EIO). Now every
command says "damaged" on one line with exit status 4, ``mount`` refuses, ``check`` reports what it could
read, and ``check --repair`` salvages the readable records into a new store and keeps the old one.
"""

import contextlib
import glob
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys

import pytest
from helpers.mount import require_fuse
from helpers.wait import wait_until

from libraryfs.errors import EXIT_DAMAGED
from libraryfs.layout import VERIFIED_FILE, is_libraryfs_mount, state_dir, wait_until_idle
from libraryfs.words import count

CRASH_CODES = (128 + 6, 128 + 7, 128 + 11, -6, -7, -11)  # SIGABRT, SIGBUS, SIGSEGV (shell / Popen style)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,  # `mcp` serves stdio: end of input ends it
    )


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A library made by ``libraryfs init`` and filled through a real mount: (libdir, {path: bytes})."""
    require_fuse()
    root = tmp_path_factory.mktemp("damaged")
    lib, mnt = str(root / "lib"), str(root / "mnt")
    assert cli("init", lib).returncode == 0
    r = cli("mount", lib, mnt, "--no-llm")
    assert r.returncode == 0, r.stderr
    rng = random.Random(14)
    files = {}
    try:
        for i in range(60):
            rel = f"s{i % 5}/note{i}.md"
            body = f"# Note {i}\n\n".encode() + rng.randbytes(rng.choice([100, 3000, 70_000, 200_000]))
            os.makedirs(os.path.join(mnt, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(mnt, rel), "wb") as f:
                f.write(body)
            files[rel] = body
        wait_until_idle(lib, 60)
    finally:
        r = cli("umount", mnt)
    assert r.returncode == 0, r.stderr
    return lib, files


@pytest.fixture
def copy(made, tmp_path):
    """A fresh copy of the made library (tests damage it)."""
    lib = str(tmp_path / "lib")
    shutil.copytree(made[0], lib)
    return lib


def data_file(lib: str) -> str:
    return os.path.join(lib, "store", "data.mdb")


def sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def says_damaged(r: subprocess.CompletedProcess, what: str) -> None:
    assert r.returncode == EXIT_DAMAGED, (what, r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, (what, r.stderr)
    assert r.stderr.count("\n") == 1 and "damaged" in r.stderr, (what, r.stderr)


def assert_refused_everywhere(lib: str, tmp_path) -> None:
    """status, index, mcp, find, recall and mount (find and recall walk the pages as status does, even where the damage is off
    the few keys it reads): one line, exit 4; check: a report whose first line says damaged."""
    for cmd in (
        ("status", lib),
        ("index", lib),
        ("mcp", lib, "--no-indexer"),
        ("find", lib, "note1"),
        ("recall", "e1", "where", "--library", lib),  # the page walk too: a damaged page could drop units
    ):
        says_damaged(cli(*cmd), cmd[0])
    mnt = str(tmp_path / "mnt-refused")
    says_damaged(cli("mount", lib, mnt, "--no-llm"), "mount")
    assert not is_libraryfs_mount(mnt) and not os.path.exists(mnt)
    r = cli("check", lib)
    assert r.returncode == EXIT_DAMAGED and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    # what it could read: per-table counts, or (the main table's page itself destroyed) that none was reachable
    said = "readable records" in r.stdout or "no table could be reached" in r.stdout
    assert "damaged" in r.stdout.splitlines()[0] and said, r.stdout


def repair_and_read_back(lib: str, files: dict, tmp_path) -> int:
    """check --repair salvages (old store kept byte-exact), the result checks clean, mounts, and every file
    that survived reads back exactly as written. Returns how many files survived."""
    before = sha(data_file(lib))
    r = cli("check", "--repair", lib)
    assert "salvaged" in r.stdout, r.stdout + r.stderr
    got, want = map(int, re.search(r"salvaged (\d+) of (\d+) records?", r.stdout).groups())
    last = r.stdout.splitlines()[-1]  # a lossy salvage never ends on a bare "repaired"
    index_lost = re.search(r"(\d+) of the (\d+) files and directories the term index knew of are lost", last)
    if got < want:
        assert f"{count(want - got, 'record')} could not be salvaged" in last, r.stdout
    elif got == 0:  # the headers promised nothing: the term index says what was there
        assert last.startswith("nothing could be salvaged") and index_lost, r.stdout
    else:
        assert last == "repaired" or index_lost, r.stdout
    # README "Exit status": a salvage that lost anything is 1 (shown whole when it fails: pytest cuts tuples)
    assert r.returncode == (0 if last == "repaired" else 1), r.stdout + r.stderr
    kept = glob.glob(os.path.join(lib, "store.damaged-*"))
    assert len(kept) == 1 and sha(os.path.join(kept[0], "data.mdb")) == before
    assert cli("check", lib).returncode == 0
    mnt = str(tmp_path / "mnt-repaired")
    r = cli("mount", lib, mnt, "--no-indexer")
    assert r.returncode == 0, r.stderr
    survived = 0
    try:
        for rel, body in files.items():
            p = os.path.join(mnt, rel)
            if os.path.exists(p):
                with open(p, "rb") as f:
                    data = f.read()
                # a file whose inode survived but whose chunks were lost reads as a hole, never as garbage
                assert data == body or data.strip(b"\0") == b"" or body.startswith(data.rstrip(b"\0")), rel
                survived += data == body
    finally:
        assert cli("umount", mnt).returncode == 0
    return survived


def test_truncated_store(copy, made, tmp_path):
    size = os.path.getsize(data_file(copy))
    os.truncate(data_file(copy), size * 2 // 3 // 4096 * 4096)
    assert_refused_everywhere(copy, tmp_path)
    repair_and_read_back(copy, made[1], tmp_path)


def test_overwritten_pages(copy, made, tmp_path):
    path = data_file(copy)
    npages = os.path.getsize(path) // 4096
    rng = random.Random(1414)
    with open(path, "r+b") as f:  # a third of the pages after the two meta pages, with random bytes
        for pgno in rng.sample(range(2, npages), npages // 3):
            f.seek(pgno * 4096)
            f.write(rng.randbytes(4096))
    assert_refused_everywhere(copy, tmp_path)
    repair_and_read_back(copy, made[1], tmp_path)


@pytest.mark.parametrize("damage", ["truncated-to-one-page", "empty", "random"])
def test_repair_of_a_total_loss_says_so_and_fails(copy, made, damage):
    """Nothing readable (the meta pages gone): the salvage copies 0 of the 0 records the headers promise, and
    the check that follows repairs the empty result into a consistent store. That is no success: the last
    line says nothing could be salvaged and how many of the files and directories the term index knew of
    are lost; exit status 1 (README); the damaged store is kept byte for byte."""
    from libraryfs.index.termindex import known_inodes
    from libraryfs.layout import term_index_path

    known = len(known_inodes(term_index_path(copy)))
    assert known > len(made[1]), known  # every file, and its directories
    path = data_file(copy)
    if damage == "truncated-to-one-page":
        os.truncate(path, 4096)
    else:
        size = os.path.getsize(path)
        with open(path, "wb") as f:
            f.write(b"" if damage == "empty" else random.Random(3).randbytes(size))
    before = sha(path)
    r = cli("check", "--repair", copy)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    last = r.stdout.splitlines()[-1]
    assert last.startswith("nothing could be salvaged"), r.stdout
    assert f"{known} of the {known} files and directories the term index knew of are lost" in last, last
    kept = glob.glob(os.path.join(copy, "store.damaged-*"))
    assert len(kept) == 1 and sha(os.path.join(kept[0], "data.mdb")) == before
    r = cli(
        "check", "--repair", copy, "--json"
    )  # nothing left to salvage: clean (what is left is consistent)
    assert r.returncode == 0, r.stdout + r.stderr


def test_an_overwritten_leaf_of_the_inodes_table(copy, made, tmp_path):
    """The one page every lookup reads, the root of the inodes table, with impossible bounds (its page
    number kept): LMDB reads garbage node pointers from it. Named, refused and salvaged."""
    root = _table_root(copy, b"inodes")
    with open(data_file(copy), "r+b") as f:
        f.seek(root * 4096 + 12)  # keep the page number, break the page's free-space bounds
        f.write(b"\xff\xff\x10\x00")
    assert_refused_everywhere(copy, tmp_path)
    assert repair_and_read_back(copy, made[1], tmp_path) == 0  # every inode was on that page


def _table_root(lib: str, name: bytes) -> int:
    """The root page of a named table, from the main DB's record of it read by LMDB itself (``MDB_db``:
    ``md_root`` is its last u64) through the backend's environment (only the backend imports lmdb)."""
    from libraryfs.fs.store import Store

    st = Store(lib, readonly=True)
    try:
        with st.backend.env.begin() as t:  # type: ignore[attr-defined]
            raw = t.get(name)
    finally:
        st.close()
    return int.from_bytes(raw[40:48], "little")


def test_find_refuses_a_store_damaged_after_a_clean_find(copy):
    """A dirents page overwritten after a clean ``find``: ``find`` answered from the term index and dropped
    the matches the damaged page hid (exit 0, "171 of 201 matches shown"; ``--json`` an empty result, exit
    1). It walks the pages whenever the data file changed since the last clean walk, as ``status`` does."""
    r = cli("find", copy, "note", "--limit", "300")
    assert r.returncode == 0 and len(r.stdout.splitlines()) >= 60, r.stderr
    root = _table_root(copy, b"dirents")
    with open(data_file(copy), "r+b") as f:
        f.seek(root * 4096 + 100)  # the node offsets and the first nodes of the table's root page
        f.write(random.Random(7).randbytes(200))
    for args in (("--limit", "300"), ("-0",)):
        r = cli("find", copy, "note", *args)
        says_damaged(r, f"find {args}")
        assert r.stdout == "", r.stdout
    r = cli("find", copy, "note", "--json")  # a script reading stdout gets one JSON object: the error
    says_damaged(r, "find --json")
    report = json.loads(r.stdout)
    assert report["exit_code"] == 4 and "damaged" in report["error"] and "matches" not in report, report
    says_damaged(cli("status", copy), "status")


def test_a_store_being_written_is_never_called_damaged(mounted):
    """The page walk beside a writer (the mount committing file writes as fast as it can): no walk reports
    confirmed problems, and status and check never say damaged."""
    import threading

    from libraryfs.fs.lmdb_pages import walk

    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            with open(mounted.p(f"w{i % 50}.md"), "wb") as f:
                f.write(os.urandom(3000 + i % 7 * 9000))
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        reports = [walk(os.path.join(mounted.libdir, "store")) for _ in range(40)]
        runs = [cli("status", mounted.libdir) for _ in range(3)] + [cli("check", mounted.libdir)]
    finally:
        stop.set()
        t.join()
    confirmed = [r.problems for r in reports if r.problems and not r.unsettled]
    assert confirmed == []
    for r in runs:
        assert r.returncode in (0, 1) and "damaged" not in r.stdout + r.stderr, (r.args, r.stdout, r.stderr)


def test_status_sees_damage_made_after_a_clean_status(copy):
    """``status`` remembers the data file's state after a clean page walk and skips the walk while it is
    unchanged; pages overwritten afterwards (size, LMDB's txnid and meta pages unchanged, the mtime put
    back) are still found."""
    record = os.path.join(state_dir(copy), VERIFIED_FILE)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(record)  # copied with the library: another file's state

    def clean_status_remembered() -> bool:
        r = cli("status", copy)
        assert r.returncode == 0, r.stderr
        return os.path.exists(record)  # once the copy's last write is SETTLE_S old

    wait_until(clean_status_remembered, 120, "status to remember the store's state")
    assert cli("status", copy).returncode == 0  # the remembered state: no walk
    path = data_file(copy)
    before = os.stat(path)
    root = _table_root(copy, b"inodes")
    with open(path, "r+b") as f:
        f.seek(root * 4096 + 12)  # keep the page number, break the page's free-space bounds
        f.write(b"\xff\xff\x10\x00")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_size == before.st_size
    says_damaged(cli("status", copy), "status")
