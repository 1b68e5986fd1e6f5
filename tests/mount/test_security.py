"""Security (issue 6 item 5): a mount is private to its owner unless ``--allow-other``; ``--read-only``
refuses every write with EROFS; ``..`` and symlinks never let the indexer (or its LLM) read anything outside
the library; a library directory is created 0700; nothing of one library leaks into another's status,
stats or TOCs.

The LLM is a real OpenAI-compatible server on 127.0.0.1 (``tests/helpers/llm_server.py``) that records every
request, so "the model never saw /etc/passwd" is checked on the wire.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import tempfile

import pytest
from helpers.files import read_file
from helpers.llm_server import IndexModel, LLMServer
from helpers.mount import mount, require_fuse

from libraryfs.fs import schema as S
from libraryfs.fs.store import Store
from libraryfs.fs.view import LibraryView

NOBODY = 65534
PASSWD_MARK = "root:"  # the first field of /etc/passwd's first line on every Linux


def _as_nobody(*argv: str) -> subprocess.CompletedProcess:
    """Run a system command as uid/gid 65534 (another user than the mount's owner)."""

    def drop():
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    return subprocess.run(list(argv), capture_output=True, text=True, preexec_fn=drop, cwd="/")


@pytest.fixture
def public_dir():
    """A directory every user can traverse (pytest's own tmp dirs are 0700, which would deny others for the
    wrong reason); the test proves other users can reach it before checking what they cannot reach."""
    d = tempfile.mkdtemp(prefix="lfs-sec-", dir="/tmp")
    os.chmod(d, 0o755)
    assert _as_nobody("ls", d).returncode == 0
    yield d
    subprocess.run(["fusermount3", "-uz", os.path.join(d, "mnt")], capture_output=True)
    shutil.rmtree(d, ignore_errors=True)


def _mount_options(mnt: str) -> list[str]:
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if parts[1] == os.path.realpath(mnt):
                return parts[3].split(",")
    raise AssertionError(f"{mnt} not in /proc/mounts")


# -- private by default -----------------------------------------------------------------------------------


def test_mount_is_private_by_default(public_dir):
    require_fuse()
    libdir, mnt = os.path.join(public_dir, "lib"), os.path.join(public_dir, "mnt")
    Store.create(libdir).close()
    with mount(libdir, mnt, indexer=False):
        os.chmod(mnt, 0o755)
        with open(os.path.join(mnt, "open.md"), "w") as f:
            f.write("world readable mode, still private\n")
        os.chmod(os.path.join(mnt, "open.md"), 0o644)
        assert "allow_other" not in _mount_options(mnt)
        r = _as_nobody("stat", os.path.join(mnt, "open.md"))
        assert r.returncode != 0 and "Permission denied" in r.stderr, r.stderr
        r = _as_nobody("ls", mnt)
        assert r.returncode != 0 and "Permission denied" in r.stderr, r.stderr


def test_allow_other_only_when_asked_and_modes_are_enforced(public_dir):
    require_fuse()
    libdir, mnt = os.path.join(public_dir, "lib"), os.path.join(public_dir, "mnt")
    Store.create(libdir).close()
    with mount(libdir, mnt, indexer=False, allow_other=True):
        os.chmod(mnt, 0o755)
        assert "allow_other" in _mount_options(mnt)
        for name, mode in (("public.md", 0o644), ("secret.md", 0o600)):
            with open(os.path.join(mnt, name), "w") as f:
                f.write(f"{name}\n")
            os.chmod(os.path.join(mnt, name), mode)
        r = _as_nobody("cat", os.path.join(mnt, "public.md"))
        assert r.returncode == 0 and r.stdout == "public.md\n", r.stderr
        r = _as_nobody("cat", os.path.join(mnt, "secret.md"))
        assert r.returncode != 0 and "Permission denied" in r.stderr  # default_permissions: the kernel checks
        r = _as_nobody("touch", os.path.join(mnt, "new.md"))
        assert r.returncode != 0 and "Permission denied" in r.stderr


# -- read-only mounts ---------------------------------------------------------------------------------------


def _populate(libdir: str) -> None:
    st = Store(libdir)
    try:
        v = LibraryView(st)
        v.mkdir(b"/notes", 0o755, os.getuid(), os.getgid())
        fh = v.create(b"/notes/a.md", 0o644, os.O_WRONLY, os.getuid(), os.getgid())
        v.write(fh, b"# alpha\n", 0)
        v.release(fh)
    finally:
        st.close()


WRITES = {
    "create": lambda m: open(os.path.join(m, "notes/new.md"), "w"),
    "open for writing": lambda m: open(os.path.join(m, "notes/a.md"), "r+b"),
    "truncate": lambda m: os.truncate(os.path.join(m, "notes/a.md"), 0),
    "mkdir": lambda m: os.mkdir(os.path.join(m, "d")),
    "rmdir": lambda m: os.rmdir(os.path.join(m, "notes")),
    "unlink": lambda m: os.unlink(os.path.join(m, "notes/a.md")),
    "rename": lambda m: os.rename(os.path.join(m, "notes/a.md"), os.path.join(m, "notes/b.md")),
    "symlink": lambda m: os.symlink("a.md", os.path.join(m, "notes/l")),
    "link": lambda m: os.link(os.path.join(m, "notes/a.md"), os.path.join(m, "notes/h")),
    "chmod": lambda m: os.chmod(os.path.join(m, "notes/a.md"), 0o600),
    "utime": lambda m: os.utime(os.path.join(m, "notes/a.md"), (1, 1)),
    "setxattr": lambda m: os.setxattr(os.path.join(m, "notes/a.md"), "user.x", b"1"),
}


def test_read_only_mount_refuses_every_write_with_erofs(tmp_path, run_cli):
    require_fuse()
    libdir, mnt = str(tmp_path / "lib"), str(tmp_path / "mnt")
    Store.create(libdir).close()
    _populate(libdir)
    st = Store(libdir, readonly=True)
    with st.read() as t:
        tail_before = t.journal_tail()
    st.close()
    r = run_cli("mount", libdir, mnt, "--read-only")
    assert r.returncode == 0, r.stderr
    try:
        assert "no indexer" in r.stdout  # a read-only mount starts no indexer
        assert "ro" in _mount_options(mnt)
        assert read_file(os.path.join(mnt, "notes/a.md")) == "# alpha\n"
        assert os.listdir(os.path.join(mnt, "notes")) == ["a.md"]  # INDEX.md resolves, is not listed
        failures = {}
        for what, fn in WRITES.items():
            try:
                fn(mnt)
                failures[what] = "succeeded"
            except OSError as e:
                if e.errno != errno.EROFS:
                    failures[what] = errno.errorcode.get(e.errno, e.errno)
        assert failures == {}
    finally:
        run_cli("umount", mnt, check_rc=True)
    st = Store(libdir, readonly=True)
    with st.read() as t:
        assert t.journal_tail() == tail_before  # nothing was written to the store
    st.close()


# -- symlinks and `..`: the indexer never reads outside the library ---------------------------------------


def test_symlinks_out_of_the_library_are_never_read_or_summarised(tmp_path):
    require_fuse()
    assert PASSWD_MARK in read_file("/etc/passwd")
    libdir, mnt = str(tmp_path / "lib"), str(tmp_path / "mnt")
    Store.create(libdir).close()
    with LLMServer(default=IndexModel(file_to={"pw-in-inbox": "../../etc"})) as srv:
        env = {
            "LIBRARYFS_LLM_BASE_URL": srv.base_url,
            "LIBRARYFS_LLM_MODEL": "test-model",
            "LIBRARYFS_LLM_API_KEY": "sk-test",
        }
        with mount(libdir, mnt, llm=True, env=env) as m:
            os.makedirs(os.path.join(mnt, "notes"))
            os.makedirs(os.path.join(mnt, "inbox"))
            with open(os.path.join(mnt, "notes/real.md"), "w") as f:
                f.write("# A real note\n")
            os.symlink("/etc/passwd", os.path.join(mnt, "notes/pw"))
            os.symlink("../" * 12 + "etc/passwd", os.path.join(mnt, "notes/up"))
            os.symlink("/etc", os.path.join(mnt, "notes/etcdir"))
            os.symlink("/etc/passwd", os.path.join(mnt, "inbox/pw-in-inbox"))
            with open(os.path.join(mnt, "inbox/filed.md"), "w") as f:
                f.write("# To be filed where the model says: ../../etc\n")
            m.wait_indexed()
            tocs = b""
            for dirpath, dirnames, _files in os.walk(mnt):
                dirnames[:] = [d for d in dirnames if d not in (".libraryfs", ".find", "etcdir")]
                if os.path.isfile(os.path.join(dirpath, "INDEX.md")):  # opened by name, never listed
                    tocs += read_file(os.path.join(dirpath, "INDEX.md"), "rb")
            assert PASSWD_MARK.encode() not in tocs
            assert b"pw" in tocs and b"real.md" in tocs
            wire = b"".join(r.body for r in srv.requests)
            assert srv.chat_requests(), "the LLM builder was not used"
            assert PASSWD_MARK.encode() not in wire and b"/bin/" not in wire
            # the model's '../../etc' was not followed: nothing was created outside the mount
            assert not os.path.exists(os.path.join(os.path.dirname(mnt), "etc"))
            assert not os.path.exists(os.path.join(tmp_path, "etc"))
        status = Store(libdir, readonly=True)
        with status.read() as t:
            for _k, v in t.kv.range(S.DB_META):
                assert PASSWD_MARK.encode() not in v
        status.close()


def test_ingest_refuses_dotdot_and_skips_symlinks(tmp_path, run_cli):
    libdir = str(tmp_path / "lib")
    Store.create(libdir).close()
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.md").write_text("# ok\n")
    os.symlink("/etc/passwd", src / "pw")
    os.symlink("/etc", src / "etcdir")
    r = run_cli("ingest", libdir, str(src), "--quiet")
    assert r.returncode == 0, r.stderr
    st = Store(libdir, readonly=True)
    with st.read() as t:
        names = [n for n, _ in t.iter_dir(S.ROOT_INO)]
        for _k, v in t.kv.range(S.DB_DATA):
            assert PASSWD_MARK.encode() not in v
    st.close()
    assert names == [b"ok.md"]
    r = run_cli("ingest", libdir, str(src), "--into", "../escape", "--quiet")
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "escape").exists()


