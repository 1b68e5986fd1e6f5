"""Aggregation, the table printed to stdout, the JSON summary and the PNG plots."""

from __future__ import annotations

import math
import os
from collections import defaultdict

RANKERS = ("find", "grep", "bm25")
#: navigators whose lookups are walks with a read count (success within k reads applies)
WALKERS = ("toc", "toc-walk", "llm", "find")


def wilson(k: int, n: int, z: float = 1.96) -> list[float] | None:
    """Wilson score 95% interval of k successes in n trials (None for n = 0)."""
    if n == 0:
        return None
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [round(max(0.0, c - h), 4), round(min(1.0, c + h), 4)]


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 3) if xs else None


def summarise(records: list[dict], facts: dict[str, dict]) -> list[dict]:
    """One row per (corpus, kind, split, navigator): rates with Wilson intervals, mean reads and tokens,
    and tokens as a share of the corpus's flat cost."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        if r.get("skipped"):
            continue
        groups[(r["corpus"], r["kind"], r["split"], r["navigator"])].append(r)
    rows = []
    for (corpus, kind, split, nav), rs in sorted(groups.items()):
        f = facts[corpus]
        n = len(rs)
        row = {
            "corpus": corpus,
            "kind": kind,
            "split": split,
            "navigator": nav,
            "n": n,
            "k": f["k"],
            "found": _mean([float(r["hit"]) for r in rs]),
            "found_ci": wilson(sum(r["hit"] for r in rs), n),
            "mean_reads": _mean([r["reads"] for r in rs]),
            "mean_tokens": _mean([r["tokens"] for r in rs]),
            "errors": sum(1 for r in rs if r.get("error")),
        }
        row["flat_ratio"] = round(row["mean_tokens"] / f["flat_tokens"], 6) if f["flat_tokens"] else None
        if nav in WALKERS:
            for k in sorted({f["k"], f["k"] + 2, 2 * f["k"]}):
                ok = sum(1 for r in rs if r["hit"] and r["reads"] <= k)
                row[f"success_at_{k}"] = round(ok / n, 4)
            ok = sum(1 for r in rs if r["hit"] and r["reads"] <= f["k"])
            row["success_at_k"] = round(ok / n, 4)
            row["success_at_k_ci"] = wilson(ok, n)
        if nav in RANKERS:
            row["hit1"] = _mean([float(r["hit1"]) for r in rs])
            row["hit5"] = _mean([float(r["hit5"]) for r in rs])
        if nav == "llm":
            row["mean_api_tokens"] = _mean([r.get("api_tokens", 0) for r in rs])
        rows.append(row)
    return rows


def _fmt(x, pct: bool = False) -> str:
    if x is None:
        return "—"
    if pct:
        return f"{100 * x:5.1f}%"
    return f"{x:,.1f}" if isinstance(x, float) else f"{x:,}"


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.3f}%"


def table(rows: list[dict], facts: dict[str, dict]) -> str:
    """The text table: one line per row of :func:`summarise`, grouped by corpus."""
    out = []
    for corpus in sorted({r["corpus"] for r in rows}):
        f = facts[corpus]
        out.append(
            f"\n{corpus}: N = {f['entries']:,} entries, flat cost {f['flat_tokens']:,} tokens, "
            f"{f['toc_pages']} TOC pages, fan-out b = {f['b']:.1f}, k = ⌈log_b N⌉ + 2 = {f['k']}"
        )
        out.append(
            f"  {'kind':6} {'split':8} {'navigator':9} {'n':>4} {'found':>7} {'succ@k':>7} "
            f"{'hit@1':>7} {'hit@5':>7} {'reads':>7} {'tokens':>10} {'÷flat':>9}"
        )
        for r in (r for r in rows if r["corpus"] == corpus):
            out.append(
                f"  {r['kind']:6} {r['split']:8} {r['navigator']:9} {r['n']:>4} {_fmt(r['found'], True):>7} "
                f"{_fmt(r.get('success_at_k'), True):>7} {_fmt(r.get('hit1'), True):>7} "
                f"{_fmt(r.get('hit5'), True):>7} {_fmt(r['mean_reads']):>7} {_fmt(r['mean_tokens']):>10} "
                f"{_ratio(r['flat_ratio']):>9}"
            )
    return "\n".join(out)


def plots(rows: list[dict], out_dir: str, split: str = "heldout") -> list[str]:
    """Two PNGs over the ``split`` rows: success within k reads / found (bars per navigator, one panel
    per corpus × kind), and mean tokens per lookup against the flat cost (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sel = [r for r in rows if r["split"] == split]
    if not sel:
        return []
    cells = sorted({(r["corpus"], r["kind"]) for r in sel})
    navs = sorted({r["navigator"] for r in sel})
    paths = []
    for metric, fname, ylab, log in (
        ("success_at_k", "success.png", "found within k reads (walkers) / found (flat)", False),
        ("mean_tokens", "tokens.png", "mean tokens per lookup (o200k)", True),
    ):
        fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(cells)), 4))
        w = 0.8 / max(1, len(navs))
        for j, nav in enumerate(navs):
            ys = []
            for c in cells:
                r = next((r for r in sel if (r["corpus"], r["kind"]) == c and r["navigator"] == nav), None)
                v = None if r is None else (r.get(metric) if metric in r else r["found"])
                ys.append(v or 0)
            ax.bar([i + j * w for i in range(len(cells))], ys, w, label=nav)
        ax.set_xticks([i + w * (len(navs) - 1) / 2 for i in range(len(cells))])
        ax.set_xticklabels([f"{c}\n{k}" for c, k in cells], fontsize=8)
        ax.set_ylabel(ylab, fontsize=8)
        if log:
            ax.set_yscale("log")
        ax.set_title(f"findability, {split} queries", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        p = os.path.join(out_dir, fname)
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def markdown(doc: dict, split: str) -> str:
    """A Markdown table of one split of a summary: per corpus × kind, the TOC walk (success within k,
    found, reads, tokens, share of flat) and the rankers' hit@1 / hit@5."""
    rows = [r for r in doc["rows"] if r["split"] == split]
    by = {(r["corpus"], r["kind"], r["navigator"]): r for r in rows}
    out = [
        "| corpus | kind | n | k | toc: found ≤ k reads | toc: found | toc: reads | toc: tokens (÷ flat) "
        "| llm: found ≤ k | find hit@1 / @5 | grep hit@1 / @5 | bm25 hit@1 / @5 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for corpus, kind in sorted({(r["corpus"], r["kind"]) for r in rows}):
        toc = by.get((corpus, kind, "toc"), {})
        llm = by.get((corpus, kind, "llm"))

        def hits(nav: str, corpus: str = corpus, kind: str = kind) -> str:
            r = by.get((corpus, kind, nav))
            return "—" if r is None else f"{_pct(r['hit1'])} / {_pct(r['hit5'])}"

        tokens = toc.get("mean_tokens")
        out.append(
            f"| {corpus} | {kind} | {toc.get('n', '—')} | {toc.get('k', '—')} | {_pct(toc.get('success_at_k'))} "
            f"| {_pct(toc.get('found'))} | {_num(toc.get('mean_reads'))} | "
            f"{'—' if tokens is None else f'{tokens:,.0f}'} ({_ratio(toc.get('flat_ratio'))}) "
            f"| {'not run' if llm is None else _pct(llm.get('success_at_k'))} "
            f"| {hits('find')} | {hits('grep')} | {hits('bm25')} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m libraryfs_bench.findability.report SUMMARY.json [SPLIT …]``: Markdown tables."""
    import json
    import sys

    args = argv if argv is not None else sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(main.__doc__)
        return 0 if args else 2
    with open(args[0]) as f:
        doc = json.load(f)
    for split in args[1:] or ["heldout", "dev"]:
        print(f"\n{split}:\n\n{markdown(doc, split)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
