"""Packaging: daemon/ and cli/ install as libraryfs.daemon / libraryfs.cli; no package is left out."""

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_listed():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    mapping = cfg["package-dir"]
    found = set()
    for pkg, src in (("libraryfs", "libraryfs"), ("libraryfs.daemon", "daemon"), ("libraryfs.cli", "cli")):
        for dirpath, _dirs, files in os.walk(ROOT / src):
            if "__init__.py" in files and "__pycache__" not in dirpath:
                rel = os.path.relpath(dirpath, ROOT / src)
                found.add(pkg if rel == "." else pkg + "." + rel.replace(os.sep, "."))
    assert found <= listed, f"packages missing from pyproject.toml: {sorted(found - listed)}"
    assert mapping["libraryfs.daemon"] == "daemon" and mapping["libraryfs.cli"] == "cli"


def test_wheel_puts_nothing_generic_in_site_packages(tmp_path):
    # build from a copy: an in-tree build writes build/ and *.egg-info/ into the source tree
    src = tmp_path / "src"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".venv"),
    )
    out = tmp_path / "wheels"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(src),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    whl = next(out.glob("libraryfs-*.whl"))
    tops = {n.split("/")[0] for n in zipfile.ZipFile(whl).namelist()}
    assert {t for t in tops if not t.startswith("libraryfs")} == set()
    names = zipfile.ZipFile(whl).namelist()
    assert "libraryfs/daemon/indexer.py" in names and "libraryfs/cli/main.py" in names
