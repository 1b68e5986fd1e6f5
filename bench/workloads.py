"""Real-workload benchmark: what agents run, on tmpfs, bindfs, the bare binding and libraryfs (issue 18 item 1).

The yardstick is another FUSE filesystem: bindfs (C) mirroring a directory pays the same kernel round trips
as libraryfs, so libraryfs / bindfs is the cost of our own code. One run measures every workload of
``bench/workload_steps.py`` (untar + sync, ``ls -laR`` and ``rg`` cold/warm, ``git clone`` + status + log,
10,000 × create/stat/read/unlink, SQLite rollback/WAL/bulk, 8 processes × 2,000 creates and cold reads)
on every filesystem of ``bench/workload_fs.py`` (tmpfs, bindfs, multithreaded bindfs for the concurrent
workloads, the bare mfusepy binding as a passthrough, libraryfs without and with its indexer).

**Interleaved repetitions**: for each repetition, for each workload, every filesystem in turn (the order
rotates from one repetition and workload to the next) runs the workload's steps; the figure of a cell is the
median over repetitions. Before a cold step the filesystem is remounted (``--cold drop_caches`` also drops
the OS caches, evicting other users' too); after a workload, libraryfs's indexer is waited for (the wait is
recorded as ``settle_s``, not timed) so it never runs during another filesystem's cell.

**Load**: before and after every cell the benchmark records the load average and, during the cell, the CPU
that processes other than the benchmark's own (its clients, the filesystem's servers and daemons) used
(``foreign_cpus``: CPU-seconds per second, from ``/proc/stat``; kernel threads working for the benchmark,
such as writeback, count as foreign). A cell is marked ``loaded`` when load1 > ``--max-load`` (0.5) before
it *and* foreign CPU > ``--max-foreign-cpus`` (0.1) during it: load1 alone, a one-minute average, counts the
benchmark's own previous cells. ``--wait-quiet S`` waits up to S seconds before each cell for a quiet
machine. Medians that include a loaded repetition are marked ``†``.

Run (root: mounts tmpfs and FUSE)::

    python bench/workloads.py [--runs 5 | --quick] [--fs tmpfs,bindfs,...] [--workloads docs,git,...]
                              [--cold remount|drop_caches] [--backing disk|tmpfs] [--tiny] [--out PATH.json]

Prints the table of seconds and ratios to bindfs, and writes ``bench/results/workloads-<date>.json`` and a PNG
beside it (``bench/results/`` is not committed). Needs: bindfs, ripgrep, git, tar, python3-doc
(``scripts/setup.sh`` installs them). Exit status 2 on a missing prerequisite, 1 if a workload failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import workload_fs as wfs  # noqa: E402
import workload_report as report  # noqa: E402
import workload_steps as ws  # noqa: E402

FS_WORKLOADS = {"bindfs-mt": {"procs"}}  #: filesystems that run only some workloads (the rest: all)
TINY = ws.Sizes(files=200, file_bytes=1024, sqlite_commits=40, sqlite_rows=2000, procs=2, proc_files=50)


# -- load ------------------------------------------------------------------------------------------------------
def _busy_s() -> float:
    """CPU-seconds the whole machine has been busy (user, nice, system, irq, softirq, steal)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


def _own_s(pids: list[int]) -> float:
    """CPU-seconds used by this process, its waited-for children and the filesystem's processes."""
    ru = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(r.ru_utime + r.ru_stime for r in ru) + sum(wfs.process_cpu_s(p) for p in pids)


class Meter:
    """Load average, foreign CPU and the filesystem's own CPU (per process role) over one cell."""

    def __init__(self, processes: dict[str, int]) -> None:
        self.processes = processes
        self.load_before = [round(x, 2) for x in os.getloadavg()]
        self.t = time.monotonic()
        self.busy = _busy_s()
        self.own = _own_s(list(processes.values()))
        self.cpu = {role: wfs.process_cpu_s(p) for role, p in processes.items()}

    def finish(self, max_load: float, max_foreign: float) -> dict:
        """The cell's load facts: ``load_before``/``load_after`` (1/5/15 min), ``foreign_cpus``,
        ``<role>_cpu_s`` (``server_cpu_s``, ``indexer_cpu_s``), ``loaded``."""
        wall = max(time.monotonic() - self.t, 1e-6)
        foreign = (
            max(0.0, (_busy_s() - self.busy) - (_own_s(list(self.processes.values())) - self.own)) / wall
        )
        out = {
            "load_before": self.load_before,
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "foreign_cpus": round(foreign, 3),
            "server_cpu_s": None,
            "loaded": self.load_before[0] > max_load and foreign > max_foreign,
        }
        for role, p in self.processes.items():
            out[f"{role}_cpu_s"] = round(wfs.process_cpu_s(p) - self.cpu[role], 3)
        return out


