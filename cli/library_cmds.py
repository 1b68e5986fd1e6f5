"""``libraryfs init | check | index``: commands that make, check and index a library (``status`` and ``find``:
:mod:`libraryfs.cli.query_cmds`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from libraryfs.cli.common import echo_json, handle_errors, resolve_libdir
from libraryfs.cli.options import (
    checked_store_url,
    library_argument,
    llm_field_overrides,
    llm_options,
    llm_switch,
    setting_overrides,
)
from libraryfs.errors import Busy, Corrupt, Damaged, Exists, InvalidArgument
from libraryfs.fs.backends import is_library, join_library, require_new_libdir, store_url
from libraryfs.fs.holder import Holder, describe_holder, mount_holders
from libraryfs.fs.isolated import run_isolated
from libraryfs.fs.lmdb_backend import store_path
from libraryfs.fs.lmdb_pages import walk
from libraryfs.fs.store import Store
from libraryfs.index import DEFAULT_MAX_TOKENS
from libraryfs.layout import (
    INDEXER_LOCK,
    MOUNT_LOCK,
    acquire_lock,
    indexer_pid,
    lock_holder,
    mount_info,
    term_index_path,
)
from libraryfs.words import count

if TYPE_CHECKING:
    from libraryfs.fs.check import Report


@click.command()
@library_argument
@click.option(
    "--toc-max-tokens",
    type=click.IntRange(200, 100_000),
    default=DEFAULT_MAX_TOKENS,
    show_default=True,
    help="Token bound C of every TOC page.",
)
@click.option("--map-size-mb", type=click.IntRange(1), default=None, help="Initial LMDB map size (grows).")
@click.option(
    "--force", is_flag=True, help="Make the library in a non-empty directory (its files and mode are kept)."
)
@click.option(
    "--store",
    "url",
    metavar="URL",
    default=None,
    callback=checked_store_url,  # a bad URL is a usage error before anything is made
    help="Keep the store on etcd: etcd://HOST:PORT[,HOST:PORT...]/PREFIX (an empty prefix; LIBDIR keeps "
    "config, logs and locks). Default: LMDB in LIBDIR/store.",
)
@click.option(
    "--join",
    is_flag=True,
    help="With --store: use the library already at URL (one library directory per host) instead of "
    "creating one.",
)
@handle_errors
def init(
    libdir: str, toc_max_tokens: int, map_size_mb: int | None, force: bool, url: str | None, join: bool
) -> None:
    """Create a new, empty library in LIBDIR: a new or empty directory (made mode 0700)."""
    if join and not url:
        raise click.UsageError("--join needs --store URL")
    if force:  # beside its files: only a library already there, or a file, stops it
        if is_library(libdir):
            raise Exists(f"{os.path.abspath(libdir)} already holds a library")
        if os.path.exists(libdir) and not os.path.isdir(libdir):
            raise InvalidArgument(f"{libdir} exists and is not a directory")
    else:
        require_new_libdir(
            libdir, " (or --force to make the library beside its files, leaving its mode as it is)"
        )
    if join:
        join_library(libdir, url)
        click.echo(f"joined library {url} in {os.path.abspath(libdir)}")
        return
    st = Store.create(
        libdir,
        {"toc_max_tokens": toc_max_tokens},
        map_size=map_size_mb << 20 if map_size_mb else None,
        url=url,
    )
    try:  # the drop zone the indexer files from (README layout)
        from libraryfs.fs.view import LibraryView

        LibraryView(st).mkdir(b"/inbox", 0o755, os.getuid(), os.getgid())
    finally:
        st.close()
    where = f", store {url}" if url else ""
    click.echo(f"initialised library {os.path.abspath(libdir)} (TOC pages ≤ {toc_max_tokens} tokens{where})")


@click.command()
@library_argument
@click.option(
    "--repair",
    is_flag=True,
    help="Fix what can be fixed; a damaged store is salvaged into a new one, the old one kept "
    "(the library must not be mounted).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
@handle_errors
def check(libdir: str, repair: bool, as_json: bool) -> None:
    """Verify the store's pages, then every invariant (fsck). Exit status 0 clean (or all repaired), 1 if
    problems remain or a salvage lost records (the last line says how many), 4 if the store is damaged
    (not repaired)."""
    from libraryfs.fs.check import REPAIR_HINT, describe

    libdir = resolve_libdir(libdir)
    if repair and lock_holder(libdir, MOUNT_LOCK) is not None:
        raise Busy(f"{libdir} is mounted: unmount it before `check --repair`")
    if repair and store_url(libdir) is not None:
        _refuse_if_mounted_elsewhere(libdir)
    # the page walk is LMDB's: an etcd store has no pages of ours (Raft and etcd's own checks keep them)
    lmdb = store_url(libdir) is None
    # what the derived term index knew of, read before a salvage can replace the store: the salvage's loss
    # is counted against it too (a store whose headers are gone promises no record count of its own)
    known = _known_inodes(libdir) if repair and lmdb else []
    salvaged = _walk_pages(libdir, repair, as_json) if lmdb else None
    # the term index's rows trail the store by one pass while an indexer runs: drift is judged only when
    # none does; its repair takes the indexer's lock (one writer)
    indexer_running = not repair and indexer_pid(libdir) is not None
    lock = acquire_lock(libdir, INDEXER_LOCK) if repair else None
    try:
        # LMDB reads the store in a child process: if it crashes on damage the walk missed, that is a report
        report, index_lost = run_isolated(
            lambda: _check_store(libdir, repair, not indexer_running, known if salvaged else []),
            "checking the library's store",
        )
    finally:
        if lock is not None:
            os.close(lock)
    loss = _salvage_loss(salvaged, len(known), index_lost) if salvaged else None
    if as_json:
        extra = {"index_known": len(known), "index_lost": index_lost, "loss": loss}
        echo_json({**report.to_json(), **({"salvage": {**vars(salvaged), **extra}} if salvaged else {})})
    else:
        click.echo(describe(report))
        if loss:  # "repaired" alone would read as "nothing was lost"
            click.echo(loss)
        if not report.clean and not repair:
            click.echo(REPAIR_HINT)
    if not report.clean or loss:  # README "Exit status": a lossy salvage is 1 too
        raise SystemExit(1)


def _known_inodes(libdir: str) -> list[int]:
    """The inodes the library's term index holds rows for (:func:`libraryfs.index.termindex.known_inodes`)."""
    from libraryfs.index import termindex

    return termindex.known_inodes(term_index_path(libdir))


