"""Shared fixtures and the suite's layers (tests/README.md).

* ``libdir``  — an initialised, empty library in a temporary directory.
* ``mounted`` — that library mounted by :func:`helpers.mount.mount` (the real server and, unless the test is
  marked ``no_indexer``, the real indexer daemon); unmounted, checked and its logs scanned in teardown.
* ``run_cli`` — the real ``libraryfs`` command line in a subprocess.
* ``local_llm`` — the real local model served on loopback, one server per session (tests/helpers/local_llm.py).
* ``etcd_cluster`` / ``etcd_backend`` / ``etcd_url`` — a real 3-member etcd cluster on loopback (tests/helpers/etcd_cluster.py).

Markers say what a test needs and are applied here, by directory (``unit``, ``mount``, ``integration``,
``bench``, ``posix`` for tests/posix_behaviour) and by fixture (``mount`` for ``mounted``, ``etcd``, ``llm_local``), so ``pytest -m "not mount"``
selects what runs without FUSE. Every test also runs under the log guard of tests/helpers/checklogs.py and
the session under the source-tree guard of tests/helpers/treeguard.py.

In CI (``CI=true``) a missing /dev/fuse or fusermount3 is an error, never a skip (a mount test that skips in
CI is a failure).
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

# hypothesis keeps its example database and caches under ./.hypothesis unless told otherwise: keep them out
# of the source tree (before hypothesis is imported)
if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
    _hypothesis_dir = tempfile.mkdtemp(prefix="libraryfs-hypothesis-")
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = _hypothesis_dir
    atexit.register(shutil.rmtree, _hypothesis_dir, ignore_errors=True)

# The indexer daemon lowers its own priority (index.nice = 10: the mount server wins the CPU). On a loaded
# machine a niced daemon gets a few percent of a core, so a test waiting for it to finish a pass or to exit
# waits on the scheduler, not on libraryfs. The daemons the tests start run at the tests' priority; the
# renice itself is tested with the variable removed (test_service_lifecycle).
os.environ.setdefault("LIBRARYFS_INDEX_NICE", "0")

import pytest  # noqa: E402
from helpers import tmpbase  # noqa: E402
from helpers.etcd_cluster import etcd_backend, etcd_cluster, etcd_url  # noqa: F401, E402  (fixtures)
from helpers.local_llm import local_llm  # noqa: F401, E402  (session fixture: the real local model)
from helpers.mount import Mounted, mount  # noqa: F401, E402  (Mounted: the type of the mounted fixture)

from libraryfs.fs.store import Store  # noqa: E402

pytest_plugins = ["helpers.checklogs", "helpers.treeguard"]

TESTS = Path(__file__).resolve().parent
LAYERS = {
    "unit": "unit",
    "mount": "mount",
    "integration": "integration",
    "bench": "bench",
    "posix_behaviour": "posix",
}
#: tests/<directory>/ → marker
FIXTURE_MARKS = {
    "mounted": "mount",
    "etcd_cluster": "etcd",
    "etcd_backend": "etcd",
    "etcd_url": "etcd",
    "local_llm": "llm_local",
}  #: a test using the fixture gets the marker
#: a test function or fixture taking the real local model (``local_llm``): its module is an LLM module
_TAKES_LOCAL_LLM = re.compile(r"\bdef \w+\([^)]*\blocal_llm\b")


@functools.cache
def llm_modules(rootpath: Path) -> frozenset[str]:
    """The test modules (paths relative to ``rootpath``, as in node ids) with a test that takes ``local_llm``."""
    return frozenset(
        p.relative_to(rootpath).as_posix()
        for p in TESTS.rglob("test_*.py")
        if _TAKES_LOCAL_LLM.search(p.read_text(encoding="utf-8"))
    )


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before pytest-xdist's own scheduler choice
def pytest_xdist_make_scheduler(config, log):
    """Two pytest-xdist workers (``scripts/test.sh``: ``-n 2 --dist loadfile``): a module's tests run on one
    worker (its module fixtures are set up once), and every LLM module's on the same one, so the session's
    real local model server starts once per run, not once per worker (:func:`llm_modules`)."""
    if config.getvalue("dist") not in ("loadfile", "loadscope", "loadgroup"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    llm = llm_modules(config.rootpath)

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "llm_local" if module in llm else module

    return ByModule(config, log)


@pytest.hookimpl(tryfirst=True)  # before the tmpdir plugin's, which reads --basetemp
def pytest_configure(config):
    config.addinivalue_line("markers", "no_indexer: mount without the indexer daemon")
    config.addinivalue_line("markers", "timeouts(spec): kernel cache timeouts 'entry,attr,negative'")
    if config.option.basetemp is None:
        # A session's own base directory, not a numbered one under /tmp/pytest-of-<user>: at its end pytest
        # deletes the older numbered directories of *every* session of the user, and on a shared machine one
        # of them can hold another run's dead FUSE mount — rmtree hits EIO and the session ends in an
        # internal error after every test passed. Removed when the session passes; kept when it fails.
        config.option.basetemp = tempfile.mkdtemp(prefix=tmpbase.PREFIX)
        config.stash[_OWN_BASETEMP] = config.option.basetemp
        # a failed session keeps its base: bound how many pile up (helpers/tmpbase.py)
        tmpbase.prune_kept_bases(tempfile.gettempdir(), own=config.option.basetemp)


_OWN_BASETEMP = pytest.StashKey[str]()  #: the base directory pytest_configure made for this session


def pytest_sessionfinish(session, exitstatus):
    """Remove the session's own base directory (``pytest_configure``) when every test passed."""
    base = session.config.stash.get(_OWN_BASETEMP, None)
    if base and exitstatus == 0:
        shutil.rmtree(base, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """Mark every test by its directory and by the facilities its fixtures need; a test taking the local
    model in a module :func:`llm_modules` does not name is a usage error (it would start a second server)."""
    for item in items:
        try:
            layer = Path(str(item.path)).resolve().relative_to(TESTS).parts[0]
        except ValueError:
            layer = ""
        if layer in LAYERS:
            item.add_marker(LAYERS[layer])
        names = getattr(item, "fixturenames", ())
        for fixture, marker in FIXTURE_MARKS.items():
            if fixture in names:
                item.add_marker(marker)
        module = item.nodeid.split("::", 1)[0]
        if "local_llm" in names and module not in llm_modules(config.rootpath):
            raise pytest.UsageError(
                f"{item.nodeid} takes local_llm indirectly: name local_llm in a signature of {module} "
                "(tests/conftest.py llm_modules), so its tests share the worker that runs the local model"
            )


REPORTS = pytest.StashKey[dict]()  #: the test's phase reports ("setup", "call", "teardown")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item, so fixtures can tell in teardown whether the test failed."""
    rep = yield
    _no_skips(rep)
    item.stash.setdefault(REPORTS, {})[rep.when] = rep
    return rep


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A module that skips at import (``pytest.importorskip``, ``allow_module_level``) fails instead."""
    rep = yield
    _no_skips(rep)
    return rep


def _no_skips(rep) -> None:
    """This suite has no skips: a skipped test (or module) is reported failed, with the skip's reason — a
    mount test that did not run has not passed (ARCHITECTURE §6). Expected failures (xfail) stay as they are."""
    if rep.skipped and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = f"a test skipped ({reason}); this suite does not skip: install what it needs"


def call_failed(request) -> bool:
    """Whether the running test's call phase failed (for fixtures in teardown)."""
    rep = request.node.stash.get(REPORTS, {}).get("call")
    return rep is not None and rep.failed


#: ``LIBRARYFS_TEST_STORE=etcd`` runs the tests that use ``libdir``/``mounted`` on a library whose store is on
#: the session's etcd cluster (``init --store``) instead of LMDB: the mount tests against the etcd backend.
TEST_STORE = os.environ.get("LIBRARYFS_TEST_STORE", "lmdb")


@pytest.fixture
def libdir(request, tmp_path: Path) -> Path:
    """A new empty library (TOC bound 2,000 tokens); on etcd when ``LIBRARYFS_TEST_STORE=etcd``."""
    d = tmp_path / "lib"
    if TEST_STORE == "etcd":
        import uuid

        cluster = request.getfixturevalue("etcd_cluster")
        Store.create(d, {"toc_max_tokens": 2000}, url=cluster.url(f"test/{uuid.uuid4().hex[:12]}")).close()
    else:
        Store.create(d, {"toc_max_tokens": 2000}).close()
    return d


@pytest.fixture
def store(tmp_path: Path):
    """A new LMDB store in ``tmp_path/lib`` (no mount); the test fails if ``libraryfs check`` finds a
    problem after it. A module may define its own ``store`` (pytest prefers the nearer fixture)."""
    from libraryfs.fs.check import check, describe

    st = Store.create(tmp_path / "lib")
    yield st
    try:
        report = check(st)
        assert report.problems == [], describe(report)
    finally:
        st.close()


@pytest.fixture
def mounted(request, libdir: Path, tmp_path: Path, expected_log_patterns):
    """The library mounted (real server + indexer subprocesses); unmounted, checked and its logs scanned
    in teardown. Markers: ``no_indexer``, ``timeouts("entry,attr,negative")``, ``expect_log(regex, ...)``."""
    tm = request.node.get_closest_marker("timeouts")
    with mount(
        libdir,
        tmp_path / "mnt",
        indexer=request.node.get_closest_marker("no_indexer") is None,
        timeouts=tm.args[0] if tm else "1,1,1",
        expected_log=expected_log_patterns,
    ) as m:
        yield m
        if call_failed(request):
            m.expect_server_alive = False  # the failure is the report; a dead server follows from it


@pytest.fixture
def run_cli():
    """Run the real ``libraryfs`` console script: returns CompletedProcess (text)."""
    import subprocess

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
