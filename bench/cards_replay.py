"""Replay on champ-dataset: real recorded model answers drive the tiered agreement gates; accuracy and
calls of tiered vs Best-of-N, exit-tier histogram, concordance with held-out difficulty, and the keyword
classifier's accuracy on the dataset's 5 domains; compares to KACE's numbers (PAPERS.md §2).

    python bench/cards_replay.py [--problems N] [--seeds 50] [--workers 2]

Then the per-block report (libraryfs_bench.cards.blocks): problems split by a hash of their id into a tuning
and a held-out part; per block (tier x domain) accuracy with vs without its cards, bootstrap 95% interval,
verdict; pruning policies chosen on tuning, scored on held-out against Best-of-N at equal calls.

Answer classes (math-verify) are cached in bench/results/cards_champ_classes.json (first run: minutes).
Writes bench/results/cards_replay.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections import Counter

from libraryfs.features.cards.cards import slug
from libraryfs.features.cards.classify import classify
from libraryfs.features.cards.refine import evidence_of, refine
from libraryfs.fs.tree import DirTree
from libraryfs_bench.cards.blocks import block_report, format_report, split
from libraryfs_bench.cards.replay import (
    champ_traces,
    format_table,
    load_dataset,
    load_records,
    replay,
    seed_champ,
)


def refine_on_recorded(recs: list[dict]) -> dict:
    """REFINE over the tuning part's recorded answers (as traces) on a freshly seeded tree: the changes it
    makes, and the cards with the most net hurt evidence (tuning; the same cards' held-out evidence)."""
    tune, held = split(recs)
    with tempfile.TemporaryDirectory(prefix="cards-refine-") as tmp:
        tree = DirTree(tmp)
        seed_champ(tree)
        changes = refine(tree, champ_traces(tune))
        _, ev_tune, subs = evidence_of(tree, champ_traces(tune))
        _, ev_held, _ = evidence_of(tree, champ_traces(held))
    top = sorted(ev_tune.items(), key=lambda kv: (-kv[1].net_hurt, kv[0]))[:5]
    none = [0.0, 0.0]
    return {
        "changes": dict(Counter(r["op"] for r in changes)),
        "pairs_with_substitution_evidence": len(subs),
        "top_net_hurt": [
            {
                "card": p,
                "tuning": [round(e.hurt, 2), round(e.help, 2)],
                "held_out": [round(x, 2) for x in (ev_held[p].hurt, ev_held[p].help)]
                if p in ev_held
                else none,
            }
            for p, e in top
        ],
    }


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
    res["by_block"] = block_report(recs, a.seeds)
    print()
    print(format_report(res["by_block"]))
    res["refine"] = ref = refine_on_recorded(recs)
    print()
    print(f"REFINE over the tuning part's recorded answers on a seeded tree: changes {ref['changes']},")
    print(f"card pairs with any substitution evidence: {ref['pairs_with_substitution_evidence']}")
    print("cards with the most net hurt evidence (hurt, help in problems; demotion needs net >= 3):")
    for t in ref["top_net_hurt"]:
        print(f"  {t['card']:<44} tuning {t['tuning']}  held-out {t['held_out']}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(res, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
