"""ruff lint and format over the packages, tests and benchmarks, and mypy over the core (STYLE.md: lint
runs in CI).

Run as ``python -m ruff``/``python -m mypy`` of the test interpreter without a cache in the tree (ruff
``--no-cache``; mypy's cache in the test's temporary directory), so nothing is written into the tree.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["libraryfs", "daemon", "cli", "tests", "bench"]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", *PATHS], cwd=ROOT, capture_output=True, text=True
    )


def test_ruff_check_is_clean():
    r = _ruff("check")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_ruff_format_is_clean():
    r = _ruff("format", "--check")
    assert r.returncode == 0, "run `ruff format` on:\n" + r.stdout[-4000:] + r.stderr[-2000:]


def test_mypy_is_clean_on_the_core(tmp_path):
    """The files of ``[tool.mypy] files`` in pyproject.toml (the filesystem core, the index, the LLM client)."""
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_every_public_function_and_class_has_a_docstring_at_any_depth():
    """ruff's D1 rules see module-level and class-level definitions only; nested helpers (transaction bodies,
    decorator wrappers, handler methods of local classes) need their docstring too (the handbook: shapes,
    units, errors, source). A name starting with ``_`` is private and exempt."""
    import ast

    missing = []
    for top in ("libraryfs", "daemon", "cli"):
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    continue
                if not node.name.startswith("_") and ast.get_docstring(node) is None:
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert missing == [], f"{len(missing)} without a docstring:\n" + "\n".join(missing)
