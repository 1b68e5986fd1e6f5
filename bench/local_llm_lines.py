"""Do the local model's summary lines help a reader pick the right page more than the deterministic lines?

A small, honest measure (issue 13 item 4; docs/llm.md "Local model lines vs deterministic lines"):

- **queries**: the held-out *topic* queries of the findability benchmark's python set
  (``bench/libraryfs_bench/findability/data/python.jsonl``: the first sentence of each stdlib module's own
  docstring, independent of the TOC text and of both summarisers), every query whose target is one
  ``library/`` page, the first ``--n`` by id;
- **candidates**: the target pages of those queries (each query must find its page among all of them);
- **lines**: for every page, the deterministic builder's line and the local model's line in the builder's
  plain-text mode (:mod:`libraryfs.llm.textmode`; where the model's answer is refused, the TOC shows the
  deterministic line: column "model, as the TOC shows it");
- **reader**: BM25 (``rank_bm25``) over ``name + line``, content words (:func:`libraryfs.index.jobs.terms`);
  hit@1 and mean reciprocal rank of the target page. No LLM reads the lines (a lexical reader: the TOC-only
  navigator of the findability benchmark works the same way).

Nothing was tuned on these queries. Run::

    python bench/local_llm_lines.py [--n 24] [--base-url URL]   # without --base-url the model is started

Writes ``bench/results/local_llm_lines.json`` (every line and rank).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import time

from rank_bm25 import BM25Okapi

from libraryfs.daemon.corpus import PYTHON_DOC_SOURCES
from libraryfs.index.jobs import DeterministicBuilder, EntryDoc, terms
from libraryfs.index.outline import extract
from libraryfs.llm import local
from libraryfs.llm import prompts as P
from libraryfs.llm import textmode as T
from libraryfs.llm.client import ChatClient
from libraryfs.llm.config import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
QUERIES = os.path.join(HERE, "libraryfs_bench", "findability", "data", "python.jsonl")


def load_queries(n: int) -> list[dict]:
    """Held-out topic queries with one ``library/`` target, the first ``n`` by id."""
    out = []
    with open(QUERIES) as f:
        for line in f:
            q = json.loads(line)
            one = len(q["targets"]) == 1 and q["targets"][0].startswith("python-docs/library/")
            if q["kind"] == "topic" and q["split"] == "heldout" and one:
                out.append(q)
    out.sort(key=lambda q: q["id"])
    seen: set[str] = set()
    picked = []
    for q in out:
        if q["targets"][0] not in seen:
            seen.add(q["targets"][0])
            picked.append(q)
    return picked[:n]


def entry_doc(rel: str) -> EntryDoc:
    """The page as the indexer hands it to a builder (outline, text, first 8 KiB)."""
    with open(os.path.join(PYTHON_DOC_SOURCES, rel), "rb") as f:
        data = f.read()
    name = os.path.basename(rel)
    ext = extract(name, data, len(data))
    return EntryDoc(
        path=rel,
        name=name,
        content_hash=hashlib.sha256(data).hexdigest(),
        text=ext.text,
        size_bytes=len(data),
        is_binary=ext.binary,
        outline=ext.outline,
        head=ext.head,
    )


def ranks(queries: list[dict], pages: list[str], lines: dict[str, str]) -> list[int]:
    """1-based rank of each query's target page under BM25 over ``name + line``."""
    docs = [
        terms(os.path.basename(p).replace(".rst.txt", "").replace("_", " ") + " " + lines[p]) for p in pages
    ]
    bm = BM25Okapi([d or ["-"] for d in docs])
    out = []
    for q in queries:
        scores = bm.get_scores(terms(q["query"]))
        order = sorted(range(len(pages)), key=lambda i: -scores[i])
        out.append(1 + order.index(pages.index(q["targets"][0].removeprefix("python-docs/"))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--base-url", default=None)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "local_llm_lines.json"))
    args = ap.parse_args()
    queries = load_queries(args.n)
    pages = [q["targets"][0].removeprefix("python-docs/") for q in queries]
    docs = {p: entry_doc(p) for p in pages}
    det = dict(zip(pages, DeterministicBuilder().summarize([docs[p] for p in pages]), strict=True))
    model = None if args.base_url else local.start()
    base_url = args.base_url or model.base_url  # type: ignore[union-attr]
    cfg = load_config(None, {"base_url": base_url, "model": local.MODEL_NAME, **local.RECOMMENDED}, env={})
    client = ChatClient(cfg)
    raw: dict[str, str] = {}
    accepted: dict[str, str | None] = {}
    seconds: list[float] = []
    try:
        for p in pages:
            d = docs[p]
            item = {"name": d.name, "path": d.path, "size_bytes": d.size_bytes, "text": P.excerpt(d.text)}
            t0 = time.monotonic()
            reply = client.chat(T.messages(T.SUMMARIZE, item), max_tokens=T.SUMMARIZE.max_tokens)
            seconds.append(time.monotonic() - t0)
            raw[p] = reply.text
            accepted[p] = T.parse(T.SUMMARIZE, reply.text, item)
            print(f"{p}: {accepted[p]!r}", flush=True)
    finally:
        if model is not None:
            model.stop()
    shown = {p: accepted[p] or det[p] for p in pages}
    only_model = {p: accepted[p] or "" for p in pages}
    table = []
    for label, lines in (
        ("deterministic (the default)", det),
        ("model, as the TOC shows it (refused → deterministic)", shown),
        ("model only (refused → empty line)", only_model),
        ("file name only (no line)", dict.fromkeys(pages, "")),
    ):
        r = ranks(queries, pages, lines)
        table.append(
            {
                "lines": label,
                "hit@1": sum(1 for x in r if x == 1),
                "hit@3": sum(1 for x in r if x <= 3),
                "mrr": round(statistics.mean(1 / x for x in r), 3),
                "ranks": r,
            }
        )
    n = len(queries)
    print(f"\n{n} held-out python topic queries, {n} candidate pages; BM25 over name + line")
    print(f"{'lines':55} {'hit@1':>7} {'hit@3':>7} {'MRR':>6}")
    for row in table:
        print(f"{row['lines']:55} {row['hit@1']:>3}/{n:<3} {row['hit@3']:>3}/{n:<3} {row['mrr']:>6.3f}")
    ok = sum(1 for v in accepted.values() if v)
    print(
        f"model answers accepted {ok}/{n}; latency p50 {statistics.median(seconds):.1f} s, "
        f"max {max(seconds):.1f} s"
    )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(
            {
                "queries": queries,
                "pages": pages,
                "deterministic": det,
                "model_raw": raw,
                "model_accepted": accepted,
                "seconds": seconds,
                "table": table,
            },
            f,
            indent=1,
        )


if __name__ == "__main__":
    main()
