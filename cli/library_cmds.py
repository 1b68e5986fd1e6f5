"""``libraryfs init | check | status | find | index``: commands that work on the store directly."""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING

import click

from libraryfs.cli.common import display_path, echo_json, handle_errors, resolve_libdir, verify_pages
from libraryfs.cli.options import (
    checked_store_url,
    library_argument,
    llm_field_overrides,
    llm_options,
    llm_switch,
    setting_overrides,
)
from libraryfs.errors import Busy, Damaged, Exists, InvalidArgument
from libraryfs.fs import generated as G
from libraryfs.fs import schema as S
from libraryfs.fs.backends import is_library, join_library, require_new_libdir, store_url
from libraryfs.fs.holder import Holder, describe_holder, holder_facts, mount_holders, standby_facts
from libraryfs.fs.isolated import run_isolated
from libraryfs.fs.lmdb_backend import store_path
from libraryfs.fs.lmdb_pages import walk
from libraryfs.fs.store import Store
from libraryfs.index import DEFAULT_MAX_TOKENS
from libraryfs.layout import (
    INDEXER_LOCK,
    LOGS_DIR,
    MOUNT_LOCK,
    acquire_lock,
    indexer_pid,
    lock_holder,
    lock_stopping,
    mount_info,
    mount_record_key,
    mount_state,
    pid_alive,
    read_run,
    state_dir,
    stopped_server,
    term_index_path,
)
from libraryfs.probes import last_log_line, stopped_how
from libraryfs.words import count

