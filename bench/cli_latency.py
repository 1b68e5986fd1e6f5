"""Latency of the CLI commands an agent runs between steps, at 10⁵ entries (issue 18 item 3).

One run: a library of ``--entries`` files (1,000 per directory, ~200-byte text entries) is written once in a
temp dir through :class:`~libraryfs.fs.tree.StoreTree` (the store API, no mount), with one episode of
``--steps`` steps (seeded Crafter rollouts from ``libraryfs_bench.episodes.crafter_data``, concatenated and
renumbered) built by the deterministic episode builder. Then every command runs as a fresh subprocess
``--runs`` times, the commands interleaved round-robin so that load hits all alike:

* baselines: ``true`` (process start) and ``python -c pass`` (the interpreter's start);
* ``libraryfs --version`` (the CLI's import cost), ``libraryfs find LIB TERM``, ``libraryfs status LIB``,
  ``libraryfs recall EP Q --library LIB``, ``libraryfs answer EP Q --library LIB --reader rules``.

With ``--after-write``, ``find`` and ``status`` are also timed "after a write" (after the rounds above, in
rounds of their own): before each such run the harness writes one small file (~40 bytes, a new name each
time) through the store API (:class:`~libraryfs.fs.tree.StoreTree` over a :class:`~libraryfs.fs.store.Store`
it keeps open), so the data file has changed since the last command's page check, as in an agent's loop
of "write a note, then find". The write is not timed (it runs in this process, not in the command's).

Each run records wall time and the CPU time (user + sys) of the command's process and its children (the
forked reader of ``run_isolated``): on a loaded machine CPU is the steadier figure. After building, one
indexing pass runs (``libraryfs index``, skip with ``--no-index``) so that ``find`` answers from the term
index as on a library in use. The commands run with a private bytecode cache (``PYTHONPYCACHEPREFIX`` in
the temp dir, warmed by one untimed round; ``PYTHONDONTWRITEBYTECODE`` dropped): an installed package has
its ``.pyc`` files, and without them every process compiles its sources again (``--no-bytecode-cache``
keeps the caller's environment).

The import time is reported separately: ``python -X importtime -c "import libraryfs.cli.main"``, the
cumulative µs of that module (median of ``--runs``), and for each command path the sum of the top-level
imports of ``python -X importtime -m libraryfs.cli.main <command>`` (the forked child's included) with its
costliest modules. The load average before and after is recorded.

Run: ``python bench/cli_latency.py [--entries 100000] [--steps 10000] [--runs 15] [--after-write] [--out FILE]``. Prints a
table and writes JSON (default ``bench/results/cli_latency.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
QUESTION = "where did I last drink water?"
FIND_TERM = "entry-77777"
#: every command runs here: ``python -c``/``-m`` put the working directory first on sys.path, and a source
#: checkout there would shadow the interpreter's (the baseline's) libraryfs
NEUTRAL_CWD = "/"
ROLLOUT_STEPS = 2700  #: steps per rollout (seeds 1000–1005 at this length are in the shared rollout cache)


def _libraryfs() -> list[str]:
    """``libraryfs`` run by this interpreter (``-m``, like the baseline, so both start the same way)."""
    return [sys.executable, "-m", "libraryfs.cli.main"]


def entry_text(i: int) -> bytes:
    """The body of entry ``i`` (~200 bytes of text with a unique token ``entry-<i>``)."""
    return (
        f"# entry-{i}\n\nNote {i} about topic {i % 97} in section {i // 1000}: "
        f"the agent recorded observation entry-{i} while working on task {i % 13}.\n"
    ).encode()


def build(libdir: str, entries: int, steps: int, index: bool = True) -> dict:
    """``libraryfs init`` + ``entries`` files + one episode ``e1`` of ``steps`` steps (+ one indexing pass
    when ``index``); seconds per phase."""
    from libraryfs.features.episodes.builder import EpisodeBuilder
    from libraryfs.fs.store import Store
    from libraryfs.fs.tree import StoreTree

    t0 = time.perf_counter()
    subprocess.run([*_libraryfs(), "init", libdir], check=True, capture_output=True)
    store = Store(libdir)
    tree = StoreTree(store)
    try:
        for i in range(entries):
            tree.write_bytes(f"notes/s{i // 1000:03d}/entry-{i}.md", entry_text(i))
        t1 = time.perf_counter()
        if steps:
            tree.write_bytes("episodes/e1/steps.jsonl", _steps_jsonl(steps))
            EpisodeBuilder(tree, store).build("e1")
    finally:
        store.close()
    t2 = time.perf_counter()
    if index:
        subprocess.run([*_libraryfs(), "index", libdir], check=True, capture_output=True)
    return {
        "entries_s": round(t1 - t0, 1),
        "episode_s": round(t2 - t1, 1),
        "index_s": round(time.perf_counter() - t2, 1) if index else None,
    }


def _steps_jsonl(steps: int) -> bytes:
    """``steps`` Crafter step records (seeded rollouts back to back, ``t`` renumbered) as JSONL."""
    from libraryfs_bench.episodes import crafter_data

    out: list[str] = []
    for _seed, recs in crafter_data.dataset(min_total_steps=steps, max_steps=ROLLOUT_STEPS):
        for r in recs:
            if len(out) == steps:
                break
            out.append(json.dumps({**r, "t": len(out)}, separators=(",", ":")))
    return ("\n".join(out) + "\n").encode()


def commands(libdir: str, steps: int, lfs: list[str]) -> dict[str, list[str]]:
    """Name → argv of every timed command (``lfs``: the ``libraryfs`` command to time)."""
    out = {
        "true": ["true"],
        "python -c pass": [sys.executable, "-c", "pass"],
        "libraryfs --version": [*lfs, "--version"],
        "find": [*lfs, "find", libdir, FIND_TERM],
        "status": [*lfs, "status", libdir],
    }
    if steps:
        out["recall"] = [*lfs, "recall", "e1", QUESTION, "--library", libdir]
        out["answer"] = [*lfs, "answer", "e1", QUESTION, "--library", libdir, "--reader", "rules"]
    return out


def _importtime_lines(stderr: str):
    """``(self_us, cumulative_us, name with its indent)`` of each ``-X importtime`` line."""
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line or "cumulative" in line:
            continue
        own, cum, name = line[len("import time:") :].split("|")
        yield int(own), int(cum), name.rstrip()


def command_imports_us(cmds: dict[str, list[str]], runs: int, env: dict[str, str]) -> dict[str, dict]:
    """Per ``python`` command: median over ``runs`` of the summed top-level imports of ``-X importtime``
    (everything the command path imported, the forked child's too) and its 5 costliest top-level modules."""
    out = {}
    for name, argv in cmds.items():
        if argv[0] == "true" or "-c" in argv[:2]:
            continue
        totals, per_mod = [], {}
        for _ in range(runs):
            r = subprocess.run(
                [argv[0], "-X", "importtime", *argv[1:]],
                capture_output=True,
                text=True,
                env=env,
                cwd=NEUTRAL_CWD,
            )
            top = [(cum, n.strip()) for _own, cum, n in _importtime_lines(r.stderr) if not n.startswith("  ")]
            totals.append(sum(c for c, _ in top))
            for c, n in top:
                per_mod.setdefault(n, []).append(c)
        costly = sorted(((sum(v) / runs, k) for k, v in per_mod.items()), reverse=True)[:5]
        out[name] = {"imports_us": statistics.median(totals), "top_us": {k: int(v) for v, k in costly}}
    return out


def import_us(runs: int, python: str = sys.executable) -> dict:
    """Median cumulative µs of ``import libraryfs.cli.main`` under ``python`` and its 8 costliest modules."""
    totals, per_mod = [], {}
    for _ in range(runs):
        r = subprocess.run(
            [python, "-X", "importtime", "-c", "import libraryfs.cli.main"],
            cwd=NEUTRAL_CWD,
            capture_output=True,
            text=True,
            check=True,
        )
        for _own, cum, name in _importtime_lines(r.stderr):
            name = name.strip()
            per_mod.setdefault(name, []).append(cum)
            if name == "libraryfs.cli.main":
                totals.append(cum)
    top = sorted(
        ((statistics.median(v), k) for k, v in per_mod.items() if k != "libraryfs.cli.main"), reverse=True
    )
    return {"cli_main_us": statistics.median(totals), "top_cumulative_us": {k: int(v) for v, k in top[:8]}}


def _children_cpu_s() -> float:
    """User + sys seconds of this process's waited-for children (and theirs) so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _p(xs: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``xs`` (nearest rank), rounded to 0.1."""
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 1)


