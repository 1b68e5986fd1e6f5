"""Fitting the router on the earlier commits: the time split, determinism (same split → same parameters, in
any order), optimal thresholds, the held-out evaluation against every baseline, and the shipped constants
reproduced from the committed tasks file."""

from __future__ import annotations

import itertools
import os
import random

import pytest

from libraryfs.features.code.footprint import FEATURES, MODEL
from libraryfs.features.code.router import THRESHOLDS, Thresholds
from libraryfs_bench.code.evalset import Task, gold_label, load_tasks
from libraryfs_bench.code.fit import evaluate, fit, fit_thresholds, footprint_of, predict, time_split

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "libraryfs_bench", "code", "data")


def synthetic_tasks(n: int, seed: int) -> list[Task]:
    """Tasks whose footprint size depends on their features (so there is something to fit), in 2 repos."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        cands, files = [], []
        for j in range(rng.randint(3, 12)):
            x = [1.0] + [round(rng.random(), 3) for _ in FEATURES[1:]]
            path = f"pkg/m{j}.py"
            cands.append([path, x])
            if rng.random() < 0.15 + 0.6 * x[1] * x[5]:
                files.append(path)
        files = files or [cands[0][0]]
        msg = rng.choice(["Fix x", "Add y", "Refactor all z", "typo"])
        gold = gold_label(msg, files, [f"{f}::s" for f in files])
        t = Task(f"r{i % 2}", f"c{i:04d}", f"p{i}", f"a{i % 7}", 1000 * i, msg, files, [], gold,
                 baseline=rng.choice(["FASTPATH", "SUBAGENT", "MULTIAGENT"]), commit_time_s=1000 * i + rng.randint(0, 500),
                 intent="edit" if msg != "typo" else "small", candidates=cands, habit_files=rng.choice([1, 1.5, 2, 3]),
                 text_features=[float(msg == "typo"), float("all" in msg), 0.7], parent_files=files)  # fmt: skip
        tasks.append(t)
    return tasks


def test_time_split_is_per_repository_and_later():
    tasks = synthetic_tasks(101, 1)
    train, held = time_split(tasks, 0.7)
    assert len(train) + len(held) == len(tasks)
    for repo in ("r0", "r1"):
        tr = [t for t in train if t.repo == repo]
        ho = [t for t in held if t.repo == repo]
        assert len(tr) == int(0.7 * (len(tr) + len(ho)))
        assert max(t.commit_time_s for t in tr) <= min(t.commit_time_s for t in ho)
    with pytest.raises(ValueError):
        time_split(tasks, 1.0)


def test_same_split_same_parameters_in_any_order():
    tasks = synthetic_tasks(160, 2)
    train, _ = time_split(tasks)
    a = fit(train)
    shuffled = list(train)
    random.Random(9).shuffle(shuffled)
    b = fit(shuffled)
    assert a.as_dict() == b.as_dict()
    assert len(a.model.weights) == len(FEATURES) and a.thresholds.fast_max <= a.thresholds.sub_max
    # a different training split gives different parameters (the fit does depend on its data)
    c = fit(time_split(tasks, 0.5)[0])
    assert c.as_dict() != a.as_dict()


def test_thresholds_minimise_training_misroutes():
    tasks = synthetic_tasks(60, 3)
    model = fit(tasks).model
    thr, wrong = fit_thresholds(tasks, model)
    assert wrong == sum(predict(t, model, thr)[0] != t.gold for t in tasks)
    scores = sorted({round(footprint_of(t, model).score, 4) for t in tasks})
    grid = [scores[0] - 1] + [(x + y) / 2 for x, y in itertools.pairwise(scores)] + [scores[-1] + 1]
    best = min(
        sum(predict(t, model, Thresholds(a, b))[0] != t.gold for t in tasks)
        for a in grid
        for b in grid
        if a <= b
    )
    assert wrong == best


def test_evaluate_reports_every_baseline_with_mcnemar():
    tasks = synthetic_tasks(120, 4)
    train, held = time_split(tasks)
    f = fit(train)
    ev = evaluate(held, train, f.model, f.thresholds)
    names = set(ev["baselines"])
    assert {"regex", "always FASTPATH", "always SUBAGENT", "always MULTIAGENT"} <= names
    assert any(n.startswith("training majority (") for n in names)
    pred = [predict(t, f.model, f.thresholds)[0] for t in held]
    assert ev["router"]["misrouted"] == sum(p != t.gold for p, t in zip(pred, held, strict=True))
    for name, r in ev["baselines"].items():
        m = r["mcnemar"]
        # discordant pairs: router wrong/baseline right and the reverse; their difference is the rates'
        assert (
            m["baseline_only_wrong"] - m["router_only_wrong"] == r["misrouted"] - ev["router"]["misrouted"]
        ), name
        assert 0 <= m["p"] <= 1
        lo, hi = r["wilson95"]
        assert lo <= r["rate"] <= hi


def test_shipped_parameters_are_the_fit_of_the_committed_training_split():
    tasks = load_tasks(os.path.join(DATA, "realhistory-tasks.jsonl.gz"))
    train, held = time_split(tasks)
    f = fit(train)
    assert f.model == MODEL and f.thresholds == THRESHOLDS
    assert len(train) == 884 and len(held) == 381
