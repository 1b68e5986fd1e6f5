"""The benchmark's corpora, built into real libraries with the real CLI and read through the mount.

Each corpus is one library (``libraryfs init``), mounted with its indexer (``libraryfs mount``), filled
the way a user fills it, and read only once the indexer is idle (``libraryfs status --json``: no pending
journal records, state ``idle``, empty inbox):

* ``python`` — the python3-doc reStructuredText sources, ``libraryfs ingest … --into python-docs``
  (as ``libraryfs demo`` does);
* ``gcide`` — a deterministic sample of dict-gcide entries (headword → first definition, the demo's
  format ``# Word\\n\\nDefinition.``), written under ``dictionary/<letter>/`` and ingested;
* ``code`` — this repository at a pinned commit (``git archive``), indexed with ``libraryfs code add``
  (layout ``code/<repo>/<file path>/{SYMBOLS.md, SOURCE.py, <symbol>.py}``);
* ``click`` — pallets/click at a pinned commit, the same way (a repository with a long real history);
* custom — any directory of files with its own query file (``--custom NAME=DIR,QUERIES.jsonl``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

#: The commit of this repository that the ``code`` corpus and its queries are pinned to.
CODE_COMMIT = "784e628"
CODE_NAME = "libraryfs"
#: A second code corpus with a long real history: pallets/click (BSD-3-Clause) at the commit the code-index
#: evaluation used (docs/code.md). Not shipped: give its checkout or git directory with --click-repo / env
#: LIBRARYFS_BENCH_CLICK_REPO (a clone of https://github.com/pallets/click containing this commit).
CLICK_COMMIT = "2c8cd3ac958a7eb316d67f2d316c27086c4c0369"
CLICK_NAME = "click"
CLICK_REPO_DEFAULT = "/work/.mirror/pallets+click/repo"
GCIDE_WORDS = 3000
GCIDE_SEED = 2026
PYTHON_SECTION = "python-docs"
GCIDE_SECTION = "dictionary"


class CorpusUnavailable(Exception):
    """A corpus cannot be built here (a package or the pinned commit is missing); the message says why."""


def libraryfs_cli() -> list[str]:
    """The ``libraryfs`` command beside this interpreter (else the one on PATH)."""
    beside = os.path.join(os.path.dirname(sys.executable), "libraryfs")
    if os.access(beside, os.X_OK):
        return [beside]
    found = shutil.which("libraryfs")
    if not found:
        raise CorpusUnavailable("the libraryfs command is not installed")
    return [found]


def run_cli(*args: str, timeout_s: float = 1800, ok_codes: tuple[int, ...] = (0,)) -> str:
    """Run ``libraryfs ARGS``; return stdout. Raises ``RuntimeError`` with the CLI's stderr when the exit
    code is not in ``ok_codes``."""
    p = subprocess.run(libraryfs_cli() + list(args), capture_output=True, text=True, timeout=timeout_s)
    if p.returncode not in ok_codes:
        raise RuntimeError(f"libraryfs {' '.join(args)} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    return p.stdout


def python_docs_dir() -> str:
    """The python3-doc ``_sources`` directory. Raises :class:`CorpusUnavailable` if not installed."""
    for cand in sorted(os.listdir("/usr/share/doc")) if os.path.isdir("/usr/share/doc") else []:
        if cand.startswith("python3") and cand.endswith("-doc"):
            d = f"/usr/share/doc/{cand}/html/_sources"
            if os.path.isdir(d):
                return d
    raise CorpusUnavailable("python3-doc is not installed (apt-get install python3-doc)")


def gcide_entries(words: int = GCIDE_WORDS, seed: int = GCIDE_SEED) -> list[tuple[str, str]]:
    """``(headword, definition)`` of the sample (libraryfs's own dict-gcide reader, as ``demo`` uses it).
    Raises :class:`CorpusUnavailable` if dict-gcide is not installed."""
    from libraryfs.daemon.corpus import gcide_available
    from libraryfs.daemon.corpus import gcide_entries as entries

    if not gcide_available():
        raise CorpusUnavailable("dict-gcide is not installed (apt-get install dict-gcide)")
    return entries(words, seed=seed)


def gcide_path(word: str) -> str:
    """Library-relative path of a headword's entry."""
    return f"{GCIDE_SECTION}/{word[0].lower()}/{word.lower()}.md"


def write_gcide_source(dest: str, entries: list[tuple[str, str]]) -> None:
    """Write the entries as ``dest/<letter>/<word>.md`` (the tree ingested ``--into dictionary``)."""
    for w, d in entries:
        rel = gcide_path(w).split("/", 1)[1]
        os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(dest, rel), "w", encoding="utf-8") as f:
            f.write(f"# {w}\n\n{d}\n")


def click_repo() -> str:
    """The pallets/click git repository (``LIBRARYFS_BENCH_CLICK_REPO``, else the default mirror path).
    Raises :class:`CorpusUnavailable` if neither exists."""
    path = os.environ.get("LIBRARYFS_BENCH_CLICK_REPO") or CLICK_REPO_DEFAULT
    if not os.path.exists(path):
        raise CorpusUnavailable("no pallets/click repository: set LIBRARYFS_BENCH_CLICK_REPO to a clone")
    return path


