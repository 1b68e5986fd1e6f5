"""Shared fixtures: temporary libraries, real FUSE mounts in a subprocess, consistency checks.

* ``libdir``  — an initialised, empty library in a temporary directory.
* ``mounted`` — that library mounted at a temporary mountpoint by the real server process (and, unless the
  test is marked ``@pytest.mark.no_indexer``, the real indexer daemon). It is always unmounted in teardown
  (``fusermount3 -u``, then ``-uz``), the processes are killed if still alive, and the store must pass
  ``libraryfs check`` afterwards (s3ql's habit: every test ends with the checker).
* ``local_llm`` — the real local model served on loopback, one server per session, started by the first test
  that asks for it (tests/helpers/local_llm.py; tests marked ``llm_local`` and ``slow``).

In CI (``CI=true``) a missing /dev/fuse or fusermount3 is an error, never a skip (a mount test that skips in
CI is a failure).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

import pytest
from helpers.etcd_cluster import etcd_backend, etcd_cluster  # noqa: F401  (fixtures)
from helpers.local_llm import local_llm  # noqa: F401  (session fixture: the real local model)

from libraryfs.fs.check import check, describe
from libraryfs.fs.store import Store
from libraryfs.layout import pid_alive, wait_exit, wait_until_idle

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_configure(config):
    config.addinivalue_line("markers", "no_indexer: mount without the indexer daemon")
    config.addinivalue_line("markers", "timeouts(spec): kernel cache timeouts 'entry,attr,negative'")


def unavailable(why: str) -> NoReturn:
    """A facility a test needs is missing: skip here, but fail in CI, where .ci/run installs everything.

    The one place the suite skips: a mount test that skips in CI is a failure (ARCHITECTURE §6)."""
    if IN_CI:
        pytest.fail(f"required in CI: {why}")
    pytest.skip(why)


def fuse_available() -> str | None:
    """None if real mounts are possible here, else why not."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if not (shutil.which("fusermount3") or shutil.which("fusermount")):
        return "fusermount3 is missing (apt-get install fuse3)"
    return None


@pytest.fixture
def libdir(tmp_path: Path) -> Path:
    """A new empty library (TOC bound 2,000 tokens)."""
    d = tmp_path / "lib"
    Store.create(d, {"toc_max_tokens": 2000}).close()
    return d


class Mounted:
    """A live mount of a temporary library: ``.libdir``, ``.mnt`` (str paths), helpers."""

    def __init__(self, libdir: Path, mnt: Path, info: dict) -> None:
        self.libdir = str(libdir)
        self.mnt = str(mnt)
        self.info = info

    def p(self, rel: str) -> str:
        """Absolute path of ``rel`` inside the mount."""
        return os.path.join(self.mnt, rel)

    def store(self, readonly: bool = False) -> Store:
        """Open the library's store in this (test) process — for store-side changes behind the kernel."""
        return Store(self.libdir, readonly=readonly)

    def wait_indexed(self, timeout_s: float = 15.0) -> None:
        """Wait until the indexer has consumed every journal record, run its hooks and is idle
        (:func:`libraryfs.layout.wait_until_idle`); raises TimeoutError."""
        wait_until_idle(self.libdir, timeout_s)
        time.sleep(0.3)  # let the mount's invalidation thread (0.2 s poll) see the new generation

    @property
    def server_pid(self) -> int:
        """pid of the mount server process."""
        return self.info["server_pid"]


def _unmount(mnt: str) -> None:
    for args in (["-u"], ["-uz"]):
        r = subprocess.run(["fusermount3", *args, mnt], capture_output=True)
        if r.returncode == 0:
            return


def _kill(pid: int | None) -> None:
    if not pid:
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def mounted(request, libdir: Path, tmp_path: Path):
    """The library mounted (real server + indexer subprocesses); unmounted and checked in teardown."""
    why = fuse_available()
    if why:
        unavailable(why)
    from libraryfs.daemon import launcher

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    no_indexer = request.node.get_closest_marker("no_indexer") is not None
    tm = request.node.get_closest_marker("timeouts")
    timeouts = tm.args[0] if tm else "1,1,1"
    info = launcher.start(str(libdir), str(mnt), indexer=not no_indexer, timeouts=timeouts, llm=False)
    m = Mounted(libdir, mnt, info)
    try:
        yield m
    finally:
        _unmount(str(mnt))
        wait_exit(info.get("server_pid"), 10)
        for key in ("indexer_pid", "server_pid"):
            pid = m.info.get(key)
            if key == "indexer_pid" and pid_alive(pid):
                os.kill(pid, signal.SIGTERM)
                wait_exit(pid, 5)
            _kill(pid if pid_alive(pid) else None)
    st = Store(libdir)
    try:
        report = check(st)
    finally:
        st.close()
    assert report.problems == [], describe(report)


@pytest.fixture
def run_cli():
    """Run the real ``libraryfs`` console script: returns CompletedProcess (text)."""

    def run(*args: str, check_rc: bool = False, timeout: float = 120, env: dict | None = None):
        r = subprocess.run(
            [sys.executable, "-m", "libraryfs.cli.main", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ, **(env or {})),
        )
        if check_rc and r.returncode != 0:
            raise AssertionError(f"libraryfs {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return r

    return run
