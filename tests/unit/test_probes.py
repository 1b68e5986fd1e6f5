"""Facts read without waiting on a mount (libraryfs.probes): a process's run state, a log's last line read
from its tail only, a path's real name; on real processes and files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from helpers.wait import wait_until

from libraryfs.daemon.launcher import _last_line
from libraryfs.probes import last_log_line, process_state, real_path_untouched, stopped_how


def test_a_stopped_process_reads_as_stopped_and_a_gone_one_as_none():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert stopped_how(child.pid) is None
        os.kill(child.pid, signal.SIGSTOP)
        wait_until(lambda: process_state(child.pid) == "T", 30, "the child to stop")
        assert stopped_how(child.pid) == "stopped (SIGSTOP)"
        os.kill(child.pid, signal.SIGCONT)
        wait_until(lambda: process_state(child.pid) != "T", 30, "the child to run again")
    finally:
        child.kill()
        child.wait()
    assert process_state(child.pid) is None and stopped_how(child.pid) is None
    assert process_state(None) is None and process_state(-1) is None


def test_last_log_line_prefers_what_it_is_asked_for_after_start(tmp_path):
    log = tmp_path / "mount.log"
    assert last_log_line(str(log)) is None  # unreadable: nothing is created
    assert not log.exists()
    log.write_text("old libraryfs-mountd: an earlier server's error\n")
    start = log.stat().st_size
    assert last_log_line(str(log), start=start) == ""  # nothing written since
    with log.open("a") as f:
        f.write("  starting\nlibraryfs-mountd: library is damaged\nINFO bye\n\n")
    assert last_log_line(str(log), start=start) == "INFO bye"
    assert last_log_line(str(log), start=start, prefer=lambda ln: "mountd:" in ln) == (
        "libraryfs-mountd: library is damaged"
    )
    assert last_log_line(str(log), start=start, prefer=lambda ln: "nothing" in ln) == "INFO bye"
    # the launcher's reading of its server's log: the error line without its program prefix
    assert _last_line(str(log), start) == "library is damaged"
    assert _last_line(str(log), log.stat().st_size) == "no output"
    assert _last_line(str(tmp_path / "absent.log")) == "no log"


def test_last_log_line_reads_only_the_tail_and_drops_a_cut_line(tmp_path):
    log = tmp_path / "indexer.log"
    early_error = "ERROR early\n"
    body = early_error + "x" * 5000 + "\n" + "".join(f"line {i}\n" for i in range(100))
    log.write_text(body)
    tail = len("".join(f"line {i}\n" for i in range(100))) + 10  # cuts into the long line of x
    got = last_log_line(str(log), prefer=lambda ln: ln.startswith("x") or "ERROR" in ln, tail_bytes=tail)
    assert got == "line 99"  # the cut line of x and the early error lie outside the tail
    assert last_log_line(str(log), prefer=lambda ln: "ERROR" in ln) == "ERROR early"  # within 64 KiB
    exact = len("".join(f"line {i}\n" for i in range(50, 100)))  # the window begins on a line
    assert last_log_line(str(log), prefer=lambda ln: ln == "line 50", tail_bytes=exact) == "line 50"


def test_real_path_untouched_resolves_parents_and_symlinks(tmp_path):
    real = tmp_path / "real"
    (real / "mnt").mkdir(parents=True)
    (tmp_path / "alias").symlink_to(real)
    (tmp_path / "link").symlink_to(real / "mnt")
    listed = {str(real / "mnt")}
    assert real_path_untouched(str(tmp_path / "alias" / "mnt"), listed) == str(real / "mnt")
    assert real_path_untouched(str(tmp_path / "link"), listed) == str(real / "mnt")
    assert real_path_untouched(str(tmp_path / "alias" / "mnt" / ".."), set()) == str(real)
    assert real_path_untouched(str(tmp_path / "alias" / "absent"), set()) == str(real / "absent")
    assert real_path_untouched("/", set()) == "/"
