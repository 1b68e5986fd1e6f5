"""Replay of tiered self-consistency on champ-dataset with real recorded model answers (KACE §2, offline).

champ-dataset (``pip install champ-dataset``; data ships in the wheel) holds 270 competition problems in
5 domains, 89 concepts and 456 hints, and the conversations of 4 models (GPT-3.5, GPT-4, GPT-4 Turbo,
PaLM 2 Medium) under 18 prompt settings. Each recorded final answer is one attempt:

* attempts **without cards** (the easy tier, and Best-of-N): prompts ``0-Shot``, ``5-Shot``, ``No C w/o H``
  — 12 answers per problem;
* attempts **with cards** (medium and hard tiers): prompts that give the problem's concepts — the general
  knowledge a (tier, domain) block holds — without problem-specific hints: ``Direct C w/o H``,
  ``Root C w/o H``, ``Name C w/o H``, ``Example C w/o H`` — 16 answers per problem;
* **held out** for the reference difficulty (solve rate): the remaining 11 prompts — 44 answers.

Per seed and problem the two attempt pools are shuffled and drawn without replacement: easy takes 2
no-card answers, medium 3 card answers, hard the next 5. Answers are grouped into equivalence classes with
``math-verify`` once (class 0 = the gold answer), in worker processes, and cached as JSON.
Limitation: attempts mix four models (the recorded data has ≤ 4 answers per model and setting).
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from tqdm import tqdm

from libraryfs.features.cards import answers
from libraryfs.features.cards.cards import Card, card_path, slug, write_card
from libraryfs.features.cards.controller import DEFAULT_SCHEDULE, Schedule, control, majority_vote, tier_index
from libraryfs.fs.tree import Tree
from libraryfs_bench.cards.simulate import concordance

NO_CARD_PROMPTS = ("0-Shot", "5-Shot", "No C w/o H")
CARD_PROMPTS = ("Direct C w/o H", "Root C w/o H", "Name C w/o H", "Example C w/o H")
CACHE_VERSION = 2  # 2: records carry the problem's concept ids


@functools.lru_cache(maxsize=1)
def load_dataset():
    """The champ-dataset v0 ``Dataset``, loaded once per process (raises ``ImportError`` if not installed)."""
    import champ_dataset  # imported here: optional dependency ("bench" extra)

    return champ_dataset.load("v0")


def _final_answer(conv) -> str | None:
    texts = [m.text for m in conv.messages if m.role.startswith("Model.") and m.text]
    for t in reversed(texts):  # the one-sentence summary first, then the full solution
        a = answers.extract_answer(t)
        if a is not None:
            return a
    return None


def _classes(golds: list[str], items: list[str | None]) -> list[int]:
    """Class id per answer: 0 = equivalent to one of the gold forms, 1.. = other classes, -1 = none."""
    reps: list[str] = list(golds)
    by_norm: dict[str, int] = {answers.normalize(g): 0 for g in golds}
    out = []
    for a in items:
        if a is None:
            out.append(-1)
            continue
        n = answers.normalize(a)
        if n not in by_norm:
            hit = next((i for i, r in enumerate(reps) if answers.equivalent(r, a)), None)
            if hit is None:
                reps.append(a)
                hit = len(reps) - 1
            by_norm[n] = max(0, hit - len(golds) + 1)
        out.append(by_norm[n])
    return out


def _problem_record(args: tuple[str, str, str, dict[str, Any], list[str]]) -> dict[str, Any]:
    pid, category, raw_gold, finals, concepts = args
    gold = answers.extract_answer(raw_gold) or raw_gold
    golds = [gold] + [raw_gold] * (answers.normalize(raw_gold) != answers.normalize(gold))
    keys = sorted(finals)
    used = [k for k in keys if k.split("|", 1)[1] in NO_CARD_PROMPTS + CARD_PROMPTS]
    ids = dict(zip(used, _classes(golds, [finals[k] for k in used]), strict=False))

    def pick(prompts: tuple[str, ...]) -> list[int]:
        return [ids[k] for k in used if k.split("|", 1)[1] in prompts]

    # held-out answers only need right/wrong (0 / 1; -1 = none): no clustering among themselves
    held = [
        -1 if finals[k] is None else 0 if any(answers.equivalent(g, finals[k]) for g in golds) else 1
        for k in keys
        if k not in ids
    ]
    return {
        "id": pid,
        "domain": slug(category),
        "gold": gold,
        "no_card": pick(NO_CARD_PROMPTS),
        "card": pick(CARD_PROMPTS),
        "held_out": held,
        "solve_rate": sum(c == 0 for c in held) / len(held) if held else 0.0,
        "concepts": concepts,
    }


def load_records(
    limit: int | None = None, workers: int = 2, cache_path: str | None = None, progress: bool = False
) -> list[dict]:
    """Per-problem answer classes (see module docstring), from ``cache_path`` if it holds them.

    ``limit`` takes the first N problems in a domain-interleaved order (so a small replay spans domains).
    """
    if cache_path and os.path.exists(cache_path):
        with open(cache_path, encoding="utf-8") as f:
            cached = json.load(f)
        have = cached.get("limit")  # None: the whole dataset
        if cached.get("version") == CACHE_VERSION and (have is None or (limit is not None and have >= limit)):
            recs = cached["records"]
            return recs if limit is None else _interleave(recs)[:limit]
    ds = load_dataset()
    probs = _interleave(list(ds.problems.values()), key=lambda p: p.category)
    if limit is not None:
        probs = probs[:limit]
    jobs = [
        (
            p.identifier,
            p.category,
            p.answer,
            {k: _final_answer(c) for k, c in p.conversations.items()},
            sorted({x for x in p.ch_list if x.startswith("C_")}),
        )
        for p in probs
    ]
    bar = dict(total=len(jobs), desc="math-verify answer classes", unit="problem", disable=not progress)
    if workers > 1:
        with ProcessPoolExecutor(workers) as ex:
            recs = list(tqdm(ex.map(_problem_record, jobs, chunksize=2), **bar))
    else:
        recs = [_problem_record(j) for j in tqdm(jobs, **bar)]
    if cache_path:
        os.makedirs(os.path.dirname(cache_path) or ".", exist_ok=True)
        with open(cache_path, "w", encoding="utf-8") as f:
            json.dump({"version": CACHE_VERSION, "limit": limit, "records": recs}, f)
    return recs


def _interleave(items: list, key=lambda r: r["domain"]) -> list:
    """Round-robin over domains, each in its original order (deterministic)."""
    groups: dict[str, list] = {}
    for it in items:
        groups.setdefault(key(it), []).append(it)
    out, lists = [], [groups[k] for k in sorted(groups)]
    for i in range(max((len(g) for g in lists), default=0)):
        out += [g[i] for g in lists if i < len(g)]
    return out


def draws(rec: dict, seed: int) -> tuple[list[int], list[int]]:
    """Shuffle ``seed`` of a problem's no-card and card answer classes (deterministic per problem and seed)."""
    rng = random.Random(f"{rec['id']}/{seed}")
    nc, wc = rec["no_card"][:], rec["card"][:]
    rng.shuffle(nc)
    rng.shuffle(wc)
    return nc, wc


