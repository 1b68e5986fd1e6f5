"""Evidence recall and exact-match answers of episodic recall on real Crafter trajectories, per question
family, against flat BM25 at the same token budgets (PAPERS.md §4 "Numbers").

Questions come from a phrasing file (:mod:`.phrasings`, :mod:`.questions`) instantiated over seeded Crafter
episodes (:mod:`.crafter_data`; evaluation seeds from :data:`~.crafter_data.EVAL_FIRST_SEED`). For every
question and budget B ∈ :data:`BUDGETS` tokens:

- ``libraryfs`` — :func:`~libraryfs.features.episodes.recall.order_items` packed into B;
- ``bm25``      — flat BM25 top-k over the raw step texts (text + observation, one step per chunk: vanilla
                  RAG), packed in score order into B.

Metrics: **evidence recall** (share of the gold steps present in the packed text) and **exact match** of
the deterministic reader (:func:`~libraryfs.features.episodes.reader.read` for unit evidence,
:func:`.rawfacts.read_raw` for raw text) reading only the packed text. Two checks per question, outside
any budget: ``parse`` — the question's parse resolved over the complete unit index (is the question
understood?), and ``full`` — the reader over the whole raw history.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from collections import defaultdict
from pathlib import Path

from rank_bm25 import BM25Okapi

from libraryfs.features.episodes.anchors import parse_question
from libraryfs.features.episodes.index import EpisodeIndex, tokenize
from libraryfs.features.episodes.reader import read
from libraryfs.features.episodes.recall import order_items
from libraryfs.features.episodes.resolve import resolve
from libraryfs.features.episodes.units import EpisodeState, Unit, unit_from_line
from libraryfs.index.tokens import count_tokens
from libraryfs_bench.episodes import crafter_data, phrasings, questions
from libraryfs_bench.episodes.rawfacts import parse_raw, read_raw

BUDGETS = (64, 128, 200, 400, 800, 1600)
REPORT_BUDGETS = (64, 200, 400)
METHODS = ("libraryfs", "bm25")
EPISODES = 6
MAX_STEPS = 2700  #: 6 × 2,701 = 16,206 steps
BM25_TOP = 400


def build_units(recs: list[dict]) -> list[Unit]:
    """Units of an episode's records, exactly as the builder makes them."""
    st = EpisodeState()
    out = []
    for r in recs:
        u = unit_from_line(r)
        st.mark(u)
        out.append(u)
    return out


def norm(answer: str | None) -> str:
    """Answer normalised for exact match: lower case, ``_`` and runs of spaces as one space."""
    return re.sub(r"[\s_]+", " ", (answer or "").strip().lower())


def _prefix_counts(lines: list[str], max_tokens: int) -> list[int]:
    out, text = [], ""
    for line in lines:
        text = f"{text}\n{line}" if text else line
        out.append(count_tokens(text))
        if out[-1] > max_tokens:
            break
    return out


def _steps_in(text: str) -> set[int]:
    return {int(x) for x in re.findall(r"(?m)^(?:t=|Step )(\d+)\b", text)}


class _Episode:
    """One episode's unit index, raw lines and BM25 index."""

    def __init__(self, recs: list[dict]) -> None:
        self.idx = EpisodeIndex(build_units(recs))
        self.raw = [r["text"] for r in recs]
        self.bm = BM25Okapi([tokenize(x) for x in self.raw])
        self.full = parse_raw("\n".join(self.raw))

    def lines(self, method: str, question: str) -> list[str]:
        if method == "libraryfs":
            return [i.text for i in order_items(self.idx, question)[2]]
        scores = self.bm.get_scores(tokenize(question))
        order = sorted(range(len(self.raw)), key=lambda i: (-scores[i], i))[:BM25_TOP]
        return [self.raw[i] for i in order]


