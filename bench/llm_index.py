"""Benchmark of the LLM index builder against a loopback OpenAI-compatible server (issue 3).

On the real corpus (the reStructuredText sources of ``python3-doc``), it measures in one run:

1. requests and tokens per 1,000 entries for a first full index pass — batched (``batch_size`` entries per
   request) vs unbatched (1 per request) — beside the deterministic builder (0 requests) as the baseline;
2. the cache hit rate and requests of a second full pass over unchanged content (a new builder process);
3. requests caused by editing one entry (must be that entry's summary + the TOCs on its path);
4. the mount's stat / open+read latency (µs, p50/p99) while an indexer process is busy with the model vs
   idle, and their ratio (the mount never waits on the indexer or the network).

Tokens are counted with o200k_base by the loopback server (it reports them as ``usage``), so the figures are
what an OpenAI endpoint would bill for these prompts; the server's answers are scripted (tests/helpers/llm_server.py
``IndexModel``), so answer *quality* is not measured here.

    python bench/llm_index.py [--limit N] [--latency-samples N] [--delay-ms MS]

Writes ``bench/results/llm_index.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "helpers"))

from llm_server import Delay, IndexModel, LLMServer, Reply, Request  # noqa: E402

from libraryfs.daemon.indexer import Indexer  # noqa: E402
from libraryfs.daemon.ingest import ingest_tree  # noqa: E402
from libraryfs.fs import generated as G  # noqa: E402
from libraryfs.fs.meta import EntryMeta  # noqa: E402
from libraryfs.fs.store import Store  # noqa: E402
from libraryfs.index.jobs import DeterministicBuilder  # noqa: E402
from libraryfs.index.tokens import count_tokens  # noqa: E402
from libraryfs.llm import make_builder, report_line  # noqa: E402

CORPUS = "/usr/share/doc/python3.11-doc/html/_sources"


class CountingModel:
    """``IndexModel`` answers with o200k_base token counts as ``usage``, optionally after a delay."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.model = IndexModel()
        self.delay_s = delay_s

    def __call__(self, req: Request):
        rep: Reply = self.model(req)
        p = req.payload or {}
        if p.get("task") == "summarize":  # like a real model: the summary changes when the text does
            import hashlib

            for item, e in zip(rep.content["summaries"], p["entries"], strict=False):
                item["summary"] += " " + hashlib.sha256(e["text"].encode()).hexdigest()[:6]
        prompt = sum(count_tokens(m.get("content") or "") + 4 for m in req.messages)
        content = rep.content if isinstance(rep.content, str) else json.dumps(rep.content)
        rep.usage = {"prompt_tokens": prompt, "completion_tokens": count_tokens(content)}
        return Delay(self.delay_s, rep) if self.delay_s else rep