def same_class(a: int | None, b: int | None) -> bool:
    """Equivalence of answer class ids (``-1`` = no answer, never equal)."""
    return a is not None and a >= 0 and a == b


def replay(records: list[dict], seeds: int = 50, schedule: Schedule = DEFAULT_SCHEDULE) -> dict:
    """Drive the agreement gates with the recorded answers; JSON-able result (accuracies in [0, 1],
    calls per problem, exit-tier histogram, pairwise concordance of exit tier with held-out solve rate)."""
    acc: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    hist: Counter[str] = Counter()
    levels = []
    runs = len(records) * seeds
    eq = same_class
    for rec in records:
        lv = 0
        for s in range(seeds):
            nc, wc = draws(rec, s)
            d = control({"easy": nc[:2], "medium": wc[:3], "hard": wc[3:8]}, schedule, eq)
            acc["tiered"] += d.answer == 0
            calls["tiered"] += d.calls
            hist[d.exit_tier] += 1
            lv += tier_index(d.exit_tier)
            d0 = control({"easy": nc[:2], "medium": nc[2:5], "hard": nc[5:10]}, schedule, eq)
            acc["tiered, no cards"] += d0.answer == 0
            calls["tiered, no cards"] += d0.calls
            for n in range(1, len(nc) + 1):
                acc[f"best-of-{n}"] += majority_vote(nc[:n], eq) == 0
                calls[f"best-of-{n}"] += n
            acc["best-of-5, cards"] += majority_vote(wc[:5], eq) == 0
            calls["best-of-5, cards"] += 5
        levels.append(lv / seeds)
    mean_calls = calls["tiered"] / runs
    lo, hi = math.floor(mean_calls), math.ceil(mean_calls)
    eq_calls = acc[f"best-of-{lo}"] + (mean_calls - lo) * (acc[f"best-of-{hi}"] - acc[f"best-of-{lo}"])
    shown = {
        "tiered",
        "tiered, no cards",
        "best-of-5, cards",
        f"best-of-{lo}",
        f"best-of-{hi}",
        "best-of-5",
        "best-of-10",
    }
    methods = {m: {"accuracy": acc[m] / runs, "mean_calls": calls[m] / runs} for m in acc if m in shown}
    methods["best-of-N (equal calls)"] = {"accuracy": eq_calls / runs, "mean_calls": mean_calls}
    conc, pairs = concordance(levels, [r["solve_rate"] for r in records])
    return {
        "problems": len(records),
        "seeds": seeds,
        "methods": methods,
        "exit_histogram": {t: hist[t] / runs for t in ("easy", "medium", "hard", "fallback")},
        "concordance": conc,
        "concordance_pairs": pairs,
        "single_attempt_accuracy": {
            "no cards": sum(c == 0 for r in records for c in r["no_card"])
            / max(1, sum(len(r["no_card"]) for r in records)),
            "cards": sum(c == 0 for r in records for c in r["card"])
            / max(1, sum(len(r["card"]) for r in records)),
        },
    }