# -- the library directory -------------------------------------------------------------------------------------


def test_library_directory_is_created_0700(public_dir, run_cli):
    for where in ("fresh", "existing"):
        libdir = os.path.join(public_dir, where)
        if where == "existing":
            os.mkdir(libdir, 0o755)
        run_cli("init", libdir, check_rc=True)
        assert stat.S_IMODE(os.stat(libdir).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(os.path.join(libdir, "store")).st_mode) == 0o700
        r = _as_nobody("cat", os.path.join(libdir, "store", "data.mdb"))
        assert r.returncode != 0 and "Permission denied" in r.stderr


def test_logs_and_locks_are_not_reachable_by_others(public_dir):
    require_fuse()
    libdir, mnt = os.path.join(public_dir, "lib"), os.path.join(public_dir, "mnt")
    Store.create(libdir).close()
    with mount(libdir, mnt):
        for rel in ("logs/mount.log", "logs/indexer.log", "mount.lock", "run.json", "store/lock.mdb"):
            p = os.path.join(libdir, rel)
            assert os.path.exists(p), rel
            r = _as_nobody("cat", p)
            assert r.returncode != 0 and "Permission denied" in r.stderr, rel


# -- isolation between libraries ---------------------------------------------------------------------------------


def test_nothing_leaks_between_two_libraries(tmp_path, run_cli):
    require_fuse()
    a_lib, a_mnt = str(tmp_path / "a-lib"), str(tmp_path / "a-mnt")
    b_lib, b_mnt = str(tmp_path / "b-lib"), str(tmp_path / "b-mnt")
    for lib in (a_lib, b_lib):
        Store.create(lib).close()
    secret = "zebra-secret-4711"
    with mount(a_lib, a_mnt) as a, mount(b_lib, b_mnt) as b:
        os.makedirs(os.path.join(a_mnt, f"{secret}-section"))
        with open(os.path.join(a_mnt, f"{secret}-section", f"{secret}.md"), "w") as f:
            f.write(f"# {secret}\n\nOnly library A knows this.\n")
        os.makedirs(os.path.join(b_mnt, "public"))
        with open(os.path.join(b_mnt, "public", "b.md"), "w") as f:
            f.write("# B's own note\n")
        read_file(os.path.join(a_mnt, f"{secret}-section", f"{secret}.md"))  # a read counted in A's stats
        a.wait_indexed()
        b.wait_indexed()
        seen_b = ""
        for rel in (
            "INDEX.md",
            "public/INDEX.md",
            ".libraryfs/status.json",
            ".libraryfs/stats.json",
            ".libraryfs/journal",
        ):
            seen_b += read_file(os.path.join(b_mnt, rel))
        seen_b += "".join(os.listdir(os.path.join(b_mnt, ".find")))
        assert not os.path.exists(os.path.join(b_mnt, ".find", secret, "01-" + secret + ".md"))
        r = run_cli("status", b_lib, "--json")
        seen_b += r.stdout + r.stderr
        r = run_cli("find", b_lib, secret)
        assert r.returncode != 0 and r.stdout == ""  # "no match" (its message repeats the term itself)
        assert secret not in seen_b
        assert a_lib not in seen_b and a_mnt not in seen_b
        status_b = json.loads(read_file(os.path.join(b_mnt, ".libraryfs/status.json")))
        assert status_b["library"] == b_lib
        # and A does see its own secret (the check above can fail)
        assert secret in read_file(os.path.join(a_mnt, "INDEX.md"))
