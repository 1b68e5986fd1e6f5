"""The paper's per-trial logs beside ours: loading, store verification, cell summaries, fidelity check.

Logs: ``data/library-theorem/*.jsonl`` of zmainen/library-theorem (MIT), one JSON object per trial.
Conventions of the paper's analysis (data README): drop rows with ``total_tokens == 0``, keep the last row
per (model, condition, N, trial), report medians (IQR) and Wilson 95 % intervals for accuracy.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from libraryfs_bench.theorem.accounting import read_jsonl
from libraryfs_bench.theorem.content import hash_items, target_position
from libraryfs_bench.theorem.stores import PAGE_ITEMS, shuffled_items

#: Where the logs are looked for: $LIBRARYFS_THEOREM_DATA, then the project's shared data folder.
#: Where the paper's per-trial logs are looked for: $LIBRARYFS_THEOREM_DATA, the copy shipped in this package
#: (github zmainen/library-theorem, MIT — see data/LICENSE), a ``shared/`` checkout beside the repository.
DATA_DIRS = (
    os.environ.get("LIBRARYFS_THEOREM_DATA", ""),
    str(Path(__file__).resolve().parent / "data"),
    str(Path(__file__).resolve().parents[2].parent / "shared" / "data" / "library-theorem"),
)
#: Files in the order later rows supersede earlier ones (deep_indexed_v5 extends exp2's DEEP-INDEXED cells).
LOG_FILES = (
    "exp2_gpt-4o-mini.jsonl",
    "deep_indexed_v5.jsonl",
    "exp2_gpt-5.4.jsonl",
    "benchmark_v3_numeric.jsonl",
    "benchmark_v2.jsonl",
    "benchmark_v2_gpt-5.4.jsonl",
)


@dataclass(frozen=True)
class PaperRow:
    """One published trial, normalised across the log formats."""

    source: str
    model: str  # short name: gpt-4o-mini, gpt-5.4
    content: str  # hash, numeric, encyclopedia
    condition: str
    n: int
    trial: int
    key_low: int  # hash: 100 or 1000 (inferred from the target key); others 0
    target_key: int | str
    target_val: int | str
    target_position: int  # numeric/encyclopedia: logged; hash: -1
    page_reads: int
    index_reads: int
    section_index_reads: int
    total_tokens: int
    correct: bool
    answered: bool


def find_data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Directory holding the paper's logs. Raises FileNotFoundError naming the places tried."""
    tried = [str(explicit)] if explicit else [d for d in DATA_DIRS if d]
    for d in tried:
        if (Path(d) / LOG_FILES[0]).is_file():
            return Path(d)
    raise FileNotFoundError(f"the paper's logs ({LOG_FILES[0]}) not found in: {', '.join(tried)}")


def _row(source: str, r: dict) -> PaperRow:
    model = r["model"].split("/")[-1]
    if "target_key" in r:
        content, key, val, pos = "hash", r["target_key"], r["target_val"], -1
        key_low = 100 if key < 1000 else 1000
    elif "target_item" in r:
        content, key, val, pos, key_low = (
            "numeric",
            r["target_item"],
            r["target_value"],
            r["target_position"],
            0,
        )
    else:
        content, key, val, pos, key_low = (
            "encyclopedia",
            r["target_topic"],
            r["target_fact"],
            r["target_position"],
            0,
        )
    return PaperRow(
        source,
        model,
        content,
        r["condition"],
        r.get("n", r.get("m")),
        r["trial"],
        key_low,
        key,
        val,
        pos,
        r["page_reads"],
        r["index_reads"],
        r.get("section_index_reads", 0),
        r["total_tokens"],
        bool(r["correct"]),
        bool(r["answered"]),
    )


def load_paper_rows(data_dir: str | os.PathLike[str] | None = None, clean: bool = True) -> list[PaperRow]:
    """All published trials; ``clean`` applies the paper's conventions (drop total_tokens == 0, keep the
    last row per (model, content, condition, N, trial)). Raises FileNotFoundError without the logs."""
    base = find_data_dir(data_dir)
    rows: list[PaperRow] = []
    for name in LOG_FILES:
        if (base / name).is_file():
            rows += [_row(name, r) for r in read_jsonl(base / name)]
    if not clean:
        return rows
    last: dict[tuple, PaperRow] = {}
    for row in rows:
        if row.total_tokens > 0:
            last[(row.model, row.content, row.condition, row.n, row.trial)] = row
    return list(last.values())


@dataclass
class Verification:
    """Outcome of regenerating the published stores from the seeds."""

    rows: int = 0
    target_matches: int = 0
    flat_correct: int = 0
    flat_reads_equal_target_page: int = 0
    mismatches: list | None = None


