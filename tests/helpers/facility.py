"""Facilities a test needs (FUSE, etcd, the local model, system tools): a missing one fails the test.

The suite never skips (tests/conftest.py turns any skip into a failure): a mount test that does not run has
not passed (ARCHITECTURE §6). ``bash scripts/setup.sh`` installs every facility; the failure message says
what is missing and how to install it.
"""

from __future__ import annotations

from typing import NoReturn

import pytest


def unavailable(why: str) -> NoReturn:
    """A facility the test needs is missing: the test fails, saying which (run ``bash scripts/setup.sh``)."""
    pytest.fail(f"required by this test: {why} (bash scripts/setup.sh installs it)")
