"""The indexer is background work for the CPU scheduler (issue 18: "an untar with the indexer on must not cost
more than without it").

Before: the indexer applied ``nice 10`` and nothing else. The launcher starts it in a session of its own, and
with autogroups (``kernel.sched_autogroup_enabled``, the default of most distributions) the scheduler shares
the CPU between sessions first: nice counts only inside a session, so the indexer's session competed with
the user's ``tar`` and the mount server as an equal. Now it also runs ``SCHED_BATCH`` and gives its own
session's autogroup its nice value (:func:`libraryfs.daemon.indexerd.lower_priority`); a process that does
not lead its session (``libraryfs index`` from a shell) leaves the session's autogroup alone.

What the kernel says is read from ``/proc`` (proc(5), sched(7)); speed is shown by ``bench/workloads.py``
(docs/benchmarks.md), never asserted here.
"""

import os
import subprocess
import sys
from pathlib import Path

from helpers.mount import mount, require_fuse
from helpers.wait import wait_until

SCHED_BATCH = 3  #: sched(7)


def stat_fields(path: str) -> list[str]:
    """Fields 3… of a ``/proc/…/stat`` file (after the command name in parentheses)."""
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def autogroup(pid: int | str = "self") -> tuple[str, int] | None:
    """``(autogroup name, its nice value)`` of ``pid``, or None when it has none: a kernel without autogroups
    (no file), or a process still in the default autogroup — a session that never called setsid(2) since
    boot, whose task group is the root's: the kernel prints nothing (CI's test processes; a process there
    that starts a session of its own gets an autogroup all the same)."""
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            fields = f.read().split()  # "/autogroup-123 nice 0"
    except FileNotFoundError:
        return None
    if len(fields) != 3:
        return None
    return fields[0], int(fields[2])


def test_the_mounts_indexer_runs_as_background_work_and_still_indexes_a_new_file(
    libdir: Path, tmp_path: Path
):
    """With ``index.nice = 10`` a new file still shows up in its directory's INDEX.md, and every thread of the
    mount's indexer runs SCHED_BATCH at nice +10, in its own session whose autogroup is at nice 10 — not the
    mount server's, nor this test's session."""
    require_fuse()
    mine = autogroup()
    base = os.nice(0)
    with mount(libdir, tmp_path / "mnt", env={"LIBRARYFS_INDEX_NICE": "10"}) as m:
        os.makedirs(m.p("notes"))
        Path(m.p("notes/first.md")).write_text("# First\n\nThe indexer still indexes a single new file.\n")

        def indexed() -> bool:
            """notes/INDEX.md is the indexer's page listing first.md (not the mount's "Index pending" page,
            which lists the names before the indexer has run)."""
            try:
                page = Path(m.p("notes/INDEX.md")).read_text()
            except FileNotFoundError:
                return False
            return "first.md" in page and "Index pending" not in page

        wait_until(indexed, 60, "the indexer to list first.md in notes/INDEX.md")
        pid = m.indexer_pid  # it has indexed: it is past its start, where it lowers its priority
        assert pid is not None
        for tid in os.listdir(f"/proc/{pid}/task"):
            fields = stat_fields(f"/proc/{pid}/task/{tid}/stat")
            assert int(fields[16]) == min(19, base + 10), tid  # field 19: nice
            assert int(fields[38]) == SCHED_BATCH, tid  # field 41: policy
        assert os.getsid(pid) == pid  # the launcher's own session: its autogroup holds only the indexer
        group, server_group = autogroup(pid), autogroup(m.server_pid)
        if group is not None:  # the indexer's session has an autogroup (on CI none has: see autogroup())
            assert group[1] == min(19, max(base + 10, 0))
            assert group[0] not in (server_group[0] if server_group else None, mine[0] if mine else None)
        if server_group is not None:
            assert server_group[1] == 0
        assert autogroup() == mine  # this test's session is untouched


PROBE = """
import json, os, sys
from libraryfs.daemon import indexerd
from libraryfs.daemon.indexerd import lower_priority
if sys.argv[1] == "lead":
    os.setsid()
if len(sys.argv) > 2:
    indexerd.AUTOGROUP = sys.argv[2]
done = lower_priority(10)
with open("/proc/self/stat") as f:
    policy = int(f.read().rsplit(")", 1)[1].split()[38])
group = open("/proc/self/autogroup").read().split() if os.path.exists("/proc/self/autogroup") else []
print(json.dumps({"done": done, "policy": policy, "group": group}))
"""


