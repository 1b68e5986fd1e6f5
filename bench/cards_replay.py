"""Replay on champ-dataset: real recorded model answers drive the tiered agreement gates; accuracy and
calls of tiered vs Best-of-N, exit-tier histogram, concordance with held-out difficulty, and the keyword
classifier's accuracy on the dataset's 5 domains; compares to KACE's numbers (PAPERS.md §2).

    python bench/cards_replay.py [--problems N] [--seeds 50] [--workers 2]

Answer classes (math-verify) are cached in bench/results/cards_champ_classes.json (first run: minutes).
Writes bench/results/cards_replay.json.
"""

from __future__ import annotations

import argparse
import json
import os

from libraryfs.features.cards.cards import slug
from libraryfs.features.cards.classify import classify
from libraryfs_bench.cards.replay import format_table, load_dataset, load_records, replay

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
PAPER = {"tiered (KACE)": 0.622, "best-of-5": 0.518, "mean calls": "~5", "exit-tier concordance": 0.78}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=None)
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(RESULTS, "cards_replay.json"))
    a = ap.parse_args()
    recs = load_records(
        a.problems, a.workers, os.path.join(RESULTS, "cards_champ_classes.json"), progress=True
    )
    res = replay(recs, a.seeds)
    print(f"champ-dataset replay: {res['problems']} problems x {res['seeds']} shuffles")
    print(format_table(res))
    ds = load_dataset()
    ids = {r["id"] for r in recs}
    hits = sum(classify(p.text) == slug(p.category) for p in ds.problems.values() if p.identifier in ids)
    res["classifier_accuracy"] = hits / len(ids)
    print(
        f"keyword domain classifier: {hits}/{len(ids)} = {hits / len(ids):.3f} of problems in their champ domain"
    )
    by_dom: dict[str, list[float]] = {}
    for r in recs:
        by_dom.setdefault(r["domain"], []).append(r["solve_rate"])
    print(
        "held-out solve rate by domain: "
        + ", ".join(f"{d} {sum(v) / len(v):.3f}" for d, v in sorted(by_dom.items()))
    )
    print(f"paper (AIME 2025, one real LLM): {PAPER}")
    res["paper"] = PAPER
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(res, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
