"""Several read-write mounts of one etcd library (issue 15 item 3 "Many hosts, one library").

Two library directories joined to one etcd library (``init --store`` / ``init --join``: two hosts' directories
on this host) are mounted read-write at once, on the session's real 3-member loopback cluster. Writer
processes on both mounts create, rewrite, rename and unlink files in shared directories
(``bench/acked_writers.py``); afterwards every acknowledged change is there, with the right bytes, through
both mounts, and ``libraryfs check`` is clean. The mounts cache for 60 s, so a change on A reaches a reader on
B in time only through B's journal watch (``libraryfs/fs/remote_inval.py``): with ``LIBRARYFS_REMOTE_INVAL=0``
in the environment the cross-mount steps fail. A starting mount must not purge an inode another mount holds
open after unlinking it.
"""

from __future__ import annotations

import json
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers.etcd_mounts import acked_writers, finish_writers, start_writers
from helpers.etcd_mounts import mount as _mount
from helpers.etcd_mounts import unmount as _unmount
from helpers.facility import unavailable
from helpers.mount import fuse_available
from helpers.wait import wait_until

from libraryfs.fs.backends import store_url
from libraryfs.layout import wait_exit, wait_until_idle

pytestmark = pytest.mark.etcd

WRITERS_PER_MOUNT = 3
OPS_PER_WRITER = 25


@contextmanager
def _two_mounts(run_cli, url: str, tmp_path: Path, indexer: bool = True):
    """``(a, b, ma, mb)``: library directories ``a`` (``init --store``) and ``b`` (``--join``), mounted
    read-write at ``ma`` and ``mb`` at once (with ``indexer``: the indexer runs beside ``a``'s mount, so it is
    ``a``'s term index that follows the store; the standby on another host is test_etcd_library's); both
    unmounted when the block ends."""
    if why := fuse_available():
        unavailable(why)
    a, b, ma, mb = tmp_path / "a", tmp_path / "b", tmp_path / "ma", tmp_path / "mb"
    run_cli("init", str(a), "--store", url, check_rc=True)
    run_cli("init", str(b), "--store", url, "--join", check_rc=True)
    info_a = _mount(a, ma, indexer)
    try:
        info_b = _mount(b, mb, indexer=False)
        try:
            yield a, b, ma, mb
        finally:
            _unmount(mb, info_b)
    finally:
        _unmount(ma, info_a)


def _read(p: Path) -> bytes | None:
    try:
        return p.read_bytes()
    except FileNotFoundError:
        return None


def test_two_read_write_mounts_keep_every_acknowledged_write_and_see_each_other(run_cli, etcd_url, tmp_path):
    with _two_mounts(run_cli, etcd_url, tmp_path) as (a, b, ma, mb):
        ledgers = _exercise(run_cli, a, b, ma, mb, tmp_path)
        result = acked_writers().verify([str(ma), str(mb)], ledgers)
        assert result["wrong"] == [], result["wrong"][:20]
        assert result["present"] > 0 and result["absent"] > 0  # rewrites, renames and unlinks all happened
        wait_until_idle(
            str(a), 300
        )  # a's indexer (the active one) has indexed it all: its term index is whole
    facts = json.loads(run_cli("status", str(a), "--json", check_rc=True).stdout)
    # the last unmount set the flag, and no mount lease is left
    assert facts["clean_shutdown"] and facts["holders"]["mount"] == [], _shutdown_report(facts, a, b)
    r = run_cli("check", str(a))
    assert r.returncode == 0, r.stdout + r.stderr


def _shutdown_report(facts: dict, *libdirs: Path) -> str:
    """What to look at when the library was not left clean after its last unmount: the status facts, the
    mount records left in the store (each mount's ``mount_status/<host>:<libdir>``; one left keeps the clean
    flag off) and the end of each library directory's mount log (did its server log "clean shutdown"?)."""
    from libraryfs.fs import schema as S
    from libraryfs.fs.store import Store
    from libraryfs.layout import log_path

    lines = [
        f"clean_shutdown={facts['clean_shutdown']} holders.mount={facts['holders']['mount']}",
    ]
    st = Store(libdirs[0], readonly=True)
    try:
        with st.read() as t:
            left = [(k, v) for k, v in t.kv.prefix(S.DB_CONFIG, S.CFG_MOUNTS)]
            lines.append(f"clean flag {t.cfg(S.CFG_CLEAN)!r}; mount records left: {left or 'none'}")
    finally:
        st.close()
    for d in libdirs:
        try:
            tail = Path(log_path(str(d), "mount")).read_text(errors="replace").splitlines()[-40:]
        except OSError as e:
            tail = [f"(no log: {e})"]
        lines += [f"--- {d.name}: mount log (last {len(tail)} lines)", *tail]
    return "\n".join(lines)