def verify_stores(rows: Iterable[PaperRow]) -> Verification:
    """Regenerate each published trial's store and target from the seeds and compare with the log:
    hash rows by (target_key, target_val), numeric/encyclopedia rows by target position; for FLAT rows
    answered correctly, the logged page_reads against the target's page in the shuffled pages."""
    v = Verification(mismatches=[])
    for r in rows:
        v.rows += 1
        if r.content == "hash":
            items = hash_items(r.n, r.trial, r.key_low)
            target = items[target_position(r.n, r.trial)]
            ok = target == (r.target_key, r.target_val)
            if r.condition == "FLAT" and r.correct:
                v.flat_correct += 1
                page = shuffled_items(items, r.trial).index(target) // PAGE_ITEMS + 1
                v.flat_reads_equal_target_page += page == r.page_reads
        else:
            ok = target_position(r.n, r.trial) == r.target_position
        v.target_matches += ok
        if not ok:
            v.mismatches.append((r.source, r.condition, r.n, r.trial))
    return v


def wilson(successes: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a proportion (95 % by default); (0, 0) for no trials."""
    if total == 0:
        return 0.0, 0.0
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize(rows: Iterable, reads: str = "page_reads") -> dict:
    """Median/mean reads, accuracy (+ Wilson 95 %), median tokens of trial rows (PaperRow or dict)."""
    rows = list(rows)
    get = (lambda r, k: r[k]) if rows and isinstance(rows[0], dict) else (lambda r, k: getattr(r, k))
    pr = [get(r, reads) for r in rows]
    tok = [get(r, "total_tokens") for r in rows]
    correct = sum(bool(get(r, "correct")) for r in rows)
    lo, hi = wilson(correct, len(rows))
    return {
        "trials": len(rows),
        "reads_median": statistics.median(pr) if pr else None,
        "reads_mean": statistics.fmean(pr) if pr else None,
        "index_reads_median": statistics.median([get(r, "index_reads") for r in rows]) if rows else None,
        "accuracy": correct / len(rows) if rows else None,
        "accuracy_wilson95": [lo, hi],
        "tokens_median": statistics.median(tok) if tok else None,
    }


def side_by_side(paper: list[PaperRow], ours: list[dict]) -> list[dict]:
    """One dict per published (model, content, condition, N) cell: the paper's summary and ours over the
    same trials (our records matched on content, condition, N, trial and key range)."""
    mine = {}
    for r in ours:
        mine[
            (r["content"], r["condition"], r["n"], r["trial"], r["key_low"] if r["content"] == "hash" else 0)
        ] = r
    cells: dict[tuple, list[PaperRow]] = defaultdict(list)
    for r in paper:
        cells[(r.model, r.content, r.condition, r.n)].append(r)
    out = []
    for (model, content, cond, n), rows in sorted(
        cells.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2], kv[0][3])
    ):
        matched = [
            mine[(content, cond, n, r.trial, r.key_low)]
            for r in rows
            if (content, cond, n, r.trial, r.key_low) in mine
        ]
        flat_equal = None
        if cond == "FLAT" and matched:
            pairs = [(r, mine.get((content, cond, n, r.trial, r.key_low))) for r in rows if r.correct]
            flat_equal = [sum(1 for r, m in pairs if m and m["page_reads"] == r.page_reads), len(pairs)]
        out.append(
            {
                "model": model,
                "content": content,
                "condition": cond,
                "n": n,
                "paper": summarize(rows),
                "ours": summarize(matched) if matched else None,
                "flat_reads_equal": flat_equal,
            }
        )
    return out


def _fmt(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "—"
    return f"{x:,.{digits}f}" if digits else f"{x:,.0f}" if x == int(x) else f"{x:,.1f}"


def format_side_by_side(cells: list[dict]) -> str:
    """Plain-text table of :func:`side_by_side` (reads median (mean) / accuracy / median tokens)."""
    head = f"{'model':12} {'content':12} {'condition':18} {'N':>5} {'trials':>6}  {'paper reads':>14} {'acc':>5} {'tokens':>9}  |  {'ours reads':>14} {'acc':>5} {'tokens':>9}  {'FLAT reads=paper':>16}"
    lines = [head, "-" * len(head)]
    for c in cells:
        p, o = c["paper"], c["ours"] or {}
        pr = f"{_fmt(p['reads_median'])} ({p['reads_mean']:.1f})"
        orr = f"{_fmt(o.get('reads_median'))} ({o['reads_mean']:.1f})" if o else "—"
        fe = f"{c['flat_reads_equal'][0]}/{c['flat_reads_equal'][1]}" if c["flat_reads_equal"] else ""
        acc = f"{o['accuracy']:.2f}" if o.get("accuracy") is not None else "—"  # a cell not run has none
        lines.append(
            f"{c['model']:12} {c['content']:12} {c['condition']:18} {c['n']:>5} {p['trials']:>6}  {pr:>14} "
            f"{p['accuracy']:>5.2f} {_fmt(p['tokens_median']):>9}  |  {orr:>14} "
            f"{acc:>5} {_fmt(o.get('tokens_median')):>9}  {fe:>16}"
        )
    return "\n".join(lines)
