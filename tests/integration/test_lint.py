"""ruff over the packages, tests and benchmarks (STYLE.md: lint runs in CI)."""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_is_clean():
    ruff = shutil.which("ruff")
    assert ruff, "ruff is installed by the test extras (pip install -e '.[test]')"
    r = subprocess.run([ruff, "check", "libraryfs", "daemon", "cli", "tests", "bench"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:]