def wait_quiet(timeout_s: float, max_load: float, max_foreign: float) -> float:
    """Wait up to ``timeout_s`` until a 1 s window shows foreign CPU ≤ ``max_foreign`` or load1 ≤
    ``max_load``; returns seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        m = Meter({})
        time.sleep(1.0)
        if m.finish(max_load, max_foreign)["loaded"] is False:
            break
    return time.monotonic() - t0


# -- the run -----------------------------------------------------------------------------------------------------
def run_cells(fss: dict[str, wfs.Filesystem], inputs: ws.Inputs, args) -> list[dict]:
    """Every repetition × workload × filesystem (rotating order); returns the cells."""
    cells: list[dict] = []
    names = list(fss)
    for rep in range(args.runs):
        for wi, name in enumerate(args.workloads):
            wl = ws.workload(name)
            k = (rep + wi) % len(names)
            for fs_name in names[k:] + names[:k]:
                if fs_name in FS_WORKLOADS and name not in FS_WORKLOADS[fs_name]:
                    continue
                cells += run_workload(fss[fs_name], wl, inputs, rep, args)
            print(f"# run {rep + 1}/{args.runs} {name}: done, load {os.getloadavg()[0]:.2f}", flush=True)
    return cells


def run_workload(fs: wfs.Filesystem, wl: ws.Workload, inputs: ws.Inputs, rep: int, args) -> list[dict]:
    """The steps of ``wl`` on ``fs``, then its cleanup and the indexer's settling; returns the cells."""
    out = []
    for step in wl.steps:
        if step.cold:
            out[-1]["settle_s"] = round(fs.settle(), 3) if out else 0.0
            fs.remount(drop=args.cold == "drop_caches")
        waited = wait_quiet(args.wait_quiet, args.max_load, args.max_foreign_cpus) if args.wait_quiet else 0
        meter = Meter(fs.processes())
        seconds, parts, error = None, {}, None
        try:
            seconds, parts = step.run(fs.root, inputs)
        except ws.StepError as e:  # the tool failed on this filesystem: a result, not a crash
            error = str(e)
        cell = {
            "run": rep,
            "workload": wl.name,
            "metric": step.metric,
            "fs": fs.name,
            "seconds": None if seconds is None else round(seconds, 5),
            "parts": {k: v if isinstance(v, list) else round(v, 5) for k, v in parts.items()},
            "cold": step.cold and fs.cold != "none",
            "waited_quiet_s": round(waited, 1),
            **meter.finish(args.max_load, args.max_foreign_cpus),
        }
        if error:
            cell["error"] = error
        out.append(cell)
        if args.verbose or error:
            shown = f"{seconds:8.3f} s" if seconds is not None else f"FAILED: {error}"
            print(
                f"  {fs.name:16s} {step.metric:16s} {shown}  load {cell['load_before'][0]:.2f}"
                f"  foreign {cell['foreign_cpus']:.2f}" + ("  loaded" if cell["loaded"] else ""),
                flush=True,
            )
    wl.cleanup(fs.root)
    out[-1]["settle_s"] = round(fs.settle(), 3)
    return out


def machine() -> dict:
    """What the figures were measured on (CPU, memory, kernel, versions of the pieces involved)."""
    from fs_bench import machine as base

    def version(cmd: list[str]) -> str | None:
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except OSError:
            return None
        return (r.stdout or r.stderr).strip().splitlines()[0] if (r.stdout or r.stderr).strip() else None

    import sqlite3

    return {
        **base(),
        "bindfs": version(["bindfs", "--version"]),
        "ripgrep": version(["rg", "--version"]),
        "git_version": version(["git", "--version"]),
        "tar": version(["tar", "--version"]),
        "sqlite": sqlite3.sqlite_version,
    }


