"""Monte-Carlo: tiered self-consistency vs Best-of-N at equal expected calls, over a grid of
(card lift, wrong-answer spread); compares to KACE's AIME 2025 numbers (PAPERS.md §2).

    python bench/cards_sim.py [--problems 2000] [--seeds 5]

Prints one table per setting and writes bench/results/cards_sim.json.
"""

from __future__ import annotations

import argparse
import json
import os

from libraryfs_bench.cards.simulate import SimConfig, format_table, simulate

PAPER = {"tiered (KACE)": 0.622, "best-of-5": 0.518, "mean calls": "~5", "exit-tier concordance": 0.78}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=2000)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "cards_sim.json"))
    a = ap.parse_args()
    results = []
    for lift in (0.0, 0.15):
        for spread in (0.2, 0.5, 0.8):
            cfg = SimConfig(n_problems=a.problems, seeds=a.seeds, card_lift=lift, spread=spread)
            r = simulate(cfg)
            print(
                f"\n== card lift {lift}, wrong-answer spread {spread} "
                f"(mean single-attempt solve rate {r['oracle_single_attempt']:.3f})"
            )
            print(format_table(r))
            results.append(r)
    print("\nsummary: accuracy gain of tiered over Best-of-N at equal expected calls")
    print(
        f"{'lift':>6}{'spread':>8}{'tiered':>9}{'BoN=':>8}{'gain':>8}{'calls':>7}{'pooled':>9}{'p.calls':>9}{'conc':>7}"
    )
    for r in results:
        m, c = r["methods"], r["config"]
        t, b, p = m["tiered"], m["best-of-N (equal calls)"], m["tiered-pooled"]
        print(
            f"{c['card_lift']:>6}{c['spread']:>8}{t['accuracy']:>9.3f}{b['accuracy']:>8.3f}"
            f"{t['accuracy'] - b['accuracy']:>+8.3f}{t['mean_calls']:>7.2f}{p['accuracy']:>9.3f}"
            f"{p['mean_calls']:>9.2f}{r['concordance']:>7.3f}"
        )
    print(f"paper (AIME 2025, real LLM): {PAPER}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"results": results, "paper": PAPER}, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