def _salvage_loss(salvaged, index_known: int, index_lost: int) -> str | None:
    """The last line of ``check --repair`` after a salvage that lost anything (None: nothing lost): how many
    records could not be salvaged (of what the store's headers promised), how many of the ``index_known``
    files and directories the term index knew of are not in the salvaged store (``index_lost``), and where
    the old store is. A salvage that copied no record at all says so: headers destroyed promise nothing."""
    copied, lost = sum(salvaged.copied.values()), salvaged.lost()
    if not (lost or index_lost or not copied):
        return None
    if not copied:
        parts = ["nothing could be salvaged: no record of the damaged store was readable"]
    else:
        parts = [f"consistent again, but {count(lost, 'record')} could not be salvaged"]
    if index_lost:
        parts.append(
            f"{index_lost} of the {index_known} files and directories the term index knew of are lost"
        )
    elif not copied and not index_known:
        parts.append("no term index says how many files and directories the library held")
    what = (
        "the library is empty now: restore it from a backup"
        if not copied
        else "files may be missing (look in /lost+found) or read as holes"
    )
    return "; ".join([*parts, what, f"the damaged store is kept at {salvaged.kept}"])


def _refuse_if_mounted_elsewhere(libdir: str) -> None:
    """Raise Busy when any host holds a read-write mount lease of the etcd library (``check --repair`` must
    not run under a serving mount)."""
    st = Store(libdir, readonly=True)
    try:
        mounts = mount_holders(st.backend)
    finally:
        st.close()
    if mounts:
        more = f" (and {len(mounts) - 1} more)" if len(mounts) > 1 else ""
        raise Busy(
            f"the library is mounted on {describe_holder(mounts[0])}{more}: unmount it before `check --repair`"
        )


def _walk_pages(libdir: str, repair: bool, as_json: bool):
    """Walk the LMDB store's pages (plain reads: nothing here can crash on a damaged file); a damaged store
    is reported and raises :class:`Damaged`, or with ``repair`` is salvaged (the salvage report returned)."""
    from libraryfs.fs.check import damage_json, describe_damage
    from libraryfs.fs.salvage import salvage

    pages = walk(store_path(libdir))
    if pages.unsettled:  # the mount wrote faster than the pages could be walked: LMDB alone checks
        click.echo("note: the store changed during every page walk; its pages were not verified", err=True)
        return None
    if not pages.problems:
        return None
    if not repair:
        if as_json:
            echo_json(damage_json(pages))
        else:
            click.echo(describe_damage(pages))
        more = f" (and {len(pages.problems) - 1} more)" if len(pages.problems) > 1 else ""
        raise Damaged(f"the library's store is damaged: {pages.problems[0]}{more}; see the report above")
    if indexer_pid(libdir):  # it has the old store open: it would go on writing into the renamed one
        raise Busy(f"the indexer of {libdir} (pid {indexer_pid(libdir)}) is running: stop it first")
    salvaged = salvage(libdir)
    click.echo(os.linesep.join(salvaged.lines()), err=as_json)
    return salvaged