def evaluate(q: questions.Question, ep: _Episode, budgets: tuple[int, ...]) -> list[dict]:
    """Rows (method, budget, recall, chain, correct, tokens) of one question."""
    gold = set(q.gold_steps)
    base = {"family": q.family, "kind": q.kind, "episode": q.episode}
    parsed = parse_question(q.text, ep.idx.vocab)
    oracle = resolve(ep.idx, parsed, ep.idx.last_t)[0] if parsed.typed() else None
    full = read_raw(q.text, ep.full)[0]
    rows = [
        {**base, "method": "parse", "budget": None, "tokens": 0, "recall": 1.0, "chain": 1.0,
         "correct": float(norm(oracle) == norm(q.answer)), "typed": float(parsed.typed())},
        {**base, "method": "full", "budget": None, "tokens": 0, "recall": 1.0, "chain": 1.0,
         "correct": float(norm(full) == norm(q.answer))},
    ]  # fmt: skip
    for method in METHODS:
        lines = ep.lines(method, q.text)
        counts = _prefix_counts(lines, max(budgets))
        for b in budgets:
            n = 0
            while n < len(counts) and counts[n] <= b:
                n += 1
            text = "\n".join(lines[:n])
            have = gold & _steps_in(text)
            if method == "libraryfs":
                ans = read(q.text, text)[0]
            else:
                ans = read_raw(q.text, parse_raw(text))[0]
            rows.append(
                {**base, "method": method, "budget": b, "tokens": counts[n - 1] if n else 0,
                 "recall": len(have) / len(gold) if gold else 1.0, "chain": float(have == gold),
                 "correct": float(norm(ans) == norm(q.answer))}
            )  # fmt: skip
    return rows


def run(
    phrasing_file: str | os.PathLike[str],
    episodes: int = EPISODES,
    max_steps: int = MAX_STEPS,
    first_seed: int = crafter_data.EVAL_FIRST_SEED,
    per_template: int = 1,
    budgets: tuple[int, ...] = BUDGETS,
    progress=None,
) -> dict:
    """Run the benchmark for one phrasing file; returns the JSON-ready result (see :func:`tables`)."""
    t0 = time.monotonic()
    templates = phrasings.load(phrasing_file)
    name = Path(phrasing_file).stem
    rows: list[dict] = []
    qs_out: list[dict] = []
    notes: list[str] = []
    steps = 0
    for seed in range(first_seed, first_seed + episodes):
        recs = crafter_data.load_rollout(seed, max_steps)
        steps += len(recs)
        ep = _Episode(recs)
        qs, why = questions.generate(recs, templates, f"seed{seed}", per_template, key=name)
        notes += why
        for q in qs:
            rs = evaluate(q, ep, budgets)
            rows += rs
            qs_out.append({**q.to_json(), "parse_ok": rs[0]["correct"], "typed": rs[0]["typed"]})
        if progress:
            progress(f"{name} seed {seed}: {len(recs)} steps, {len(qs)} questions")
    if not qs_out:
        raise ValueError(f"{phrasing_file}: no question could be instantiated ({'; '.join(notes[:3])})")
    return {
        "phrasings": str(phrasing_file),
        "name": name,
        "templates": len(templates),
        "episodes": episodes,
        "seeds": [first_seed, first_seed + episodes - 1],
        "steps": steps,
        "questions": len(qs_out),
        "budgets": list(budgets),
        "rows": rows,
        "question_list": qs_out,
        "notes": notes,
        "seconds": round(time.monotonic() - t0, 1),
    }


