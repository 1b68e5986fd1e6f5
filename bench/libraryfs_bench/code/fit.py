"""Fit the router on the earlier commits, judge it on the later ones (issue 17 part 1).

* :func:`time_split` — per repository, tasks in committer-time order; the first ``train_share`` are the
  training split, the rest the held-out split (every held-out task is later than every training task of
  its repository; each repository is represented on both sides).
* :func:`fit` — on the training split only, three steps: the per-file weights by L2-regularised logistic
  regression (Newton/IRLS, :data:`L2`, :data:`NEWTON_STEPS` steps from zero; one row per candidate file,
  label = the commit changed it); the size weights by ridge regression (:data:`RIDGE`) of ln(code files the
  commit changed) on :data:`~libraryfs.features.code.footprint.SIZE_FEATURES`; both rounded to 4 decimals;
  then the two cut points on the size score that misroute the fewest training tasks (exhaustive over the
  midpoints between consecutive distinct scores; ties → the smallest cut points). Same training tasks (in
  any order) → same parameters.
* :func:`predict` — the router's decision for a stored task under given parameters (the same
  :func:`libraryfs.features.code.router.decide` the runtime uses).
* :func:`evaluate` — misroutes of the router and of every baseline (regex; always FASTPATH, SUBAGENT,
  MULTIAGENT; the training split's majority class) with Wilson 95% intervals, exact McNemar of the router
  against each, Spearman's ρ between estimated and true footprint size, footprint recall, per repository.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from libraryfs.features.code.footprint import (
    FEATURES,
    Candidate,
    Footprint,
    FootprintModel,
    assemble,
    size_features,
)
from libraryfs.features.code.router import TOPOLOGIES, Thresholds, decide
from libraryfs_bench.code.evalset import Task
from libraryfs_bench.code.stats import cluster_bootstrap, mcnemar_exact, spearman, wilson

L2 = 1.0
NEWTON_STEPS = 25
RIDGE = 1.0
TRAIN_SHARE = 0.7


def time_split(tasks: list[Task], train_share: float = TRAIN_SHARE) -> tuple[list[Task], list[Task]]:
    """(training, held-out): per repository, the first ``floor(train_share · n)`` tasks by (committer time,
    commit id) train; the rest are held out. Raises ``ValueError`` unless 0 < train_share < 1."""
    if not 0 < train_share < 1:
        raise ValueError(f"train share must be in (0, 1), got {train_share}")
    by_repo: dict[str, list[Task]] = {}
    for t in tasks:
        by_repo.setdefault(t.repo, []).append(t)
    train: list[Task] = []
    held: list[Task] = []
    for repo in sorted(by_repo):
        ts = sorted(by_repo[repo], key=lambda t: (t.commit_time_s, t.commit))
        k = int(train_share * len(ts))
        train += ts[:k]
        held += ts[k:]
    return train, held


def fit_weights(train: list[Task], l2: float = L2, steps: int = NEWTON_STEPS) -> tuple[float, ...]:
    """Logistic-regression weights over every candidate row of ``train`` (label: the commit changed the
    file), rounded to 4 decimals. Rows are taken in (repo, commit, path) order so the result does not depend
    on the order of ``train``."""
    import numpy as np

    xs: list[list[float]] = []
    ys: list[float] = []
    for t in sorted(train, key=lambda t: (t.repo, t.commit)):
        truth = t.label_files()
        for path, x in sorted(t.candidates, key=lambda c: c[0]):
            xs.append(x)
            ys.append(1.0 if path in truth else 0.0)
    if not xs:
        raise ValueError("no candidate rows to fit on")
    X, y = np.array(xs, dtype=float), np.array(ys)
    w = np.zeros(X.shape[1])
    reg = l2 * np.eye(X.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        hess = X.T @ (X * (p * (1 - p))[:, None]) + reg
        grad = X.T @ (p - y) + l2 * w
        w = w - np.linalg.solve(hess, grad)
    return tuple(round(float(v), 4) + 0.0 for v in w)


def footprint_of(t: Task, model: FootprintModel) -> Footprint:
    """The footprint estimate of a stored task under ``model`` (what
    :func:`~libraryfs.features.code.footprint.estimate` computes at run time)."""
    cands = [Candidate(path, list(x)) for path, x in t.candidates]
    return assemble(cands, t.habit_files, list(t.text_features), model)


def fit_size_weights(
    train: list[Task], weights: tuple[float, ...], ridge: float = RIDGE
) -> tuple[float, ...]:
    """Ridge regression of ln(code files changed) on the size features, n̂_f under ``weights``; rounded to
    4 decimals; rows in (repo, commit) order."""
    import numpy as np

    probe = FootprintModel(weights, (0.0,) * 6)
    rows, ys = [], []
    for t in sorted(train, key=lambda t: (t.repo, t.commit)):
        fp = footprint_of(t, probe)
        rows.append(size_features(fp.expected_files, t.habit_files, list(t.text_features)))
        ys.append(math.log(max(1, len(t.code_files))))
    X, y = np.array(rows), np.array(ys)
    beta = np.linalg.solve(X.T @ X + ridge * np.eye(X.shape[1]), X.T @ y)
    return tuple(round(float(v), 4) + 0.0 for v in beta)


def predict(t: Task, model: FootprintModel, thresholds: Thresholds) -> tuple[str, Footprint, list[str]]:
    """(topology, footprint, files the topology works on) for a stored task."""
    fp = footprint_of(t, model)
    topology, _rule, n = decide(t.intent, fp, thresholds)
    return topology, fp, fp.chosen()[:n] if n else []


def fit_thresholds(train: list[Task], model: FootprintModel) -> tuple[Thresholds, int]:
    """The cut points minimising training misroutes for ``model`` (see module docstring); returns
    ``(thresholds, misrouted training tasks)``."""
    fixed_wrong = 0
    scored: list[tuple[float, str]] = []
    probe = Thresholds(float("inf"), float("inf"))
    for t in train:
        fp = footprint_of(t, model)
        topology, _rule, _n = decide(t.intent, fp, probe)
        if t.intent == "edit" and fp.files:
            scored.append((round(fp.score, 4), t.gold))
        else:
            fixed_wrong += topology != t.gold
    scored.sort(key=lambda s: s[0])
    n = len(scored)
    pre = {g: [0] * (n + 1) for g in ("FASTPATH", "SUBAGENT", "MULTIAGENT")}
    for i, (_z, g) in enumerate(scored):
        for k, col in pre.items():
            col[i + 1] = col[i] + (g == k)
    # cut positions: between distinct scores only (tasks with equal z route alike), and the two ends
    cuts = [0] + [i for i in range(1, n) if scored[i][0] != scored[i - 1][0]] + [n]
    best = (-1, 0, 0)
    for a, i in enumerate(cuts):
        for j in cuts[a:]:
            right = pre["FASTPATH"][i] + pre["SUBAGENT"][j] - pre["SUBAGENT"][i]
            right += pre["MULTIAGENT"][n] - pre["MULTIAGENT"][j]
            if right > best[0]:
                best = (right, i, j)
    right, i, j = best

    def cut(k: int) -> float:
        if k == 0:
            return round(scored[0][0] - 1.0, 4) if scored else 0.0
        if k == n:
            return round(scored[-1][0] + 1.0, 4)
        return round((scored[k - 1][0] + scored[k][0]) / 2, 4)

    return Thresholds(cut(i), cut(j)), fixed_wrong + (n - right)


@dataclass(slots=True)
class FitResult:
    """What :func:`fit` chose and how it did on the training split."""

    model: FootprintModel
    thresholds: Thresholds
    train_misrouted: int
    n_train: int

    def as_dict(self) -> dict:
        """JSON-ready dict."""
        return {
            "model": self.model.as_dict(),
            "thresholds": self.thresholds.as_dict(),
            "train_misrouted": self.train_misrouted,
            "n_train": self.n_train,
        }


def fit(train: list[Task]) -> FitResult:
    """Fit the per-file weights, the size weights and the thresholds on ``train`` (module docstring)."""
    weights = fit_weights(train)
    if len(weights) != len(FEATURES):
        raise ValueError(f"tasks carry {len(weights)} features, the router has {len(FEATURES)}")
    model = FootprintModel(weights, fit_size_weights(train, weights))
    thresholds, wrong = fit_thresholds(train, model)
    return FitResult(model, thresholds, wrong, len(train))


def _rate(wrong: int, n: int) -> dict:
    return {"misrouted": wrong, "n": n, "rate": wrong / n if n else None, "wilson95": wilson(wrong, n)}


def evaluate(tasks: list[Task], train: list[Task], model: FootprintModel, thresholds: Thresholds) -> dict:
    """The router (under ``model``/``thresholds``) and the baselines on ``tasks``; ``train`` names the
    majority class. See the module docstring for what is reported."""
    routed = [predict(t, model, thresholds) for t in tasks]
    pred = [r[0] for r in routed]
    gold = [t.gold for t in tasks]
    majority = Counter(t.gold for t in train).most_common()
    majority_label = (
        min(majority, key=lambda kv: (-kv[1], TOPOLOGIES.index(kv[0])))[0] if majority else "FASTPATH"
    )
    baselines = {
        "regex": [t.baseline for t in tasks],
        "always FASTPATH": ["FASTPATH"] * len(tasks),
        "always SUBAGENT": ["SUBAGENT"] * len(tasks),
        "always MULTIAGENT": ["MULTIAGENT"] * len(tasks),
        f"training majority ({majority_label})": [majority_label] * len(tasks),
    }
    r_wrong = [p != g for p, g in zip(pred, gold, strict=True)]
    out: dict = {"n": len(tasks), "router": _rate(sum(r_wrong), len(tasks)), "baselines": {}}
    for name, labels in baselines.items():
        b_wrong = [p != g for p, g in zip(labels, gold, strict=True)]
        b = sum(r and not w for r, w in zip(r_wrong, b_wrong, strict=True))
        c = sum(w and not r for r, w in zip(r_wrong, b_wrong, strict=True))
        out["baselines"][name] = _rate(sum(b_wrong), len(tasks)) | {
            "mcnemar": {"router_only_wrong": b, "baseline_only_wrong": c, "p": mcnemar_exact(b, c)}
        }
    true_n = [len(t.code_files) for t in tasks]
    out["spearman_expected_vs_true_files"] = spearman([r[1].expected_files for r in routed], true_n)
    out["spearman_size_score_vs_true_files"] = spearman([r[1].score for r in routed], true_n)
    out["spearman_regex_rank_vs_true_files"] = spearman(
        [TOPOLOGIES.index(b) if b != "DEEPRESEARCH" else -1 for b in baselines["regex"]], true_n
    )
    out["footprint_recall"] = _recall(tasks, [r[1].chosen() for r in routed])
    out["confusion_gold_by_predicted"] = _confusion(gold, pred)
    out["gold_distribution"] = {g: gold.count(g) for g in TOPOLOGIES}
    out["predicted_distribution"] = {g: pred.count(g) for g in TOPOLOGIES}
    out["by_repo"] = _by_repo(tasks, pred)
    keys = [(t.repo, t.author, t.time_s // (7 * 86400)) for t in tasks]
    fast_wrong = [g != "FASTPATH" for g in gold]
    out["cluster_bootstrap_vs_fastpath"] = cluster_bootstrap(keys, r_wrong, fast_wrong)
    return out


def _recall(tasks: list[Task], chosen: list[list[str]]) -> dict:
    with_fp = [(t, c) for t, c in zip(tasks, chosen, strict=True) if t.parent_files]
    if not with_fp:
        return {"tasks": 0, "mean_recall": None, "any_hit": 0}
    rec = sum(len(set(t.parent_files) & set(c)) / len(t.parent_files) for t, c in with_fp) / len(with_fp)
    hit = sum(bool(set(t.parent_files) & set(c)) for t, c in with_fp)
    return {
        "tasks": len(with_fp),
        "mean_recall": rec,
        "any_hit": hit,
        "any_hit_wilson95": wilson(hit, len(with_fp)),
    }


def _confusion(gold: list[str], pred: list[str]) -> dict:
    m = {g: dict.fromkeys(TOPOLOGIES, 0) for g in TOPOLOGIES}
    for g, p in zip(gold, pred, strict=True):
        m[g][p] += 1
    return m


def _by_repo(tasks: list[Task], pred: list[str]) -> dict:
    out: dict[str, dict] = {}
    for t, p in zip(tasks, pred, strict=True):
        r = out.setdefault(
            t.repo, {"n": 0, "router": 0, "regex": 0, "always FASTPATH": 0, "always SUBAGENT": 0}
        )
        r["n"] += 1
        r["router"] += p != t.gold
        r["regex"] += t.baseline != t.gold
        r["always FASTPATH"] += t.gold != "FASTPATH"
        r["always SUBAGENT"] += t.gold != "SUBAGENT"
    return out