def probe(how: str, *extra: str) -> dict:
    """Run :func:`lower_priority` in a child that leads a new session (``lead``) or stays in this one;
    ``extra``: the path it reads as its autogroup file instead of ``/proc/self/autogroup``."""
    import json

    r = subprocess.run(
        [sys.executable, "-c", PROBE, how, *extra], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(r.stdout)


def test_lower_priority_lowers_only_a_session_it_leads():
    """In a session of its own the process's autogroup takes its nice value; a process inside another's
    session (a ``libraryfs index`` typed in a shell) leaves that session's autogroup as it was — both run
    SCHED_BATCH."""
    mine = autogroup()
    base = os.nice(0)
    inside = probe("inside")
    assert inside["policy"] == SCHED_BATCH and inside["done"]["policy"] == "batch"
    assert inside["done"]["nice"] == min(19, base + 10)
    assert inside["done"]["autogroup_nice"] is None
    assert autogroup() == mine
    if mine is not None:
        assert inside["group"] == [mine[0], "nice", str(mine[1])]
    lead = probe("lead")
    assert lead["policy"] == SCHED_BATCH
    # whether the new session has an autogroup is the child's own fact, not this process's: on CI this
    # process's file is empty (it sits in the default autogroup, whose task group is the root's) while a
    # process that starts a session gets an autogroup of its own — and lowers it
    if len(lead["group"]) == 3:
        assert lead["done"]["autogroup_nice"] == min(19, base + 10)
        assert lead["group"][0] != (mine[0] if mine else None)
        assert int(lead["group"][2]) == min(19, base + 10)
    else:
        assert lead["done"]["autogroup_nice"] is None


def test_lower_priority_without_an_autogroup_still_runs_as_background_work(tmp_path: Path):
    """A process in the default autogroup (one that is not a session of its own; CI's test processes) reads an
    empty autogroup file: the autogroup step is left out, nice and SCHED_BATCH still apply, nothing raises."""
    empty = tmp_path / "autogroup"
    empty.write_text("")
    base = os.nice(0)
    lead = probe("lead", str(empty))
    assert lead["policy"] == SCHED_BATCH and lead["done"]["policy"] == "batch"
    assert lead["done"]["nice"] == min(19, base + 10)
    assert lead["done"]["autogroup_nice"] is None
    assert empty.read_text() == ""


RESTORE_PROBE = """
import json, os, sys, threading
from libraryfs.daemon.indexerd import lower_priority, restore_priority
os.setsid()
before = os.nice(0)
done = lower_priority(10)
worker = threading.Event()
t = threading.Thread(target=worker.wait, daemon=True)  # started lowered, as the indexer's threads are
t.start()
back = restore_priority(done)
threads = {}
for tid in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    threads[tid] = [int(fields[16]), int(fields[38])]
group = open("/proc/self/autogroup").read().split() if os.path.exists("/proc/self/autogroup") else []
worker.set()
print(json.dumps({"before": before, "done": done, "back": back, "threads": threads, "group": group}))
"""


def test_a_stopping_indexer_returns_to_the_foreground_priority():
    """Shutting down is not background work (``umount`` waits for it, 10 s): under a CPU hog the niced
    SCHED_BATCH indexer finished its last item after that and ``umount`` exited 10. restore_priority — run
    when the indexer is told to stop — puts every thread back to SCHED_OTHER at the nice value before (as
    root; CAP_SYS_NICE is needed to lower a nice value) and the session's autogroup back to its value."""
    r = subprocess.run(
        [sys.executable, "-c", RESTORE_PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    import json

    out = json.loads(r.stdout)
    assert out["done"]["policy"] == "batch"
    assert len(out["threads"]) == 2 and out["back"]["threads"] == 2
    for tid, (nice, policy) in out["threads"].items():
        assert policy == 0, tid  # SCHED_OTHER
        if os.geteuid() == 0:
            assert nice == out["before"], tid
    # the kernel rate-limits autogroup changes (one per few seconds): a refused write leaves it lowered
    if out["done"]["autogroup_nice"] is not None and out["back"]["autogroup_nice"] is not None:
        assert int(out["group"][2]) == out["done"]["autogroup_before"]