def test_two_mounts_unmounting_at_once_leave_the_clean_flag_set(run_cli, etcd_url, tmp_path):
    """Two mounts' unregistering transactions (``mountd._set_mounted(..., None)``) running at once, as when
    two hosts unmount together: each deletes its own record and sets the clean flag only when no other
    record is left. Each reads the other's record, then both commit: the second must conflict (the other
    record it read was deleted meanwhile), run again, find no record and set the flag. Before, the
    transaction read the records only as a range, and an etcd range compare catches inserts but not
    deletes (libraryfs/fs/etcd_txn.py): both commits went through, neither set the flag, and the library
    read as stopped uncleanly with no mount left (the next mount ran the consistency check)."""
    import threading

    from libraryfs.daemon.mountd import _set_mounted
    from libraryfs.fs import schema as S
    from libraryfs.fs.store import Store

    a, b = tmp_path / "a", tmp_path / "b"
    run_cli("init", str(a), "--store", etcd_url, check_rc=True)
    run_cli("init", str(b), "--store", etcd_url, "--join", check_rc=True)
    stores = [Store(a), Store(b)]
    try:
        keys = [S.CFG_MOUNTS + b"host-a:/a", S.CFG_MOUNTS + b"host-b:/b"]  # two hosts' mounts
        _set_mounted(stores[0], keys[0], {"pid": 1}, alone=True)
        _set_mounted(stores[1], keys[1], {"pid": 2}, alone=False)
        both_read = threading.Barrier(2)

        def hold_first_commit(st: Store) -> None:
            """Make ``st``'s next write transaction wait, after its reads, until the other's has read too
            (the interleaving of two hosts unmounting at once; later runs of it do not wait)."""
            real = st.run_write
            first = [True]

            def run_write(fn):
                def body(t):
                    out = fn(t)
                    if first[0]:
                        first[0] = False
                        both_read.wait(60)
                    return out

                return real(body)

            st.run_write = run_write  # type: ignore[method-assign]

        errors: list[BaseException] = []

        def unregister(st: Store, key: bytes) -> None:
            try:
                _set_mounted(st, key, None)
            except BaseException as e:  # reported below
                errors.append(e)

        for st in stores:
            hold_first_commit(st)
        threads = [
            threading.Thread(target=unregister, args=(st, k)) for st, k in zip(stores, keys, strict=True)
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        assert errors == [] and not any(th.is_alive() for th in threads), errors
        with stores[0].read() as t:
            assert list(t.kv.prefix(S.DB_CONFIG, S.CFG_MOUNTS, keys_only=True)) == []
            assert t.cfg(S.CFG_CLEAN) == b"1"  # the last of them set it
    finally:
        for st in stores:
            st.close()


#: a mount server that exits without revoking its lease (as when etcd does not answer the revoke in time:
#: ``Lease.release`` gives up after 3 s): it takes the mount lease of ``argv[1]`` with a TTL of 300 s, prints
#: the lease id and exits
LEFT_LEASE = """
import os, sys
from libraryfs.fs.holder import Holder, mount_lease_name
from libraryfs.fs.store import Store
st = Store(sys.argv[1])
h = Holder.take(st.backend, mount_lease_name(sys.argv[1]), {"mountpoint": "/gone", "libdir": sys.argv[1]},
                "mounted", ttl_s=300)
print(h.lease.id, flush=True)
os._exit(0)
"""


def test_a_mount_lease_left_by_a_gone_server_of_this_host_is_no_mount(run_cli, etcd_url, tmp_path):
    """A stopped mount server revokes its lease; when etcd does not answer that revoke in time (slow under
    load), the lease stays until its TTL runs out, though the server is gone. ``status`` must not list that
    as a mount, nor ``check --repair`` refuse for it: this host can see that the process is gone (as a
    starting mount already did for a killed one's). Before, ``status`` listed it for up to the TTL (10 s),
    which could fail the two-mount test's last ``holders["mount"] == []`` under load."""
    import sys

    from libraryfs.fs.etcd_backend import EtcdBackend

    a = tmp_path / "a"
    run_cli("init", str(a), "--store", etcd_url, check_rc=True)
    r = subprocess.run(
        [sys.executable, "-c", LEFT_LEASE, str(a)], capture_output=True, text=True, check=True, timeout=120
    )
    lease_id = int(r.stdout)
    b = EtcdBackend.open(store_url(a))
    try:
        assert b.lease_holders("mount/")  # the lease is there (300 s TTL), its process gone
        facts = json.loads(run_cli("status", str(a), "--json", check_rc=True).stdout)
        assert facts["holders"]["mount"] == [], facts["holders"]
        r = run_cli("check", str(a), "--repair")
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        b.gw.call("lease/revoke", {"ID": str(lease_id)})
        b.close()


def test_entries_a_listing_cached_follow_the_other_mounts_writes(run_cli, etcd_url, tmp_path):
    """``ls -l`` on B caches every entry's attributes from one READDIRPLUS (no lookup per name); a write on A,
    whose journal record names only the inode, must still reach those names on B through its journal watch
    (the listing tells the watch their paths, as a lookup would). Fails while B keeps the listed size for
    its 60 s attribute timeout."""
    with _two_mounts(run_cli, etcd_url, tmp_path, indexer=False) as (_a, _b, ma, mb):
        (ma / "sentinel").write_bytes(b"1")
        assert (mb / "sentinel").stat().st_size == 1  # B caches it (a lookup)
        (ma / "walk").mkdir()
        for i in range(20):
            (ma / "walk" / f"f{i:02d}").write_bytes(b"x" * i)
        with open(ma / "sentinel", "ab") as f:
            f.write(b"2")  # after the creates: once B sees it, B's watch has applied every record before it
        wait_until(lambda: (mb / "sentinel").stat().st_size == 2, 30, "A's append to sentinel seen by B")
        listed = subprocess.run(["ls", "-ln", str(mb / "walk")], capture_output=True, text=True, check=True)
        assert len(listed.stdout.splitlines()) == 21  # "total" + 20 entries, sizes cached on B for 60 s
        assert (mb / "walk" / "f07").stat().st_size == 7
        with open(ma / "walk" / "f07", "ab") as f:
            f.write(b"appended")
        wait_until(
            lambda: (mb / "walk" / "f07").stat().st_size == 15, 30, "A's append seen by B after a listing"
        )
        assert (mb / "walk" / "f07").read_bytes() == b"x" * 7 + b"appended"


def _exercise(run_cli, a: Path, b: Path, ma: Path, mb: Path, tmp_path: Path) -> list[dict]:
    """Status and check --repair with two mounts, the cross-mount visibility steps, then the writers on both
    mounts; returns their ledgers (asserting no call failed)."""
    facts = json.loads(run_cli("status", str(b), "--json", check_rc=True).stdout)
    assert sorted(m["mountpoint"] for m in facts["holders"]["mount"]) == sorted([str(ma), str(mb)])
    r = run_cli("check", str(a), "--repair")
    assert r.returncode == 1 and "is mounted" in r.stderr, r.stderr  # a's own mount (its flock)
    c = tmp_path / "c"  # a third host's directory, not mounted there: the etcd leases refuse it
    run_cli("init", str(c), "--store", store_url(a), "--join", check_rc=True)
    r = run_cli("check", str(c), "--repair")
    assert r.returncode == 1 and "mounted on host" in r.stderr and "(and 1 more)" in r.stderr, r.stderr

    # cross-mount visibility: B has the entry and its attributes and pages cached (for 60 s)
    (ma / "shared.md").write_bytes(b"version 1\n")
    assert (mb / "shared.md").read_bytes() == b"version 1\n" and (mb / "shared.md").stat().st_size == 10
    (ma / "gone.md").write_bytes(b"to be unlinked on a\n")
    assert (mb / "gone.md").stat().st_size == 20
    (ma / "shared.md").write_bytes(b"version 2, longer\n")
    wait_until(lambda: _read(mb / "shared.md") == b"version 2, longer\n", 30, "A's rewrite read through B")
    os.rename(ma / "shared.md", ma / "moved.md")
    os.unlink(ma / "gone.md")
    wait_until(lambda: not os.path.exists(mb / "shared.md"), 30, "A's rename (old name gone) seen by B")
    wait_until(lambda: not os.path.exists(mb / "gone.md"), 30, "A's unlink seen by B")
    assert (mb / "moved.md").read_bytes() == b"version 2, longer\n"
    # and the other way round: B writes what A had cached
    (mb / "moved.md").write_bytes(b"version 3 from b\n")
    wait_until(lambda: _read(ma / "moved.md") == b"version 3 from b\n", 30, "B's rewrite read through A")

    # writer processes on both mounts, in shared directories (their commits conflict in etcd and retry)
    for d in range(4):
        (ma / f"d{d}").mkdir()
    procs = start_writers({"a": ma, "b": mb}, WRITERS_PER_MOUNT, tmp_path, ops=OPS_PER_WRITER)
    ledgers = finish_writers(procs, tmp_path)
    assert [e for led in ledgers for e in led["errors"]] == []  # a conflict retries, never fails the call
    assert sum(led["acked"] for led in ledgers) == 2 * WRITERS_PER_MOUNT * OPS_PER_WRITER
    return ledgers


def test_a_starting_mount_leaves_alone_an_unlinked_file_another_mount_holds_open(run_cli, etcd_url, tmp_path):
    """A file unlinked while open stays in the store (nlink 0) until its last close; a mount starting while
    another serves must not purge it as a crash's orphan (it runs the purge only when it is alone)."""
    from libraryfs.daemon import launcher

    if why := fuse_available():
        unavailable(why)
    a, b, ma, mb = tmp_path / "a", tmp_path / "b", tmp_path / "ma", tmp_path / "mb"
    run_cli("init", str(a), "--store", etcd_url, check_rc=True)
    run_cli("init", str(b), "--store", etcd_url, "--join", check_rc=True)
    info_a = _mount(a, ma, indexer=False)
    try:
        data = os.urandom(100_000)
        (ma / "open.bin").write_bytes(data)
        fd = os.open(ma / "open.bin", os.O_RDONLY)
        try:
            os.unlink(ma / "open.bin")
            info_b = _mount(b, mb, indexer=False)
            try:
                assert os.pread(fd, len(data) + 1, 0) == data
                assert os.fstat(fd).st_size == len(data)
            finally:
                _unmount(mb, info_b)
        finally:
            os.close(fd)
    finally:
        _unmount(ma, info_a)
    assert run_cli("check", str(a)).returncode == 0  # the last close freed it: no orphan left
    # a mount killed with open unlinked files leaves orphans: the next mount alone purges them
    info_a = _mount(a, ma, indexer=False)
    (ma / "killed.bin").write_bytes(data)
    fd = os.open(ma / "killed.bin", os.O_RDONLY)
    os.unlink(ma / "killed.bin")
    os.kill(info_a["server_pid"], 9)
    os.close(fd)
    wait_exit(info_a["server_pid"], 10)
    launcher.clear_stale(str(ma))
    assert run_cli("check", str(a)).returncode == 1  # the orphan (nlink 0, no dirent)
    _unmount(mb, _mount(b, mb, indexer=False))  # alone: purges it (a's lease is waited out: its pid is gone)
    r = run_cli("check", str(a))
    assert r.returncode == 0, r.stdout


def test_an_indexer_pass_over_a_large_backlog_fits_etcd_transaction_limits(run_cli, etcd_url, tmp_path):
    """Writers on several mounts leave the indexer hundreds of changed entries for one pass; their meta is
    written in transactions under etcd's 128 operations (one transaction for all failed every pass with
    FileTooBig, and the library was never indexed again)."""
    from libraryfs.fs import schema as S
    from libraryfs.fs.store import Store
    from libraryfs.fs.view import LibraryView

    lib = tmp_path / "lib"
    run_cli("init", str(lib), "--store", etcd_url, check_rc=True)
    st = Store(lib)
    try:
        view = LibraryView(st)
        view.mkdir(b"/notes", 0o755, os.getuid(), os.getgid())
        for i in range(120):
            fh = view.create(
                f"/notes/n{i:03d}.md".encode(), S.S_IFREG | 0o644, os.O_WRONLY, os.getuid(), os.getgid()
            )
            try:
                view.write(fh, f"# Note {i}\n\nbody of note {i}\n".encode(), 0)
            finally:
                view.release(fh)
    finally:
        st.close()
    r = run_cli("index", str(lib), "--no-llm", timeout=600)
    assert r.returncode == 0, r.stderr
    facts = json.loads(run_cli("status", str(lib), "--json", check_rc=True).stdout)
    assert facts["pending_records"] == 0 and not facts["indexer"].get("last_error"), facts["indexer"]
    st = Store(lib, readonly=True)
    try:
        with st.read() as t:
            notes = t.lookup(S.ROOT_INO, b"notes")
            metas = [t.entry_meta(ino) for _name, ino in t.iter_dir(notes)]
            assert t.toc_page_count(notes) > 0
    finally:
        st.close()
    assert len(metas) == 120 and all(m is not None and m.summary for m in metas)
    r = run_cli("check", str(lib))
    assert r.returncode == 0, r.stdout
