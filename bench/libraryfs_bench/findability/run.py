"""One benchmark run: build each corpus's library, run every navigator on every query, write the results.

Results (``--out``, default ``bench/results/findability``): ``summary.json`` (facts per corpus, one row
per corpus × kind × split × navigator), ``lookups.jsonl`` (every lookup: answer, reads, tokens, the TOC
navigator's trace), ``success.png`` and ``tokens.png`` (held-out queries).
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from libraryfs.fs.generated import INDEX_FILE
from libraryfs.index.tokens import count_tokens

from . import corpora, report
from .flat import BM25Baseline, GrepBaseline
from .navigators import FindNavigator, TocNavigator, hits_at
from .queries import load_queries, query_file
from .reader import Lookup, is_hit, list_entries, list_toc_pages, parse_toc
from .subjectnav import SubjectNavigator


@dataclass
class Options:
    """What to run. ``llm``: ``{"base_url", "model", "api_key", "protocol", "timeout_s"}`` or None."""

    corpora: list[str]
    out_dir: str
    quick: int = 0  #: queries per (kind, split) when > 0
    split: str = "all"  #: "dev" while developing or tuning; "heldout" / "all" for reporting
    navigators: list[str] = field(default_factory=lambda: ["toc", "find", "grep", "bm25", "llm"])
    llm: dict | None = None
    llm_limit: int = 0  #: queries per (kind, split) for the LLM navigator when > 0
    toc_max_reads: int = 16
    custom: dict[str, tuple[str, str]] = field(default_factory=dict)  #: name -> (source dir, queries)
    keep_dir: str | None = None
    plots: bool = True


def corpus_facts(lib: corpora.Library) -> tuple[dict, dict[str, bytes]]:
    """N, flat cost, TOC pages and fan-out of a built library; plus every entry's bytes (read once through
    the mount, for the flat baselines)."""
    entries = list_entries(lib.mountpoint)
    texts: dict[str, bytes] = {}
    for rel in entries:
        with open(os.path.join(lib.mountpoint, rel), "rb") as f:
            texts[rel] = f.read()
    tokens = {rel: count_tokens(data) for rel, data in texts.items()}
    pages = list_toc_pages(lib.mountpoint)
    fan, page_tokens = [], []
    line_of: dict[str, list[str]] = {}  # linked path -> [TOC page, the line]: shown with a failed walk
    for p in pages:
        with open(os.path.join(lib.mountpoint, p), encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = parse_toc(text, p)
        fan.append(len(lines))
        page_tokens.append(count_tokens(text))
        for ln in lines:
            if not ln.label.startswith("↑"):
                line_of.setdefault(ln.path, [p, ln.raw[:300]])
    n = len(entries)
    b = max(2.0, sum(fan) / len(fan)) if fan else 2.0
    k = math.ceil(math.log(max(n, 2)) / math.log(b)) + 2
    facts = {
        "entries": n,
        "flat_tokens": sum(tokens.values()),
        "toc_pages": len(pages),
        "toc_page_tokens_mean": round(sum(page_tokens) / len(page_tokens), 1) if page_tokens else None,
        "b": round(b, 2),
        "k": k,
        "fanout_median": statistics.median(fan) if fan else 0,
        **lib.facts,
    }
    facts["_entry_tokens"] = tokens
    facts["_line_of"] = line_of
    return facts, texts


def select(queries: list[dict], quick: int, seed: int = 7) -> list[dict]:
    """All queries, or ``quick`` per (kind, split), drawn deterministically."""
    if quick <= 0:
        return queries
    out = []
    for key in sorted({(q["kind"], q["split"]) for q in queries}):
        pool = [q for q in queries if (q["kind"], q["split"]) == key]
        out += random.Random(seed).sample(pool, min(quick, len(pool)))
    return out


def _record(q: dict, nav: str, outcome: Any, lookup: Lookup | None, facts: dict) -> dict:
    r = {
        "id": q["id"],
        "corpus": q["corpus"],
        "kind": q["kind"],
        "split": q["split"],
        "navigator": nav,
        "query": q["query"],
        "answer": outcome.answer,
        "hit": is_hit(outcome.answer, q["targets"]),
    }
    if lookup is None:  # flat: everything was read
        r.update(reads=facts["entries"], tokens=facts["flat_tokens"])
    else:
        r.update(
            reads=len(lookup.reads),
            tokens=lookup.tokens,
            toc_reads=sum(1 for x in lookup.reads if x.kind == "toc"),
        )
    if nav in report.RANKERS:
        r.update(
            hit1=hits_at(outcome.ranked, q["targets"], 1),
            hit5=hits_at(outcome.ranked, q["targets"], 5),
            ranked=outcome.ranked[:5],
        )
    if outcome.trace and nav in ("toc", "toc-walk", "llm"):
        r["trace"] = outcome.trace
    if outcome.error:
        r["error"] = outcome.error
    if nav == "llm":
        r["api_tokens"] = outcome.api_tokens
    return r


def run_corpus(name: str, opts: Options, log) -> tuple[dict, list[dict]]:
    """Build one corpus, run the navigators; returns its facts and lookup records."""
    source, qpath = opts.custom.get(name, (None, query_file(name)))
    queries = [q for q in load_queries(qpath) if opts.split in ("all", q["split"])]
    queries = select(queries, opts.quick)
    for q in queries:
        q["corpus"] = name
    keep = os.path.join(opts.keep_dir, name) if opts.keep_dir else None
    with corpora.built_library(name, source=source, keep_dir=keep) as lib:
        facts, texts = corpus_facts(lib)
        entry_tokens = facts.pop("_entry_tokens")
        line_of = facts.pop("_line_of")
        log(
            f"{name}: built in {facts['fill_s'] + facts['index_s']:.1f} s; N = {facts['entries']}, "
            f"flat {facts['flat_tokens']:,} tokens, {facts['toc_pages']} TOC pages, b = {facts['b']}, k = {facts['k']}"
        )
        entries = set(texts)
        records: list[dict] = []
        missing = [q for q in queries if not any(is_hit(e, q["targets"]) for e in entries)]
        for q in missing:
            records.append(
                {
                    "id": q["id"],
                    "corpus": name,
                    "kind": q["kind"],
                    "split": q["split"],
                    "navigator": "*",
                    "skipped": "no target entry in the library",
                    "query": q["query"],
                }
            )
        live = [q for q in queries if q not in missing]
        facts["queries"] = len(live)
        facts["queries_missing_target"] = len(missing)
        navs: list[tuple[str, Any]] = []
        if "toc" in opts.navigators:
            navs.append(("toc", SubjectNavigator(opts.toc_max_reads)))
        if "toc-walk" in opts.navigators:
            navs.append(("toc-walk", TocNavigator(opts.toc_max_reads)))
        if "find" in opts.navigators:
            navs.append(("find", FindNavigator(lib.libdir)))
        for nav_name, nav in navs:
            t0 = time.perf_counter()
            for q in live:
                lk = Lookup(lib.mountpoint, entry_tokens.copy())
                records.append(_record(q, nav_name, nav.run(q["query"], lk), lk, facts))
                if nav_name.startswith("toc") and not records[-1]["hit"]:
                    records[-1]["target_lines"] = [
                        line_of.get(t.rstrip("/") + "/" + INDEX_FILE if t.endswith("/") else t)
                        for t in q["targets"][:3]
                    ]
            facts.setdefault("seconds", {})[nav_name] = round(time.perf_counter() - t0, 2)
            log(f"  {nav_name}: {len(live)} lookups in {time.perf_counter() - t0:.1f} s")
        flat: list[tuple[str, Any]] = []
        if "grep" in opts.navigators:
            flat.append(("grep", GrepBaseline(texts)))
        if "bm25" in opts.navigators:
            flat.append(("bm25", BM25Baseline(texts)))
        for nav_name, nav in flat:
            t0 = time.perf_counter()
            try:
                for q in live:
                    records.append(_record(q, nav_name, nav.run(q["query"]), None, facts))
            finally:
                if hasattr(nav, "close"):
                    nav.close()
            facts.setdefault("seconds", {})[nav_name] = round(time.perf_counter() - t0, 2)
            log(f"  {nav_name}: {len(live)} lookups in {time.perf_counter() - t0:.1f} s")
        if "llm" in opts.navigators:
            records += _run_llm(live, lib, entry_tokens, facts, opts, log)
    return facts, records


def _run_llm(
    live: list[dict], lib: corpora.Library, entry_tokens: dict, facts: dict, opts: Options, log
) -> list[dict]:
    if not opts.llm:
        log("  llm: skipped (no --base-url/--model)")
        facts["llm"] = "skipped: no endpoint given"
        return []
    from .llmnav import LLMNavigator, make_client

    cfg = opts.llm
    nav = LLMNavigator(
        make_client(cfg["base_url"], cfg.get("api_key"), cfg.get("timeout_s", 120.0)),
        cfg["model"],
        protocol=cfg.get("protocol", "tools"),
        max_turns=cfg.get("max_turns", 12),
    )
    qs = select(live, opts.llm_limit) if opts.llm_limit else live
    facts["llm"] = {k: v for k, v in cfg.items() if k != "api_key"} | {"queries": len(qs)}
    out = []
    t0 = time.perf_counter()
    for q in qs:
        lk = Lookup(lib.mountpoint, entry_tokens.copy())
        out.append(_record(q, "llm", nav.run(q["query"], q["kind"], lk), lk, facts))
    facts.setdefault("seconds", {})["llm"] = round(time.perf_counter() - t0, 2)
    log(f"  llm: {len(qs)} lookups in {time.perf_counter() - t0:.1f} s")
    return out


def code_under_test() -> dict:
    """Which libraryfs was measured: the package directory, its git commit, and whether the checkout had edits
    outside bench/, tests/ and docs/."""
    import subprocess

    import libraryfs

    where = os.path.dirname(os.path.abspath(libraryfs.__file__))
    out = {"package": where}
    head = subprocess.run(["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        dirty = subprocess.run(
            [
                "git",
                "-C",
                where,
                "status",
                "--porcelain",
                "--",
                ":/",
                ":(top,exclude)bench",
                ":(top,exclude)tests",
                ":(top,exclude)docs",
            ],
            capture_output=True,
            text=True,
        )
        out.update(commit=head.stdout.strip(), dirty=bool(dirty.stdout.strip()))
    return out


def run(opts: Options, log=print) -> dict:
    """Run every corpus of ``opts``; write results; return the summary document."""
    os.makedirs(opts.out_dir, exist_ok=True)
    facts: dict[str, dict] = {}
    records: list[dict] = []
    unavailable: dict[str, str] = {}
    for name in opts.corpora:
        try:
            facts[name], recs = run_corpus(name, opts, log)
        except corpora.CorpusUnavailable as e:
            unavailable[name] = str(e)
            log(f"{name}: skipped — {e}")
            continue
        records += recs
    rows = report.summarise(records, facts)
    doc = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": opts.quick,
        "split": opts.split,
        "navigators": opts.navigators,
        "libraryfs": code_under_test(),
        "corpora": facts,
        "unavailable": unavailable,
        "rows": rows,
    }
    with open(os.path.join(opts.out_dir, "summary.json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(opts.out_dir, "lookups.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    log(report.table(rows, facts))
    if opts.plots:
        for p in report.plots(rows, opts.out_dir):
            log(f"wrote {p}")
    log(f"wrote {opts.out_dir}/summary.json and lookups.jsonl")
    return doc
