"""CLI commands against real mounts: find, .find/, stats.json, status, ingest --watch, read-only TOCs."""

import errno
import json
import os
import subprocess
import sys

import pytest
from helpers.files import read_file, write_file
from helpers.wait import wait_until


def wait_for(pred, timeout_s=30.0):
    wait_until(pred, timeout_s, "the mirrored change")


def test_find_and_dot_find(mounted, run_cli):
    os.makedirs(mounted.p("kitchen"))
    os.makedirs(mounted.p("garage"))
    write_file("# Recipes\n\nPasta with tomato sauce.\n", mounted.p("kitchen/recipes.md"), "w")
    write_file("# Tools\n\nA hammer and a saw.\n", mounted.p("garage/tools.md"), "w")
    mounted.wait_indexed()
    r = run_cli("find", mounted.libdir, "recipes.md", check_rc=True)
    assert r.stdout.splitlines()[0] == mounted.p("kitchen/recipes.md")
    r = run_cli("find", mounted.libdir, "hammer", check_rc=True)
    assert mounted.p("garage/tools.md") in r.stdout
    links = sorted(os.listdir(mounted.p(".find/tools.md")))
    assert links == ["01-tools.md"]
    assert read_file(mounted.p(".find/tools.md/01-tools.md")).startswith("# Tools")
    assert run_cli("find", mounted.libdir, "nothing-like-this").returncode == 1


def test_dot_find_refuses_a_blank_term_as_libraryfs_find_does(mounted, run_cli):
    """Trial 1203b finding 5: ``.find/<blank>`` was an empty directory, where ``libraryfs find L "   "``
    exits 2 and the MCP ``find`` tool answers EINVAL (``find.check_term``, one rule for every front end).
    Now the lookup fails with EINVAL; a term with blanks around a word still resolves."""
    write_file("# Tools\n\nA hammer.\n", mounted.p("tools.md"), "w")
    mounted.wait_indexed()
    for term in (" ", "   ", "\t", " \t\n"):
        for op in (os.stat, os.listdir, os.lstat):
            with pytest.raises(OSError) as e:
                op(mounted.p(".find/" + term))
            assert e.value.errno == errno.EINVAL, (term, op, e.value)
        with pytest.raises(OSError) as e:
            os.stat(mounted.p(".find/" + term + "/01-tools.md"))
        assert e.value.errno == errno.EINVAL, (term, e.value)
    assert run_cli("find", mounted.libdir, "   ").returncode == 2
    assert os.listdir(mounted.p(".find/ tools.md ")) == ["01-tools.md"]


