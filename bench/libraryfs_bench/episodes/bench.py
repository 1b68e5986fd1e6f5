"""Accuracy/tokens frontier of episodic recall on real Crafter trajectories (PAPERS.md §4 "Numbers").

For every question (see :mod:`.questions`) and budget B ∈ :data:`BUDGETS` tokens, four evidence sources:

- ``libraryfs``    — :func:`~libraryfs.features.episodes.recall.recall` (anchors → chain → state → re-ranked);
- ``no-anchors``   — the same units and packing, ranked by text only (the ablation "without anchor retrieval");
- ``bm25``         — flat BM25 top-k over the raw step texts (one step per chunk: vanilla RAG), packed in
                     score order into B;
- ``full``         — the whole raw history (one point at its own token count).

Metrics per (method, budget, family): evidence recall (share of gold steps present), chain completeness
(all gold steps present), answer accuracy of the rule-based reader (:mod:`.reader`) on the packed text, and
the mean evidence tokens used. The reader on the full history must score 1.0 (a check of the generator
and the reader themselves).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path

from rank_bm25 import BM25Okapi

from libraryfs.features.episodes.reader import answer, parse_evidence
from libraryfs.features.episodes.recall import EpisodeIndex, order_items, tokenize
from libraryfs.features.episodes.units import EpisodeState, Unit, unit_from_line
from libraryfs.index.tokens import count_tokens
from libraryfs_bench.episodes import crafter_data, questions

BUDGETS = (64, 128, 200, 256, 512, 1024, 1600, 2048)
METHODS = ("libraryfs", "no-anchors", "bm25")


def build_units(recs: list[dict]) -> list[Unit]:
    """Units of an episode's records, exactly as the builder makes them (structured fields as given)."""
    st = EpisodeState()
    out = []
    for r in recs:
        u = unit_from_line(r)
        st.mark(u)
        out.append(u)
    return out


def _packed(lines: list[str], counts: list[int], budget: int) -> tuple[str, int]:
    n = 0
    while n < len(counts) and counts[n] <= budget:
        n += 1
    return "\n".join(lines[:n]), (counts[n - 1] if n else 0)


def _prefix_counts(lines: list[str], max_tokens: int) -> list[int]:
    out, text = [], ""
    for line in lines:
        text = f"{text}\n{line}" if text else line
        out.append(count_tokens(text))
        if out[-1] > max_tokens:
            break
    return out


def run(
    min_total_steps: int = 10_000,
    max_steps: int = 1200,
    per_family: int = 12,
    budgets: tuple[int, ...] = BUDGETS,
    progress=None,
) -> dict:
    """Run the benchmark; returns the JSON-ready result (see :func:`table`)."""
    t0 = time.monotonic()
    rows: list[dict] = []
    total_steps, episodes = 0, 0
    full_tokens: list[int] = []
    top = max(budgets)
    for seed, recs in crafter_data.dataset(min_total_steps, max_steps):
        episodes += 1
        total_steps += len(recs)
        idx = EpisodeIndex(build_units(recs))
        raw = [r["text"] for r in recs]
        bm = BM25Okapi([tokenize(x) for x in raw])
        full_text = "\n".join(raw)
        full_facts = parse_evidence(full_text)
        n_full = count_tokens(full_text)
        for q in questions.generate(recs, per_family, seed=seed, episode=f"seed{seed}"):
            gold = set(q.gold_steps)
            full_tokens.append(n_full)
            ok_full = answer(q.spec, full_facts) == q.answer
            rows.append(
                {
                    "method": "full",
                    "budget": None,
                    "family": q.family,
                    "tokens": n_full,
                    "recall": 1.0,
                    "chain": 1.0,
                    "correct": float(ok_full),
                }
            )
            orders = {}
            for m in ("libraryfs", "no-anchors"):
                _, _, items = order_items(idx, q.text, use_anchors=(m == "libraryfs"))
                orders[m] = [i.text for i in items]
            scores = bm.get_scores(tokenize(q.text))
            order = sorted(range(len(raw)), key=lambda i: (-scores[i], i))[:400]
            orders["bm25"] = [raw[i] for i in order]
            for m, lines in orders.items():
                counts = _prefix_counts(lines, top)
                for b in budgets:
                    text, used = _packed(lines, counts, b)
                    facts = parse_evidence(text)
                    have = gold & set(facts)
                    rec = len(have) / len(gold) if gold else 1.0
                    rows.append(
                        {
                            "method": m,
                            "budget": b,
                            "family": q.family,
                            "tokens": used,
                            "recall": rec,
                            "chain": float(have == gold),
                            "correct": float(answer(q.spec, facts) == q.answer),
                        }
                    )
        if progress:
            progress(f"seed {seed}: {len(recs)} steps, {len(rows)} rows")
    return {
        "episodes": episodes,
        "steps": total_steps,
        "questions": sum(1 for r in rows if r["method"] == "full"),
        "budgets": list(budgets),
        "rows": rows,
        "seconds": round(time.monotonic() - t0, 1),
        "full_history_tokens_mean": statistics.mean(full_tokens) if full_tokens else 0,
    }