def build_library(root: str, limit: int | None) -> tuple[str, int, str]:
    """A library with the corpus ingested under ``pydoc/`` (journaled, not yet indexed), its entry count and
    the library path of one nested entry to edit."""
    src = CORPUS
    if limit:
        src = os.path.join(root, "src")
        n = 0
        for dp, _dn, fns in os.walk(CORPUS):
            for fn in sorted(fns):
                if n >= limit:
                    break
                rel = os.path.relpath(os.path.join(dp, fn), CORPUS)
                os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
                shutil.copy(os.path.join(dp, fn), os.path.join(src, rel))
                n += 1
    lib = os.path.join(root, "lib")
    Store.create(lib, {"toc_max_tokens": 2000}).close()
    res = ingest_tree(lib, src, "pydoc", progress=False)
    nested = sorted(
        os.path.relpath(os.path.join(dp, f), src) for dp, _d, fs in os.walk(src) for f in fs if dp != src
    )
    pick = "library/os.rst.txt" if "library/os.rst.txt" in nested else nested[len(nested) // 2]
    return lib, res["files"], "/pydoc/" + pick


def index_pass(lib: str, srv: LLMServer | None, full: bool = True, **over) -> dict:
    """One indexer pass in this process; returns requests by job, tokens and the builder's status."""
    st = Store(lib)
    try:
        if srv is None:
            b = DeterministicBuilder()
        else:
            b = make_builder(
                lib,
                st,
                {
                    "base_url": srv.base_url,
                    "model": "bench-model",
                    "timeout_s": 30,
                    "max_requests_per_hour": 0,
                    "max_tokens_per_hour": 0,
                    **over,
                },
            )
        n0 = len(srv.requests) if srv else 0
        t0 = time.perf_counter()
        rep = Indexer(lib, builder=b, store=st, settle_s=0).run_once(full=full)
        secs = time.perf_counter() - t0
        reqs = srv.chat_requests()[n0:] if srv else []
        status = b.status()
        if hasattr(b, "close"):
            b.close()
    finally:
        st.close()
    by_job: dict[str, int] = {}
    for r in reqs:
        by_job[r.task or "?"] = by_job.get(r.task or "?", 0) + 1
    return {
        "seconds": round(secs, 3),
        "requests": len(reqs),
        "by_job": by_job,
        "prompt_tokens": status.get("prompt_tokens", 0),
        "completion_tokens": status.get("completion_tokens", 0),
        "cache_hits": status.get("cache_hits", 0),
        "cache_misses": status.get("cache_misses", 0),
        "fallbacks": status.get("fallbacks", 0),
        "summarized": rep.summarized,
        "report": report_line(status),
    }


def forget_summaries(lib: str) -> None:
    """Drop the content hash from every entry's indexer meta, so the next pass re-summarises everything."""
    st = Store(lib)
    try:

        def fn(t) -> None:
            for ino, m in list(t.iter_meta()):
                if isinstance(m, EntryMeta) and m.hash is not None:
                    m.hash = None
                    t.put_meta(ino, m)

        st.run_write(fn)
    finally:
        st.close()


PROBE = r"""
import json, os, sys, time
paths = json.loads(sys.argv[1]); n = int(sys.argv[2]); deadline = float(sys.argv[3])
st, rd = [], []
i = 0
while len(st) < n and time.time() < deadline:
    p = paths[i % len(paths)]; i += 1
    try:
        t0 = time.perf_counter_ns(); os.stat(p); st.append(time.perf_counter_ns() - t0)
        t0 = time.perf_counter_ns()
        with open(p, "rb") as f: f.read(4096)
        rd.append(time.perf_counter_ns() - t0)
    except OSError:
        pass
print(json.dumps({"stat": st, "read": rd}))
"""


def probe(paths: list[str], n: int, max_s: float) -> dict:
    """stat and open+read+close latencies (ns) measured by a separate process (no GIL shared with us)."""
    r = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(paths), str(n), str(time.time() + max_s)],
        capture_output=True,
        text=True,
    )
    if r.returncode:
        raise RuntimeError(f"latency probe failed: {r.stderr[-500:]}")
    return json.loads(r.stdout)


def pct(xs: list[int], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] / 1000 if xs else float("nan")


