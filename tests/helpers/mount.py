"""The one way tests mount a library: the real mount server and indexer as subprocesses.

::

    with mount(libdir, tmp_path / "mnt") as m:     # Mounted: m.mnt, m.libdir, m.p("a.md"), m.wait_indexed()
        ...

:func:`mount` starts the processes with the real launcher (``libraryfs mount`` without the CLI), which
polls until the mountpoint answers. When the body ends it asserts that the mount server is still alive (a
crashed server is a failure even if every assertion passed; pass ``server_alive=False`` for tests that
kill it), then always unmounts (``fusermount3 -u``, then ``-uz``), stops the indexer (SIGTERM), kills what
is left, runs ``libraryfs check`` on the store (s3ql's habit: every mount ends with the checker) and scans
the lines the mount and indexer logged during the mount for ``ERROR``/``CRITICAL``/``Traceback`` that the
test did not declare with ``expected_log`` (regular expressions). borg's archiver ``fuse_mount`` is the
model.

In CI (``CI=true``) a missing /dev/fuse or fusermount3 is an error, never a skip (:func:`unavailable`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

from helpers.facility import unavailable
from helpers.wait import pid_alive, wait_exit, wait_idle, wait_until

LOGS = ("mount.log", "indexer.log")  #: the daemons' log files under ``<libdir>/logs/``
BAD_LINE = re.compile(r"\b(ERROR|CRITICAL)\b|^Traceback |^<[0-3]>")  #: what the log scan reports
_PAGE0_PLACES = ((b"INDEX.md",), (b".index", b"INDEX.md"))  #: where a directory's TOC page 0 is served


def fuse_available() -> str | None:
    """None if real mounts are possible here, else why not."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if not (shutil.which("fusermount3") or shutil.which("fusermount")):
        return "fusermount3 is missing (apt-get install fuse3)"
    return None


def require_fuse() -> None:
    """Skip (fail in CI) unless real mounts are possible here."""
    why = fuse_available()
    if why:
        unavailable(why)


class Mounted:
    """A live mount of a library: ``.libdir``, ``.mnt`` (str paths), ``.info`` (the launcher's run facts)."""

    def __init__(self, libdir: str | Path, mnt: str | Path, info: dict) -> None:
        self.libdir = str(libdir)
        self.mnt = str(mnt)
        self.info = info
        #: whether the mount server must be alive when the test body ends (a test that stops or kills it
        #: without mounting again sets this False); a test that remounts updates ``info["server_pid"]``
        self.expect_server_alive = True

    def p(self, rel: str) -> str:
        """Absolute path of ``rel`` inside the mount."""
        return os.path.join(self.mnt, rel)

    def store(self, readonly: bool = False):
        """Open the library's store in this (test) process — for store-side changes behind the kernel."""
        from libraryfs.fs.store import Store

        return Store(self.libdir, readonly=readonly)

    def wait_indexed(self, timeout_s: float = 60.0) -> None:
        """Wait until the indexer has consumed every journal record and is idle, then until the mount
        serves the TOCs it rewrote last (its ``INDEX.md`` through the kernel equals the stored page)."""
        wait_idle(self.libdir, timeout_s)
        wait_until(self._serves_current_tocs, timeout_s, "the mount to serve the current TOCs")

    def _serves_current_tocs(self) -> bool:
        from libraryfs.fs import schema as S

        st = self.store(readonly=True)
        try:
            with st.read() as t:
                want = []
                for ino in S.loads(t.cfg(S.CFG_TOC_DIRTY), []) or []:  # type: ignore[union-attr]
                    path = t.path_of(ino)
                    page = t.toc_page(ino, 0)
                    if path is not None and page is not None:
                        want.append((path, page))
        finally:
            st.close()
        for path, page in want:
            d = os.path.join(os.fsencode(self.mnt), path.lstrip(b"/"))
            # page 0 is INDEX.md, or .index/INDEX.md where INDEX.md is the user's (docs/posix.md): one of them
            seen = [self._reads(os.path.join(d, *rel), page) for rel in _PAGE0_PLACES]
            if True not in seen and False in seen:
                return False
        return True

    @staticmethod
    def _reads(path: bytes, page: bytes) -> bool | None:
        """Whether ``path`` reads as ``page``; None when it cannot be read (removed since, a path beyond
        PATH_MAX, or no TOC there): nothing to compare, which counts as served."""
        try:
            with open(path, "rb") as f:
                return f.read() == page
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG):
                raise
            return None

    @property
    def server_pid(self) -> int:
        """pid of the mount server process."""
        return self.info["server_pid"]

    @property
    def indexer_pid(self) -> int | None:
        """pid of the indexer daemon (None when mounted without one)."""
        return self.info.get("indexer_pid")


