"""``libraryfs bench theorem`` end to end: plan → stores under the root → agents → JSONL, tables, plots.

Outputs in ``out_dir``: ``trials.jsonl`` (one record per trial, the paper's field names first),
``comparison.json`` (every published cell, paper vs ours), ``summary.json`` (our cells, separation
ratios, AUTO/PATH checks, run facts), ``compounding.json``, and ``reads_vs_n.png``, ``tokens_vs_n.png``,
``compounding.png``.
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from libraryfs_bench.theorem import compare, plots
from libraryfs_bench.theorem.accounting import write_jsonl
from libraryfs_bench.theorem.compounding import run_compounding
from libraryfs_bench.theorem.content import hash_key_low
from libraryfs_bench.theorem.runner import Plan, build_stores, make_plan, run_jobs_llm, run_plan
from libraryfs_bench.theorem.stores import CONDITIONS, StoreSpec, write_item_store


@dataclass
class BenchOptions:
    """What to run. ``ns`` None: the paper's sizes (50 … 5,000); ``extra_trials``: trials for cells the
    logs lack (PATH/AUTO use ``item_trials``); ``steps`` 0 skips compounding."""

    ns: list[int] | None = None
    conditions: tuple[str, ...] = CONDITIONS
    contents: tuple[str, ...] = ("hash", "numeric", "encyclopedia")
    extra_trials: int = 10
    item_trials: int = 3
    paper_trials: bool = True
    large: bool = False
    large_lookups: int = 20
    steps: int = 1000
    compounding_n: int = 1_000
    index_timeout_s: float = 120.0
    plots: bool = True


def our_cells(records: list[dict]) -> list[dict]:
    """Summary per (content, condition, N) of our records (all trials run)."""
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        cells[(r["content"], r["condition"], r["n"])].append(r)
    out = []
    for (content, cond, n), rows in sorted(cells.items()):
        s = compare.summarize(rows)
        s.update(
            content=content,
            condition=cond,
            n=n,
            max_toc_tokens=max(r["max_toc_tokens"] for r in rows),
            max_fanout=max(r["max_fanout"] for r in rows),
            closed_form=any(r["agent"] == "closed-form" for r in rows),
        )
        out.append(s)
    return out


def separation(cells: list[dict]) -> list[dict]:
    """FLAT / INDEXED and FLAT / AUTO median-token ratios per N (hash content)."""
    by = {(c["condition"], c["n"]): c for c in cells if c["content"] == "hash"}
    out = []
    for n in sorted({c["n"] for c in cells}):
        flat = by.get(("FLAT", n))
        if not flat:
            continue
        row = {"n": n, "flat_tokens": flat["tokens_median"], "flat_closed_form": flat["closed_form"]}
        for other in ("INDEXED", "AUTO", "PATH"):
            if (other, n) in by and by[(other, n)]["tokens_median"]:
                row[f"flat_over_{other.lower()}"] = flat["tokens_median"] / by[(other, n)]["tokens_median"]
        out.append(row)
    return out


def auto_checks(cells: list[dict], records: list[dict]) -> list[dict]:
    """AUTO per N: TOC reads vs ⌈log_b N⌉ with b the largest fan-out seen, max TOC page tokens."""
    out = []
    for c in cells:
        if c["condition"] != "AUTO" or c["content"] != "hash":
            continue
        rows = [
            r for r in records if r["condition"] == "AUTO" and r["n"] == c["n"] and r["content"] == "hash"
        ]
        b = max(2, c["max_fanout"])
        bound = math.ceil(math.log(c["n"], b) - 1e-9)
        worst = max(r["index_reads"] + r["page_reads"] for r in rows)
        out.append(
            {
                "n": c["n"],
                "fanout_b": b,
                "ceil_log_b_n": bound,
                "max_reads": worst,
                "max_toc_reads": max(r["index_reads"] for r in rows),
                "max_entry_reads": max(r["page_reads"] for r in rows),  # 0: answered from a quoted line
                "within_bound": worst <= bound + 1,
                "max_toc_tokens": c["max_toc_tokens"],
                "tokens_median": c["tokens_median"],
                "accuracy": c["accuracy"],
            }
        )
    return out


def format_cells(cells: list[dict]) -> str:
    """Our results per (content, condition, N)."""
    head = f"{'content':12} {'condition':18} {'N':>9} {'trials':>6} {'reads med':>9} {'mean':>7} {'TOC reads':>9} {'acc':>5} {'tokens med':>12}  note"
    lines = [head, "-" * len(head)]
    for c in cells:
        note = "closed form, not run" if c["closed_form"] else ""
        lines.append(
            f"{c['content']:12} {c['condition']:18} {c['n']:>9,} {c['trials']:>6} {c['reads_median']:>9,.1f} "
            f"{c['reads_mean']:>7.1f} {c['index_reads_median']:>9} {c['accuracy']:>5.2f} {c['tokens_median']:>12,.0f}  {note}"
        )
    return "\n".join(lines)


def run_benchmark(
    root: Path,
    via: str,
    out_dir: Path,
    opts: BenchOptions,
    toc_writer: Callable[[Path], object] | None = None,
    llm: tuple[object, str] | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """Run everything and write the outputs (module doc). ``llm`` (client, model) runs the LLM agent
    instead of the scripted ones. Returns the summary dict. Raises FileNotFoundError without the
    paper's logs, RuntimeError when a mounted library's indexer does not catch up."""
    t0 = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    paper_rows = compare.load_paper_rows()
    checked = [r for r in paper_rows if opts.ns is None or r.n in opts.ns]
    ver = compare.verify_stores(checked)
    log(
        f"store reproduction: {ver.target_matches}/{ver.rows} published trials (at the sizes run) regenerate their target "
        f"from the seeds; FLAT correct trials whose page_reads == target page: "
        f"{ver.flat_reads_equal_target_page}/{ver.flat_correct}"
    )
    plan: Plan = make_plan(
        opts.ns,
        opts.conditions,
        opts.extra_trials,
        opts.item_trials,
        paper_rows,
        opts.contents,
        opts.large,
        opts.large_lookups,
        opts.paper_trials,
    )
    log(f"plan: {len(plan.jobs)} trials under {root} (via {via})")
    if llm is None:
        records, stats = run_plan(root, plan, via, toc_writer, opts.index_timeout_s, log)
        run_facts = stats.__dict__
    else:
        from libraryfs_bench.theorem.runner import RunStats

        stats = RunStats()
        paper, items = build_stores(root, plan, stats, log)
        for spec in {j.spec() for j in plan.jobs if j.condition == "AUTO"}:
            if toc_writer is not None:
                toc_writer(items[spec].dir)
        records = run_jobs_llm(plan, paper, items, llm[0], llm[1], via, log=log)
        run_facts = stats.__dict__
    dicts = [r.as_dict() for r in records]
    write_jsonl(out_dir / "trials.jsonl", dicts)
    cmp_cells = compare.side_by_side(paper_rows, dicts)
    (out_dir / "comparison.json").write_text(json.dumps(cmp_cells, indent=1))
    log("\n== The paper's published cells beside ours (same trials, same seeds) ==")
    log(compare.format_side_by_side(cmp_cells))
    cells = our_cells(dicts)
    log("\n== libraryfs scripted agents, all cells ==")
    log(format_cells(cells))
    sep = separation(cells)
    log("\n== Token separation (median tokens, hash) ==")
    for s in sep:
        ratios = "  ".join(f"{k[10:]}: {v:,.0f}×" for k, v in s.items() if k.startswith("flat_over_"))
        log(
            f"  N={s['n']:>9,}  FLAT {s['flat_tokens']:>15,.0f} tok{' (closed form)' if s['flat_closed_form'] else ''}  {ratios}"
        )
    checks = auto_checks(cells, dicts)
    if checks:
        log("\n== AUTO through the library's INDEX.md pages ==")
        for c in checks:
            log(
                f"  N={c['n']:>9,}  b={c['fanout_b']:>4}  ⌈log_b N⌉={c['ceil_log_b_n']}  max reads={c['max_reads']} "
                f"(TOC {c['max_toc_reads']}, entry {c['max_entry_reads']})  within ⌈log_b N⌉+1: {c['within_bound']}  "
                f"largest TOC page {c['max_toc_tokens']} tok  median tokens {c['tokens_median']:,.0f}  acc {c['accuracy']:.2f}"
            )
    comp = None
    if opts.steps > 0:
        spec = StoreSpec("hash", opts.compounding_n, 0, hash_key_low(opts.compounding_n))
        store = write_item_store(root, spec, skip_existing=True)
        result = run_compounding(root, store, opts.steps, toc_writer=toc_writer)
        comp = result.as_dict()
        (out_dir / "compounding.json").write_text(json.dumps(comp, indent=1))
        log(f"\n== T-step compounding (T={opts.steps}, notes through {via}) ==")
        for t, f, lib in zip(
            result.checkpoints, result.flat_cumulative, result.library_cumulative, strict=False
        ):
            log(f"  T={t:>6}  flat {f:>14,}  library {lib:>12,}  ratio {f / lib:>7.1f}×")
        log(
            f"  fitted exponents (T ≥ {max(10, opts.steps // 10)}): flat {result.flat_exponent:.2f}, "
            f"library {result.library_exponent:.2f}; max TOC reads/step {max(result.library_toc_reads)}; "
            f"notes opened by path before indexed: {result.direct_opens}"
        )
    pngs = []
    if opts.plots:
        pngs = [str(p) for p in plots.plot_vs_n(dicts, paper_rows, out_dir)]
        if comp:
            pngs.append(str(plots.plot_compounding(comp, out_dir)))
    summary = {
        "via": via,
        "root": str(root),
        "cells": cells,
        "separation": sep,
        "auto": checks,
        "verification": {k: v for k, v in ver.__dict__.items() if k != "mismatches"},
        "run": run_facts,
        "wall_s": time.monotonic() - t0,
        "plots": pngs,
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    log(
        f"\nwrote {out_dir}/trials.jsonl, comparison.json, summary.json{', plots' if pngs else ''} "
        f"in {summary['wall_s']:.0f} s"
    )
    return summary


def parse_ns(text: str | None) -> list[int] | None:
    """``"50,100,1e6"`` → [50, 100, 1000000]; None/empty → None."""
    if not text:
        return None
    return sorted({int(float(x)) for x in text.replace(" ", "").split(",") if x})


def parse_conditions(text: str | None) -> tuple[str, ...]:
    """Comma-separated condition names (case-insensitive). Raises ValueError for unknown ones."""
    if not text:
        return CONDITIONS
    wanted = tuple(c.strip().upper() for c in text.split(",") if c.strip())
    bad = [c for c in wanted if c not in CONDITIONS]
    if bad:
        raise ValueError(f"unknown condition(s) {', '.join(bad)}; known: {', '.join(CONDITIONS)}")
    return wanted