def time_commands(
    cmds: dict[str, list[str]], runs: int, env: dict[str, str], before: Callable[[], None] | None = None
) -> dict[str, dict]:
    """Wall and CPU (user + sys, children included) ms per command (fresh subprocess each), the commands
    interleaved over ``runs`` rounds; ``before()`` (untimed) runs before each command."""
    wall: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    codes: dict[str, set[int]] = {k: set() for k in cmds}
    for _ in range(runs):
        for name, argv in cmds.items():
            if before is not None:
                before()
            c0, t0 = _children_cpu_s(), time.perf_counter()
            r = subprocess.run(argv, capture_output=True, env=env, cwd=NEUTRAL_CWD)
            wall[name].append((time.perf_counter() - t0) * 1000)
            cpu[name].append((_children_cpu_s() - c0) * 1000)
            codes[name].add(r.returncode)
    out = {}
    for name, xs in wall.items():
        xs.sort()
        cs = sorted(cpu[name])
        out[name] = {
            "p50_ms": round(statistics.median(xs), 1),
            "p90_ms": _p(xs, 0.9),
            "min_ms": round(xs[0], 1),
            "cpu_p50_ms": round(statistics.median(cs), 1),
            "cpu_p90_ms": _p(cs, 0.9),
            "exit_codes": sorted(codes[name]),
        }
    return out