def check_prerequisites(args) -> str | None:
    """Why the benchmark cannot run here (one line), or None."""
    if os.geteuid() != 0 and ("tmpfs" in args.fs or args.cold == "drop_caches" or args.backing == "tmpfs"):
        return "run as root (mounts tmpfs, drops caches)"
    if not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        return "FUSE is not available (/dev/fuse, fusermount3: apt-get install fuse3)"
    needs = {"tar": "tar", "git": "git"}
    if "docs" in args.workloads:
        needs["rg"] = "ripgrep"
    if any(f.startswith("bindfs") for f in args.fs):
        needs["bindfs"] = "bindfs"
    for exe, pkg in needs.items():
        if not shutil.which(exe):
            return f"{exe} is missing (apt-get install {pkg})"
    return None


def add_input_options(ap: argparse.ArgumentParser) -> None:
    """Options for the inputs and sizes (shared with ``bench/workload_profile.py``)."""
    ap.add_argument("--docs", default="/usr/share/doc/python3/html", help="tree to tar and untar")
    ap.add_argument("--docs-limit", type=int, default=None, help="keep only the first N files of --docs")
    ap.add_argument("--git-source", default=None, help="repository to clone (default: this one)")
    for f in ws.Sizes.__dataclass_fields__:
        ap.add_argument(
            "--" + f.replace("_", "-"),
            type=int,
            default=None,
            help=f"default {getattr(ws.Sizes(), f)} (--tiny: {getattr(TINY, f)})",
        )
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (a smoke run, not a measurement)")
    ap.add_argument("--work", default=None, help="parent of the work directory (a disk, not tmpfs)")


def input_sizes(a: argparse.Namespace) -> None:
    """Set ``a.sizes`` (defaults, or :data:`TINY` with ``--tiny``, overridden per option) and the docs limit."""
    base = TINY if a.tiny else ws.Sizes()
    a.sizes = ws.Sizes(
        **{
            f: getattr(a, f) if getattr(a, f) is not None else getattr(base, f)
            for f in base.__dataclass_fields__
        }
    )
    if a.tiny and a.docs_limit is None:
        a.docs_limit = 60


def git_source(a: argparse.Namespace) -> str:
    """The repository the git step clones: ``--git-source``, else the one holding this script."""
    return (
        a.git_source
        or subprocess.run(
            ["git", "-C", HERE, "rev-parse", "--show-toplevel"], capture_output=True, text=True
        ).stdout.strip()
    )


