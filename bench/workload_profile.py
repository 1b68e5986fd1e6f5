"""Where the libraryfs mount server spends its time, step by step of ``bench/workloads.py`` (issue 18 item 2).

Two passes over the same workloads, each on a fresh library mounted with ``libraryfs mount`` (default
``--no-indexer``: the server alone), one step at a time:

1. **py-spy** (``py-spy record --native --threads`` on the server pid, only while the step runs): every sample
   of the FUSE loop thread is classified by its stack, from the leaf up — *idle* (libfuse waiting in
   ``read`` on /dev/fuse), *reply* (libfuse's ``writev`` of the answer to the kernel), *libfuse* (other C in
   libfuse, outside any Python callback); inside a callback: *LMDB sync* (``mdb_env_sync``: the fsync),
   *LMDB commit* / *LMDB* (other liblmdb and py-lmdb C code), then the innermost Python frame's module: *store*, *schema* (record encoding), *view* (every other
   module of the libraryfs package), *adapter* (``fuse_adapter.py``), *binding* (``mfusepy.py`` and ctypes).
   Shares are of the busy samples (all but idle). Per function: inclusive share (on the stack) and self share
   (innermost libraryfs frame, including the C it calls directly, e.g. ``Store.run_write`` holds the commit).
2. **op counts** (``bench/profile_hook/sitecustomize.py`` loaded into the server by ``PYTHONPATH``): per FUSE
   operation, calls, server µs per call (Python side of the op), store write transactions, read transactions
   and syncs per call.

Run (root): ``python bench/workload_profile.py [--steps create,unlink,...] [--fs libraryfs-noidx] [--tiny]``;
needs ``py-spy`` (``pip install py-spy``). Writes ``bench/results/workload-profile-<date>.json`` and the raw
collapsed stacks (``<step>.txt``, for flamegraph.pl or speedscope) in a directory beside it; prints a
summary per step. py-spy with ``--native`` pauses the server for each sample (rate 200 Hz by default):
absolute times in this pass are inflated; shares are what it is for.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import workload_fs as wfs  # noqa: E402
import workload_steps as ws  # noqa: E402
import workloads  # noqa: E402

HOOK_DIR = os.path.join(HERE, "profile_hook")
CATEGORIES = (
    "reply",
    "libfuse",
    "binding",
    "adapter",
    "view",
    "schema",
    "store",
    "LMDB",
    "LMDB commit",
    "LMDB sync",
    "hook",
)
_LMDB_C = ("mdb.c", "midl.c", "cpython.c")  # liblmdb and py-lmdb's C module
_CALLBACK = ("_CallPythonObject", "closure_fcn", "FUSE._wrapper")


# -- py-spy ------------------------------------------------------------------------------------------------------
class PySpy:
    """``py-spy record`` attached to ``pid`` from construction until :meth:`stop`."""

    def __init__(self, pid: int, out: str, rate: int, native: bool) -> None:
        exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
        cmd = [
            exe,
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(rate),
            "--format",
            "raw",
            "--threads",
            "--output",
            out,
        ] + (["--native"] if native else [])
        self.out = out
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 30
        seen = ""
        while "Sampling process" not in seen:  # py-spy's first line once it is attached
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"py-spy did not attach to {pid}: {seen.strip()}")
            if select.select([self.proc.stdout], [], [], 0.5)[0]:
                seen += self.proc.stdout.readline()  # type: ignore[union-attr]

    def stop(self) -> dict:
        """Stop sampling (SIGINT: py-spy writes its output); returns py-spy's ``{samples, errors}`` counts."""
        self.proc.send_signal(signal.SIGINT)
        try:
            said = self.proc.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            said = self.proc.communicate()[0]
        m = re.search(r"Samples: (\d+) Errors: (\d+)", said or "")
        return {"pyspy_samples": int(m.group(1)), "pyspy_errors": int(m.group(2))} if m else {}


def _frame(f: str) -> tuple[str, str]:
    """``"func (file:line)"`` → ``(func, file:line)``."""
    name, _, loc = f.rpartition(" (")
    return (name, loc[:-1]) if name else (f, "")