def unmount_and_stop(
    mnt: str, pids: Iterable[int | None], indexer_pid: int | None = None, libdir: str | None = None
) -> None:
    """Unmount ``mnt`` (``-u``, then ``-uz``), stop the indexer with SIGTERM, wait for the server(s) ``pids``
    and the indexer to exit, and SIGKILL whatever is still alive. Never raises for what is already gone.
    With ``libdir``, the indexer is also whichever one runs for it now (``indexer.lock``) and the one
    ``run.json`` names (the server starts another in place of a killed one: daemon.indexwatch).

    The indexer is stopped once the mount is detached, while the server is still exiting: the two shut down
    side by side (neither needs the other to stop; each closes its own LMDB environment)."""
    from libraryfs.layout import indexer_pid as running_indexer
    from libraryfs.layout import read_run

    fm = shutil.which("fusermount3") or shutil.which("fusermount") or "fusermount3"
    for args in (["-u"], ["-uz"]):
        if subprocess.run([fm, *args, mnt], capture_output=True).returncode == 0:
            break
    indexers = [indexer_pid]
    if libdir:
        indexers += [read_run(libdir).get("indexer_pid"), running_indexer(libdir)]
    indexers = [p for p in dict.fromkeys(indexers) if p]
    for pid in indexers:
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    for pid in pids:
        wait_exit(pid, 10)
    for pid in indexers:
        wait_exit(pid, 10)
    for pid in (*pids, *indexers):
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # type: ignore[arg-type]
            wait_exit(pid, 5)


def check_store(libdir: str) -> None:
    """``libraryfs check`` of the library (opened read-write, as the checker is run): the store's invariants
    and the ``names`` table (``N1``: the indexer is stopped); AssertionError with the checker's report when
    it finds a problem."""
    from libraryfs.fs.check import Problem, check, describe
    from libraryfs.fs.store import Store
    from libraryfs.index import names

    st = Store(libdir)
    try:
        report = check(st)
        report.problems += [Problem(f.code, 0, f.message) for f in names.verify(st)]
    finally:
        st.close()
    assert report.problems == [], describe(report)


def log_offsets(libdir: str) -> dict[str, int]:
    """Current sizes of the daemons' log files (the scan reads only what is logged after this)."""
    out = {}
    for name in LOGS:
        try:
            out[name] = os.path.getsize(os.path.join(libdir, "logs", name))
        except OSError:
            out[name] = 0
    return out


def unexpected_log_lines(libdir: str, since: dict[str, int], expected: Iterable[str] = ()) -> list[str]:
    """Lines of the daemons' logs written after ``since`` that report an error or a traceback and match
    none of the ``expected`` regular expressions (a traceback's continuation lines are not repeated)."""
    pats = [re.compile(p) for p in expected]
    bad = []
    for name in LOGS:
        try:
            with open(os.path.join(libdir, "logs", name), "rb") as f:
                f.seek(since.get(name, 0))
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if BAD_LINE.search(line) and not any(p.search(line) for p in pats):
                bad.append(f"{name}: {line}")
    return bad


def assert_logs_clean(libdir: str, since: dict[str, int], expected: Iterable[str] = ()) -> None:
    """AssertionError listing the unexpected error lines of :func:`unexpected_log_lines`, with the tail of
    the log they came from."""
    bad = unexpected_log_lines(libdir, since, expected)
    assert not bad, "unexpected errors in the daemons' logs (declare expected ones with expected_log):\n" + (
        "\n".join(bad[:40])
    )


@contextlib.contextmanager
def mount(
    libdir: str | Path,
    mnt: str | Path,
    *,
    indexer: bool = True,
    timeouts: str | None = "1,1,1",
    llm: bool | None = False,
    env: dict | None = None,
    server_alive: bool = True,
    check: bool = True,
    expected_log: Iterable[str] = (),
    **launcher_kw,
) -> Iterator[Mounted]:
    """Mount ``libdir`` at ``mnt`` (created if missing) with the real server and (unless ``indexer`` is
    false) the real indexer; yield a :class:`Mounted`; always unmount and stop both; then check the store
    and scan the logs (module doc). ``launcher_kw`` go to :func:`libraryfs.daemon.launcher.start`
    (``read_only``, ``budget``, ...). Raises the launcher's ``LaunchError`` if the mount does not come up.
    """
    from libraryfs.daemon import launcher

    require_fuse()
    libdir, mnt = str(libdir), str(mnt)
    os.makedirs(mnt, exist_ok=True)
    since = log_offsets(libdir)
    info = launcher.start(libdir, mnt, indexer=indexer, timeouts=timeouts, llm=llm, env=env, **launcher_kw)
    m = Mounted(libdir, mnt, info)
    try:
        yield m
        if server_alive and m.expect_server_alive:
            assert pid_alive(m.server_pid), (
                f"the mount server (pid {m.server_pid}) died during the test; mount.log ends:\n"
                + _tail(os.path.join(libdir, "logs", "mount.log"))
            )
    finally:
        unmount_and_stop(
            mnt, [info.get("server_pid"), m.info.get("server_pid")], m.info.get("indexer_pid"), libdir=libdir
        )
    if check:
        check_store(libdir)
    assert_logs_clean(libdir, since, expected_log)


def _tail(path: str, n_bytes: int = 3000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - n_bytes))
            return f.read().decode(errors="replace")
    except OSError:
        return "(no log)"