def test_stats_count_toc_pages_and_entries_per_process(mounted):
    os.makedirs(mounted.p("s"))
    write_file("# E\n\n" + "word " * 400, mounted.p("s/e.md"), "w")
    mounted.wait_indexed()
    code = (
        f"import json,os;open({mounted.p('INDEX.md')!r}).read();open({mounted.p('s/INDEX.md')!r}).read();"
        f"open({mounted.p('s/e.md')!r}).read();"
        f"print(os.getpid());print(open({mounted.p('.libraryfs/stats.json')!r}).read())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    pid, stats = out.split("\n", 1)
    mine = json.loads(stats)["by_pid"][pid]
    assert mine["toc_pages_read"] == 2 and mine["entries_read"] == 1
    assert 400 <= mine["entry_tokens_read"] <= 420  # the indexer's o200k count of the entry


def test_generated_files_are_read_only_but_index_md_can_become_the_users(mounted):
    for flags in (os.O_WRONLY, os.O_RDWR | os.O_TRUNC):
        with pytest.raises(PermissionError):
            os.open(mounted.p(".libraryfs/status.json"), flags)
    assert "INDEX.md" not in os.listdir(mounted.mnt)  # resolvable, never listed (docs/posix.md)
    os.mkdir(mounted.p("s"))
    with open(mounted.p("s/a.md"), "w") as f:
        f.write("# A\n")
    mounted.wait_indexed()
    assert read_file(mounted.p("s/INDEX.md"), "rb").startswith(b"<!-- libraryfs toc:")
    with open(mounted.p("s/INDEX.md"), "w") as f:  # `>` turns the generated page into the user's file
        f.write("# mine\n")
    assert read_file(mounted.p("s/INDEX.md")) == "# mine\n" and "INDEX.md" in os.listdir(mounted.p("s"))
    os.unlink(mounted.p("s/INDEX.md"))  # the name stays the user's: absent, as on any filesystem
    assert not os.path.exists(mounted.p("s/INDEX.md"))
    os.close(os.open(mounted.p("s/INDEX.md"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    mounted.wait_indexed()
    assert b"../a.md" in read_file(mounted.p("s/.index/INDEX.md"), "rb")  # the TOC, moved


def test_status_json(mounted, run_cli):
    write_file("x", mounted.p("x.md"), "w")
    mounted.wait_indexed()
    st = json.loads(run_cli("status", mounted.libdir, "--json", check_rc=True).stdout)
    assert st["mounted"] and st["mount"]["pid"] == mounted.server_pid
    assert st["indexer_running"] and st["pending_records"] == 0
    human = run_cli("status", mounted.libdir, check_rc=True).stdout
    assert "mounted     yes" in human and "last error  none" in human


def test_ingest_watch_mirrors_changes(mounted, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.md").write_text("# A\n")
    (src / "sub" / "b.md").write_text("# B\n")
    (src / ".hidden").write_text("secret")
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "libraryfs.cli.main",
            "ingest",
            mounted.libdir,
            str(src),
            "--into",
            "docs",
            "--watch",
            "-q",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: os.path.exists(mounted.p("docs/sub/b.md")))
        assert not os.path.exists(mounted.p("docs/.hidden"))

        def mirrored() -> bool:  # "watching" is printed before the observer starts: probe until it mirrors
            (src / "probe.md").write_text("probe\n")
            return os.path.exists(mounted.p("docs/probe.md"))

        wait_until(mirrored, 60, "the ingest watcher to mirror a change (its observer runs)")
        (src / "c.md").write_text("# C\n")
        (src / "a.md").write_text("# A2\n")
        os.unlink(src / "sub" / "b.md")
        wait_for(lambda: os.path.exists(mounted.p("docs/c.md")))
        wait_for(lambda: read_file(mounted.p("docs/a.md")) == "# A2\n")
        wait_for(lambda: not os.path.exists(mounted.p("docs/sub/b.md")))
    finally:
        p.terminate()
        p.communicate(timeout=30)  # reaps it and closes its pipes


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def test_find_defined_names_through_the_cli_and_dot_find(mounted, run_cli):
    os.makedirs(mounted.p("docs/library"))
    os.makedirs(mounted.p("notes"))
    rst = ".. module:: json\n\n.. function:: dumps(obj)\n\n   Serialize obj.\n"
    _write(mounted.p("docs/library/json.rst.txt"), "json\n====\n\n" + rst)
    _write(mounted.p("docs/library/pickle.rst.txt"), "pickle\n======\n\n.. module:: pickle\n")
    for k in range(55):
        _write(mounted.p(f"notes/n{k:02d}.md"), f"# Note {k}\n\nA tomato note.\n")
    mounted.wait_indexed()
    r = run_cli("find", mounted.libdir, "json.dumps", check_rc=True)
    assert r.stdout.splitlines()[0] == mounted.p("docs/library/json.rst.txt")
    links = sorted(os.listdir(mounted.p(".find/json.dumps")))
    assert links[0] == "01-json.rst.txt"
    with open(mounted.p(".find/json.dumps/01-json.rst.txt")) as f:
        assert "Serialize obj." in f.read()
    # directories are results too
    assert os.path.isdir(mounted.p(".find/notes/01-notes"))
    # 55 notes and their directory match: 50 links, then the cut note (a dangling link) says so
    listing = sorted(os.listdir(mounted.p(".find/tomato")))
    assert len(listing) == 51 and listing[-1] == "~ 50 of 56 shown; libraryfs find --limit lists more"
    assert not os.path.exists(mounted.p(".find/tomato/" + listing[-1]))
    r = run_cli("find", mounted.libdir, "tomato", "--json", check_rc=True)
    out = json.loads(r.stdout)
    assert out["cut"] and out["total"] == 56 and out["shown"] == 20


def test_a_killed_indexer_is_started_again_and_a_stopped_one_is_not(mounted, run_cli):
    """A new user killed the indexer (``kill -9``) under a live mount and its TOCs silently stopped following
    writes until someone noticed "not running" in ``status``. Now the mount server starts another
    (daemon.indexwatch): the mount's log says so, ``status`` names the new pid and a file written afterwards
    gets its TOC line. An indexer stopped on purpose (SIGTERM, as ``kill PID`` sends) is not restarted, and
    ``status`` then says how to start one and where its log ended."""
    import signal

    from helpers.wait import wait_exit

    def status() -> dict:
        return json.loads(run_cli("status", mounted.libdir, "--json", check_rc=True).stdout)

    # running, so it has published a state of its own (one killed while starting is not restarted:
    # test_an_indexer_stopped_as_it_starts_is_not_restarted)
    mounted.wait_indexed()
    first = mounted.indexer_pid
    assert first and status()["indexer_pid"] == first
    os.kill(first, signal.SIGKILL)
    assert wait_exit(first, 10)
    wait_until(lambda: status()["indexer_pid"] not in (None, first), 30, "another indexer")
    second = status()["indexer_pid"]
    log = read_file(os.path.join(mounted.libdir, "logs", "mount.log"), errors="replace")
    assert f"the indexer (pid {first}) exited without stopping" in log and f"(pid {second}," in log, log[
        -2000:
    ]
    write_file(b"# Written after the kill\n\nThe new indexer files it.\n", mounted.p("later.md"), "wb")
    wait_for(lambda: "later.md" in read_file(mounted.p("INDEX.md")))
    # it was started by a thread of the server, which blocks SIGTERM; once running it has unblocked it
    with open(f"/proc/{second}/status") as f:
        assert next(ln for ln in f if ln.startswith("SigBlk:")).split()[1].strip("0") == ""

    os.kill(second, signal.SIGTERM)
    assert wait_exit(second, 30)
    wait_until(
        lambda: "stopped when asked" in read_file(os.path.join(mounted.libdir, "logs", "mount.log")),
        30,
        "the server to see the indexer's stop",
    )
    assert not status()["indexer_running"]  # not restarted
    line = next(
        ln
        for ln in run_cli("status", mounted.libdir, check_rc=True).stdout.splitlines()
        if ln.startswith("indexer ")
    )
    assert "not running" in line and f"it stopped when asked (pid {second})" in line, line
    assert f"libraryfs indexer {mounted.libdir} --mountpoint {mounted.mnt}" in line, line
    assert f"libraryfs index {mounted.libdir}" in line, line


def test_an_indexer_the_mount_found_running_is_replaced_by_its_own_when_it_stops(libdir, tmp_path, run_cli):
    """A mount started while another indexer runs (an MCP server's, here a user's ``libraryfs indexer``) adopts
    it. That indexer's stop is its owner's, not the mount's: when it ends (SIGTERM, as an MCP server's exit
    stops its own), the mount starts its own and a file written afterwards reaches its INDEX.md. Before, the
    mount logged "stopped when asked; not restarted" and its TOCs stopped following writes."""
    import signal

    from helpers.mount import require_fuse
    from helpers.wait import wait_exit

    from libraryfs.layout import indexer_pid, read_run

    require_fuse()
    lib, mnt = str(libdir), str(tmp_path / "mnt")
    theirs = subprocess.Popen(
        [sys.executable, "-m", "libraryfs.cli.main", "indexer", lib, "--no-llm"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: indexer_pid(lib) == theirs.pid, 60, "the user's indexer to hold its lock")
        out = run_cli("mount", lib, mnt, "--no-llm", check_rc=True).stdout
        assert f"indexer pid {theirs.pid}" in out, out
        assert read_run(lib).get("indexer_adopted") is True
        theirs.send_signal(signal.SIGTERM)
        assert wait_exit(theirs.pid, 30)
        theirs.wait()
        wait_until(
            lambda: read_run(lib).get("indexer_pid") not in (None, theirs.pid) and indexer_pid(lib),
            30,
            "the mount's own indexer",
        )
        ours = read_run(lib)["indexer_pid"]
        assert read_run(lib).get("indexer_adopted") is False and indexer_pid(lib) == ours
        log = read_file(os.path.join(lib, "logs", "mount.log"), errors="replace")
        assert f"the indexer (pid {theirs.pid}) this mount found running has ended" in log, log[-2000:]
        write_file(b"# Written after their stop\n", os.path.join(mnt, "later.md"), "wb")
        wait_until(lambda: "later.md" in read_file(os.path.join(mnt, "INDEX.md")), 30, "later.md in INDEX.md")
    finally:
        run_cli("umount", mnt)
        if theirs.poll() is None:
            theirs.kill()
            theirs.wait()


@pytest.mark.expect_log(r"another could not be started", r"not restarted after \d+ restarts")
def test_an_indexer_that_cannot_be_started_again_is_given_up_after_five_tries(mounted, run_cli):
    """The restart budget (daemon.indexwatch): an indexer that dies at every start would otherwise be
    started every 2 s forever. Here every start fails (the indexer's log file is a directory, so its output
    cannot be opened): the server tries :data:`RESTARTS` times, then says once that it gives up, and
    ``status`` shows no indexer."""
    import signal

    from helpers.wait import wait_exit

    from libraryfs.daemon.indexwatch import RESTARTS

    logs = os.path.join(mounted.libdir, "logs")
    os.rename(os.path.join(logs, "indexer.log"), os.path.join(logs, "indexer.aside"))
    os.mkdir(os.path.join(logs, "indexer.log"))
    mounted.wait_indexed()
    first = mounted.indexer_pid
    os.kill(first, signal.SIGKILL)
    assert wait_exit(first, 10)
    wait_until(
        lambda: "not restarted after" in read_file(os.path.join(logs, "mount.log")),
        120,
        "the server giving up",
    )
    text = read_file(os.path.join(logs, "mount.log"))
    assert text.count(f"the indexer (pid {first}) is gone and another could not be started") == RESTARTS, text
    assert "Is a directory" in text
    assert not json.loads(run_cli("status", mounted.libdir, "--json", check_rc=True).stdout)[
        "indexer_running"
    ]
    human = run_cli("status", mounted.libdir, check_rc=True).stdout
    assert f"the mount stopped restarting it after {RESTARTS} restarts" in human, human
    os.rmdir(os.path.join(logs, "indexer.log"))
    os.rename(os.path.join(logs, "indexer.aside"), os.path.join(logs, "indexer.log"))


def test_an_indexer_stopped_as_it_starts_is_not_restarted(libdir, tmp_path):
    """SIGTERM to the indexer right after `mount` returned can come before its handler is installed: it
    then dies by the signal without publishing ``stopped``, which looked like a crash and was restarted. Now
    an indexer that never published a state of its own is not restarted, whatever ended it."""
    import signal

    from helpers.mount import mount
    from helpers.wait import wait_exit

    with mount(libdir, tmp_path / "mnt") as m:
        first = m.indexer_pid
        os.kill(first, signal.SIGTERM)
        assert wait_exit(first, 30)
        log = os.path.join(m.libdir, "logs", "mount.log")
        wait_until(
            lambda: f"the indexer (pid {first}) stopped when asked" in read_file(log)
            or f"the indexer (pid {first}) ended while starting" in read_file(log),
            30,
            "the server to look at the stopped indexer",
        )
        assert "started another" not in read_file(log)
        from libraryfs.layout import indexer_pid

        assert indexer_pid(m.libdir) is None
        # status names this indexer's end, never an earlier indexer's (the record may be another pid's)
        r = subprocess.run(
            [sys.executable, "-m", "libraryfs.cli.main", "status", m.libdir], capture_output=True, text=True
        )
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith("indexer "))
        assert (
            f"it (pid {first}) ended while starting" in line or f"stopped when asked (pid {first})" in line
        ), line


def test_an_unmount_by_the_systems_tools_stops_the_indexer(mounted):
    """`fusermount3 -u` (or `umount`, or SIGTERM to the server) ended the mount but left its indexer
    running until someone ran `libraryfs umount`. Now the server stops it on its way out."""
    import shutil

    from helpers.wait import wait_exit

    from libraryfs.layout import indexer_pid

    mounted.wait_indexed()  # past its start: its SIGTERM handler logs the stop
    first = mounted.indexer_pid
    assert first and indexer_pid(mounted.libdir) == first
    fm = shutil.which("fusermount3") or "fusermount3"
    assert subprocess.run([fm, "-u", mounted.mnt], capture_output=True).returncode == 0
    mounted.expect_server_alive = False
    assert wait_exit(mounted.server_pid, 30)
    assert wait_exit(first, 30), "the indexer outlived its mount"
    text = read_file(os.path.join(mounted.libdir, "logs", "indexer.log"))
    assert f"indexer stopped (pid {first}): stopping (SIGTERM)" in text, text[-1000:]
    # `libraryfs umount` afterwards said "unmounted" although nothing was mounted any more
    r = subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", "umount", mounted.libdir], capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("was not mounted"), (r.stdout, r.stderr)
    r = subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", "umount", mounted.libdir], capture_output=True, text=True
    )
    assert (
        r.returncode == 1 and r.stderr.strip() == f"Error: the library {mounted.libdir} is not mounted"
    ), r.stderr