if TYPE_CHECKING:
    from libraryfs.fs.check import Report
    from libraryfs.index.find import Found


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
    from libraryfs.fs.check import describe

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
    then the finder's term index (derived data beside the store: ``T1`` missing or damaged, ``T2`` rows out
    of line with the store when ``drift_too``; :func:`libraryfs.index.termindex.verify`). Returns the report
    and how many of the inodes ``known`` (the term index's, read before a salvage) the store lacks after
    the check (before the term index's repair drops their rows)."""
    from libraryfs.fs.check import Problem
    from libraryfs.fs.check import check as run_check
    from libraryfs.index import termindex

    st = Store(libdir, readonly=not repair)  # a plain check never writes
    try:
        report = run_check(st, repair=repair)
        with st.read() as t:
            index_lost = sum(1 for ino in known if t.inode(ino) is None)
        for f in termindex.verify(st, term_index_path(libdir), repair=repair, drift_too=drift_too):
            report.problems.append(Problem(f.code, 0, f.message, f.repaired))
            report.repaired += f.repaired
        return report, index_lost
    finally:
        st.close()


@click.command()
@library_argument
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Machine-readable status; on an error {"error", "exit_code", "library"} (and its exit status).',
)
@handle_errors
def status(libdir: str, as_json: bool) -> None:
    """Is it mounted, what is the indexer doing, what went wrong last. Exit status 4: the store is damaged;
    8: it cannot be reached; 9: the mount server is stopped (SIGSTOP; the mount is not touched)."""
    from libraryfs.daemon.launcher import refuse_if_stopped

    libdir = resolve_libdir(libdir)
    refuse_if_stopped(libdir, "status")  # before anything asks the mount: it would wait for the server
    out = run_isolated(lambda: status_facts(libdir))  # LMDB may crash on a damaged page: a report
    if as_json:
        echo_json(out)
    else:
        _print_status(out)


def status_facts(libdir: str) -> dict:
    """What ``libraryfs status --json`` prints: the store's facts, the mount (live, or stale after a crash),
    the indexer (running = it holds ``indexer.lock``, :func:`libraryfs.layout.indexer_pid`), ``run.json``.
    Every page of the store is walked first unless the data file is unchanged since the last clean walk
    (:func:`libraryfs.fs.lmdb_pages.verify_since`): a damaged store is :class:`~libraryfs.errors.Damaged`."""
    verify_pages(libdir)
    st = Store(libdir, readonly=True, verify=False)
    try:
        with st.read() as t:
            tail, cursor = t.journal_tail(), t.cfg_int(S.CFG_CURSOR)
            idx = t.cfg_json(S.CFG_INDEXER_STATUS)
            last_mount = t.cfg_json(mount_record_key(libdir, st.backend))
            out = {
                "library": libdir,
                "clean_shutdown": t.cfg(S.CFG_CLEAN) != b"0",
                "journal_tail": tail,
                "pending_records": max(0, tail - cursor),
                "toc_generation": t.cfg_int(S.CFG_TOC_GEN),
                "inodes": t.count(S.DB_INODES),
                "map": st.map_info(),
                "backend": st.backend.name,
                "store_url": store_url(libdir),
                "indexer": idx,
                # etcd: who holds the library across hosts: every read-write mount, the one indexer
                # ([] and None on LMDB: the flock locks say it)
                "holders": {
                    "mount": mount_holders(st.backend),
                    "indexer": holder_facts(st.backend, "indexer"),
                },
            }
    finally:
        st.close()
    minfo = mount_info(libdir)
    out["mounted"] = bool(minfo)
    out["mount"] = minfo or {}
    out["indexer_pid"] = indexer_pid(libdir)
    out["indexer_running"] = out["indexer_pid"] is not None
    out["indexer_stopping"] = lock_stopping(libdir, INDEXER_LOCK) is not None  # SIGTERMed, not exited yet
    # SIGSTOP or a debugger: it holds its lock but does nothing until continued
    out["indexer_suspended"] = stopped_how(out["indexer_pid"]) if out["indexer_running"] else None
    out["indexer_standby"] = standby_facts(libdir)  # etcd: this directory's indexer waits for another host's
    out["indexer_state"] = indexer_state(out)
    out["stale_mount"] = None
    if minfo:
        out["uptime_s"] = round(time.time() - minfo.get("started", time.time()), 1)
        try:
            stats_path = os.path.join(minfo["mountpoint"], G.CTL_DIRNAME, os.fsdecode(G.STATS_FILE))
            with open(stats_path) as f:
                out["stats"] = json.load(f).get("total", {})
        except (OSError, ValueError):
            pass
    elif last_mount.get("mountpoint") and not pid_alive(last_mount.get("pid")):
        mp = last_mount["mountpoint"]
        try:
            state = mount_state(mp)
        except OSError:
            state = "unknown"
        out["stale_mount"] = {"mountpoint": mp, "pid": last_mount.get("pid"), "state": state}
    out["run"] = read_run(libdir)
    return out


def indexer_state(out: dict) -> str | None:
    """What the library's indexer is doing, from :func:`status_facts`' dict: None when none runs;
    ``"suspended"`` (SIGSTOP, a debugger); ``"standby"`` (etcd: another host's indexer is the active one);
    ``"stopping"`` (SIGTERMed, or it published ``"stopped"`` and has not exited yet); ``"starting"`` (the
    published record is an earlier indexer's, or there is none yet: after a remount the record says
    ``"stopped"`` until the new indexer publishes its own); else the state the running indexer published
    (``"idle"``, ``"indexing"``, ``"settling"``, ``"hooks"``, …)."""
    if not out["indexer_running"]:
        return None
    if out.get("indexer_suspended"):
        return "suspended"
    if out.get("indexer_standby"):
        return "standby"
    if out.get("indexer_stopping"):
        return "stopping"
    idx = out.get("indexer") or {}
    if idx.get("pid") != out["indexer_pid"] or not idx.get("state"):
        return "starting"
    if idx["state"] == "stopped":  # published on its way out: it still holds its lock for a moment
        return "stopping"
    return str(idx["state"])


def _indexer_line(out: dict) -> str:
    """The ``indexer`` line of ``status``: whether it runs, what it does, and what to do when it cannot go
    on (suspended by a signal, or gone while the library is mounted)."""
    pid, state, m = out["indexer_pid"], out.get("indexer_state"), out["mount"]
    pending = out["pending_records"]
    if state == "standby":
        active = describe_holder(out["indexer_standby"].get("active") or {})
        return f"running (standby, pid {pid}; takes over from {active} when its lease ends)"
    if state == "suspended":
        how = out.get("indexer_suspended") or ""
        if "SIGSTOP" in how:
            return f"stopped by a signal (pid {pid}): continue it with `kill -CONT {pid}`"
        return f"stopped by a debugger (pid {pid}): let its debugger continue it"
    if out["indexer_running"]:
        if state == "idle" and pending:  # between polls: the next pass takes them
            return f"running (pid {pid}), {count(pending, 'journal record')} not indexed yet"
        return f"running ({state}, pid {pid})"
    if not out["mounted"]:
        return "not running"
    # e.g. killed: nothing restarts it outside systemd
    log = os.path.join(state_dir(out["library"]), LOGS_DIR, "indexer.log")  # log_path would create logs/
    last = (last_log_line(log) or "")[:160]
    return (
        "not running"
        + (f" (its log ends: {last})" if last else "")
        + f"; run `libraryfs index {out['library']}` for one pass, or `libraryfs indexer {out['library']}"
        + f" --mountpoint {m['mountpoint']}` to keep one running"
    )


def _print_status(out: dict) -> None:
    """The human-readable ``libraryfs status`` of :func:`status_facts`' dict."""
    m, idx = out["mount"], out["indexer"] or {}
    click.echo(f"library     {out['library']}")
    if out["mounted"]:
        unit = f", unit {m['systemd_unit']}" if m.get("systemd_unit") else ""
        ro = ", read-only" if m.get("read_only") else ""
        click.echo(
            f"mounted     yes at {m['mountpoint']} (server pid {m['pid']}, up "
            f"{_duration(out['uptime_s'])}{ro}{unit})"
        )
    elif out["stale_mount"]:
        sm = out["stale_mount"]
        what = "stale (ENOTCONN)" if sm["state"] == "stale" else "no longer mounted"
        click.echo(
            f"mounted     no: server pid {sm['pid']} died without unmounting; {sm['mountpoint']} is {what}; "
            f"the next mount clears it and runs the check"
        )
    else:
        click.echo("mounted     no")
    click.echo(f"indexer     {_indexer_line(out)}")
    click.echo(
        f"index       TOC generation {out['toc_generation']} (one per indexer commit), "
        f"{count(out['pending_records'], 'journal record')} pending, "
        f"builder {(idx.get('builder') or {}).get('builder', 'deterministic')}"
    )
    last = idx.get("last_pass") or {}
    previous = _previous_run(out)
    if last:
        click.echo(
            f"last pass   {count(last.get('records', 0), 'record')}, {count(last.get('summarized', 0), 'summary')}, "
            f"{count(last.get('dirs_rendered', 0), 'TOC')} in {last.get('seconds', 0)} s{previous}"
        )
    llm_error = (idx.get("builder") or {}).get("last_error")
    llm_line = (
        f"LLM endpoint {llm_error.get('kind')} in the {llm_error.get('job')} job "
        f"{_duration(max(0.0, time.time() - llm_error.get('time', time.time())))} ago: {llm_error.get('message')}"
        if llm_error
        else ""
    )
    error = idx.get("last_error") or llm_line
    click.echo(f"last error  {error or 'none'}{previous if error else ''}")
    if idx.get("last_error") and llm_line:
        click.echo(f"LLM error   {llm_line}")
    _print_llm(idx.get("builder") or {})
    if "stats" in out:
        s = out["stats"]
        click.echo(
            f"reads       {count(s.get('toc_pages_read', 0), 'TOC page')}, {count(s.get('entries_read', 0), 'entry')}, "
            f"{count(s.get('tokens_read', 0), 'token')} since mount"
        )
    if out.get("backend") == "etcd":
        _print_cluster(out)
    click.echo(
        f"store       {count(out['inodes'], 'inode')}, {out['map']['used_bytes'] / 2**20:.1f} MiB used, "
        f"clean shutdown flag: {'set' if out['clean_shutdown'] else 'not set (mounted or crashed)'}"
    )


def _previous_run(out: dict) -> str:
    """`` (the previous indexer's, pid N; pid M has not finished a pass yet)`` while a new indexer is
    starting (:func:`indexer_state`): the published record — its last pass, its last error — is still the
    one of the indexer before it (restarted by an MCP server or systemd, or a remount); else ``""``."""
    if out.get("indexer_state") != "starting":
        return ""
    old = (out.get("indexer") or {}).get("pid")
    return f" (the previous indexer's, pid {old}; pid {out['indexer_pid']} has not finished a pass yet)"


def _print_cluster(out: dict) -> None:
    """The ``backend`` and ``member`` lines of ``status`` for a library on etcd (one line per member)."""
    members = out["map"].get("members", [])
    healthy = sum(1 for m in members if m.get("healthy"))
    click.echo(f"backend     etcd {out['store_url']} ({healthy} of {count(len(members), 'member')} healthy)")
    for m in members:
        state = "healthy" if m.get("healthy") else "unhealthy (no answer or no leader)"
        lead = ", leader" if m.get("leader") else ""
        size = f", db {m['db_size_bytes'] / 2**20:.1f} MiB" if "db_size_bytes" in m else ""
        click.echo(
            f"member      {m.get('name') or '?'} {','.join(m.get('client_urls', []))} {state}{lead}{size}"
        )
    holders = out.get("holders") or {}
    for facts in holders.get("mount") or [None]:  # one line per read-write mount
        click.echo(f"{'mounted by':<12}{describe_holder(facts) if facts else 'nobody (no etcd lease held)'}")
    facts = holders.get("indexer")
    click.echo(f"{'indexed by':<12}{describe_holder(facts) if facts else 'nobody (no etcd lease held)'}")


def _print_llm(builder: dict) -> None:
    """The ``LLM`` line of ``status`` (requests, tokens, fallbacks, the hour's spend) for an LLM builder."""
    if builder.get("requests") is None:
        return
    spend = builder.get("spend") or {}
    hour = (
        f"; last hour {count(spend.get('requests_last_hour', 0), 'request')}, "
        f"{count(spend.get('tokens_last_hour', 0), 'token')} (limits {spend.get('max_requests_per_hour') or 'none'}/"
        f"{spend.get('max_tokens_per_hour') or 'none'})"
        if spend
        else ""
    )
    click.echo(
        f"LLM         {builder.get('model', '?')}: {count(builder.get('requests') or 0, 'request')}, "
        f"{count(builder.get('tokens', 0), 'token')}, {count(builder.get('fallbacks', 0), 'fallback')}{hour}"
    )
    for line in endpoint_lines(builder):
        click.echo(line)


def endpoint_lines(builder: dict, now: float | None = None) -> list[str]:
    """The ``endpoint`` line of ``status`` (state, pause, latency, error rate, last error) and, when the
    indexer asks in the background, the ``LLM queue`` line; ``[]`` for a builder without endpoint facts."""
    ep = builder.get("endpoint")
    if not ep:
        return []
    now = time.time() if now is None else now
    state = ep.get("state", "unknown")
    if ep.get("paused_until"):
        state += f", paused {_duration(max(0.0, ep['paused_until'] - now))} more ({ep.get('pause_reason')})"
    if ep.get("failing_since"):
        state += f", failing for {_duration(max(0.0, now - ep['failing_since']))}"
    lat = (
        f"latency p50 {ep['latency_p50_s']:.2f} s, p95 {ep['latency_p95_s']:.2f} s"
        if ep.get("latency_p50_s") is not None
        else "latency -"
    )
    rate = (
        f"{count(ep['errors_recent'], 'error')} in the last {count(ep['requests_recent'], 'answer')} "
        f"({ep['error_rate']:.0%})"
        if ep.get("requests_recent")
        else "no answers yet"
    )
    err = builder.get("last_error")
    last = (
        f"; last error [{err.get('job')}] {err.get('kind')} {_duration(max(0.0, now - err.get('time', now)))} "
        f"ago: {str(err.get('message', ''))[:120]}"
        if err
        else ""
    )
    lines = [f"endpoint    {builder.get('base_url')}: {state}; {lat}; {rate}{last}"]
    bg = builder.get("background")
    if bg is not None:
        lines.append(
            f"LLM queue   {bg.get('queued', 0)} queued, {bg.get('in_flight', 0)} in flight, "
            f"{bg.get('fetched', 0)} answered in the background, {bg.get('given_up', 0)} given up "
            "(their TOC lines stay deterministic)"
        )
    return lines


def _duration(seconds: float) -> str:
    """``3725`` → ``"1h 2m 5s"``."""
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    parts = [f"{d}d"] * bool(d) + [f"{h}h"] * bool(h) + [f"{m}m"] * bool(m) + [f"{s}s"]
    return " ".join(parts[:3])


def _nonblank(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Click callback refusing an empty or blank search term (``click.BadParameter``, exit status 2)."""
    if not value.strip():
        raise click.BadParameter("the search term is empty")
    return value


@click.command()
@library_argument
@click.argument("term", callback=_nonblank)
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True)
@click.option(
    "-0",
    "--null",
    "null",
    is_flag=True,
    help="Print raw path bytes separated by NUL (for xargs -0), unescaped.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable results (paths, kinds, total).")
@handle_errors
def find(libdir: str, term: str, limit: int, null: bool, as_json: bool) -> None:
    """Resolve TERM to entries and directories without the model, best first: exact file names, names the
    entries define (``json.dumps``, ``lru_cache``), then BM25 over names, defined names and content.

    Directories end in ``/``. When more match than ``--limit``, a note on stderr says how many. Paths are
    printed with undecodable bytes and control characters escaped (``\\xNN``); use ``-0`` for the exact
    bytes. Exit status 1: no match."""
    libdir = resolve_libdir(libdir)
    found = run_isolated(lambda: _find(libdir, term, limit))  # a damaged store is a report, never a crash
    prefix = os.fsencode(_mountpoint_for_paths(libdir))
    if as_json:
        echo_json(_found_json(found, term, prefix))
        if not found.matches:
            raise SystemExit(1)
        return
    if not found.matches:
        raise click.ClickException(f"no match for {term!r}")
    if null:
        out = click.get_binary_stream("stdout")
        for m in found.matches:
            out.write(prefix + m.path + b"\0")
    else:
        for m in found.matches:
            click.echo(display_path(prefix + m.path) + ("/" if m.kind == "dir" else ""))
    if found.cut:
        click.echo(f"({len(found.matches)} of {found.total} matches shown; --limit N shows more)", err=True)


def _mountpoint_for_paths(libdir: str) -> str:
    """Where ``find`` says the library's paths are: its live mountpoint, ``""`` when not mounted. Beside a
    stopped mount server the mountpoint ``/proc/mounts`` lists, never asked (it would wait for the server)."""
    if stopped_server(libdir):
        from libraryfs.layout import mountpoint_of

        return mountpoint_of(libdir) or ""
    minfo = mount_info(libdir)
    return minfo["mountpoint"] if minfo else ""


def _find(libdir: str, term: str, limit: int) -> Found:
    """:func:`~libraryfs.index.find.find_ranked` over the library's term index, read-only (the store's
    fallback order when the library has none yet or SQLite cannot read it), after :func:`verify_pages`:
    raises :class:`~libraryfs.errors.Damaged` for a damaged store, as ``status`` does."""
    from libraryfs.index import termindex
    from libraryfs.index.find import find_ranked

    verify_pages(libdir)  # the term index names inodes a damaged page would silently drop from the answer
    reader = termindex.Reader(term_index_path(libdir))
    st = Store(libdir, readonly=True, verify=False)
    try:
        with st.read() as t:
            return find_ranked(t, reader.get(), term, limit)
    finally:
        st.close()


def _found_json(found: Found, term: str, prefix: bytes) -> dict:
    """``--json`` of ``libraryfs find``: the term, ``total``, ``shown``, ``cut`` and the matches (rank
    from 1, path, kind, how it matched, bm25 score)."""
    return {
        "term": term,
        "total": found.total,
        "shown": len(found.matches),
        "cut": found.cut,
        "matches": [
            {
                "rank": k,
                "path": os.fsdecode(prefix + m.path),
                "kind": m.kind,
                "match": m.match,
                "score": round(m.score, 4),
            }
            for k, m in enumerate(found.matches, start=1)
        ],
    }


@click.command()
@library_argument
@click.option("--full", is_flag=True, help="Re-examine every entry and directory.")
@llm_switch
@llm_options
@handle_errors
def index(libdir: str, full: bool, llm: bool | None, **kwargs) -> None:
    """Run one indexing pass now, then exit (refused while an indexer daemon is running)."""
    from libraryfs.daemon.indexer import Indexer
    from libraryfs.daemon.indexerd import make_builder
    from libraryfs.daemon.launcher import refuse_if_stopped

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
                never = t.cfg(S.CFG_TOC_GEN) is None
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


commands = [init, check, status, find, index]
