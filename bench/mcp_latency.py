"""Latency of ``read_text_file`` and ``write_file`` over MCP (stdio) against the same operations through the
FUSE mount of the same library, measured in one run (issue 16).

Setup: a new library holding ``--files`` entries of each size (1 KiB and 64 KiB, ASCII text), mounted
(``libraryfs.daemon.launcher.start``, indexer off during timing, kernel timeouts 1,1,1) and served by
``libraryfs mcp --no-indexer`` over stdio to the MCP SDK's real client (``mcp.Client``) in this process.
Every sample is one client-side call, timed with ``time.perf_counter_ns``, files visited round-robin:

* ``mcp`` — ``call_tool("read_text_file", {"path"})`` / ``call_tool("write_file", {"path", "content"})``:
  JSON-RPC over the stdio pipes, the SDK on both sides, the server's view;
* ``in-memory`` — the same tool calls through the SDK's client connected to the server in this process
  (both SDK sides, no pipes, no second process);
* ``in-process`` — :class:`~libraryfs.daemon.mcp_ops.LibraryOps` ``read``/``write`` over a
  :class:`~libraryfs.fs.view.LibraryView` opened in this process: the server's work without any transport
  (so ``mcp`` − ``in-process`` is the protocol's cost);
* ``mount`` — Python ``open``/``read``/``close`` through the mount; for writes both ``open(O_TRUNC)``/
  ``write``/``close`` in place (what ``echo >`` does) and a temporary file + ``rename`` (what ``write_file``
  does: atomic replace), so the comparison is like for like.

It also measures how long a read through the mount takes to show content written over MCP (polled every
0.2 ms; bounded by the kernel's entry/attribute timeouts, 1 s). Prints a table (p50 / p95 / mean in µs and
the MCP/mount ratio of p50s) and writes ``bench/results/mcp_latency.json``.

Run (root, /dev/fuse): ``python bench/mcp_latency.py [--iterations 300] [--files 50]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import anyio
from mcp import Client, StdioServerParameters

from libraryfs.daemon import launcher
from libraryfs.daemon.mcpd import Served, ServerOptions
from libraryfs.fs.store import Store

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = {"1KiB": 1024, "64KiB": 64 * 1024}


def body(size: int, seed: int) -> str:
    """ASCII text of exactly ``size`` bytes, different per ``seed``."""
    line = f"entry {seed} " + "lorem ipsum dolor sit amet " * 4 + "\n"
    return (line * (size // len(line) + 1))[:size]


def stats_us(samples_ns: list[int]) -> dict:
    """p50 / p95 / mean of samples in µs."""
    s = sorted(samples_ns)
    return {
        "n": len(s),
        "p50_us": round(s[len(s) // 2] / 1e3, 1),
        "p95_us": round(s[int(len(s) * 0.95)] / 1e3, 1),
        "mean_us": round(statistics.fmean(s) / 1e3, 1),
    }


def timed(fn, paths: list[str], n: int, warmup: int = 20) -> list[int]:
    """``fn(path, k)`` over ``paths`` round-robin: ``warmup`` unmeasured calls, then ``n`` timed ones (ns)."""
    out = []
    for k in range(warmup + n):
        p = paths[k % len(paths)]
        t0 = time.perf_counter_ns()
        fn(p, k)
        if k >= warmup:
            out.append(time.perf_counter_ns() - t0)
    return out


async def atimed(fn, paths: list[str], n: int, warmup: int = 20) -> list[int]:
    """Async :func:`timed`."""
    out = []
    for k in range(warmup + n):
        p = paths[k % len(paths)]
        t0 = time.perf_counter_ns()
        await fn(p, k)
        if k >= warmup:
            out.append(time.perf_counter_ns() - t0)
    return out


def mount_ops(mnt: str, size: int) -> dict:
    """The mount-side operations, each ``fn(rel path, k)``."""

    def read(rel: str, _k: int) -> None:
        with open(os.path.join(mnt, rel), "rb") as f:
            assert len(f.read()) == size

    def write_in_place(rel: str, k: int) -> None:
        with open(os.path.join(mnt, rel), "w") as f:
            f.write(body(size, k))

    def write_replace(rel: str, k: int) -> None:
        p = os.path.join(mnt, rel)
        tmp = os.path.join(os.path.dirname(p), f".{os.path.basename(p)}.tmp")
        with open(tmp, "w") as f:
            f.write(body(size, k))
        os.replace(tmp, p)

    return {"read": read, "write (in place)": write_in_place, "write (temp+rename)": write_replace}


async def mcp_side(libdir: str, mnt: str, rels: dict, n: int) -> tuple[dict, dict]:
    """MCP latencies per (size, op) and the mount's visibility lag of MCP writes."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "libraryfs.cli.main", "mcp", libdir, "--no-indexer", "--max-write-bytes", str(1 << 20)],
        env=dict(os.environ),
    )
    out: dict = {}
    lags: list[int] = []
    async with Client(params) as c:

        async def read(rel: str, _k: int) -> None:
            r = await c.call_tool("read_text_file", {"path": rel})
            assert not r.is_error, r.content[0].text

        for label, size in SIZES.items():

            async def write(rel: str, k: int, size: int = size) -> None:
                r = await c.call_tool("write_file", {"path": rel, "content": body(size, k)})
                assert not r.is_error, r.content[0].text

            out[(label, "read")] = await atimed(read, rels[label], n)
            out[(label, "write")] = await atimed(write, rels[label], n)
        for k in range(min(n, 50)):  # visibility of an MCP write through the mount
            rel = rels["1KiB"][k % len(rels["1KiB"])]
            new = body(1024, 10_000 + k)
            r = await c.call_tool("write_file", {"path": rel, "content": new})
            assert not r.is_error, r.content[0].text
            t0 = time.perf_counter_ns()
            while True:
                with open(os.path.join(mnt, rel)) as f:
                    if f.read() == new:
                        break
                await anyio.sleep(0.0002)
            lags.append(time.perf_counter_ns() - t0)
    return out, {"mount sees an MCP write": stats_us(lags) | {"max_us": round(max(lags) / 1e3, 1)}}


