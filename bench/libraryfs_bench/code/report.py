"""Text tables of the routing evaluation (what ``libraryfs code eval`` prints)."""

from __future__ import annotations


def _row(label: str, r: dict, p: float | None = None) -> str:
    lo, hi = r["wilson95"]
    rate = f"{r['rate']:.1%}" if r["rate"] is not None else "-"
    line = f"{label:34s} {r['misrouted']:>5d} / {r['n']:<5d} {rate:>7s}  {lo:>6.1%} – {hi:<6.1%}"
    return line + (f"  {p:.2g}" if p is not None else "")


def format_evaluation(title: str, ev: dict) -> list[str]:
    """Lines: the router and every baseline (misrouted, rate, Wilson 95%, McNemar p vs the router), Spearman,
    footprint recall, per repository, the confusion matrix."""
    lines = [title, f"{'':34s} {'misrouted':>13s} {'rate':>7s}  {'Wilson 95%':>15s}  McNemar p (vs router)"]
    lines.append(_row("router", ev["router"]))
    for name, r in ev["baselines"].items():
        m = r["mcnemar"]
        lines.append(
            _row(name, r, m["p"]) + f"   (router-only wrong {m['router_only_wrong']}, "
            f"baseline-only wrong {m['baseline_only_wrong']})"
        )

    def rho(key: str) -> str:
        v = ev[key]
        return f"{v:.3f}" if v is not None else "undefined"

    lines.append(
        f"Spearman ρ with the files the commit changed: size score {rho('spearman_size_score_vs_true_files')}, "
        f"n̂_f {rho('spearman_expected_vs_true_files')}, regex baseline's order {rho('spearman_regex_rank_vs_true_files')}"
    )
    fr = ev["footprint_recall"]
    if fr["tasks"]:
        lo, hi = fr["any_hit_wilson95"]
        lines.append(
            f"footprint recall (changed files existing at the parent, in the estimated footprint), {fr['tasks']} "
            f"tasks: mean {fr['mean_recall']:.1%}; at least one {fr['any_hit']} = {fr['any_hit'] / fr['tasks']:.1%} "
            f"(Wilson 95% {lo:.1%}–{hi:.1%})"
        )
    b = ev["cluster_bootstrap_vs_fastpath"]
    if b["a95"] is not None:
        lines.append(
            f"cluster bootstrap over {b['clusters']} (repo, author, week) clusters, 95%: router "
            f"{b['a95'][0]:.1%}–{b['a95'][1]:.1%}, always FASTPATH {b['b95'][0]:.1%}–{b['b95'][1]:.1%}, "
            f"difference {b['diff95'][0]:+.1%} to {b['diff95'][1]:+.1%}"
        )
    for repo, r in ev["by_repo"].items():
        n = r["n"]
        lines.append(
            f"  {repo:14s} n={n:<4d} router {r['router'] / n:6.1%}  regex {r['regex'] / n:6.1%}  "
            f"always FASTPATH {r['always FASTPATH'] / n:6.1%}  always SUBAGENT {r['always SUBAGENT'] / n:6.1%}"
        )
    lines.append(f"gold: {ev['gold_distribution']}; router: {ev['predicted_distribution']}")
    lines.append(
        "confusion (rows gold, columns router): "
        + "; ".join(
            f"{g[:4]} " + " ".join(f"{p[:4]}={k}" for p, k in row.items())
            for g, row in ev["confusion_gold_by_predicted"].items()
        )
    )
    return lines


def format_counts(counts: dict) -> list[str]:
    """One line per checkout: commits seen, exclusions, tasks, the commit it was read at."""
    out = []
    for co, c in counts.items():
        out.append(
            f"{co} @ {c.get('head', '?')[:10]}: {c['commits']} commits seen ({c['merge']} merge, {c['root']} root, "
            f"{c['bot']} bot), {c['eligible']} eligible, {c['selected']} selected, {c['no_code']} without code "
            f"→ {c['tasks']} tasks ({c['renames']} renamed files, {c['symbols_skipped']} over the symbol cap)"
        )
    return out