def _file(loc: str) -> str:
    return loc.rsplit(":", 1)[0] if ":" in loc else loc


def _python_category(path: str) -> str | None:
    base = os.path.basename(path)
    if "profile_hook" in path:
        return "hook"
    if base == "mfusepy.py":
        return "binding"
    if base == "fuse_adapter.py":
        return "adapter"
    if base in ("store.py", "lmdb_backend.py", "backend.py"):
        return "store"
    if base == "schema.py" or path.endswith("fs/meta.py"):
        return "schema"
    if path.startswith("libraryfs/") or "/libraryfs/" in path or path.startswith("daemon/"):
        return "view"
    return None


def _callback_frames(frames: list[tuple[str, str]]) -> list[tuple[str, str]] | None:
    """The frames of the Python callback a sample is in (after its ctypes entry), or None outside one."""
    for i in range(len(frames) - 1, -1, -1):
        if frames[i][0] in _CALLBACK:
            return frames[i + 1 :]
    return None


def classify(frames: list[tuple[str, str]]) -> str:
    """Category of one FUSE-thread sample (root-first frames); ``"idle"`` when waiting for a request."""
    inner = _callback_frames(frames)
    if inner is None:
        leaf = frames[-1][0] if frames else ""
        if leaf in ("read", "__read", "__libc_read", "FUSE.__init__", "poll", "ppoll"):
            return "idle"
        return "reply" if leaf in ("writev", "__writev", "write") else "libfuse"
    for _name, loc in reversed(inner):
        f = _file(loc)
        if os.path.basename(f) in _LMDB_C:
            names = [n for n, _ in inner]  # (py-lmdb's liblmdb symbols: mdb09_env_sync, _mdb_txn_commit)
            if any("env_sync" in n for n in names):
                return "LMDB sync"
            return "LMDB commit" if any("txn_commit" in n for n in names) else "LMDB"
        cat = _python_category(f)
        if cat:
            return cat
    return "binding"


def _fn_key(name: str, loc: str) -> str:
    return f"{name} ({os.path.basename(_file(loc))})"


def parse_profile(path: str, rate: int) -> dict:
    """Shares (% of busy FUSE-thread samples) by category, function (inclusive and self) and line."""
    cats: Counter = Counter()
    incl: Counter = Counter()
    self_fn: Counter = Counter()
    self_line: Counter = Counter()
    busy = 0
    with open(path) as f:
        for line in f:
            stack, _, n_txt = line.rstrip("\n").rpartition(" ")
            if not stack or not n_txt.isdigit():
                continue
            n = int(n_txt)
            frames = [_frame(x) for x in stack.split(";")]
            if not any(
                nm in ("fuse_session_loop", "fuse_session_loop_mt", "FUSE.__init__") or "fuse_do_work" in nm
                for nm, _ in frames
            ):
                continue  # helper threads (invalidator, signals)
            cat = classify(frames)
            cats[cat] += n
            if cat == "idle":
                continue
            busy += n
            own = [
                (nm, loc)
                for nm, loc in _callback_frames(frames) or []
                if _python_category(_file(loc)) in ("adapter", "view", "schema", "store")
            ]
            for key in {_fn_key(nm, loc) for nm, loc in own}:
                incl[key] += n
            if own:
                self_fn[_fn_key(*own[-1])] += n
                self_line[f"{own[-1][0]} ({own[-1][1]})"] += n

    def pct(c: Counter, top: int) -> list[list]:
        return [[k, round(100 * v / busy, 1)] for k, v in c.most_common(top)] if busy else []

    return {
        "busy_samples": busy,
        "idle_samples": cats["idle"],
        "busy_s": round(busy / rate, 2),
        "categories": {c: round(100 * cats[c] / busy, 1) for c in CATEGORIES if cats[c]} if busy else {},
        "functions_inclusive": pct(incl, 30),
        "functions_self": pct(self_fn, 25),
        "lines_self": pct(self_line, 15),
    }