def run_llm_reader(
    phrasing_file: str | os.PathLike[str],
    reader,
    n_questions: int = 36,
    budget: int = 200,
    seed: int = crafter_data.EVAL_FIRST_SEED,
    max_steps: int = MAX_STEPS,
    progress=None,
) -> dict:
    """Exact match of an LLM reader (:class:`~libraryfs.features.episodes.answer.LLMReader`) against the
    deterministic reader on the same packed evidence (``budget`` tokens of libraryfs recall), for
    ``n_questions`` questions of one episode spread evenly over the file's templates (so over every kind). Returns ``{"rows": [...], "by_family":
    {family: {"n", "llm", "rules"}}, "errors", "seconds"}``."""
    t0 = time.monotonic()
    recs = crafter_data.load_rollout(seed, max_steps)
    ep = _Episode(recs)
    qs, _ = questions.generate(
        recs, phrasings.load(phrasing_file), f"seed{seed}", 1, key=Path(phrasing_file).stem
    )
    qs = [qs[i * len(qs) // n_questions] for i in range(min(n_questions, len(qs)))] if n_questions else []
    rows = []
    for q in qs:
        lines = ep.lines("libraryfs", q.text)
        text = "\n".join(lines[: _fit(lines, budget)])
        llm = reader(q.text, text)
        rules = read(q.text, text)[0]
        rows.append({"kind": q.kind, "family": q.family, "question": q.text, "answer": q.answer, "llm": llm,
                     "llm_ok": norm(llm) == norm(q.answer), "rules_ok": norm(rules) == norm(q.answer)})  # fmt: skip
        if progress:
            progress(f"{q.kind} {q.text!r}: gold {q.answer!r}, llm {llm!r}")
    fam: dict[str, dict[str, float]] = {}
    for r in rows:
        f = fam.setdefault(r["family"], {"n": 0, "llm": 0.0, "rules": 0.0})
        f["n"] += 1
        f["llm"] += r["llm_ok"]
        f["rules"] += r["rules_ok"]
    by_family = {
        k: {"n": v["n"], "llm": v["llm"] / v["n"], "rules": v["rules"] / v["n"]} for k, v in fam.items()
    }
    return {
        "rows": rows,
        "by_family": by_family,
        "errors": reader.errors,
        "seconds": round(time.monotonic() - t0),
    }


def _fit(lines: list[str], budget: int) -> int:
    counts = _prefix_counts(lines, budget)
    n = 0
    while n < len(counts) and counts[n] <= budget:
        n += 1
    return n


def aggregate(result: dict) -> dict:
    """``{(method, budget, family|"all"): {"recall", "chain", "acc", "tokens", "n"}}`` (budget None: checks)."""
    acc: dict[tuple, list[dict]] = defaultdict(list)
    for r in result["rows"]:
        acc[(r["method"], r["budget"], r["family"])].append(r)
        acc[(r["method"], r["budget"], "all")].append(r)
    return {
        key: {
            "recall": statistics.mean(r["recall"] for r in rs),
            "chain": statistics.mean(r["chain"] for r in rs),
            "acc": statistics.mean(r["correct"] for r in rs),
            "tokens": statistics.mean(r["tokens"] for r in rs),
            "n": len(rs),
        }
        for key, rs in acc.items()
    }


def tables(result: dict) -> str:
    """Markdown: per family, evidence recall and exact match at 64/200/400 tokens for libraryfs and BM25,
    and the two checks; then the frontier over all budgets."""
    ag = aggregate(result)
    rb = [b for b in REPORT_BUDGETS if b in result["budgets"]]
    head = ["family (n)"]
    for metric in ("recall", "EM"):
        head += [f"{m} {metric}@{b}" for m in METHODS for b in rb]
    head += ["parse EM", "full-history EM"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for fam in (*phrasings.FAMILIES, "all"):
        if ("libraryfs", rb[0], fam) not in ag:
            continue
        n = ag[("parse", None, fam)]["n"]
        cells = [f"{fam} ({n})"]
        for metric in ("recall", "acc"):
            cells += [f"{ag[(m, b, fam)][metric]:.2f}" for m in METHODS for b in rb]
        cells += [f"{ag[('parse', None, fam)]['acc']:.2f}", f"{ag[('full', None, fam)]['acc']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    b = result["budgets"]
    lines += [
        "",
        "| method | metric | " + " | ".join(f"B={x}" for x in b) + " |",
        "|---|---|" + "---|" * len(b),
    ]
    for m in METHODS:
        for metric, label in (
            ("recall", "evidence recall"),
            ("acc", "exact match"),
            ("tokens", "tokens used"),
        ):
            fmt = "{:.0f}" if metric == "tokens" else "{:.2f}"
            lines.append(
                f"| {m} | {label} | " + " | ".join(fmt.format(ag[(m, x, "all")][metric]) for x in b) + " |"
            )
    lines.append(
        f"\n{result['name']}: {result['questions']} questions from {result['templates']} templates, "
        f"{result['episodes']} episodes (seeds {result['seeds'][0]}–{result['seeds'][1]}), {result['steps']} steps"
    )
    return "\n".join(lines)


def plot(results: list[dict], path: str | os.PathLike[str]) -> None:
    """Evidence recall and exact match vs evidence tokens (log x), libraryfs against BM25, one line style
    per phrasing file; saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    styles = ("-", "--", ":", "-.")
    for ri, result in enumerate(results):
        ag = aggregate(result)
        for ax, metric, title in ((axes[0], "recall", "evidence recall"), (axes[1], "acc", "exact match")):
            for m, color in zip(METHODS, ("tab:blue", "tab:orange"), strict=True):
                xs = [ag[(m, b, "all")]["tokens"] for b in result["budgets"]]
                ys = [ag[(m, b, "all")][metric] for b in result["budgets"]]
                ax.plot(xs, ys, styles[ri % 4], marker="o", color=color, label=f"{m} ({result['name']})")
            ax.set_title(f"Crafter episodes: {title}")
    for ax in axes:
        ax.axvline(200, color="grey", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("evidence tokens per question (o200k)")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share")
    axes[1].legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save(results: list[dict], path: str | os.PathLike[str]) -> None:
    """Write the results (with their aggregates) as JSON."""
    out = []
    for result in results:
        ag = aggregate(result)
        out.append(
            {
                **result,
                "aggregate": [
                    {"method": k[0], "budget": k[1], "family": k[2], **v}
                    for k, v in sorted(ag.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0, kv[0][2]))
                ],
            }
        )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1))