def latency(lib: str, root: str, samples: int, delay_s: float) -> dict:
    """Mount the library (no indexer of its own) and probe it: idle; while an indexer process re-indexes with
    the deterministic builder (its CPU cost alone: the baseline); while an indexer process works with the
    model (the loopback model answers after ``delay_s`` without tokenising, so this process burns no CPU)."""
    from libraryfs.daemon import launcher

    mnt = os.path.join(root, "mnt")
    os.makedirs(mnt, exist_ok=True)
    launcher.start(lib, mnt, indexer=False, timeouts="0,0,0", llm=False)
    row: dict = {}
    try:
        paths = []
        for dp, _dn, fns in os.walk(os.path.join(mnt, "pydoc")):
            if "/." not in dp:  # entries only: not the generated .index/ pages
                paths += [os.path.join(dp, f) for f in fns if f != G.INDEX_FILE]
            if len(paths) > 200:
                break
        runs = {"idle": probe(paths, samples, 60)}
        cmd = [
            sys.executable,
            "-m",
            "libraryfs.daemon.indexer",
            lib,
            "--once",
            "--full",
            "--mountpoint",
            mnt,
            "--log-level",
            "WARNING",
        ]
        proc = subprocess.Popen(cmd + ["--no-llm"])
        try:
            time.sleep(0.3)
            runs["busy_deterministic"] = probe(paths, samples, 60)
            row["deterministic_still_busy_after_probe"] = proc.poll() is None
        finally:
            proc.wait(600)
        with LLMServer(default=Delay(delay_s, IndexModel())) as srv:
            env = dict(
                os.environ,
                LIBRARYFS_LLM_BASE_URL=srv.base_url,
                LIBRARYFS_LLM_MODEL="busy-model",
                LIBRARYFS_LLM_MAX_REQUESTS_PER_HOUR="0",
                LIBRARYFS_LLM_MAX_TOKENS_PER_HOUR="0",
            )
            proc = subprocess.Popen(cmd + ["--llm"], env=env)
            try:
                while len(srv.requests) < 3 and proc.poll() is None:
                    time.sleep(0.05)
                runs["busy_llm"] = probe(paths, samples, 60)
                row["llm_requests_during_probe"] = len(srv.requests)
                row["llm_still_busy_after_probe"] = proc.poll() is None
            finally:
                proc.wait(600)
    finally:
        launcher.stop(mnt)
    idle = runs["idle"]
    for op in ("stat", "read"):
        row[op] = {"idle_p50_us": pct(idle[op], 0.5), "idle_p99_us": pct(idle[op], 0.99)}
        for k in ("busy_deterministic", "busy_llm"):
            row[op][f"{k}_p50_us"] = pct(runs[k][op], 0.5)
            row[op][f"{k}_p99_us"] = pct(runs[k][op], 0.99)
            row[op][f"{k}_ratio_p50"] = pct(runs[k][op], 0.5) / pct(idle[op], 0.5)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="entries of the corpus to use (default: all)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--latency-samples", type=int, default=3000)
    ap.add_argument("--delay-ms", type=float, default=200.0, help="model latency per request in the busy run")
    ap.add_argument("--no-mount", action="store_true", help="skip the latency part (no FUSE here)")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="lfs-llm-bench-")
    res: dict = {"corpus": CORPUS, "batch_size": a.batch_size}
    try:
        lib, n, edit_path = build_library(root, a.limit)
        res["entries"] = n
        res["edited"] = edit_path
        pristine = os.path.join(root, "pristine")
        shutil.copytree(lib, pristine)

        def fresh(name: str) -> str:
            d = os.path.join(root, name)
            shutil.copytree(pristine, d)
            return d

        count_tokens("warm up the tokenizer before timing anything")
        res["deterministic"] = index_pass(fresh("det"), None)
        with LLMServer(default=CountingModel()) as srv:
            res["unbatched"] = index_pass(fresh("unb"), srv, batch_size=1)
            res["batched"] = index_pass(lib, srv, batch_size=a.batch_size)
            res["second_pass"] = index_pass(lib, srv, batch_size=a.batch_size)
            forget_summaries(lib)  # the indexer's own meta forgets: only the LLM cache can answer now
            res["cache_only_pass"] = index_pass(lib, srv, batch_size=a.batch_size)
            # edit one entry through the store's view (journaled like a write through the mount)
            from libraryfs.fs.view import LibraryView

            st = Store(lib)
            try:
                v = LibraryView(st)
                target = edit_path.encode()
                # an atomic save, as `sed -i` and most editors do: write a hidden temp file, rename it over.
                # (An in-place write is journaled without its parent and the indexer does not re-render
                # the section TOC then — reported to the lead; this path is the one it handles.)
                fh, _ = v.open(target, os.O_RDONLY)
                old = v.read(fh, 1 << 30, 0)
                v.release(fh)
                tmp = target.rsplit(b"/", 1)[0] + b"/.edit.tmp"
                fh = v.create(tmp, 0o644, os.O_WRONLY, os.getuid(), os.getgid())
                v.write(fh, b"An edited first paragraph.\n\n" + old, 0)
                v.release(fh)
                v.rename(tmp, target)
            finally:
                st.close()
            res["edit_one"] = index_pass(lib, srv, full=False, batch_size=a.batch_size)
        if not a.no_mount:
            res["latency"] = latency(lib, root, a.latency_samples, a.delay_ms / 1000)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    per_k = 1000 / max(1, res["entries"])
    print(
        f"\nLLM index builder — {res['entries']} entries of python3-doc, loopback server, "
        f"batch_size={a.batch_size}\n"
    )
    print(
        f"{'pass':<26}{'requests':>10}{'req/1k entries':>16}{'prompt tok/1k':>15}{'compl tok/1k':>14}"
        f"{'cache hits':>12}{'fallbacks':>11}{'seconds':>9}"
    )
    for key, label in (
        ("deterministic", "deterministic (baseline)"),
        ("unbatched", "LLM unbatched (1/req)"),
        ("batched", f"LLM batched ({a.batch_size}/req)"),
        ("second_pass", "LLM 2nd pass, unchanged"),
        ("cache_only_pass", "LLM pass, meta forgotten"),
        ("edit_one", "LLM after editing 1 entry"),
    ):
        r = res[key]
        print(
            f"{label:<26}{r['requests']:>10,}{r['requests'] * per_k:>16,.1f}{r['prompt_tokens'] * per_k:>15,.0f}"
            f"{r['completion_tokens'] * per_k:>14,.0f}{r['cache_hits']:>12,}{r['fallbacks']:>11,}"
            f"{r['seconds']:>9.2f}"
        )
    for key in ("second_pass", "cache_only_pass"):
        sp = res[key]
        looked = sp["cache_hits"] + sp["cache_misses"]
        res[key + "_hit_rate"] = sp["cache_hits"] / looked if looked else 1.0
        print(
            f"{key.replace('_', ' ')}: LLM cache hit rate {res[key + '_hit_rate']:.1%} "
            f"({sp['cache_hits']} of {looked} looked up), {sp['requests']} requests"
        )
    print(f"editing one entry: {res['edit_one']['requests']} requests {res['edit_one']['by_job']}")
    b, u = res["batched"], res["unbatched"]
    print(
        f"batching saves {1 - b['requests'] / max(1, u['requests']):.0%} of requests and "
        f"{1 - (b['prompt_tokens'] + b['completion_tokens']) / max(1, u['prompt_tokens'] + u['completion_tokens']):.0%}"
        " of tokens"
    )
    if "latency" in res:
        L = res["latency"]
        print(
            f"\nmount latency (µs, p50 / p99) measured by another process; model answers after "
            f"{a.delay_ms:g} ms:"
        )
        print(
            f"  {'op':<5}{'idle':>20}{'busy, deterministic':>24}{'busy, LLM':>22}{'ratio LLM/idle p50':>20}"
        )
        for op in ("stat", "read"):
            x = L[op]
            print(
                f"  {op:<5}{x['idle_p50_us']:>10.1f} /{x['idle_p99_us']:>8.1f}"
                f"{x['busy_deterministic_p50_us']:>13.1f} /{x['busy_deterministic_p99_us']:>8.1f}"
                f"{x['busy_llm_p50_us']:>11.1f} /{x['busy_llm_p99_us']:>8.1f}{x['busy_llm_ratio_p50']:>20.2f}"
            )
        print(
            f"  (LLM indexer: {L['llm_requests_during_probe']} requests by the end of its probe, still busy: "
            f"{L['llm_still_busy_after_probe']}; deterministic still busy: "
            f"{L['deterministic_still_busy_after_probe']})"
        )
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    out = os.path.join(HERE, "results", "llm_index.json")
    with open(out, "w") as f:
        json.dump(res, f, indent=2)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