# -- op counts ---------------------------------------------------------------------------------------------------
def snapshot(fs: wfs.Libraryfs, outdir: str, tag: str) -> dict:
    """Cumulative per-op counters of the hooked server (see ``profile_hook/sitecustomize.py``)."""
    try:
        os.stat(os.path.join(fs.mnt, ".bench-opstats-" + tag))
    except FileNotFoundError:
        pass
    path = os.path.join(outdir, tag + ".json")
    if not os.path.exists(path):
        raise RuntimeError("the op-count hook is not active in the server (bench/profile_hook)")
    with open(path) as f:
        return json.load(f)["ops"]


def op_delta(before: dict, after: dict) -> dict:
    """Per-op counters of one step: ``{op: {calls, us_per_call, write_txns_per_call, …}}``."""
    out = {}
    for op, a in after.items():
        b = before.get(op, {})
        d = {k: a[k] - b.get(k, 0) for k in a}
        if op == "getattr":
            d["calls"] -= 1  # the lookup that took the "before" snapshot
        if not (d["calls"] or d["write_txns"] or d["syncs"]):
            continue
        calls = d["calls"]
        out[op] = {
            "calls": calls,
            "total_ms": round(d["ns"] / 1e6, 1),
            "us_per_call": round(d["ns"] / calls / 1e3, 1) if calls else None,
            "write_txns": d["write_txns"],
            "read_txns": d["read_txns"],
            "syncs": d["syncs"],
            "write_txns_per_call": round(d["write_txns"] / calls, 2) if calls else None,
            "read_txns_per_call": round(d["read_txns"] / calls, 2) if calls else None,
            "syncs_per_call": round(d["syncs"] / calls, 3) if calls else None,
            "write_txn_us": round(d["write_ns"] / d["write_txns"] / 1e3, 1) if d["write_txns"] else None,
            "sync_ms": round(d["sync_ns"] / d["syncs"] / 1e6, 2) if d["syncs"] else None,
        }
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["total_ms"]))


# -- the passes --------------------------------------------------------------------------------------------------
def run_pass(kind: str, fs: wfs.Libraryfs, inputs: ws.Inputs, steps: set[str], args, rawdir: str) -> dict:
    """One pass (``"pyspy"`` or ``"ops"``) over every workload; profiles the steps in ``steps``. A step that
    fails on libraryfs (``git clone`` today) is recorded with its error, and the pass goes on."""
    out: dict = {}
    for name in args.workloads:
        wl = ws.workload(name)
        for step in wl.steps:
            if step.cold:
                fs.remount()
            if step.metric in steps:
                out[step.metric] = profile_step(kind, fs, step, inputs, args, rawdir)
                r = out[step.metric]
                print(
                    f"# {kind} {step.metric}: "
                    + (f"{r['seconds']:.3f} s" if "error" not in r else r["error"])
                )
                continue
            try:
                step.run(fs.root, inputs)
            except ws.StepError as e:
                print(f"# {kind} {step.metric} (not profiled): {e}", flush=True)
        wl.cleanup(fs.root)
    return out


def profile_step(kind: str, fs: wfs.Libraryfs, step: ws.Step, inputs: ws.Inputs, args, rawdir: str) -> dict:
    """Run one step under py-spy (``kind="pyspy"``) or between two op-count snapshots (``"ops"``)."""
    res: dict = {}
    t = time.perf_counter()
    if kind == "pyspy":
        spy = PySpy(
            fs.processes()["server"],
            os.path.join(rawdir, step.metric + ".txt"),
            args.rate,
            not args.no_native,
        )
        try:
            res["seconds"] = round(step.run(fs.root, inputs)[0], 3)
        except ws.StepError as e:
            res["error"] = str(e)
        finally:
            res.update(spy.stop())
        res.update(parse_profile(spy.out, args.rate))
    else:
        statsdir = fs.extra_env["LIBRARYFS_BENCH_OPSTATS"]
        before = snapshot(fs, statsdir, step.metric + "-before")
        try:
            res["seconds"] = round(step.run(fs.root, inputs)[0], 3)
        except ws.StepError as e:
            res["error"] = str(e)
        res["ops"] = op_delta(before, snapshot(fs, statsdir, step.metric + "-after"))
    res.setdefault("seconds", round(time.perf_counter() - t, 3))
    return res


