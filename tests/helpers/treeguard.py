"""The source-tree guard (a pytest plugin): the test suite writes nothing into the source tree.

At the start of the session it records ``git status --porcelain --ignored --untracked-files=all`` of the
work tree the tests live in; at the end it compares the untracked and ignored paths. Any that appeared or
disappeared (build/, *.egg-info/, .pytest_cache/, .ruff_cache/, .hypothesis/, a stray library, ...) fails the session
with the list. Python's ``__pycache__`` and the interpreter pointer ``scripts/.python`` are left out. Outside
a git work tree (an installed sdist) the guard does nothing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IGNORED = ("__pycache__/", "scripts/.python")  #: path fragments the guard does not look at
KEY = pytest.StashKey[frozenset]()


def tree_state(root: Path = ROOT) -> frozenset[str] | None:
    """The porcelain status lines of ``root`` without the ignored fragments; None outside a git work tree."""
    try:
        r = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--ignored", "--untracked-files=all"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    return frozenset(
        ln
        for ln in r.stdout.splitlines()
        if ln[:2] in ("??", "!!")
        and not any(f in ln for f in IGNORED)  # edits of tracked files are the developer's
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker: the controller guards the whole run, once
    state = tree_state()
    if state is not None:
        session.config.stash[KEY] = state


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(KEY, None)
    if before is None:
        return
    after = tree_state()
    if after is None or after == before:
        return
    lines = [f"  + {ln}" for ln in sorted(after - before)] + [f"  - {ln}" for ln in sorted(before - after)]
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    msg = "the test session changed the source tree (git status before → after):\n" + "\n".join(lines[:50])
    if tr is not None:
        tr.write_sep("=", "source tree guard", red=True)
        tr.write_line(msg)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
