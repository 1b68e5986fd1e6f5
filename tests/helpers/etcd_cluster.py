"""A real 3-member etcd cluster on loopback for the tests, started by scripts/etcd-cluster.sh.

``etcd_cluster`` (session fixture) starts it once per test session (skip locally / fail in CI when etcd is
not installed) and stops it at the end; ``etcd_backend`` gives each test an EtcdBackend on its own prefix
and deletes that prefix afterwards. Fault tests use ``kill(n)`` / ``restart(n)`` and must leave the
cluster healthy (``restart_all()``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from helpers.facility import unavailable
from helpers.wait import wait_until

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "etcd-cluster.sh"


class EtcdCluster:
    """A running cluster: ``endpoints`` ["127.0.0.1:port", ...] in member order m1, m2, m3."""

    def __init__(self, directory: Path, quota_bytes: int = 0) -> None:
        self.dir = directory
        self.quota_bytes = quota_bytes
        self.endpoints: list[str] = []

    def _run(self, *args: str, timeout_s: float = 120) -> str:
        env = {"LIBRARYFS_ETCD_QUOTA_BYTES": str(self.quota_bytes)} if self.quota_bytes else {}
        r = subprocess.run(
            ["bash", str(SCRIPT), *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=dict(os.environ, **env),
        )
        if r.returncode != 0:
            raise RuntimeError(
                f"etcd-cluster.sh {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}"
            )
        return r.stdout.strip()

    def start(self) -> None:
        out = self._run("start", str(self.dir))
        self.endpoints = [u.split("//", 1)[1] for u in out.splitlines()[-1].split(",")]

    def stop(self) -> None:
        self._run("stop", str(self.dir))

    def url(self, prefix: str) -> str:
        """The etcd:// store URL of ``prefix`` on this cluster."""
        return f"etcd://{','.join(self.endpoints)}/{prefix}"

    def member_of(self, endpoint: str) -> int:
        """Member number (1..3) serving ``endpoint``."""
        return self.endpoints.index(endpoint) + 1

    def kill(self, n: int) -> None:
        """kill -9 member n (returns once it is gone)."""
        self._run("kill", str(self.dir), str(n))

    def restart(self, n: int) -> None:
        """Start member n again on its data directory (no wait)."""
        self._run("restart", str(self.dir), str(n))

    def status(self) -> dict[int, str]:
        """Member number → "healthy" | "unhealthy" | "stopped"."""
        out = {}
        for line in self._run("status", str(self.dir)).splitlines():
            name, *_, state = line.split()
            out[int(name[1:])] = state
        return out

    def restart_all(self) -> None:
        """Restart every stopped member and wait until all three are healthy."""
        for n, state in self.status().items():
            if state == "stopped":
                self.restart(n)
        wait_until(lambda: set(self.status().values()) == {"healthy"}, 60, "all etcd members healthy again")


def etcd_missing() -> str | None:
    """None if etcd and etcdctl are installed, else why not."""
    if not (shutil.which("etcd") and shutil.which("etcdctl")):
        return "etcd is not installed (apt-get install etcd-server etcd-client)"
    return None


def start_cluster(directory: Path, quota_bytes: int = 0) -> EtcdCluster:
    """Start a cluster in ``directory`` (skips locally / fails in CI when etcd is missing)."""
    why = etcd_missing()
    if why:
        unavailable(why)
    c = EtcdCluster(directory, quota_bytes)
    c.start()
    return c


@pytest.fixture(scope="session")
def etcd_cluster(tmp_path_factory):
    """The session's 3-member loopback cluster."""
    c = start_cluster(tmp_path_factory.mktemp("etcd"))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def etcd_backend(etcd_cluster):
    """An EtcdBackend on a fresh prefix of the session cluster (the prefix is deleted afterwards)."""
    from libraryfs.fs.etcd_backend import EtcdBackend

    etcd_cluster.restart_all()  # a previous fault test may have left a member down
    b = EtcdBackend.open(etcd_cluster.url(f"test/{uuid.uuid4().hex[:12]}"))
    try:
        yield b
    finally:
        clear_prefix(b)
        b.close()


@pytest.fixture
def etcd_url(etcd_cluster):
    """A fresh etcd:// store URL on the session cluster (for ``init --store``); its prefix is deleted
    afterwards."""
    from libraryfs.fs.etcd_backend import EtcdBackend

    etcd_cluster.restart_all()
    url = etcd_cluster.url(f"test/{uuid.uuid4().hex[:12]}")
    yield url
    b = EtcdBackend.open(url)
    try:
        clear_prefix(b)
    finally:
        b.close()


def clear_prefix(b) -> None:
    """Delete every key of a backend's prefix (test cleanup)."""
    from libraryfs.fs.etcd_gateway import b64

    base = b.ks.base
    b.gw.call("kv/deleterange", {"key": b64(base), "range_end": b64(base[:-1] + b"0")})
