"""What a fresh-user trial found in how `libraryfs mount` starts and fails, each fixed: a cwd holding a
``libraryfs/`` folder shadowed the package in the daemons it spawns (``python -m``: the cwd was on their
``sys.path``), and a mount refused for a bad ``config.toml`` left the mountpoint it had made. Real
libraries, real mounts, the real console script."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.files import read_file, write_file
from helpers.mount import mount
from helpers.wait import wait_exit

from libraryfs.layout import mount_state

LIBRARYFS = str(Path(sys.executable).parent / "libraryfs")


def test_a_libraryfs_folder_in_the_cwd_does_not_shadow_the_daemons_package(libdir, tmp_path, monkeypatch):
    """The mount server and the indexer run as ``python -m libraryfs.…``: with the user's cwd on their
    ``sys.path``, a ``libraryfs/`` folder there (a checkout, notes) was imported as the package (a namespace
    package: submodules still came from the install, ``libraryfs.__version__`` did not), and the remount
    after a crash, which recovers the store, died: "ImportError: cannot import name '__version__' from
    'libraryfs'". They now start with ``-P``: the mount comes up from such a cwd, and its indexer works."""
    mnt = tmp_path / "mnt"
    with mount(libdir, mnt, indexer=False, server_alive=False, check=False) as m:
        os.makedirs(m.p("notes"))
        write_file("# Plan\n\nsurvives a crash\n", m.p("notes/plan.md"), "w")
        os.kill(m.server_pid, signal.SIGKILL)
        assert wait_exit(m.server_pid, 30)
    cwd = tmp_path / "work"
    (cwd / "libraryfs").mkdir(parents=True)
    monkeypatch.chdir(cwd)
    with mount(libdir, mnt, expected_log=[r"unclean", r"check found"]) as m:
        assert read_file(m.p("notes/plan.md")) == "# Plan\n\nsurvives a crash\n"
        m.wait_indexed()
        assert "plan.md" in read_file(m.p("notes/INDEX.md"))


@pytest.mark.parametrize("flags", [[], ["--no-indexer"], ["--foreground"], ["--foreground", "--no-indexer"]])
def test_a_mount_refused_for_a_bad_config_removes_the_mountpoint_it_made(libdir, tmp_path, flags):
    """A ``config.toml`` that is not TOML fails the mount (exit 1, the file named); the missing mountpoint
    and its missing parents it made are removed again, as for a damaged store (README "mount makes a
    missing mountpoint … a mount that fails removes it again"). Before: with the indexer, the settings
    check came before the cleanup and ``new/deep`` stayed; in the foreground nothing was cleaned up."""
    Path(libdir, "config.toml").write_text("this is [not toml\n")
    mnt = tmp_path / "new" / "deep"
    r = subprocess.run(
        [LIBRARYFS, "mount", *flags, str(libdir), str(mnt)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 1 and "config.toml" in r.stderr, r
    assert mount_state(str(mnt)) == "none"
    assert not os.path.lexists(tmp_path / "new"), os.listdir(tmp_path)
