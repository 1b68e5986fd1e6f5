"""Facilities a test needs (FUSE, etcd, the local model, system tools): skip when missing, fail in CI.

``CI=true`` means .ci/run installed everything, so a missing facility there is a failure, never a skip
(a mount test that skips in CI is a failure: ARCHITECTURE §6). This is the one place the suite skips.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(why: str) -> NoReturn:
    """A facility the test needs is missing: ``pytest.skip`` here, ``pytest.fail`` in CI."""
    if IN_CI:
        pytest.fail(f"required in CI: {why}")
    pytest.skip(why)
