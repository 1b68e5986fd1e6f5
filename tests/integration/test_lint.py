"""ruff lint and format over the packages, tests and benchmarks, and mypy over the core (STYLE.md: lint
runs in CI).

Run as ``python -m ruff``/``python -m mypy`` of the test interpreter without a cache in the tree (ruff
``--no-cache``; mypy's cache outside it, see :func:`_mypy_cache_dir`), so nothing is written into the tree.
"""

import hashlib
import os
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


def _mypy_cache_dir(tmp_path: Path) -> Path:
    """mypy's incremental cache, kept between runs under ``$XDG_CACHE_HOME`` (``~/.cache``), one per test
    interpreter; ``tmp_path`` when that cannot be made.

    A cold run analyses the stdlib stubs and the typed dependencies (openai) the core imports: ~18 s of CPU
    against ~1 s warm. Reusing the cache loses nothing: mypy re-checks every module whose source changed
    (size, then content hash when the mtime or path differ: ``validate_meta`` in mypy/build.py), and a
    different mypy version or configuration invalidates the cache; its writes are atomic."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(sys.executable.encode()).hexdigest()[:16]
    d = base / "libraryfs-tests" / "mypy" / key
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return tmp_path / "mypy-cache"
    return d


def test_mypy_is_clean_on_the_core(tmp_path):
    """The files of ``[tool.mypy] files`` in pyproject.toml (the filesystem core, the index, the LLM client)."""
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(_mypy_cache_dir(tmp_path))],
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
