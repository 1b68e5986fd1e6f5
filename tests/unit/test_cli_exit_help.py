"""``libraryfs --help`` lists every exit status the README's "Exit status" table gives (a new user's first
look at the command had none of them), with the numbers the code uses."""

import re
import subprocess
import sys

from libraryfs.cli.code_cmds import EXIT_AGENT_FAILED, EXIT_PLAN_REFUSED
from libraryfs.cli.common import EXIT_MISSING_EXTRA
from libraryfs.cli.episode_cmds import EXIT_UNKNOWN
from libraryfs.errors import EXIT_DAMAGED, EXIT_INDEXER_STOPPING, EXIT_STOPPED, EXIT_UNAVAILABLE


def test_root_help_lists_the_exit_statuses():
    r = subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", "--help"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    head, sep, table = r.stdout.partition("Exit status")
    assert sep, r.stdout
    codes = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\s+(\d+)\s+(\S.*)$", table, re.M)}
    assert sorted(codes) == list(range(11)), table
    want = {
        1: "one line",
        2: "usage",
        EXIT_MISSING_EXTRA: "extra",
        EXIT_DAMAGED: "damaged",
        EXIT_PLAN_REFUSED: "refused",
        EXIT_AGENT_FAILED: "agent failed",
        EXIT_UNKNOWN: "unknown",
        EXIT_UNAVAILABLE: "reached",
        EXIT_STOPPED: "stopped",
        EXIT_INDEXER_STOPPING: "indexer",
    }
    for code, word in want.items():
        assert word in codes[code], (code, codes[code])