class Writer:
    """Writes one small new file per call into a library through the store API (one read-write
    :class:`~libraryfs.fs.store.Store`, opened once: its open walks every page)."""

    def __init__(self, libdir: str) -> None:
        from libraryfs.fs.store import Store
        from libraryfs.fs.tree import StoreTree

        self.store = Store(libdir)
        self.tree = StoreTree(self.store)
        self.n = 0

    def __call__(self) -> None:
        self.n += 1
        self.tree.write_bytes(
            f"notes/bench-writes/w{os.getpid()}-{self.n}.md", b"# a note\n\nwritten by the bench\n"
        )

    def close(self) -> None:
        self.store.close()


def after_write_commands(cmds: dict[str, list[str]]) -> dict[str, list[str]]:
    """``find`` and ``status`` (and their baselines) of ``cmds``, named "... after a write"."""
    return {f"{k} after a write": v for k, v in cmds.items() if k.split()[-1] in ("find", "status")}


def command_env(scratch: str, bytecode_cache: bool) -> dict[str, str]:
    """The environment of the timed commands: no LLM endpoint; with ``bytecode_cache``, a private
    ``PYTHONPYCACHEPREFIX`` under ``scratch`` (``PYTHONDONTWRITEBYTECODE`` dropped)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARYFS_LLM")}
    if bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(scratch, "pycache")
    return env


def print_report(report: dict) -> None:
    """The tables of one run (wall and CPU per command, import times) on stdout."""
    load = report["loadavg_before"]
    print(
        f"\n{report['entries']} entries, {report['steps']} episode steps, {report['runs']} runs, load {load[0]:.1f}"
    )
    print(
        "| command | wall p50 / p90 / min ms | CPU p50 / p90 ms | imports ms | exit |\n|---|---|---|---|---|"
    )
    for name, r in report["commands"].items():
        imp = report["command_imports"].get(name)
        imp_ms = f"{imp['imports_us'] / 1000:.1f}" if imp else ""
        print(
            f"| `{name}` | {r['p50_ms']} / {r['p90_ms']} / {r['min_ms']} | {r['cpu_p50_ms']} / {r['cpu_p90_ms']} "
            f"| {imp_ms} | {r['exit_codes']} |"
        )
    for name, imp in report["command_imports"].items():
        top = ", ".join(f"{k} {v / 1000:.1f}" for k, v in imp["top_us"].items())
        print(f"  imports of `{name}`: {imp['imports_us'] / 1000:.1f} ms ({top})")
    for which, imp in report["import"].items():
        print(
            f"\nimport libraryfs.cli.main ({which}): {imp['cli_main_us'] / 1000:.1f} ms (python -X importtime)"
        )
        for k, v in imp["top_cumulative_us"].items():
            print(f"  {k}: {v / 1000:.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=10_000, help="episode steps (0: no episode, no recall)")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--library", help="reuse (or build once into) this library directory")
    ap.add_argument(
        "--no-index", action="store_true", help="no indexing pass after building (find falls back)"
    )
    ap.add_argument("--no-bytecode-cache", action="store_true", help="keep the caller's bytecode settings")
    ap.add_argument(
        "--libraryfs",
        help="the libraryfs command to time (default: this environment's; e.g. another checkout's)",
    )
    ap.add_argument(
        "--baseline-python",
        help="a second interpreter whose libraryfs (e.g. main's checkout) is timed in the same rounds, "
        "its commands prefixed 'baseline '",
    )
    ap.add_argument(
        "--after-write",
        action="store_true",
        help="also time find and status each after writing one file through the store API",
    )
    ap.add_argument("--out", default=os.path.join(HERE, "results", "cli_latency.json"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cli-latency-")
    libdir = args.library or os.path.join(tmp, "lib")
    built: dict = {}
    if not os.path.exists(libdir):
        built = build(libdir, args.entries, args.steps, index=not args.no_index)
        print(f"built {args.entries} entries + {args.steps} steps: {built}", file=sys.stderr)
    try:
        env = command_env(tmp, not args.no_bytecode_cache)
        lfs = [args.libraryfs] if args.libraryfs else _libraryfs()
        cmds = commands(libdir, args.steps, lfs)
        if args.baseline_python:
            base = commands(libdir, args.steps, [args.baseline_python, "-m", "libraryfs.cli.main"])
            cmds.update({f"baseline {k}": v for k, v in base.items() if k not in ("true", "python -c pass")})
        time_commands(cmds, 1, env)  # untimed: fills the bytecode cache
        load_before = os.getloadavg()
        imports = {"this": import_us(args.runs)}
        if args.baseline_python:
            imports["baseline"] = import_us(args.runs, args.baseline_python)
        results = time_commands(cmds, args.runs, env)
        if args.after_write:
            writer = Writer(libdir)
            try:
                aw = after_write_commands(cmds)
                time_commands(aw, 1, env, before=writer)  # untimed: the first walk builds the ledger
                results.update(time_commands(aw, args.runs, env, before=writer))
            finally:
                writer.close()
        command_imports = command_imports_us(cmds, max(3, args.runs // 3), env)
        load_after = os.getloadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report = {
        "entries": args.entries,
        "steps": args.steps,
        "runs": args.runs,
        "build_s": built,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "bytecode_cache": not args.no_bytecode_cache,
        "import": imports,
        "commands": results,
        "after_write": args.after_write,
        "command_imports": command_imports,
        "python": sys.version.split()[0],
        "libraryfs_command": args.libraryfs or " ".join(_libraryfs()),
        "baseline_python": args.baseline_python,
    }
    print_report(report)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
