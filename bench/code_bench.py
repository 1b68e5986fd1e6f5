"""Benchmarks of the code index, router and budget contracts (issue 9 item 7; PAPERS.md §3).

Run: ``python bench/code_bench.py [--src DIR] [--files 200] [--max-nodes 1000000]``

Prints one table and writes ``bench/results/code_bench.json``. Baselines measured in the same run:
``ast.parse`` of the same files (CPython's own parser, no symbols/edges), and an empty Python call for the
per-operation overheads. Paper figures (RGAO, PAPERS.md §3) for reference: route 0.11 ms, 200-file index
11.1 ms, contract creation 1.1 µs, budget check 0.65 µs.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

from libraryfs.features.code.budget import (
    DIMENSIONS,
    Budget,
    BudgetTracker,
    Contract,
    make_contract,
    verify_plan,
)
from libraryfs.features.code.complexity import complexity
from libraryfs.features.code.index import CodeIndex
from libraryfs.features.code.render import Renderer
from libraryfs.features.code.retrieve import Retriever
from libraryfs.features.code.router import route
from libraryfs.fs.budget import ReadBudget
from libraryfs.fs.tree import DirTree

DEFAULT_SRC = os.path.dirname(os.__file__)  # the Python standard library of this interpreter
PAPER = {"index_200_ms": 11.1, "route_ms": 0.11, "contract_us": 1.1, "budget_check_us": 0.65}


def pick_files(src: str, n: int) -> list[str]:
    out = []
    for dirpath, dirnames, names in os.walk(src):
        dirnames[:] = sorted(
            d for d in dirnames if d not in ("test", "tests", "idlelib", "site-packages", "__pycache__")
        )
        for name in sorted(names):
            if name.endswith(".py"):
                out.append(os.path.relpath(os.path.join(dirpath, name), src))
                if len(out) == n:
                    return out
    return out


def per_call_us(fn, number: int) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t) / number * 1e6)
    return best


def random_plan(n: int, rng: random.Random) -> dict:
    parents = [-1] + [rng.randrange(i) for i in range(1, n)]
    kids: list[list[int]] = [[] for _ in range(n)]
    for i, p in enumerate(parents):
        if p >= 0:
            kids[p].append(i)
    tok = [0] * n
    for i in reversed(range(n)):
        tok[i] = 1 + sum(tok[c] for c in kids[i])
    return {
        "nodes": [
            {
                "id": str(i),
                "budget": {"tokens": tok[i], "calls": tok[i]},
                "cost": {"tokens": 1, "calls": 1},
                "children": [str(c) for c in kids[i]],
            }
            for i in range(n)
        ]
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=DEFAULT_SRC)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--max-nodes", type=int, default=1_000_000)
    args = ap.parse_args()
    rows: list[tuple[str, float, str, str]] = []
    res: dict = {"src": args.src, "python": sys.version.split()[0]}

    work = tempfile.mkdtemp(prefix="code-bench-")
    try:
        files = pick_files(args.src, args.files)
        repo = os.path.join(work, "repo")
        for rel in files:
            os.makedirs(os.path.dirname(os.path.join(repo, rel)), exist_ok=True)
            shutil.copyfile(os.path.join(args.src, rel), os.path.join(repo, rel))
        datas = [open(os.path.join(repo, r), "rb").read() for r in files]

        builds, asts = [], []
        for _ in range(5):
            t = time.perf_counter()
            idx = CodeIndex.build(repo, "bench")
            idx.edges  # noqa: B018 - resolve edges inside the timed region
            builds.append(time.perf_counter() - t)
            t = time.perf_counter()
            for d in datas:
                ast.parse(d)
            asts.append(time.perf_counter() - t)
        n_sym = sum(len(fp.symbols) for fp in idx.files.values())
        n_nodes = 1 + len(idx.directories()) - 1 + len(idx.files) + n_sym
        res["index"] = {
            "files": len(idx.files),
            "symbols": n_sym,
            "tree_nodes": n_nodes,
            "lines": sum(fp.lines for fp in idx.files.values()),
            "build_ms": min(builds) * 1e3,
            "ast_parse_ms": min(asts) * 1e3,
        }
        rows.append(
            (
                f"index build, {len(idx.files)} files ({n_nodes} nodes)",
                min(builds) * 1e3,
                "ms",
                f"ast.parse same files {min(asts) * 1e3:.1f} ms; paper 11.1 ms (2,002 nodes)",
            )
        )

        lib = os.path.join("/dev/shm" if os.path.isdir("/dev/shm") else work, f"code-bench-lib-{os.getpid()}")
        tree = DirTree(lib)
        ren = Renderer(tree, idx, lambda rel: open(os.path.join(repo, rel), "rb").read())
        t = time.perf_counter()
        ren.full()
        t_render = time.perf_counter() - t
        res["render_full_ms"] = t_render * 1e3
        res["render_files_written"] = ren.writes
        rows.append(
            (
                f"render into a directory ({ren.writes} files, tmpfs)",
                t_render * 1e3,
                "ms",
                "one-time, per add",
            )
        )

        target = max(
            files, key=lambda r: len(idx.files[r].symbols) if 5 < len(idx.files[r].symbols) < 40 else 0
        )
        original = open(os.path.join(repo, target), "rb").read()
        ups, ups_parse = [], []
        for i in range(20):
            data = original + (b"\n# edit %d\ndef _bench_added_%d():\n    pass\n" % (i, i))
            with open(os.path.join(repo, target), "wb") as f:
                f.write(data)
            t = time.perf_counter()
            idx.update_file(target)
            t1 = time.perf_counter()
            ren.update([target])
            ups.append(time.perf_counter() - t)
            ups_parse.append(t1 - t)
        res["incremental"] = {
            "file": target,
            "symbols": len(idx.files[target].symbols),
            "reparse_ms": statistics.median(ups_parse) * 1e3,
            "reparse_render_ms": statistics.median(ups) * 1e3,
        }
        rows.append(
            (
                f"one-file update: re-parse ({target})",
                statistics.median(ups_parse) * 1e3,
                "ms",
                f"full build {min(builds) * 1e3:.1f} ms",
            )
        )
        rows.append(
            (
                "one-file update: re-parse + re-render + save index",
                statistics.median(ups) * 1e3,
                "ms",
                "writes only changed files",
            )
        )
        shutil.rmtree(lib, ignore_errors=True)

        t = time.perf_counter()
        retr = Retriever(idx)
        res["bm25_build_ms"] = (time.perf_counter() - t) * 1e3
        queries = [
            "parse the email header",
            "who calls urlopen",
            "list all classes in json",
            "dumps",
            '"def encode("',
            "make the base64 decoder handle padding",
            "why is the tokenizer slow?",
        ]
        times = []
        for q in queries * 5:
            t = time.perf_counter()
            route(retr, q)
            times.append(time.perf_counter() - t)
        sub = retr.retrieve("parse the email header").subgraph
        cx = per_call_us(lambda: complexity(idx, sub), 200)
        res["route"] = {
            "median_ms": statistics.median(times) * 1e3,
            "p90_ms": sorted(times)[int(0.9 * len(times))] * 1e3,
            "complexity_vector_us": cx,
        }
        rows.append(
            (
                "route decision (retrieve+vector+decide), median",
                statistics.median(times) * 1e3,
                "ms",
                f"paper 0.11 ms; BM25 model build {res['bm25_build_ms']:.1f} ms once",
            )
        )
        rows.append(("complexity vector of a retrieved subgraph", cx, "µs", "paper: < 1 ms"))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def empty() -> None:
        return None

    base = per_call_us(empty, 200_000)
    b = Budget(1, 2, 3, 4, 5, 6)
    tools = frozenset({"grep"})
    c_raw = per_call_us(lambda: Contract(("q",), b, tools, ("a",)), 200_000)
    c_make = per_call_us(lambda: make_contract(("q",), {"tokens": 5, "calls": 2}, ("grep",), ("a",)), 100_000)
    tr = BudgetTracker(make_contract(budget={d: 1e18 for d in DIMENSIONS}))
    chk = per_call_us(lambda: tr.charge("tokens", 1), 200_000)
    rb = ReadBudget({"reads": 10**15, "tokens": 10**15})
    rchk = per_call_us(lambda: rb.charge(reads=1, tokens=10), 200_000)
    res["overheads_us"] = {
        "empty_call": base,
        "contract_raw": c_raw,
        "contract_from_dict": c_make,
        "budget_check": chk,
        "read_budget_charge": rchk,
    }
    rows.append(("contract creation (tuple budget)", c_raw, "µs", f"paper 1.1 µs; empty call {base:.2f} µs"))
    rows.append(("contract creation (from dict, validated)", c_make, "µs", ""))
    rows.append(("budget check (BudgetTracker.charge)", chk, "µs", "paper 0.65 µs"))
    rows.append(("mount read charge (ReadBudget.charge, locked)", rchk, "µs", ""))

    rng = random.Random(7)
    ver = []
    n = 100
    while n <= args.max_nodes:
        plan = random_plan(n, rng)
        t = time.perf_counter()
        r = verify_plan(plan)
        dt = time.perf_counter() - t
        assert r.ok, r.violations[:3]
        ver.append({"nodes": n, "ms": dt * 1e3, "us_per_node": dt / n * 1e6})
        rows.append((f"VERIFYCONSERVATION, {n:,} nodes", dt * 1e3, "ms", f"{dt / n * 1e6:.2f} µs/node"))
        n *= 10
    res["verify"] = ver

    width = max(len(r[0]) for r in rows)
    print(f"{'measurement':{width}s}  {'value':>10s}  unit  note")
    for name, v, unit, note in rows:
        print(f"{name:{width}s}  {v:10.3f}  {unit:4s}  {note}")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    out = os.path.join(os.path.dirname(__file__), "results", "code_bench.json")
    res["paper"] = PAPER
    with open(out, "w") as f:
        json.dump(res, f, indent=2)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
