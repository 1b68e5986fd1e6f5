"""What a fresh-user trial of the CLI found, each fixed: `status` claiming an idle indexer while records wait,
a SIGSTOPped indexer shown as "running", an earlier indexer's "stopped" shown for a new one, the mount's
uptime frozen at 0 in ``--json``, "1 entries"; `ingest` drawing its progress bar into a pipe, "1 files";
a second `mount` of a mounted library not naming its mountpoint; a missing mountpoint created silently.
Real libraries, real mounts, the real console script."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

from helpers.files import read_file, write_file
from helpers.mount import mount
from helpers.wait import wait_until

from libraryfs.index import names
from libraryfs.layout import INDEXER_LOCK, lock_holder, mount_state


def status_line(run_cli, libdir: str, key: str) -> str:
    """The ``key`` line of ``libraryfs status`` (its value, after the label column)."""
    out = run_cli("status", libdir, check_rc=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith(f"{key:<12}"))
    return line[12:]


def status_json(run_cli, libdir: str) -> dict:
    return json.loads(run_cli("status", libdir, "--json", check_rc=True).stdout)


def test_status_does_not_call_an_indexer_with_records_waiting_idle(libdir, tmp_path, run_cli):
    """Between two polls the indexer's published state is ``idle`` while a new journal record waits: the
    line said "running (idle, pid N)" beside "1 journal record(s) pending". A 60 s poll holds that state."""
    with mount(libdir, tmp_path / "mnt", env={"LIBRARYFS_INDEX_POLL_S": "60"}) as m:
        m.wait_indexed()
        written = []

        def waiting() -> bool:
            """Write one more file; True once status shows records waiting beside an idle indexer."""
            written.append(m.p(f"plan{len(written)}.md"))
            write_file("# Plan\n", written[-1], "w")
            st = status_json(run_cli, m.libdir)
            return st["pending_records"] >= 1 and st["indexer"]["state"] == "idle"

        wait_until(waiting, 30, "records waiting beside an idle indexer")  # not a pass that ran meanwhile
        line = status_line(run_cli, m.libdir, "indexer")
        found = re.fullmatch(
            rf"running \(pid {m.indexer_pid}\), (\d+) journal records? not indexed yet", line
        )
        assert found and "idle" not in line, line
        n = int(found.group(1))
        assert line.endswith(f"{n} journal record{'s' * (n != 1)} not indexed yet"), line
        index = status_line(run_cli, m.libdir, "index")
        assert f", {n} journal record{'s' * (n != 1)} pending," in index and "(s)" not in index, index


def test_status_says_a_sigstopped_indexer_is_stopped_and_how_to_continue_it(mounted, run_cli):
    pid = mounted.indexer_pid
    mounted.wait_indexed()
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: read_file(f"/proc/{pid}/stat").split(") ")[1][0] == "T", 10, "the indexer stopped")
        assert status_line(run_cli, mounted.libdir, "indexer") == (
            f"stopped by a signal (pid {pid}): continue it with `kill -CONT {pid}`"
        )
        st = status_json(run_cli, mounted.libdir)
        assert st["indexer_state"] == "suspended" and st["indexer_suspended"] == "stopped (SIGSTOP)", st
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(lambda: status_json(run_cli, mounted.libdir)["indexer_state"] != "suspended", 10, "it runs")


def test_status_of_a_new_indexer_is_not_the_last_ones_stopped(libdir, tmp_path, run_cli):
    """After an unmount the published record says ``stopped`` (pid of the indexer that exited); a new
    indexer holds its lock before it publishes its own record: that one is "starting", not
    "running (stopped, pid N)", and the record's last pass is labelled the previous indexer's (it was shown
    as the new one's). The new indexer here is a process holding the lock, as a starting one does."""
    with mount(libdir, tmp_path / "mnt") as m:
        m.wait_indexed()
        old = m.indexer_pid
    code = (
        "import sys, libraryfs.layout as L; fd = L.acquire_lock(sys.argv[1], L.INDEXER_LOCK); "
        "print('held', flush=True); sys.stdin.read()"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(libdir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as p:
        _status_beside(p, old, str(libdir), run_cli)


def _status_beside(p: subprocess.Popen, old: int, libdir: str, run_cli) -> None:
    """``status`` while ``p`` holds the indexer lock; the published record is that of indexer ``old``."""
    try:
        assert p.stdout.readline() == "held\n" and lock_holder(libdir, INDEXER_LOCK) == p.pid
        assert status_line(run_cli, libdir, "indexer") == f"running (starting, pid {p.pid})"
        last = status_line(run_cli, libdir, "last pass")
        assert re.fullmatch(
            rf"\d+ records?, \d+ summar(y|ies), \d+ TOCs? in [\d.]+ s \(the previous indexer's, pid {old}; "
            rf"pid {p.pid} has not finished a pass yet\)",
            last,
        ), last
        st = status_json(run_cli, libdir)
        assert st["indexer"]["state"] == "stopped" and st["indexer"]["pid"] == old, st["indexer"]
        assert st["indexer_state"] == "starting", st
    finally:
        p.stdin.close()
        p.wait(30)


def test_status_json_mount_uptime_counts_from_the_mounts_start(mounted, run_cli):
    started = status_json(run_cli, mounted.libdir)["mount"]["started"]
    wait_until(lambda: time.time() - started >= 2.0, 10, "the mount to be up 2 s")
    st = status_json(run_cli, mounted.libdir)
    assert st["mount"]["uptime_s"] >= 2.0 and abs(st["mount"]["uptime_s"] - st["uptime_s"]) < 1.0, st


def test_status_reads_line_counts_one_entry_as_one_entry(mounted, run_cli):
    """A fresh mount, one entry written and read back through it, no TOC page read: "1 entry", not
    "1 entries" (and "0 TOC pages")."""
    write_file("# One\n", mounted.p("one.md"), "w")
    assert read_file(mounted.p("one.md")) == "# One\n"
    line = status_line(run_cli, mounted.libdir, "reads")
    assert line.startswith("0 TOC pages, 1 entry, ") and line.endswith(" since mount"), line


def test_ingest_into_a_pipe_draws_no_bar_and_counts_one_file(libdir, tmp_path, run_cli):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.md").write_text("a\n")
    os.symlink("/etc/passwd", src / "link")
    r = run_cli("ingest", str(libdir), str(src), "--into", "docs", check_rc=True)  # stderr: a pipe
    assert r.stderr == "", r.stderr  # no tqdm bar (it was drawn with \r into the pipe)
    assert r.stdout == "ingested 1 file (2 bytes) into docs; skipped 1 (1 symlink)\n", r.stdout


def test_ingest_counts_a_symlink_to_a_directory_as_skipped(libdir, tmp_path, run_cli):
    """A symlink to a directory (``os.walk`` lists it among the directories, and does not follow it) was
    skipped without being counted: "skipped 1 (1 symlink)" for two symlinks (new-user trial)."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.md").write_text("a\n")
    os.symlink("/etc/passwd", src / "link")
    os.symlink("..", src / "sub" / "loop")
    os.symlink("/nonexistent", src / ".hidden")  # hidden first: counted once, as hidden
    r = run_cli("ingest", str(libdir), str(src), "--into", "docs", check_rc=True)
    assert r.stdout == "ingested 1 file (2 bytes) into docs; skipped 3 (1 hidden, 2 symlinks)\n", r.stdout


def test_find_in_a_library_not_mounted_says_where_its_paths_are(libdir, tmp_path, run_cli):
    """Unmounted, ``find`` prints paths from the library's root (``/notes/plan.md``): with nothing else said
    they read as paths of this machine's root (new-user trial: ``cat /caf\\xe9.md`` fails). A note on stderr
    says so; mounted, there is none."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "plan.md").write_text("# Plan\n\nShip the espresso index.\n")
    run_cli("ingest", str(libdir), str(src), "--into", "notes", check_rc=True)
    run_cli("index", str(libdir), check_rc=True)
    r = run_cli("find", str(libdir), "espresso", check_rc=True)
    assert "/notes/plan.md" in r.stdout.splitlines(), r.stdout
    assert r.stderr.count("\n") == 1 and "not mounted" in r.stderr and "libraryfs mount" in r.stderr, r.stderr


def test_second_mount_of_a_mounted_library_names_its_mountpoint(mounted, tmp_path, run_cli):
    other = tmp_path / "other"
    r = run_cli("mount", mounted.libdir, str(other))
    assert r.returncode == 1, r
    assert r.stderr.strip() == (
        f"Error: library {mounted.libdir} is already mounted at {mounted.mnt} by pid {mounted.server_pid}"
    ), r.stderr
    assert not os.path.lexists(other)  # refused before anything was made


def test_mount_says_it_created_a_missing_mountpoint(libdir, tmp_path, run_cli):
    """mount(8) and sshfs refuse a missing mountpoint; `libraryfs mount` makes it (README quick start) and
    says so on its first line. A mountpoint that exists gets no such line."""
    mnt = tmp_path / "new" / "mnt"
    r = run_cli("mount", "--no-indexer", str(libdir), str(mnt), check_rc=True)
    try:
        lines = r.stdout.splitlines()
        assert lines[0] == f"created mountpoint {mnt}" and lines[1].startswith(f"mounted {libdir} at {mnt} ")
    finally:
        run_cli("umount", str(mnt), check_rc=True)
    assert mount_state(str(mnt)) == "none" and os.path.isdir(mnt)
    r = run_cli("mount", "--no-indexer", str(libdir), str(mnt), check_rc=True)
    try:
        assert "created mountpoint" not in r.stdout and r.stdout.startswith(
            f"mounted {libdir} at {mnt} "
        ), r.stdout
    finally:
        run_cli("umount", str(mnt), check_rc=True)


def test_an_ignore_file_written_after_indexing_hides_its_paths_from_find(mounted, run_cli):
    """A ``.gitignore`` added after its directory was indexed took it out of the TOCs at once, but
    ``libraryfs find`` and ``/.find/`` kept listing the file and the directory, and ``check`` said clean (a
    user hiding a directory could still find its content). The indexer now drops their term-index rows and
    names as it does for paths ignored from the start, and brings them back when the ignore file goes."""
    os.makedirs(mounted.p("gi2/private"))
    write_file("the token is xylophonequartz\n", mounted.p("gi2/private/t.txt"), "w")
    mounted.wait_indexed()
    found = run_cli("find", mounted.libdir, "xylophonequartz", check_rc=True).stdout
    assert "/gi2/private/t.txt" in found, found

    def shown(term: str) -> list[str]:
        """What ``libraryfs find`` and ``/.find/TERM/`` show of the private directory."""
        cli = run_cli("find", mounted.libdir, term).stdout.splitlines()
        where = mounted.p(f".find/{term}")
        links = (
            [os.readlink(os.path.join(where, n)) for n in os.listdir(where)] if os.path.isdir(where) else []
        )
        return [p for p in cli + links if "private" in p]

    write_file("private/\n", mounted.p("gi2/.gitignore"), "w")
    mounted.wait_indexed()
    for term in ("xylophonequartz", "t.txt", "private"):
        assert shown(term) == [], term
    os.unlink(mounted.p("gi2/.gitignore"))
    mounted.wait_indexed()
    assert shown("xylophonequartz") and shown("t.txt")


def test_find_lists_every_link_of_a_hard_linked_file_under_its_own_name(mounted, run_cli):
    """``echo hello > solo.md; ln solo.md solo-link.md``: ``libraryfs find LIB solo.md`` listed only
    ``solo-link.md`` (the ``names`` table and the term index knew an inode by its last name). Each link is
    found under its own name, unlinking one keeps the other, renaming one moves only that name, and
    ``check`` agrees."""

    def find(term: str) -> list[str]:
        return run_cli("find", mounted.libdir, term, check_rc=True).stdout.splitlines()

    write_file("hello\n", mounted.p("solo.md"), "w")
    os.link(mounted.p("solo.md"), mounted.p("solo-link.md"))
    mounted.wait_indexed()
    assert find("solo.md")[0] == mounted.p("solo.md"), find("solo.md")
    assert find("solo-link.md")[0] == mounted.p("solo-link.md"), find("solo-link.md")
    os.rename(mounted.p("solo-link.md"), mounted.p("moved.md"))
    mounted.wait_indexed()
    assert find("moved.md")[0] == mounted.p("moved.md") and find("solo.md")[0] == mounted.p("solo.md")
    os.unlink(mounted.p("solo.md"))
    mounted.wait_indexed()
    assert find("hello") == [mounted.p("moved.md")], find("hello")
    assert mounted.p("solo.md") not in find("solo.md")
    st = mounted.store(readonly=True)
    try:
        assert names.verify(st) == []  # the indexer is idle: its rows agree with the tree
    finally:
        st.close()


def test_find_refuses_a_term_over_255_bytes_in_one_line_as_mcp_does(libdir, run_cli):
    """``find`` took a 400-byte term (200 × ``é``) and searched for it, where the MCP ``find`` tool refuses
    one and ``/.find/TERM`` gets ENAMETOOLONG from the kernel: one rule now (``find.check_term``: 1–255
    bytes), a usage error for the CLI — one line on stderr, exit status 2 (README "Exit status"). A term of
    exactly 255 bytes is searched (no match: exit status 1)."""
    r = run_cli("find", str(libdir), "é" * 200)
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr.count("\n") == 1 and "400 bytes; at most 255" in r.stderr, r.stderr
    r = run_cli("find", str(libdir), "é" * 127 + "x")  # 255 bytes
    assert r.returncode == 1 and "no match for" in r.stderr, r


def test_find_of_two_words_lists_the_file_holding_both_before_a_section(libdir, tmp_path, run_cli):
    """`libraryfs find 'zebra count'` listed the section `zebra/` first — named for one word, holding the
    other in another of its files' lines — above `notes/census.md`, the one file saying "the zebra count"."""
    src = tmp_path / "src"
    (src / "zebra").mkdir(parents=True)
    (src / "notes").mkdir()
    (src / "zebra" / "herd.md").write_text("# Zebra herd\n\nThe zebra herd crossed the river at dawn.\n")
    (src / "zebra" / "stripes.md").write_text("# Stripes\n\nThe count of stripes varies.\n")
    (src / "notes" / "census.md").write_text("# Census\n\nThe zebra count this year was 412 animals.\n")
    run_cli("ingest", str(libdir), str(src), "--into", "lib", check_rc=True)
    run_cli("index", str(libdir), check_rc=True)
    lines = run_cli("find", str(libdir), "zebra count", check_rc=True).stdout.splitlines()
    assert lines[0] == "/lib/notes/census.md" and "/lib/zebra/" in lines, lines
