"""The log guard (a pytest plugin; s3ql's tests/pytest_checklogs.py is the model).

A test fails when the code under test logs a record at WARNING or above that the test did not declare as
expected. Declare expected records with

* the marker ``@pytest.mark.expect_log(r"regex", ...)`` — any record (and any line of the mount and indexer
  logs scanned by :func:`helpers.mount.mount`) whose message matches one of the regular expressions is
  allowed, however often it occurs;
* or, around the statements that must produce it, ``with assert_logs(r"regex"):`` — the record is then
  also required (``count=`` pins how many).

Python warnings are errors (``filterwarnings = ["error", ...]`` in pyproject.toml); declare an expected one
with ``pytest.warns`` or ``@pytest.mark.filterwarnings("ignore:...")``. Records logged during fixture
teardown are not checked (the mount's own teardown scans the daemons' logs instead).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator

import pytest

FLAG = "checklogs_expected"  #: attribute set on a record declared by :func:`assert_logs`


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "expect_log(*patterns): regular expressions of WARNING/ERROR log messages (and daemon log lines) the "
        "test expects; the log guard lets them pass",
    )


@pytest.fixture
def expected_log_patterns(request: pytest.FixtureRequest) -> list[str]:
    """The regular expressions of every ``expect_log`` marker on the test (closest first)."""
    return [p for m in request.node.iter_markers("expect_log") for p in m.args]


class _Flagger(logging.Handler):
    """Flags (and counts) the records that match ``pattern`` at ``level`` or above."""

    def __init__(self, pattern: str, level: int) -> None:
        super().__init__(logging.NOTSET)
        self.pattern = re.compile(pattern)
        self.min_level = level
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= self.min_level and self.pattern.search(record.getMessage()):
            setattr(record, FLAG, True)
            self.count += 1


@contextlib.contextmanager
def assert_logs(pattern: str, level: int = logging.WARNING, count: int | None = None) -> Iterator[None]:
    """Require a log record at ``level`` or above whose message matches ``pattern`` inside the block (exactly
    ``count`` of them when given) and let the log guard pass it. AssertionError when it is missing."""
    h = _Flagger(pattern, level)
    root = logging.getLogger()
    root.addHandler(h)
    try:
        yield
    finally:
        root.removeHandler(h)
    if count is None:
        assert h.count > 0, f"expected a log record matching {pattern!r}, got none"
    else:
        assert h.count == count, f"expected {count} log record(s) matching {pattern!r}, got {h.count}"


@pytest.fixture(autouse=True)
def _log_guard(request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture, expected_log_patterns):
    """Fail the test (in its teardown) on an undeclared WARNING/ERROR record of its setup or call."""
    yield
    pats = [re.compile(p) for p in expected_log_patterns]
    bad = [
        r
        for when in ("setup", "call")
        for r in caplog.get_records(when)
        if r.levelno >= logging.WARNING
        and not getattr(r, FLAG, False)
        and not any(p.search(r.getMessage()) for p in pats)
    ]
    if bad:
        lines = "\n".join(f"  {r.levelname} {r.name}: {r.getMessage()}"[:500] for r in bad[:20])
        pytest.fail(
            f"{len(bad)} unexpected log record(s) at WARNING or above (declare expected ones with "
            f"@pytest.mark.expect_log or assert_logs):\n{lines}",
            pytrace=False,
        )
