"""``pip install libraryfs`` without extras: what it pulls in, and that the filesystem works with only that.

Built honestly but without the network: the wheel is built from a copy of the source tree; its
``Requires-Dist`` (no extras) is resolved against the distributions installed in this environment (the
versions pip chose for it); a fresh virtual environment (``python -m venv --without-pip``) gets exactly the
wheel's files and the files of that dependency closure, nothing else — so sympy, tree-sitter, numpy,
rank-bm25 and math-verify are not importable there. In it: the closure holds none of them, ``libraryfs
units install`` finds its templates in the installed package, each feature command says in one line which
extra to install (exit status 3), and ``libraryfs init/mount/umount`` serve a real FUSE mount.
(``pip install --dry-run --report`` against PyPI gives the same closure: docs/architecture.md.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from helpers.mount import Mounted, require_fuse
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("sympy", "numpy", "tree-sitter", "tree_sitter", "math-verify", "rank-bm25", "crafter", "matplotlib")
SOURCES = ("pyproject.toml", "README.md", "libraryfs", "daemon", "cli")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(requires: list[str]) -> dict[str, metadata.Distribution]:
    """Installed distributions needed by ``requires`` (Requires-Dist lines, no extras), transitively."""
    out: dict[str, metadata.Distribution] = {}
    todo = list(requires)
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = _norm(req.name)
        if name in out:
            continue
        dist = metadata.distribution(req.name)
        out[name] = dist
        todo += dist.requires or []
    return out


@pytest.fixture(scope="module")
def core_env(tmp_path_factory):
    """``(python of a venv with the wheel + its no-extras closure, closure names)``."""
    tmp = tmp_path_factory.mktemp("core")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:  # build from a copy: nothing (build/, egg-info) is written into the tree
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(p, src / name)
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
            str(tmp),
            str(src),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    wheel = next(tmp.glob("libraryfs-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [ln.split(":", 1)[1].strip() for ln in meta.splitlines() if ln.startswith("Requires-Dist:")]
    deps = closure(requires)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    zipfile.ZipFile(wheel).extractall(site)
    for dist in deps.values():
        tops = {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")} - {"__pycache__"}
        for top in tops:
            real = Path(dist.locate_file(top))
            if real.exists() and not (site / top).exists():
                (site / top).symlink_to(real)
    return venv / "bin" / "python", set(deps)


CWD = "/"  #: run outside the source tree: ``python -m`` puts the working directory first on sys.path


def run(python: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``libraryfs ARGS`` with the core environment's interpreter (no PYTHONPATH from this one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "LIBRARYFS_"))}
    return subprocess.run(
        [str(python), "-m", "libraryfs.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=CWD,
    )


def test_no_extras_pulls_nothing_heavy(core_env):
    python, names = core_env
    assert {"openai", "lmdb", "mfusepy", "click"} <= names
    assert not [n for n in names if any(n.startswith(_norm(h)) for h in HEAVY)], sorted(names)
    heavy = ["sympy", "numpy", "tree_sitter", "rank_bm25", "math_verify"]
    probe = f"import importlib.util as u; print([m for m in {heavy!r} if u.find_spec(m)])"
    r = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env={}, cwd=CWD)
    assert r.stdout.strip() == "[]", r.stderr


def test_units_install_reads_the_templates_from_the_installed_package(core_env, tmp_path):
    python, _ = core_env
    r = run(python, "units", "install", "--user", "--prefix", str(tmp_path / "u"), "--exe", sys.executable)
    assert r.returncode == 0, r.stderr
    assert "ExecStart=" in (tmp_path / "u" / "libraryfs@.service").read_text()
    assert (tmp_path / "u" / "libraryfs.env.example").exists()


@pytest.mark.parametrize(
    "args, extra",
    [
        (["recall", "ep", "what?", "--library", "/nonexistent"], "episodes"),
        (["episode", "build", "--library", "/nonexistent"], "episodes"),
        (["code", "route", "x", "--repo", "r", "--tree", "/nonexistent"], "code"),
        (["solve", "1+1?", "--tree", "/nonexistent"], "cards"),
        (["cards", "block", "easy", "algebra", "--tree", "/nonexistent"], "cards"),
    ],
)
def test_a_feature_command_names_its_missing_extra(core_env, args, extra):
    python, _ = core_env
    r = run(python, *args)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and f"pip install 'libraryfs[{extra}]'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.mount
def test_mount_works_with_the_core_only(core_env, tmp_path):
    require_fuse()
    python, _ = core_env
    lib, mnt = tmp_path / "lib", tmp_path / "mnt"
    assert run(python, "init", str(lib)).returncode == 0
    r = run(python, "mount", str(lib), str(mnt))  # the mount server and the indexer (features' hooks off)
    assert r.returncode == 0, r.stderr + (lib / "logs" / "mount.log").read_text(errors="replace")
    try:
        (mnt / "note.md").write_text("# Core only\n\nNo extras installed.\n")
        assert (mnt / "note.md").read_text().startswith("# Core only")
        Mounted(lib, mnt, {}).wait_indexed()  # idle, and the mount serves the TOCs it rewrote last
        assert "note.md" in (mnt / "INDEX.md").read_text()
        assert "Traceback" not in (lib / "logs" / "indexer.log").read_text(errors="replace")
    finally:
        r = run(python, "umount", str(mnt))
    assert r.returncode == 0, r.stderr