def _check_store(libdir: str, repair: bool, drift_too: bool, known: list[int]) -> tuple[Report, int]:
    """Open the store (read-only unless ``repair``) and run the invariant check (in the isolated child),
    then the ``names`` table (``N1`` rows or recorded names out of line with the tree when ``drift_too``:
    :func:`libraryfs.index.names.verify`) and the finder's term index (derived data beside the store: ``T1``
    missing or damaged, ``T2`` rows out of line with the store and ``T3`` rows of excluded paths when
    ``drift_too``; :func:`libraryfs.index.termindex.verify`). Returns the report
    and how many of the inodes ``known`` (the term index's, read before a salvage) the store lacks after
    the check (before the term index's repair drops their rows)."""
    from libraryfs.fs.check import Problem
    from libraryfs.fs.check import check as run_check
    from libraryfs.index import names, termindex

    st = Store(libdir, readonly=not repair)  # a plain check never writes
    try:
        report = run_check(st, repair=repair)
        with st.read() as t:
            index_lost = sum(1 for ino in known if t.inode(ino) is None)
        verifiers = [  # the names first: the term index reads them
            ("N1", "the `names` table", lambda: names.verify(st, repair=repair, drift_too=drift_too)),
            (
                "T2",
                "the term index",
                lambda: termindex.verify(st, term_index_path(libdir), repair=repair, drift_too=drift_too),
            ),
        ]
        for code, what, verify in verifiers:
            try:
                derived = verify()
            except Corrupt as e:  # an undecodable record the check above reported (I8…): a finding too,
                # not the end of the report (before: "Error: meta record is not JSON", no problem listed)
                derived = [Problem(code, 0, f"{what} could not be verified: {e}")]
            for f in derived:
                report.problems.append(Problem(f.code, 0, f.message, f.repaired))
                report.repaired += f.repaired
        return report, index_lost
    finally:
        st.close()


@click.command()
@library_argument
@click.option("--full", is_flag=True, help="Re-examine every entry and directory.")
@llm_switch
@llm_options
@handle_errors
def index(libdir: str, full: bool, llm: bool | None, **kwargs) -> None:
    """Run one indexing pass now, then exit (refused while an indexer daemon is running)."""
    from libraryfs.daemon.indexer import Indexer, needs_full_pass
    from libraryfs.daemon.indexerd import make_builder
    from libraryfs.layout import refuse_if_stopped

    libdir = resolve_libdir(libdir)
    refuse_if_stopped(libdir, "index")  # it files the inbox through the mount: that would wait
    overrides = llm_field_overrides(setting_overrides(kwargs))
    lock = acquire_lock(libdir, INDEXER_LOCK)
    try:
        st = Store(libdir)
        holder = Holder.take(st.backend, "indexer", {"libdir": libdir}, "indexed")  # across hosts (etcd)
        try:
            builder = make_builder(libdir, st, use_llm=llm, overrides=overrides or None)
            minfo = mount_info(libdir)
            idx = Indexer(
                libdir, builder=builder, store=st, mountpoint=minfo["mountpoint"] if minfo else None
            )
            with st.read() as t:
                never = needs_full_pass(t)
            rep = idx.run_once(full=full or never)
            try:
                from libraryfs.llm import report_line

                line = report_line(builder.status())
            except (ImportError, AttributeError):
                line = f"builder {builder.name}"
        finally:
            if holder is not None:
                holder.release()
            st.close()
    finally:
        os.close(lock)
    click.echo(
        f"indexed: {count(rep.records, 'journal record')}, {count(rep.summarized, 'summary')}, "
        f"{count(rep.dirs_rendered, 'TOC')} ({count(rep.pages_written, 'page')}), "
        f"{count(len(rep.filed), 'inbox entry')} filed in {rep.seconds:.2f} s; {line}"
    )


commands = [init, check, index]