def summary_text(step: str, prof: dict, ops: dict) -> str:
    """A few lines per step: categories, top functions, per-op transactions."""
    lines = [f"## {step}"]
    if prof:
        lines.append(
            f"busy {prof['busy_s']} s of samples; "
            + ", ".join(f"{k} {v}%" for k, v in sorted(prof["categories"].items(), key=lambda kv: -kv[1]))
        )
        lines.append("inclusive: " + "; ".join(f"{k} {v}%" for k, v in prof["functions_inclusive"][:10]))
        lines.append("self: " + "; ".join(f"{k} {v}%" for k, v in prof["functions_self"][:8]))
    for op, d in list((ops or {}).items())[:10]:
        lines.append(
            f"  {op:20s} {d['calls']:7d} calls {d['us_per_call'] or 0:8.1f} µs/call  "
            f"write txns/call {d['write_txns_per_call']}  read txns/call {d['read_txns_per_call']}  "
            f"syncs {d['syncs']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fs", default="libraryfs-noidx", choices=("libraryfs-noidx", "libraryfs"))
    ap.add_argument("--workloads", default=",".join(ws.WORKLOAD_NAMES))
    ap.add_argument("--steps", default=",".join(ws.METRICS), help="steps to profile (others just run)")
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    ap.add_argument("--no-native", action="store_true", help="py-spy without --native (C frames hidden)")
    ap.add_argument("--passes", default="pyspy,ops", help="pyspy, ops or both")
    ap.add_argument("--out", default=None)
    workloads.add_input_options(ap)
    args = ap.parse_args(argv)
    workloads.input_sizes(args)
    args.workloads = [w for w in args.workloads.split(",") if w]
    steps = {s for s in args.steps.split(",") if s}
    passes = [p for p in args.passes.split(",") if p]
    if "pyspy" in passes and not (
        shutil.which("py-spy") or os.path.exists(os.path.join(os.path.dirname(sys.executable), "py-spy"))
    ):
        print("workload_profile: py-spy is missing (pip install py-spy)", file=sys.stderr)
        return 2
    stamp = dt.datetime.now(dt.UTC)
    out = args.out or os.path.join(HERE, "results", f"workload-profile-{stamp:%Y%m%d-%H%M%S}.json")
    rawdir = os.path.splitext(out)[0]
    os.makedirs(rawdir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="workload-profile-", dir=args.work)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results: dict = {}
    load = {"start": [round(x, 2) for x in os.getloadavg()]}
    try:
        inputs = ws.prepare_inputs(work, args.docs, args.docs_limit, workloads.git_source(args), args.sizes)
        for kind in passes:
            fs = wfs.make(args.fs, os.path.join(work, kind), os.path.join(work, "servers.log"))
            os.makedirs(fs.work, exist_ok=True)
            assert isinstance(fs, wfs.Libraryfs)
            if kind == "ops":
                fs.extra_env = {
                    "PYTHONPATH": HOOK_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    "LIBRARYFS_BENCH_OPSTATS": os.path.join(work, "opstats"),
                }
                os.makedirs(fs.extra_env["LIBRARYFS_BENCH_OPSTATS"], exist_ok=True)
            try:
                fs.setup()
                results[kind] = run_pass(kind, fs, inputs, steps, args, rawdir)
            finally:
                fs.teardown()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load["end"] = [round(x, 2) for x in os.getloadavg()]
    doc = {
        "benchmark": "workload-profile",
        "date": stamp.isoformat(timespec="seconds"),
        "command": "python bench/workload_profile.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "fs": args.fs,
        "sizes": vars(args.sizes),
        "rate": args.rate,
        "native": not args.no_native,
        "load": load,
        "steps": {},
    }
    for step in [m for m in ws.METRICS if m in steps]:
        prof, ops = results.get("pyspy", {}).get(step), results.get("ops", {}).get(step)
        if prof or ops:
            ops = ops or {}
            doc["steps"][step] = {
                "profile": prof,
                "ops": ops.get("ops"),
                "seconds_with_hook": ops.get("seconds"),
                "error": (prof or {}).get("error") or ops.get("error"),
            }
            print(summary_text(step, prof or {}, ops.get("ops") or {}) + "\n")
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"JSON: {out}; raw stacks in {rawdir}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