def in_process(libdir: str, rels: dict, n: int) -> dict:
    """The server's work in this process: :class:`LibraryOps` calls (no protocol, ``in-process``), and the
    same tools through the SDK's client connected in memory (both SDK sides, no pipes, no second process:
    ``in-memory``)."""
    served = Served(
        libdir, ServerOptions(indexer=False, max_write_bytes=1 << 20, inline_tools=True)
    )  # as over stdio
    ops = served.ops
    out = {}
    try:
        for label, size in SIZES.items():
            enc = [p.encode() for p in rels[label]]
            out[(label, "read", "in-process")] = timed(lambda p, _k: ops.read(b"/" + p), enc, n)
            out[(label, "write", "in-process")] = timed(
                lambda p, k, size=size: ops.write(b"/" + p, body(size, k).encode()), enc, n
            )

        async def sdk() -> None:
            async with Client(served.server) as c:
                for label, size in SIZES.items():

                    async def read(rel: str, _k: int) -> None:
                        assert not (await c.call_tool("read_text_file", {"path": rel})).is_error

                    async def write(rel: str, k: int, size: int = size) -> None:
                        r = await c.call_tool("write_file", {"path": rel, "content": body(size, k)})
                        assert not r.is_error

                    out[(label, "read", "in-memory")] = await atimed(read, rels[label], n)
                    out[(label, "write", "in-memory")] = await atimed(write, rels[label], n)

        anyio.run(sdk)
        return out
    finally:
        served.close()


def measure(n: int, files: int) -> dict:
    """One full measurement (module doc); returns the JSON document."""
    tmp = tempfile.mkdtemp(prefix="mcp-bench-")
    libdir, mnt = os.path.join(tmp, "lib"), os.path.join(tmp, "mnt")
    Store.create(libdir, {"toc_max_tokens": 2000}).close()
    os.mkdir(mnt)
    launcher.start(libdir, mnt, indexer=False, timeouts="1,1,1", llm=False)
    samples: dict = {}
    try:
        rels = {}
        for label, size in SIZES.items():
            os.makedirs(os.path.join(mnt, label))
            rels[label] = [f"{label}/e{i:03d}.md" for i in range(files)]
            for k, rel in enumerate(rels[label]):
                with open(os.path.join(mnt, rel), "w") as f:
                    f.write(body(size, k))
        for label, size in SIZES.items():
            for op, fn in mount_ops(mnt, size).items():
                samples[(label, op, "mount")] = timed(fn, rels[label], n)
        mcp_rows, visibility = anyio.run(mcp_side, libdir, mnt, rels, n)
        samples.update({(*k, "mcp"): v for k, v in mcp_rows.items()})
    finally:
        launcher.stop(mnt)
    samples.update(in_process(libdir, rels, n))
    shutil.rmtree(tmp, ignore_errors=True)
    rows = [{"size": k[0], "op": k[1], "path": k[2], **stats_us(v)} for k, v in samples.items()]
    return {
        "iterations": n,
        "files_per_size": files,
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": sys.version.split()[0],
        "rows": rows,
        "visibility": visibility,
    }


def table(doc: dict) -> str:
    """The result as a text table: p50 / p95 per path, and MCP's p50 over the mount's."""
    by = {(r["size"], r["op"], r["path"]): r for r in doc["rows"]}
    lines = [
        f"{'size':6} {'op':22} {'mount p50/p95 µs':>18} {'mcp p50/p95 µs':>16} {'in-mem p50':>10} {'in-proc p50':>11} {'mcp/mount':>9}"
    ]
    for label in SIZES:
        for op, mount_op in (
            ("read", "read"),
            ("write", "write (temp+rename)"),
            ("write", "write (in place)"),
        ):
            m, c, i = by[(label, mount_op, "mount")], by[(label, op, "mcp")], by[(label, op, "in-process")]
            mem = by[(label, op, "in-memory")]
            lines.append(
                f"{label:6} {op + ' vs ' + mount_op.split(' ', 1)[-1] if op != mount_op else op:22} "
                f"{m['p50_us']:>8.0f}/{m['p95_us']:<9.0f} {c['p50_us']:>7.0f}/{c['p95_us']:<8.0f} "
                f"{mem['p50_us']:>10.0f} {i['p50_us']:>11.0f} {c['p50_us'] / m['p50_us']:>8.1f}x"
            )
    v = doc["visibility"]["mount sees an MCP write"]
    lines.append(
        f"\nan MCP write seen through the mount after: p50 {v['p50_us'] / 1e3:.1f} ms, p95 {v['p95_us'] / 1e3:.1f} ms, "
        f"max {v['max_us'] / 1e3:.1f} ms (n={v['n']}; kernel timeouts 1 s)"
    )
    lines.append(
        f"load average {doc['load_avg_1m']} on {doc['cpus']} CPUs; {doc['iterations']} samples per row"
    )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--files", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "mcp_latency.json"))
    args = ap.parse_args()
    doc = measure(args.iterations, args.files)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(table(doc))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
