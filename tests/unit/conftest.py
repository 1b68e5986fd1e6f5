"""Fixtures shared by the unit tests."""

import subprocess

import pytest
from helpers.facility import unavailable


@pytest.fixture
def small_disk(tmp_path):
    """A real 8 MiB tmpfs (root can mount one): a disk that really fills up."""
    d = tmp_path / "disk"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(d)], capture_output=True)
    if r.returncode != 0:
        unavailable(f"cannot mount a tmpfs: {r.stderr!r}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)])
