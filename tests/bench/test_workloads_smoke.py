"""Smoke test of the real-workload benchmark (bench/workloads.py): one tiny run on tmpfs and libraryfs.

Not a measurement (speed is shown by the benchmark itself, never asserted in tests): it checks that every
workload runs to a positive time on both filesystems, through real mounts (tmpfs, and libraryfs started with
the ``libraryfs`` command, indexer on), that the JSON has the shape the docs and the plot rely on, and that
the run leaves no mount behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers.facility import unavailable
from helpers.mount import fuse_available

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench", "workloads.py")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import workload_steps  # noqa: E402

pytestmark = pytest.mark.mount
FS = ("tmpfs", "libraryfs")
CELL_KEYS = {
    "run",
    "workload",
    "metric",
    "fs",
    "seconds",
    "parts",
    "cold",
    "load_before",
    "load_after",
    "foreign_cpus",
    "server_cpu_s",
    "loaded",
    "waited_quiet_s",
}


def _git_repo(path: str) -> str:
    """A small real repository (three commits) for the clone step."""
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.org",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.org",
    )
    subprocess.run(["git", "init", "-q", path], check=True, env=env)
    for i in range(3):
        with open(os.path.join(path, f"note{i}.md"), "w") as f:
            f.write(f"# note {i}\n\nimport nothing; line {i}\n" * 20)
        subprocess.run(["git", "-C", path, "add", "-A"], check=True, env=env)
        subprocess.run(["git", "-C", path, "commit", "-q", "-m", f"note {i}"], check=True, env=env)
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One tiny benchmark run; returns ``(result JSON, work parent, output path)``."""
    why = fuse_available()
    if why:
        unavailable(why)
    if os.geteuid() != 0:
        unavailable("the benchmark mounts a tmpfs: run as root")
    for exe, pkg in (("rg", "ripgrep"), ("git", "git"), ("tar", "tar")):
        if not shutil.which(exe):
            unavailable(f"{exe} is missing (apt-get install {pkg})")
    if not os.path.isdir("/usr/share/doc/python3/html"):
        unavailable("python3-doc is missing (apt-get install python3-doc)")
    base = tmp_path_factory.mktemp("workloads")
    work = base / "work"
    work.mkdir()
    out = str(base / "result.json")
    r = subprocess.run(
        [
            sys.executable,
            BENCH,
            "--tiny",
            "--runs",
            "1",
            "--fs",
            ",".join(FS),
            "--work",
            str(work),
            "--git-source",
            _git_repo(str(base / "repo")),
            "--out",
            out,
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    with open(out) as f:
        return json.load(f), str(work), out


def _cell(result: dict, fs: str, metric: str) -> dict:
    cells = [c for c in result["cells"] if c["fs"] == fs and c["metric"] == metric]
    assert len(cells) == 1, (fs, metric, cells)
    return cells[0]


def test_json_shape(run):
    result, _work, _out = run
    assert result["benchmark"] == "workloads"
    assert {"date", "command", "machine", "config", "load", "cells", "summary", "ratios"} <= set(result)
    cfg = result["config"]
    assert cfg["runs"] == 1 and cfg["cold"] == "remount" and set(cfg["filesystems"]) == set(FS)
    assert cfg["docs"]["members"] > 0 and cfg["git"]["commits"] == 3
    assert result["load"]["cells"] == len(result["cells"]) == len(FS) * len(workload_steps.METRICS)
    for c in result["cells"]:
        assert set(c) >= CELL_KEYS, set(c)
        assert len(c["load_before"]) == len(c["load_after"]) == 3
        assert isinstance(c["loaded"], bool) and c["foreign_cpus"] >= 0
    for c in result["cells"]:
        if c["fs"] == "libraryfs":  # its own processes: the server and the indexer
            assert c["server_cpu_s"] >= 0 and c["indexer_cpu_s"] >= 0
        else:
            assert c["server_cpu_s"] is None
    assert _cell(result, "libraryfs", "ls_cold")["cold"] and not _cell(result, "tmpfs", "ls_cold")["cold"]


def test_every_workload_has_a_positive_time(run):
    result, _work, _out = run
    for fs in FS:
        for metric in workload_steps.METRICS:
            c = _cell(result, fs, metric)
            assert c["seconds"] is not None and c["seconds"] > 0, c
            assert result["summary"][metric][fs]["median_s"] == pytest.approx(
                c["seconds"], abs=1e-4
            )  # (4 decimals)


def test_git_clone_on_libraryfs(run):  # issue 14: a generated INDEX.md in .git/refs broke git clone
    result, _work, _out = run
    c = _cell(result, "libraryfs", "git")
    assert c["seconds"] is not None and c["seconds"] > 0, c.get("error")


def test_plot_and_no_leftovers(run):
    _result, work, out = run
    png = os.path.splitext(out)[0] + ".png"
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(work) == []  # the work directory is removed
    with open("/proc/mounts") as f:
        assert not [line for line in f if work in line.split()[1]]