#: code corpora: name -> (repository locator, pinned commit, name under code/)
CODE_CORPORA = {
    "code": (lambda: repo_root(), CODE_COMMIT, CODE_NAME),
    "click": (lambda: click_repo(), CLICK_COMMIT, CLICK_NAME),
}


def repo_root() -> str:
    """Top of the git checkout this package lives in. Raises :class:`CorpusUnavailable` outside one."""
    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.run(["git", "-C", here, "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if p.returncode != 0:
        raise CorpusUnavailable("not inside a git checkout of libraryfs (the code corpus needs its history)")
    return p.stdout.strip()


def export_commit(repo: str, commit: str, dest: str) -> None:
    """Extract the tree of ``commit`` into ``dest`` (``git archive``; no .git, so the code index walks it).
    Raises :class:`CorpusUnavailable` if the commit is not in the repository."""
    p = subprocess.run(["git", "-C", repo, "archive", "--format=tar", commit], capture_output=True)
    if p.returncode != 0:
        raise CorpusUnavailable(f"commit {commit} is not in {repo}: {p.stderr.decode().strip()}")
    with tempfile.TemporaryFile() as f:
        f.write(p.stdout)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(dest, filter="data")


@dataclass
class Library:
    """A built, mounted, idle library: ``libdir``, ``mountpoint``, and the build's timings/facts."""

    name: str
    libdir: str
    mountpoint: str
    facts: dict = field(default_factory=dict)


def wait_idle(libdir: str, timeout_s: float = 1800.0) -> dict:
    """Poll ``libraryfs status --json`` until the indexer has consumed the journal and is idle (twice in
    a row, so a pass that starts between polls is not missed). Returns the last status. Raises
    ``TimeoutError``."""
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while True:
        st = json.loads(run_cli("status", libdir, "--json"))
        idle = st.get("pending_records") == 0 and (st.get("indexer") or {}).get("state") == "idle"
        quiet = quiet + 1 if idle else 0
        if quiet >= 2:
            return st
        if time.monotonic() > deadline:
            raise TimeoutError(f"indexer of {libdir} not idle after {timeout_s:.0f} s: {st.get('indexer')}")
        time.sleep(0.5)


def _fill(kind: str, libdir: str, work: str, source: str | None) -> dict:
    """Put the corpus ``kind`` into the mounted library; returns facts about what went in."""
    if kind == "python":
        src = python_docs_dir()
        out = run_cli("ingest", libdir, src, "--into", PYTHON_SECTION, "-q")
        return {"source": src, "ingest": out.strip()}
    if kind == "gcide":
        entries = gcide_entries()
        src = os.path.join(work, "gcide")
        write_gcide_source(src, entries)
        out = run_cli("ingest", libdir, src, "--into", GCIDE_SECTION, "-q")
        return {"source": "dict-gcide", "words": len(entries), "seed": GCIDE_SEED, "ingest": out.strip()}
    if kind in CODE_CORPORA:
        locate, commit, name = CODE_CORPORA[kind]
        repo = locate()
        src = os.path.join(work, name)
        os.makedirs(src)
        export_commit(repo, commit, src)
        out = run_cli("code", "add", src, "--name", name, "--library", libdir)
        return {"source": f"{repo}@{commit}", "code_add": out.strip()}
    if source is None:
        raise ValueError(f"unknown corpus {kind!r}")
    out = run_cli("ingest", libdir, source, "--into", kind, "-q")
    return {"source": source, "ingest": out.strip()}


@contextlib.contextmanager
def built_library(
    kind: str, *, source: str | None = None, toc_max_tokens: int = 2000, keep_dir: str | None = None
) -> Iterator[Library]:
    """Build corpus ``kind`` into a new library, mount it, wait for the indexer, yield, unmount.

    ``source``: the directory of a custom corpus. ``keep_dir``: build there (kept) instead of a temporary
    directory. Raises :class:`CorpusUnavailable`, ``RuntimeError`` (a CLI step failed), ``TimeoutError``.
    """
    work = keep_dir or tempfile.mkdtemp(prefix=f"findbench-{kind}-")
    os.makedirs(work, exist_ok=True)
    libdir, mnt = os.path.join(work, "lib"), os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    mounted = False
    try:
        t0 = time.perf_counter()
        run_cli("init", libdir, "--toc-max-tokens", str(toc_max_tokens))
        run_cli("mount", libdir, mnt)
        mounted = True
        facts = _fill(kind, libdir, work, source)
        t1 = time.perf_counter()
        st = wait_idle(libdir)
        facts.update(
            fill_s=round(t1 - t0, 2),
            index_s=round(time.perf_counter() - t1, 2),
            toc_max_tokens=toc_max_tokens,
            builder=((st.get("indexer") or {}).get("builder") or {}),
        )
        yield Library(kind, libdir, mnt, facts)
    finally:
        if mounted:
            try:
                run_cli("umount", mnt)
            except RuntimeError:
                run_cli("umount", mnt, "--lazy")
        if keep_dir is None:
            shutil.rmtree(work, ignore_errors=True)