def parse_args(argv: list[str] | None):
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="interleaved repetitions (median reported)")
    ap.add_argument("--quick", action="store_true", help="2 repetitions")
    ap.add_argument("--fs", default=",".join(wfs.FS_ALL), help="comma-separated filesystems")
    ap.add_argument("--workloads", default=",".join(ws.WORKLOAD_NAMES), help="comma-separated workloads")
    ap.add_argument("--cold", choices=("remount", "drop_caches"), default="remount")
    ap.add_argument(
        "--backing",
        choices=("disk", "tmpfs"),
        default="disk",
        help="where mirrored directories and libraries live: the work disk, or a tmpfs",
    )
    ap.add_argument("--max-load", type=float, default=0.5, help="load1 above which a cell may be 'loaded'")
    ap.add_argument(
        "--max-foreign-cpus",
        type=float,
        default=0.1,
        help="CPU used by other processes during a cell above which it is 'loaded'",
    )
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="S",
        help="before each cell, wait up to S s for a quiet machine",
    )
    add_input_options(ap)
    ap.add_argument("--out", default=None, help="JSON path [bench/results/workloads-<date>.json]")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=COMMAND [FLAG…]",
        help="makes libraryfs@LABEL and libraryfs-noidx@LABEL: libraryfs mounted by COMMAND (a libraryfs "
        "executable, e.g. another worktree's venv; '-' = this one) with FLAGs added to `libraryfs mount`",
    )
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--verbose", "-v", action="store_true", help="print every cell")
    a = ap.parse_args(argv)
    a.runs = 2 if a.quick else a.runs
    a.fs = [x for x in a.fs.split(",") if x]
    a.workloads = [x for x in a.workloads.split(",") if x]
    a.variants = {}
    for v in a.variant:
        label, eq, rest = v.partition("=")
        words = shlex.split(rest)
        if not eq or not label or not words:
            ap.error(f"--variant {v!r}: want LABEL=COMMAND [FLAG…]")
        a.variants[label] = (None if words[0] == "-" else [words[0]], words[1:])
    for x in a.fs:
        base, _, label = x.partition("@")
        if label and (base not in ("libraryfs", "libraryfs-noidx") or label not in a.variants):
            ap.error(
                f"unknown filesystem {x!r}: give --variant {label}=COMMAND for libraryfs[-noidx]@{label}"
            )
        if not label and x not in wfs.FS_ALL:
            ap.error(f"unknown filesystem {x!r} (one of {', '.join(wfs.FS_ALL)})")
    for x in a.workloads:
        if x not in ws.WORKLOAD_NAMES:
            ap.error(f"unknown workload {x!r} (one of {', '.join(ws.WORKLOAD_NAMES)})")
    input_sizes(a)
    if a.runs < 1:
        ap.error("--runs must be ≥ 1")
    return a


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; see the module docstring."""
    args = parse_args(argv)
    why = check_prerequisites(args)
    if why:
        print(f"workloads: {why}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: the finally below unmounts
    stamp = dt.datetime.now(dt.UTC)
    out = args.out or os.path.join(HERE, "results", f"workloads-{stamp:%Y%m%d-%H%M%S}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    work = tempfile.mkdtemp(prefix="workloads-", dir=args.work)
    log_path = os.path.join(work, "servers.log")
    fss: dict[str, wfs.Filesystem] = {}
    backing = None
    load_start = [round(x, 2) for x in os.getloadavg()]
    t0 = time.monotonic()
    try:
        git_src = git_source(args)
        inputs = ws.prepare_inputs(work, args.docs, args.docs_limit, git_src, args.sizes)
        git_facts = {"source": git_src, **ws.git_facts(inputs.git_src)}
        if args.backing == "tmpfs":
            backing = os.path.join(work, "backing")
            os.mkdir(backing)
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=8g,mode=0700", "wl-backing", backing], check=True
            )
        for name in args.fs:
            fss[name] = wfs.make(name, work, log_path, backing, args.variants)
            fss[name].setup()
        print(
            f"# workloads: {args.runs} run(s) × {len(args.workloads)} workloads × {len(fss)} filesystems; "
            f"work dir {work}; load {load_start}",
            flush=True,
        )
        cells = run_cells(fss, inputs, args)
        described = {n: f.describe() for n, f in fss.items()}
    except (ws.StepError, wfs.FsError) as e:
        print(f"workloads: {e}", file=sys.stderr)
        return 1
    finally:
        for f in reversed(list(fss.values())):
            try:
                f.teardown()
            except Exception as e:  # keep unmounting the others
                print(f"workloads: teardown of {f.name}: {e}", file=sys.stderr)
        if backing and wfs.is_mounted(backing):
            subprocess.run(["umount", backing], check=False)
        shutil.rmtree(work, ignore_errors=True)
    summary = report.summarize(cells)
    sizes = vars(args.sizes)
    result = {
        "benchmark": "workloads",
        "issue": 18,
        "date": stamp.isoformat(timespec="seconds"),
        "command": "python bench/workloads.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "duration_s": round(time.monotonic() - t0, 1),
        "machine": machine(),
        "config": {
            "runs": args.runs,
            "cold": args.cold,
            "backing": args.backing,
            "max_load": args.max_load,
            "max_foreign_cpus": args.max_foreign_cpus,
            "wait_quiet_s": args.wait_quiet,
            "sizes": sizes,
            "docs": {"dir": args.docs, "limit": args.docs_limit, "members": inputs.docs_files},
            "git": git_facts,
            "filesystems": described,
            "workloads": args.workloads,
        },
        "load": {
            "start": load_start,
            "end": [round(x, 2) for x in os.getloadavg()],
            "loaded_cells": sum(c["loaded"] for c in cells),
            "cells": len(cells),
        },
        "cells": cells,
        "summary": summary,
        "ratios": report.ratios(summary),
    }
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print()
    print(report.table(summary, sizes, inputs.docs_files))
    print(
        f"\n† = the median includes a repetition measured under load; {result['load']['loaded_cells']} of "
        f"{len(cells)} cells loaded; load {load_start} → {result['load']['end']}."
    )
    for metric, by_fs in summary.items():
        for fs, s in by_fs.items():
            for err in s["errors"]:
                print(f"fails: {metric} on {fs} ({s['failed']} of {s['failed'] + s['n']}): {err}")
    print("\nServer CPU seconds (median per cell):\n")
    print(report.table(summary, sizes, inputs.docs_files, key="server_cpu_s"))
    if not args.no_plot:
        png = os.path.splitext(out)[0] + ".png"
        if report.plot(summary, png, f"workloads {stamp:%Y-%m-%d %H:%M} UTC, medians of {args.runs}"):
            print(f"\nplot: {png}")
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
