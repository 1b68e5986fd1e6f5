"""The workloads of ``bench/workloads.py``: what each timed step does on one filesystem.

A workload is a group of steps run back to back on one filesystem, then cleaned up (untimed). Each step
yields one metric in seconds (plus its parts). Steps marked ``cold`` run right after the filesystem was made
cold (:meth:`workload_fs.Filesystem.remount`). Shell tools run as subprocesses timed around the call;
the file and SQLite loops run in ``bench/workload_clients.py`` (timed inside the client).

| workload | steps (metrics) |
|---|---|
| docs | ``untar`` (``tar -xf`` of the python3 HTML docs + ``sync``), ``ls_cold``/``ls_warm`` (``ls -laR``), ``rg_cold``/``rg_warm`` (``rg -c import``) |
| git | ``git`` (``git clone --no-local`` of a local bare repository + ``git status`` + ``git log``) |
| files | ``create``/``stat``/``read``/``unlink`` of N files of SIZE bytes |
| sqlite | ``sqlite_rollback``/``sqlite_wal`` (autocommit INSERTs), ``sqlite_bulk`` (one transaction) |
| procs | ``procs_create`` (P processes × M creates, own directories, started together), ``procs_read`` (cold) |
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "workload_clients.py")


@dataclass
class Sizes:
    """How big each workload is (defaults: the figures of issue 18)."""

    files: int = 10_000
    file_bytes: int = 1024
    sqlite_commits: int = 1000
    sqlite_rows: int = 100_000
    procs: int = 8
    proc_files: int = 2000


@dataclass
class Inputs:
    """Prepared once per run, outside every filesystem under test."""

    docs_tar: str  #: tarball of the docs tree
    docs_files: int  #: files and symlinks in it (directories not counted)
    git_src: str  #: local bare repository to clone
    sizes: Sizes


@dataclass
class Step:
    """One timed step: ``run(root, inputs) -> (seconds, parts)``."""

    metric: str
    run: Callable[[str, Inputs], tuple[float, dict]]
    cold: bool = False


@dataclass
class Workload:
    """Steps run back to back on one filesystem; ``cleanup(root)`` afterwards (untimed)."""

    name: str
    steps: list[Step]
    cleanup: Callable[[str], None]


class StepError(RuntimeError):
    """A workload step failed (the command, its exit status and its last error line)."""


def _run(cmd: list[str], cwd: str | None = None, ok: tuple[int, ...] = (0,)) -> float:
    """Run ``cmd`` with its output discarded; returns wall seconds. Raises StepError on a bad status."""
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t
    if r.returncode not in ok:
        err = (r.stderr.decode(errors="replace").strip().splitlines() or [""])[-1]
        raise StepError(f"{' '.join(cmd)}: exit {r.returncode}: {err}")
    return elapsed


def client(*args: object) -> float:
    """Run one ``workload_clients.py`` command; returns the seconds it measured."""
    r = subprocess.run([sys.executable, CLIENT, *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise StepError(f"client {' '.join(map(str, args))}: {(r.stderr.strip().splitlines() or [''])[-1]}")
    return json.loads(r.stdout.strip().splitlines()[-1])["seconds"]


def _rmtree(path: str) -> None:
    if os.path.lexists(path):
        shutil.rmtree(path)


# -- docs: untar, ls -laR, rg ----------------------------------------------------------------------------------
def untar(root: str, inp: Inputs) -> tuple[float, dict]:
    """``tar -xf docs.tar -C root/untar`` then ``sync`` (the data reaches the disk, whatever holds it)."""
    d = os.path.join(root, "untar")
    os.mkdir(d)
    tar_s = _run(["tar", "-xf", inp.docs_tar, "-C", d])
    t = time.perf_counter()
    os.sync()
    sync_s = time.perf_counter() - t
    return tar_s + sync_s, {"tar_s": tar_s, "sync_s": sync_s}


def ls_laR(root: str, inp: Inputs) -> tuple[float, dict]:
    """``ls -laR root/untar > /dev/null``."""
    return _run(["ls", "-laR", os.path.join(root, "untar")]), {}


def rg_import(root: str, inp: Inputs) -> tuple[float, dict]:
    """``rg -c import root/untar > /dev/null`` (ripgrep's default threads; exit 1 = no match is fine)."""
    return _run(["rg", "-c", "import", os.path.join(root, "untar")], ok=(0, 1)), {}


# -- git ---------------------------------------------------------------------------------------------------------
def git(root: str, inp: Inputs) -> tuple[float, dict]:
    """``git clone --no-local`` (pack transport, no hardlinks) + ``git status`` + ``git log``."""
    d = os.path.join(root, "clone")
    clone_s = _run(["git", "clone", "-q", "--no-local", inp.git_src, d])
    status_s = _run(["git", "-C", d, "status", "--porcelain"])
    log_s = _run(["git", "-C", d, "log", "--oneline", "--stat"])
    return clone_s + status_s + log_s, {"clone_s": clone_s, "status_s": status_s, "log_s": log_s}


# -- files -------------------------------------------------------------------------------------------------------
def files_step(op: str) -> Callable[[str, Inputs], tuple[float, dict]]:
    """The ``files OP`` client on ``root/files``."""

    def run(root: str, inp: Inputs) -> tuple[float, dict]:
        d = os.path.join(root, "files")
        if op == "create":
            os.mkdir(d)
        return client("files", op, d, inp.sizes.files, inp.sizes.file_bytes), {}

    run.__name__ = f"files_{op}"
    return run


# -- sqlite ------------------------------------------------------------------------------------------------------
def sqlite_step(mode: str) -> Callable[[str, Inputs], tuple[float, dict]]:
    """The ``sqlite MODE`` client on a new database in ``root/sqlite``."""

    def run(root: str, inp: Inputs) -> tuple[float, dict]:
        d = os.path.join(root, "sqlite")
        os.makedirs(d, exist_ok=True)
        return client(
            "sqlite", mode, os.path.join(d, mode + ".db"), inp.sizes.sqlite_commits, inp.sizes.sqlite_rows
        ), {}

    run.__name__ = f"sqlite_{mode}"
    return run


# -- procs -------------------------------------------------------------------------------------------------------
def procs(op: str, root: str, inp: Inputs) -> tuple[float, dict]:
    """P worker processes, each on its own directory ``root/procs/pNN``, released at once; returns the wall
    time from the release to the last worker's end, and each worker's own time. ``fsync``: creates with an
    ``fsync`` before each close, a tenth as many files per worker, in ``root/procs/pNNs``."""
    base = os.path.join(root, "procs")
    n = inp.sizes.proc_files if op != "fsync" else max(1, inp.sizes.proc_files // 10)
    os.makedirs(base, exist_ok=True)
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                CLIENT,
                "worker",
                op,
                os.path.join(base, f"p{i:02d}" + ("s" if op == "fsync" else "")),
                str(n),
                str(inp.sizes.file_bytes),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(inp.sizes.procs)
    ]
    try:
        for w in workers:
            if w.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
                raise StepError(f"procs {op}: a worker failed to start")
        t = time.perf_counter()
        for w in workers:
            w.stdin.write("go\n")  # type: ignore[union-attr]
            w.stdin.flush()  # type: ignore[union-attr]
        outs = [w.communicate()[0] for w in workers]
        elapsed = time.perf_counter() - t
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    if any(w.returncode for w in workers):
        raise StepError(f"procs {op}: a worker failed")
    each = [json.loads(o.strip().splitlines()[-1])["seconds"] for o in outs]
    return elapsed, {"worker_s": [round(x, 4) for x in each]}


def _procs_step(op: str) -> Callable[[str, Inputs], tuple[float, dict]]:
    def run(root: str, inp: Inputs) -> tuple[float, dict]:
        return procs(op, root, inp)

    run.__name__ = f"procs_{op}"
    return run


WORKLOADS: list[Workload] = [
    Workload(
        "docs",
        [
            Step("untar", untar),
            Step("ls_cold", ls_laR, cold=True),
            Step("ls_warm", ls_laR),
            Step("rg_cold", rg_import, cold=True),
            Step("rg_warm", rg_import),
        ],
        lambda root: _rmtree(os.path.join(root, "untar")),
    ),
    Workload("git", [Step("git", git)], lambda root: _rmtree(os.path.join(root, "clone"))),
    Workload(
        "files",
        [Step(op, files_step(op)) for op in ("create", "stat", "read", "unlink")],
        lambda root: _rmtree(os.path.join(root, "files")),
    ),
    Workload(
        "sqlite",
        [Step("sqlite_" + m, sqlite_step(m)) for m in ("rollback", "wal", "bulk")],
        lambda root: _rmtree(os.path.join(root, "sqlite")),
    ),
    Workload(
        "procs",
        [
            Step("procs_create", _procs_step("create")),
            Step("procs_read", _procs_step("read"), cold=True),
            Step("procs_fsync", _procs_step("fsync")),
        ],
        lambda root: _rmtree(os.path.join(root, "procs")),
    ),
]
WORKLOAD_NAMES = tuple(w.name for w in WORKLOADS)
METRICS = tuple(s.metric for w in WORKLOADS for s in w.steps)


def workload(name: str) -> Workload:
    """The workload called ``name``."""
    for w in WORKLOADS:
        if w.name == name:
            return w
    raise ValueError(f"unknown workload {name!r} (one of {', '.join(WORKLOAD_NAMES)})")


def prepare_inputs(work: str, docs_dir: str, docs_limit: int | None, git_source: str, sizes: Sizes) -> Inputs:
    """Make the docs tarball and the bare repository to clone, in ``work`` (a disk, not a mount under test).

    ``docs_limit`` keeps only the first N files of the docs tree (sorted paths), for tiny runs. Raises
    StepError when a source is missing.
    """
    docs_dir = os.path.realpath(docs_dir)  # /usr/share/doc/python3/html is a symlink: tar its target
    if not os.path.isdir(docs_dir):
        raise StepError(f"docs tree {docs_dir} is missing (apt-get install python3-doc, or pass --docs)")
    parent, base = os.path.split(docs_dir.rstrip("/"))
    tar = os.path.join(work, "docs.tar")
    if docs_limit:
        members = []
        for dirpath, dirnames, filenames in os.walk(docs_dir):
            dirnames.sort()
            members += [os.path.relpath(os.path.join(dirpath, f), parent) for f in sorted(filenames)]
        listing = os.path.join(work, "docs.list")
        with open(listing, "w") as f:
            f.write("\n".join(members[:docs_limit]) + "\n")
        _run(["tar", "-cf", tar, "-C", parent, "--no-recursion", "-T", listing])
    else:
        _run(["tar", "-cf", tar, "-C", parent, base])
    members = subprocess.run(["tar", "-tf", tar], capture_output=True, text=True, check=True).stdout
    n = sum(1 for m in members.splitlines() if not m.endswith("/"))  # files and symlinks
    src = os.path.join(work, "src.git")
    _run(["git", "clone", "-q", "--bare", "--no-local", git_source, src])
    return Inputs(tar, n, src, sizes)


def git_facts(src: str) -> dict:
    """Commit, commit count and pack size of the repository the git step clones."""

    def out(*a: str) -> str:
        return subprocess.run(["git", "-C", src, *a], capture_output=True, text=True).stdout.strip()

    return {
        "head": out("rev-parse", "HEAD"),
        "commits": int(out("rev-list", "--count", "HEAD") or 0),
        "count_objects": out("count-objects", "-v").replace("\n", "; "),
    }