def aggregate(result: dict) -> dict:
    """``{(method, budget, family|"all"): {"recall", "chain", "acc", "tokens", "n"}}`` (budget None = full)."""
    acc: dict[tuple, list[dict]] = defaultdict(list)
    for r in result["rows"]:
        acc[(r["method"], r["budget"], r["family"])].append(r)
        acc[(r["method"], r["budget"], "all")].append(r)
    out = {}
    for key, rs in acc.items():
        out[key] = {
            "recall": statistics.mean(r["recall"] for r in rs),
            "chain": statistics.mean(r["chain"] for r in rs),
            "acc": statistics.mean(r["correct"] for r in rs),
            "tokens": statistics.mean(r["tokens"] for r in rs),
            "n": len(rs),
        }
    return out


def table(result: dict) -> str:
    """Markdown tables: the frontier (all families) and per family at 200 tokens."""
    ag = aggregate(result)
    b = result["budgets"]
    lines = ["| method | metric | " + " | ".join(f"B={x}" for x in b) + " |", "|---|---|" + "---|" * len(b)]
    for m in METHODS:
        for metric, label in (
            ("recall", "evidence recall"),
            ("chain", "chain complete"),
            ("acc", "reader accuracy"),
            ("tokens", "tokens used"),
        ):
            cells = [
                f"{ag[(m, x, 'all')][metric]:.2f}"
                if metric != "tokens"
                else f"{ag[(m, x, 'all')][metric]:.0f}"
                for x in b
            ]
            lines.append(f"| {m} | {label} | " + " | ".join(cells) + " |")
    full = ag[("full", None, "all")]
    lines.append(
        f"\nfull history: reader accuracy {full['acc']:.2f} at {full['tokens']:.0f} tokens per question "
        f"({result['questions']} questions, {result['episodes']} episodes, {result['steps']} steps)\n"
    )
    fams = questions.FAMILIES
    lines.append(
        "| family (n) | libraryfs recall@200 | libraryfs acc@200 | bm25 recall@200 | bm25 acc@200 | "
        "bm25 recall@1600 | bm25 acc@1600 | bm25 recall@2048 | smallest B with libraryfs recall ≥ 0.9 |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for f in fams:
        if ("libraryfs", 200, f) not in ag:
            continue
        first = next((x for x in b if ag[("libraryfs", x, f)]["recall"] >= 0.9), None)
        g = lambda m, x, k: ag.get((m, x, f), {}).get(k, float("nan"))  # noqa: E731, B023 (used within this iteration)
        lines.append(
            f"| {f} ({ag[('libraryfs', 200, f)]['n']}) | {g('libraryfs', 200, 'recall'):.2f} | "
            f"{g('libraryfs', 200, 'acc'):.2f} | {g('bm25', 200, 'recall'):.2f} | {g('bm25', 200, 'acc'):.2f} | "
            f"{g('bm25', 1600, 'recall'):.2f} | {g('bm25', 1600, 'acc'):.2f} | {g('bm25', 2048, 'recall'):.2f} | "
            f"{first if first is not None else '> ' + str(b[-1])} |"
        )
    return "\n".join(lines)


def plot(result: dict, path: str | os.PathLike[str]) -> None:
    """Accuracy and evidence recall vs evidence tokens (log x) for each method, saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ag = aggregate(result)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric, title in ((axes[0], "recall", "evidence recall"), (axes[1], "acc", "reader accuracy")):
        for m in METHODS:
            xs = [ag[(m, b, "all")]["tokens"] for b in result["budgets"]]
            ys = [ag[(m, b, "all")][metric] for b in result["budgets"]]
            ax.plot(xs, ys, marker="o", label=m)
        full = ag[("full", None, "all")]
        ax.scatter([full["tokens"]], [full[metric]], marker="*", s=120, color="k", label="full history")
        ax.axvline(200, color="grey", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("evidence tokens per question (o200k)")
        ax.set_ylabel(title)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.set_title(f"Crafter episodes: {title}")
    axes[1].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save(result: dict, path: str | os.PathLike[str]) -> None:
    """Write the result (with the aggregate) as JSON."""
    ag = aggregate(result)
    out = dict(result)
    out["aggregate"] = [
        {"method": k[0], "budget": k[1], "family": k[2], **v}
        for k, v in sorted(ag.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0, kv[0][2]))
    ]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1))
