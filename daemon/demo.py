"""The main job on real input: a library of real documents, mounted, indexed, and navigated.

``libraryfs demo LIBDIR MOUNTPOINT``: initialise (or reuse) the library, mount it with its indexer, ingest
the python3-doc reStructuredText sources into ``python-docs/`` and a sample of GCIDE dictionary entries
(headword → definition) into ``dictionary/<letter>/``, drop a few new entries into ``inbox/`` for the
indexer to file, wait until the indexer is idle, then show the Library Theorem's lookup: master
``INDEX.md`` → a section ``INDEX.md`` → an entry. Idempotent: a second run changes nothing it need not.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from libraryfs.daemon import launcher
from libraryfs.daemon.corpus import PYTHON_DOC_SOURCES, gcide_available, gcide_entries
from libraryfs.daemon.ingest import ingest_tree
from libraryfs.fs import generated as G
from libraryfs.fs.backends import is_library, require_new_libdir
from libraryfs.fs.store import Store
from libraryfs.fs.tree import DirTree
from libraryfs.index.toc import links
from libraryfs.layout import log_path, mount_info, wait_until_idle, write_run


def run_demo(
    libdir: str,
    mountpoint: str,
    *,
    words: int = 600,
    llm: str | None = None,
    echo: Callable[[str], None] = print,
) -> dict:
    """Build, mount, index and navigate the demo library; returns counts. Raises LibraryError on failure
    (Exists: ``libdir`` is a non-empty folder that holds no library).

    ``llm``: ``None`` as configured (``[llm]`` settings), ``"none"`` the deterministic builder, ``"local"``
    the real local model (:mod:`libraryfs.llm.local`, started in the background for the indexer and stopped
    by ``libraryfs umount``; its lines replace the deterministic ones as they arrive)."""
    libdir, mountpoint = os.path.abspath(libdir), os.path.abspath(mountpoint)
    if not is_library(libdir):
        require_new_libdir(
            libdir, f" (or `libraryfs init --force {libdir}` first to make the library beside its files)"
        )
        Store.create(libdir, {"toc_max_tokens": 2000}).close()
        echo(f"initialised library {libdir}")
    info = mount_info(libdir)
    if info:
        mountpoint = info["mountpoint"]
        echo(f"already mounted at {mountpoint}")
        if llm:
            echo(
                f"the mount keeps its own LLM setting (--llm {llm} applies when the demo mounts the library)"
            )
    else:
        info = _mount(libdir, mountpoint, llm, echo)
    tree = DirTree(mountpoint)
    counts = {"python_docs": 0, "dictionary": 0, "inbox": 0}
    if os.path.isdir(PYTHON_DOC_SOURCES):
        rep = ingest_tree(libdir, PYTHON_DOC_SOURCES, "python-docs", progress=False, tree=tree)
        counts["python_docs"] = rep["files"]
        echo(
            f"ingested {rep['files']} Python documentation sources ({rep['bytes']:,} bytes) into python-docs/"
        )
    else:
        echo(f"python3-doc not installed ({PYTHON_DOC_SOURCES} missing): skipping")
    if gcide_available():
        entries = gcide_entries(words + 8, seed=2026)
        rerun = tree.exists("dictionary")
        inbox, rest = entries[:8], entries[8:]
        for w, d in rest:
            letter = w[0].lower()
            tree.write_bytes(f"dictionary/{letter}/{w.lower()}.md", f"# {w}\n\n{d}\n".encode())
        counts["dictionary"] = len(rest)
        echo(f"wrote {len(rest)} GCIDE dictionary entries into dictionary/<letter>/")
        if not tree.exists("inbox"):
            tree.makedirs("inbox")
        # a re-run (the dictionary was there before it): the inbox words were filed by the earlier run, and
        # dropping them again would file second copies (`abampere-2.md`)
        fresh = [] if rerun else inbox
        for w, d in fresh:
            tree.write_bytes(f"inbox/{w.lower()}.md", f"# {w}\n\n{d}\n".encode())
        counts["inbox"] = len(fresh)
        if fresh:
            echo(f"dropped {len(fresh)} new entries into inbox/ for the indexer to file")
        else:
            echo("the inbox entries were filed by an earlier run: none dropped again")
    else:
        echo("dict-gcide not installed: skipping the dictionary")
    echo("waiting for the indexer …")
    try:
        wait_until_idle(libdir, 120.0, inbox=True)
    except TimeoutError:
        echo("the indexer is still busy; INDEX.md files will catch up")
    echo("")
    show_navigation(mountpoint, echo)
    return counts


def _mount(libdir: str, mountpoint: str, llm: str | None, echo: Callable[[str], None]) -> dict:
    """Mount with the indexer; with ``llm="local"`` start the local model first (detached: it serves the
    indexer after the demo returns) and record its pid in ``run.json`` for ``libraryfs umount``."""
    model = None
    env = None
    if llm == "local":
        from libraryfs.llm import local

        log_file = log_path(libdir, "local-llm")
        echo(f"starting the local model {local.MODEL_NAME} (log {log_file}) …")
        model = local.start(detach=True, log_path=log_file)
        env = model.env()
        echo(f"{local.MODEL_NAME} serving at {model.base_url} (pid {model.pid})")
    try:
        info = launcher.start(
            libdir, mountpoint, llm={None: None, "none": False}.get(llm, True), env=env, allow_nonempty=False
        )
    except BaseException:
        if model is not None:
            model.stop()
        raise
    if model is not None:
        info["llm_pid"], info["llm_base_url"] = model.pid, model.base_url
        write_run(libdir, info)
        echo(
            "the indexer writes deterministic TOCs at once; the model's lines replace them as they arrive "
            "(one request at a time, seconds each: `libraryfs status` shows the queue)"
        )
    echo(
        f"mounted {libdir} at {mountpoint} (server pid {info['server_pid']}, indexer pid {info['indexer_pid']})"
    )
    return info


def show_navigation(mountpoint: str, echo: Callable[[str], None] = print, lines: int = 14) -> None:
    """Print master INDEX.md → a section's INDEX.md → an entry, following the TOCs' own links."""

    def show(path: str, n: int) -> bytes:
        """Echo ``head -n`` of the file at ``path`` (its first ``n`` lines, decoded UTF-8 with replacement);
        returns the whole file's bytes. Raises ``OSError`` when it cannot be read."""
        with open(path, "rb") as f:
            data = f.read()
        echo(f"$ head -{n} {path}")
        for ln in data.decode("utf-8", "replace").splitlines()[:n]:
            echo("  " + ln)
        echo("")
        return data

    root = show(os.path.join(mountpoint, G.INDEX_FILE), lines)
    sect_link = next(
        (ln for ln in links(root) if ln.endswith(b"/" + G.INDEX_NAME) and b"python" in ln), None
    ) or next((ln for ln in links(root) if ln.endswith(b"/" + G.INDEX_NAME)), None)
    if sect_link is None:
        return
    sect_path = os.path.join(mountpoint, os.fsdecode(sect_link))
    sect = show(sect_path, lines)
    page_dir = os.path.dirname(sect_path)
    entry = next(
        (ln for ln in links(sect) if not ln.endswith(G.INDEX_NAME) and not ln.startswith(G.PAGES_DIR)), None
    )
    if entry is None:
        return
    show(os.path.normpath(os.path.join(page_dir, os.fsdecode(entry))), 8)
    echo(
        f"every lookup: ⌈log_b N⌉ TOC pages of ≤ 2,000 tokens + 1 entry; try `libraryfs find {mountpoint} asyncio` "
        f"or `ls {mountpoint}/{G.FIND_DIRNAME}/asyncio/`"
    )
