"""Unusual libraries (issue 14): read-only, in a non-empty folder, holding a store/data.mdb of their own,
just mounted, with an unreachable LLM endpoint. Each test failed before its fix."""

import json
import os
import stat
import subprocess
import sys

import pytest
from helpers.llm_server import refused_port
from helpers.mount import require_fuse, unavailable

from libraryfs.layout import is_libraryfs_mount, wait_until_idle


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, **(env or {})),
    )


def one_line_error(r: subprocess.CompletedProcess, needle: str) -> None:
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert needle in r.stderr, r.stderr


@pytest.fixture
def fuse():
    require_fuse()


@pytest.fixture
def read_only_library(tmp_path, fuse):
    """A library made and filled, then seen through a read-only bind mount (a read-only filesystem: root
    ignores permission bits, so a chmod would not make it read-only for the test)."""
    lib, ro = tmp_path / "lib", tmp_path / "ro"
    assert cli("init", str(lib)).returncode == 0
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.md").write_text("# Alpha\n\nThe first note.\n")
    assert cli("ingest", str(lib), str(tmp_path / "src"), "--into", "notes", "-q").returncode == 0
    ro.mkdir()
    r = subprocess.run(["mount", "--bind", str(lib), str(ro)], capture_output=True, text=True)
    if r.returncode != 0:
        unavailable(f"bind mounts are not permitted here: {r.stderr.strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True, capture_output=True)
        yield str(ro)
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)


def test_a_read_only_library_mounts_with_read_only(read_only_library, tmp_path):
    ro, mnt = read_only_library, str(tmp_path / "mnt")
    one_line_error(cli("mount", ro, mnt, "--no-llm"), "--read-only")
    r = cli("mount", ro, mnt, "--read-only")
    assert r.returncode == 0, r.stderr
    try:
        with open(os.path.join(mnt, "notes", "a.md")) as f:
            assert "The first note." in f.read()
        with pytest.raises(OSError):
            open(os.path.join(mnt, "notes", "b.md"), "w").close()
        facts = json.loads(cli("status", mnt, "--json").stdout)
        assert facts["mounted"] and facts["library"] == ro
    finally:
        assert cli("umount", mnt).returncode == 0
    assert not is_libraryfs_mount(mnt)
    assert not os.path.exists(os.path.join(ro, "logs"))  # nothing was written into the library


def test_a_read_only_librarys_stale_banner_does_not_suggest_libraryfs_index(read_only_library, tmp_path):
    """Trial 1203b finding 10: the TOC of a read-only library with changes not indexed said "run
    `libraryfs index RO`", which fails opening the store (EROFS). Now the banner says the library cannot
    be written there; a writable library's banner keeps the command."""
    ro, mnt = read_only_library, str(tmp_path / "mnt")
    one_line_error(cli("index", ro), "Read-only file system")

    def banner_of(library: str) -> str:
        """The stale banner (second line) of the master INDEX.md of ``library`` mounted read-only."""
        r = cli("mount", library, mnt, "--read-only")
        assert r.returncode == 0, r.stderr
        try:
            with open(os.path.join(mnt, "INDEX.md")) as f:
                return f.read().splitlines()[1]
        finally:
            assert cli("umount", mnt).returncode == 0

    banner = banner_of(ro)
    assert banner.startswith("> **Stale index**: the indexer is not running;"), banner
    assert "libraryfs index" not in banner and "cannot be written here" in banner, banner
    lib = str(tmp_path / "lib")  # the same library where it is writable: the command is the way
    banner = banner_of(lib)
    assert f"(run `libraryfs index {lib}`)" in banner, banner


def test_init_refuses_a_non_empty_folder_unless_forced(tmp_path):
    folder = tmp_path / "papers"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    (folder / "keep.txt").write_text("mine")
    one_line_error(cli("init", str(folder)), "not empty")
    assert sorted(os.listdir(folder)) == ["keep.txt"] and stat.S_IMODE(folder.stat().st_mode) == 0o755
    r = cli("init", str(folder), "--force")
    assert r.returncode == 0, r.stderr
    assert (folder / "keep.txt").read_text() == "mine" and stat.S_IMODE(folder.stat().st_mode) == 0o755
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("init", str(empty)).returncode == 0  # an empty folder is fine, and made private
    assert stat.S_IMODE(empty.stat().st_mode) == 0o700


def test_a_store_file_inside_the_library_does_not_confuse_status_or_umount(tmp_path, fuse):
    lib, mnt = str(tmp_path / "lib"), str(tmp_path / "mnt")
    assert cli("init", lib).returncode == 0
    assert cli("mount", lib, mnt, "--no-llm").returncode == 0
    try:
        os.makedirs(os.path.join(mnt, "store"))
        with open(os.path.join(mnt, "store", "data.mdb"), "wb") as f:  # e.g. a backup kept in the library
            f.write(b"not the library's store")
        facts = json.loads(cli("status", mnt, "--json").stdout)
        assert facts["library"] == lib and facts["mounted"]
        r = cli("umount", mnt)
        assert r.returncode == 0, r.stderr
        assert not is_libraryfs_mount(mnt)
    finally:
        if is_libraryfs_mount(mnt):
            subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)


def test_just_after_mount_the_indexer_counts_as_running(tmp_path, fuse):
    """Before: for ~1.8 s after `mount` returned, INDEX.md said "the indexer is not running, run `libraryfs
    index`", and `libraryfs index` was refused because it was. Now its lock is held from before the mount."""
    lib, mnt = str(tmp_path / "lib"), str(tmp_path / "mnt")
    assert cli("init", lib).returncode == 0
    r = cli("mount", lib, mnt, "--no-llm")
    assert r.returncode == 0, r.stderr
    try:
        with open(os.path.join(mnt, "first.md"), "w") as f:
            f.write("# First\n")
        with open(os.path.join(mnt, "INDEX.md")) as f:
            assert "not running" not in f.read()
        one_line_error(cli("index", lib), "already indexed")
        wait_until_idle(lib, 60)
        with open(os.path.join(mnt, "INDEX.md")) as f:
            assert "first.md" in f.read()
    finally:
        assert cli("umount", mnt).returncode == 0


def test_an_unreachable_llm_endpoint_is_logged_and_shown_by_status(tmp_path):
    lib, src = str(tmp_path / "lib"), tmp_path / "src"
    assert cli("init", lib).returncode == 0
    src.mkdir()
    (src / "a.md").write_text("# Alpha\n\nThe first note.\n")
    assert cli("ingest", lib, str(src), "--into", "notes", "-q").returncode == 0
    with refused_port() as port:  # a port nobody listens on: connection refused
        env = {
            "LIBRARYFS_LLM_BASE_URL": f"http://127.0.0.1:{port}/v1",
            "LIBRARYFS_LLM_MODEL": "absent-model",
            "LIBRARYFS_LLM_TIMEOUT_S": "1",
        }
        r = cli("indexer", lib, "--once", "--llm", env=env)
    assert r.returncode == 0, r.stderr
    assert f"127.0.0.1:{port}" in r.stderr and "connection" in r.stderr, r.stderr  # the log line
    line = [ln for ln in cli("status", lib).stdout.splitlines() if ln.startswith("last error")]
    assert line and "none" not in line[0] and "connection" in line[0], line
