"""``libraryfs status | find``: the read-only commands an agent runs between steps (issue 18: each answers in
a fresh process, so this module imports only what they need — not the settings flags of ``init``/``index``
nor ``check``'s repair machinery, which live in :mod:`libraryfs.cli.library_cmds`)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from libraryfs.cli.common import display_path, echo_json, handle_errors, resolve_libdir, verify_pages
from libraryfs.cli.options import library_argument
from libraryfs.fs import generated as G
from libraryfs.fs import schema as S
from libraryfs.fs.backends import store_url
from libraryfs.fs.isolated import run_isolated
from libraryfs.fs.store import Store
from libraryfs.layout import (
    INDEXER_LOCK,
    LOGS_DIR,
    indexer_pid,
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
    from libraryfs.index.find import Found


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
    from libraryfs.layout import refuse_if_stopped

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
    from libraryfs.fs.holder import holder_facts, mount_holders, standby_facts

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
    out["config_error"] = _config_error(libdir)
    return out


def _config_error(libdir: str) -> str | None:
    """What is wrong with ``<libdir>/config.toml`` (every table: a bad value stops the mount or the indexer
    at their start, which ``status`` should say before then), else None."""
    from libraryfs.layout import config_path

    if not os.path.lexists(config_path(libdir)):  # most libraries: nothing to check, nothing imported
        return None
    from libraryfs.settings import TABLES, SettingsError, load_settings

    try:
        load_settings(libdir, tables=TABLES)
    except SettingsError as e:
        return str(e)
    return None


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
        from libraryfs.fs.holder import describe_holder

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
    if m.get("read_only"):
        return "not running (a read-only mount has no indexer)"
    # stopped on purpose (a user's SIGTERM), ended while starting, or killed again and again until the mount
    # gave up restarting it (daemon.indexwatch)
    run, idx = out.get("run") or {}, out.get("indexer") or {}
    mine = run.get("indexer_pid")  # the mount's last indexer; the record may be an earlier one's
    if run.get("indexer_gave_up"):
        why = f"; the mount stopped restarting it after {run['indexer_gave_up']}"
    elif idx.get("state") == "stopped" and (mine is None or idx.get("pid") == mine):
        why = f"; it stopped when asked (pid {idx.get('pid')})"
    elif mine is not None and idx.get("pid") != mine:
        why = f"; it (pid {mine}) ended while starting"
    else:
        why = ""
    log = os.path.join(state_dir(out["library"]), LOGS_DIR, "indexer.log")  # log_path would create logs/
    last = (last_log_line(log) or "")[:160]
    return (
        "not running"
        + why
        + (f" (its log ends: {last})" if last else "")
        + f"; run `libraryfs index {out['library']}` for one pass, or `libraryfs indexer {out['library']}"
        + f" --mountpoint {m['mountpoint']}` to keep one running"
    )


def _print_status(out: dict) -> None:
    """The human-readable ``libraryfs status`` of :func:`status_facts`' dict."""
    m, idx = out["mount"], out["indexer"] or {}
    click.echo(f"library     {out['library']}")
    if out.get("config_error"):
        click.echo(f"config      error: {out['config_error']}")
    if out["mounted"]:
        unit = f", unit {m['systemd_unit']}" if m.get("systemd_unit") else ""
        ro = ", read-only" if m.get("read_only") else ""
        threads = f", {m['threads']} threads" if (m.get("threads") or 1) > 1 else ""
        click.echo(
            f"mounted     yes at {m['mountpoint']} (server pid {m['pid']}, up "
            f"{_duration(out['uptime_s'])}{ro}{threads}{unit})"
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
    error = (idx.get("last_error") and idx["last_error"] + _error_age(idx)) or llm_line
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
    from libraryfs.fs.holder import describe_holder

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


def _error_age(idx: dict) -> str:
    """`` (5m 2s ago; 3 passes committed since)`` for the indexer record's last error: an error later passes
    got past (a full disk, then freed) is told from a current one; ``""`` for a record without the time."""
    at, since = idx.get("last_error_time"), idx.get("passes_since_error")
    if at is None:
        return ""
    # 0: the last pass met it (passes go on committing; a derived index's error recurs at each until fixed)
    later = f"; {count(since, 'pass')} committed since" if since else "; at the last pass"
    return f" ({_duration(max(0.0, time.time() - at))} ago{later})"


def _duration(seconds: float) -> str:
    """``3725`` → ``"1h 2m 5s"``."""
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    parts = [f"{d}d"] * bool(d) + [f"{h}h"] * bool(h) + [f"{m}m"] * bool(m) + [f"{s}s"]
    return " ".join(parts[:3])


def _search_term(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Click callback applying the finder's term rule (:func:`libraryfs.index.find.check_term`: 1–255 bytes,
    not blank, no NUL — what the MCP ``find`` tool and ``/.find/TERM`` accept): a term it refuses is a
    ``click.BadParameter``, one line on stderr, exit status 2."""
    from libraryfs.errors import LibraryError
    from libraryfs.index.find import check_term

    try:
        check_term(value)
    except LibraryError as e:
        raise click.BadParameter(str(e)) from None
    return value


@click.command()
@library_argument
@click.argument("term", callback=_search_term)
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
    printed with undecodable bytes, control and invisible characters (zero-width, bidi controls such as
    U+202E: ``\\x202e``) escaped (``\\xNN``), as the TOCs and the MCP tools show them; use ``-0`` for the
    exact bytes. TERM is 1–255 bytes in UTF-8 (as ``.find/TERM`` and the MCP ``find`` tool; another is a usage
    error, exit status 2). A library that is not mounted has its paths from its own root (``/notes/a.md``),
    and a note on stderr says so. Exit status 1: no match."""
    from libraryfs.index.find import find_ranked  # before the fork: the reader inherits it, and the Found it
    # returns unpickles here without importing the term index (and SQLite) a second time

    libdir = resolve_libdir(libdir)
    found = run_isolated(lambda: _find(libdir, term, limit, find_ranked))  # a damaged store: a report
    prefix = os.fsencode(_mountpoint_for_paths(libdir))
    if as_json:
        echo_json(_found_json(found, term, prefix))
        if not found.matches:
            raise SystemExit(1)
        return
    if not found.matches:
        shown = term if len(term) <= TERM_SHOWN_MAX else term[: TERM_SHOWN_MAX - 1] + "…"
        behind = f" ({_behind_note(found.behind)[1:-1]})" if found.behind else ""
        raise click.ClickException(
            f"no match for '{display_path(os.fsencode(shown))}'{behind}"
        )  # bytes as \xNN
    if null:
        out = click.get_binary_stream("stdout")
        for m in found.matches:
            out.write(prefix + m.path + b"\0")
    else:
        for m in found.matches:
            click.echo(display_path(prefix + m.path) + ("/" if m.kind == "dir" else ""))
    if found.cut:
        click.echo(f"({len(found.matches)} of {found.total} matches shown; --limit N shows more)", err=True)
    if found.behind:
        click.echo(_behind_note(found.behind), err=True)
    if not prefix:  # "/notes/a.md" reads as a path of this machine's root
        click.echo(
            f"(not mounted: the paths are inside the library; `libraryfs mount {libdir} DIR` opens them)",
            err=True,
        )


TERM_SHOWN_MAX = 80  #: characters of a search term an error message repeats


def _behind_note(n: int) -> str:
    """The note of a search whose term index trails the store by ``n`` entries (its writes failed)."""
    return (
        f"(the term index is behind by {count(n, 'entry')}: its last write failed, see `libraryfs status`; "
        "names and summaries were searched too)"
    )


def _mountpoint_for_paths(libdir: str) -> str:
    """Where ``find`` says the library's paths are: its live mountpoint, ``""`` when not mounted. Beside a
    stopped mount server the mountpoint ``/proc/mounts`` lists, never asked (it would wait for the server)."""
    if stopped_server(libdir):
        from libraryfs.layout import mountpoint_of

        return mountpoint_of(libdir) or ""
    minfo = mount_info(libdir)
    return minfo["mountpoint"] if minfo else ""


def _find(libdir: str, term: str, limit: int, find_ranked: Callable[..., Found]) -> Found:
    """``find_ranked`` (:func:`~libraryfs.index.find.find_ranked`) over the library's term index, read-only
    (the store's fallback order when the library has none yet or SQLite cannot read it), after
    :func:`verify_pages`: raises :class:`~libraryfs.errors.Damaged` for a damaged store, as ``status`` does."""
    from libraryfs.index import termindex

    verify_pages(libdir)  # the term index names inodes a damaged page would silently drop from the answer
    reader = termindex.Reader(term_index_path(libdir))
    st = Store(libdir, readonly=True, verify=False)
    try:
        with st.read() as t:
            return find_ranked(t, reader.get(), term, limit)
    finally:
        st.close()


def _found_json(found: Found, term: str, prefix: bytes) -> dict:
    """``--json`` of ``libraryfs find``: the term, ``total``, ``shown``, ``cut``, ``index_behind`` and the matches (rank
    from 1, path, kind, how it matched, bm25 score). Text is valid Unicode: bytes that are not UTF-8 are
    escaped ``\\xNN`` (as the TOCs show them), and such a match also carries its exact bytes as
    ``path_hex`` (``os.fsdecode``'s lone surrogates are rejected by strict JSON parsers)."""

    def match(k: int, m) -> dict:
        """One match's JSON (rank ``k`` from 1)."""
        path = prefix + m.path
        out = {
            "rank": k,
            "path": path.decode("utf-8", "backslashreplace"),
            "kind": m.kind,
            "match": m.match,
            "score": round(m.score, 4),
        }
        if out["path"].encode("utf-8") != path:
            out["path_hex"] = path.hex()
        return out

    return {
        "term": os.fsencode(term).decode("utf-8", "backslashreplace"),
        "total": found.total,
        "shown": len(found.matches),
        "cut": found.cut,
        "index_behind": found.behind,  # entries the term index trails the store by (0: in line)
        "matches": [match(k, m) for k, m in enumerate(found.matches, start=1)],
    }


commands = [status, find]