def format_table(result: dict) -> str:
    """The replay result as a fixed-width text table."""
    lines = [f"{'method':<26}{'accuracy':>10}{'mean calls':>12}"]
    for name in sorted(result["methods"], key=lambda m: (m.startswith("best"), m)):
        m = result["methods"][name]
        lines.append(f"{name:<26}{m['accuracy']:>10.3f}{m['mean_calls']:>12.2f}")
    lines.append("exit tiers: " + "  ".join(f"{t} {v:.1%}" for t, v in result["exit_histogram"].items()))
    lines.append(
        f"exit-tier/held-out-solve-rate pairwise concordance: {result['concordance']:.3f}"
        f" over {result['concordance_pairs']} pairs"
    )
    sa = result["single_attempt_accuracy"]
    lines.append(f"single attempt: no cards {sa['no cards']:.3f}, cards {sa['cards']:.3f}")
    return "\n".join(lines)


#: champ concept categories that are problem domains get their own blocks; the rest are universal.
CHAMP_DOMAINS = ("combinatorics", "inequality", "number-theory", "polynomial", "sequence")


def seed_champ(tree: Tree, dataset=None) -> list[str]:
    """Seed the card tree with champ-dataset's 89 concepts; returns the paths written (sorted).

    A concept whose category is a problem domain becomes a lemma card in both the medium and the hard
    block of that domain (REFINE then lets the two copies diverge by use); any other (algebra,
    trigonometry, function) becomes a universal card. Provenance ``champ:<concept id>``.
    """
    ds = dataset or load_dataset()
    paths = []
    for cid, c in sorted(ds.concepts.items()):
        dom = slug(c.category)
        title = c.name or c.text.split(".")[0][:80]
        body = c.text if not c.parent else f"{c.text}\n\n(Special case of: {c.parent.text})"
        card_id = slug(cid.removeprefix("C_"), 56) or "concept"
        tiers = ("medium", "hard") if dom in CHAMP_DOMAINS else ("universal",)
        for tier in tiers:
            d = dom if tier != "universal" else "universal"
            card = Card(
                id=card_id,
                type="lemma",
                tier=tier,
                domain=d,
                title=title,
                body=body,
                provenance=[f"champ:{cid}"],
            )
            paths.append(write_card(tree, card))
    return sorted(paths)


def concept_paths(dataset=None) -> dict[str, dict[str, str]]:
    """Where :func:`seed_champ` puts each concept: ``{concept id: {"medium": path, "hard": path}}`` (a
    universal concept has the same ``cards/universal/`` path for both tiers)."""
    ds = dataset or load_dataset()
    out = {}
    for cid, c in ds.concepts.items():
        dom = slug(c.category)
        card_id = slug(cid.removeprefix("C_"), 56) or "concept"
        if dom in CHAMP_DOMAINS:
            out[cid] = {t: card_path(t, dom, card_id) for t in ("medium", "hard")}
        else:
            out[cid] = dict.fromkeys(("medium", "hard"), card_path("universal", "universal", card_id))
    return out


def champ_traces(records: list[dict], dataset=None) -> list[dict[str, Any]]:
    """The recorded answers as solver traces over a :func:`seed_champ` tree (input of ``cards refine``).

    Per problem one trace with three tier records: ``easy`` reads no card and holds the 12 no-card answers;
    ``medium`` and ``hard`` read the cards of the problem's concepts (at that tier's path) and hold 8 of the
    16 concept-prompt answers each. Attempts carry ``correct`` (answer class 0); ``answer`` is the class id.
    The trace's ``correct`` is whether the plurality of the 16 concept-prompt answers is right.
    """
    where = concept_paths(dataset)

    def attempts(classes: list[int]) -> list[dict[str, Any]]:
        return [{"answer": f"class-{c}" if c >= 0 else None, "correct": c == 0} for c in classes]

    out = []
    for r in records:
        tiers = [{"tier": "easy", "cards": [], "attempts": attempts(r["no_card"])}]
        for i, tier in enumerate(("medium", "hard")):
            cards = sorted({where[c][tier] for c in r.get("concepts", []) if c in where})
            tiers.append({"tier": tier, "cards": cards, "attempts": attempts(r["card"][8 * i : 8 * i + 8])})
        out.append(
            {
                "problem_id": r["id"],
                "problem": "",
                "domain": r["domain"],
                "gold": r["gold"],
                "exit_tier": "hard",
                "answer": None,
                "correct": majority_vote(r["card"], same_class) == 0,
                "tiers": tiers,
            }
        )
    return out


__all__ = ["champ_traces", "concept_paths", "format_table", "load_records", "replay", "seed_champ"]
