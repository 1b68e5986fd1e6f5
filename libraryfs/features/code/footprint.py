"""Footprint estimate: which files a change will touch, from the task's words, the index and co-change history.

The paper's router measures the subgraph its retrieval returns (PAPERS.md §3). On real commits that subgraph
is not what a change touches (rank correlation 0.05 with the files a commit changed, issue 17): a fix comes
with its test, a feature with its callers, and commit messages name few identifiers. This module estimates
the footprint instead:

1. **Candidates** (:func:`candidates`): the files of the retrieval's fused hits (first
   :data:`RETRIEVED_FILES` files), the files holding an exact identifier match, the co-change partners of
   the first :data:`SEEDS` retrieved files (:class:`~libraryfs.features.code.history.CoChange`), the
   in-repository import neighbours of the first retrieved file, and the files of the last
   :data:`RECENT_COMMITS` commits (the working set). Only files that exist in the index.
2. **Features** of each candidate ``g`` (:data:`FEATURES`, in this order): bias; 1/(1 + retrieval rank of
   ``g``'s file); its fused score / the best file's; an exact identifier match in ``g``; co-change
   confidence P(g | seed) with the seeds (seed i weighted :data:`SEED_DECAY` ^ i; confidence = commits with
   both / (commits with the seed + 1)); recency 1/(1 + commits since ``g`` last changed) (0 beyond
   :data:`RECENCY_WINDOW`); log(1 + past changes of ``g``); ``g`` is a test file; an import edge between ``g``
   and the first seed; ``g`` is a test file importing a seed; ``g`` is a test file named after a seed
   (``test_core.py`` for ``core.py``); ``g`` is in the first seed's directory; and four task-level terms: a small-edit cue in
   the first line (:data:`libraryfs.features.code.cues.SMALL`), log(1 + words of the task), a test cue × test file, and the share of
   the last :data:`HABIT_COMMITS` commits that changed a test × test file.
3. **Probability** p(g) = σ(w · x) with weights fitted on the time-ordered training split of real commits
   (``libraryfs code eval --fit``; :mod:`libraryfs_bench.code.fit`), shipped as :data:`MODEL`.
4. **Estimate**: n̂_f = Σ p(g) (expected number of files), and the footprint itself = the
   max(1, round(n̂_f)) most probable candidates.
5. **Size**: the router's score is an estimate of ln(files the change touches), a linear function
   (weights :attr:`FootprintModel.size_weights`, fitted by ridge regression of the log of the files real
   commits changed) of :data:`SIZE_FEATURES`: ln n̂_f, ln(median files of the last :data:`HABIT_COMMITS`
   commits: the repository's habit), the keyword baseline's small-edit and broad-change words, and
   ln(1 + words of the task) (:func:`libraryfs.features.code.cues.text_features`).

Everything here is deterministic and pure Python (the fit lives in the benchmark package).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from libraryfs.features.code.cues import SMALL, TEST, first_line, text_features
from libraryfs.features.code.history import CoChange
from libraryfs.features.code.index import CodeIndex
from libraryfs.features.code.retrieve import Retrieval

FEATURES = (
    "bias",
    "retrieval_rr",
    "retrieval_ratio",
    "identifier",
    "cochange",
    "recency",
    "frequency",
    "is_test",
    "import_link",
    "test_of_seed",
    "test_name_of_seed",
    "same_directory",
    "small_cue",
    "log_words",
    "test_cue_x_test",
    "habit_test_x_test",
)
SIZE_FEATURES = ("bias", "log_expected_files", "log_habit_files", "fast_words", "broad_words", "log_words")
RETRIEVED_FILES = 15
SEEDS = 3
SEED_DECAY = 0.6
PARTNERS_PER_SEED = 10
RECENT_COMMITS = 3
RECENCY_WINDOW = 100
HABIT_COMMITS = 50

TEST_PATH = re.compile(
    r"(^|/)(tests?|testing|__tests__)/|(^|/)test_[^/]*$|_test\.\w+$|(^|/)conftest\.py$|\.(test|spec)\.[jt]sx?$"
)


@dataclass(frozen=True, slots=True)
class FootprintModel:
    """Fitted parameters: one weight per :data:`FEATURES` entry (the per-file model) and one per
    :data:`SIZE_FEATURES` entry (the size score)."""

    weights: tuple[float, ...]
    size_weights: tuple[float, ...]

    def as_dict(self) -> dict:
        """JSON-ready dict (weights by feature name)."""
        return {
            "weights": dict(zip(FEATURES, self.weights, strict=True)),
            "size_weights": dict(zip(SIZE_FEATURES, self.size_weights, strict=True)),
        }

    @classmethod
    def from_dict(cls, d: dict) -> FootprintModel:
        """Inverse of :meth:`as_dict`. Raises ``KeyError`` if a weight is missing."""
        return cls(
            tuple(float(d["weights"][f]) for f in FEATURES),
            tuple(float(d["size_weights"][f]) for f in SIZE_FEATURES),
        )


#: Shipped parameters: fitted on the training split (884 earlier commits of click, requests, itsdangerous and
#: this repository) by ``libraryfs code eval``; ``libraryfs code eval --from-tasks
#: bench/libraryfs_bench/code/data/realhistory-tasks.jsonl.gz`` refits them from the stored features
#: (tests/bench/test_code_fit.py checks that it does). docs/code.md has the figures.
MODEL = FootprintModel(
    weights=(-3.1374, 0.8387, 1.3141, 0.737, 1.4767, 1.8302, 0.022, -0.5924, 0.109, 0.1805, 0.6728, -0.3056,
             -0.6679, -0.1352, 0.5757, 0.3486),
    size_weights=(0.2444, 0.2137, 0.4077, -0.2656, 0.2289, 0.0315),
)  # fmt: skip


def is_test_path(path: str) -> bool:
    """Whether a repository path is a test file (a ``tests/`` directory, ``test_*.py``, ``*_test.go``,
    ``*.test.js``/``*.spec.ts``, ``conftest.py``)."""
    return bool(TEST_PATH.search(path))


def _stem(path: str) -> str:
    """File name without directory and suffix (``src/click/core.py`` → ``core``)."""
    return path.rpartition("/")[2].partition(".")[0]


def _test_subject(path: str) -> str:
    """What a test file is named after: ``test_core.py``/``core_test.go``/``core.test.js`` → ``core``."""
    stem = _stem(path)
    if stem.startswith("test_"):
        return stem[5:]
    return stem[:-5] if stem.endswith("_test") else stem


@dataclass(slots=True)
class Candidate:
    """A file the change may touch: repository path, feature vector (:data:`FEATURES`), probability."""

    path: str
    x: list[float]
    p: float = 0.0


@dataclass(slots=True)
class Footprint:
    """The estimate. ``files``: candidates by falling probability; ``expected_files``: n̂_f = Σ p;
    ``habit_files``: median source files per recent commit (1 without history); ``score``: z."""

    files: list[Candidate]
    expected_files: float
    habit_files: float
    score: float
    seeds: list[str] = field(default_factory=list)

    def chosen(self) -> list[str]:
        """The footprint: the max(1, round(n̂_f)) most probable files (empty without candidates)."""
        k = max(1, round(self.expected_files))
        return [c.path for c in self.files[:k]]


def _retrieved_files(retrieval: Retrieval) -> list[tuple[str, float]]:
    """Files of the fused hits, by summed fused score (a file's own hit and its symbols' hits)."""
    score: dict[str, float] = {}
    for h in retrieval.hits:
        f = h.node.partition("::")[0]
        score[f] = score.get(f, 0.0) + h.score
    return sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))[:RETRIEVED_FILES]


def _ages(history: CoChange | None) -> dict[str, int]:
    """Commits since each recently changed file last changed (0 = the last commit)."""
    ages: dict[str, int] = {}
    if history is None:
        return ages
    for back, files in enumerate(reversed(history.commits[-RECENCY_WINDOW:])):
        for f in files:
            ages.setdefault(f, back)
    return ages


def _habit(history: CoChange | None) -> tuple[float, float]:
    """(share of the last commits that changed a test, median source files per commit); (0, 1) without
    history."""
    if history is None or not history.commits:
        return 0.0, 1.0
    last = history.commits[-HABIT_COMMITS:]
    tests = sum(any(is_test_path(p) for p in c) for c in last) / len(last)
    sizes = sorted(len(c) for c in last)
    mid = len(sizes) // 2
    median = sizes[mid] if len(sizes) % 2 else (sizes[mid - 1] + sizes[mid]) / 2
    return tests, float(median)


def candidates(
    index: CodeIndex, retrieval: Retrieval, history: CoChange | None, query: str
) -> tuple[list[Candidate], list[str], float]:
    """Candidate files with their feature vectors (module docstring, steps 1–2). Returns ``(candidates,
    seeds, habit_files)``; candidates in a deterministic order (retrieval order, then by path)."""
    retrieved = _retrieved_files(retrieval)
    top = retrieved[0][1] if retrieved else 1.0
    rank = {f: (i, s / top) for i, (f, s) in enumerate(retrieved)}
    seeds = [f for f, _ in retrieved[:SEEDS]]
    ident_files = {n.partition("::")[0] for n in retrieval.ranks.get("identifier", [])[:10]}
    co: dict[str, float] = {}
    if history is not None:
        for i, s in enumerate(seeds):
            n = history.changes(s)
            partners = history.partners(s, min_support=1)
            best = sorted(partners.items(), key=lambda kv: (-kv[1], kv[0]))[:PARTNERS_PER_SEED]
            for g, conf in best:
                co[g] = max(co.get(g, 0.0), conf * n / (n + 1) * SEED_DECAY**i)
    edges = index.edges
    linked: set[str] = set()
    if seeds:
        linked = set(edges.imports.get(seeds[0], ())) | set(edges.importers.get(seeds[0], ()))
    ages = _ages(history)
    recent = [f for c in (history.commits[-RECENT_COMMITS:] if history else ()) for f in c]
    names = list(
        dict.fromkeys([f for f, _ in retrieved] + sorted(ident_files) + sorted(co) + sorted(linked) + recent)
    )
    habit_tests, habit_files = _habit(history)
    subject = first_line(query)
    small = float(bool(SMALL.search(subject)))
    log_words = math.log1p(len(query.split()))
    test_cue = float(bool(TEST.search(subject)))
    seed_set = set(seeds)
    seed_stems = {_stem(s) for s in seeds if not is_test_path(s)}
    top_dir = seeds[0].rpartition("/")[0] if seeds else None
    out: list[Candidate] = []
    for g in names:
        if g not in index.files:
            continue
        r, ratio = rank.get(g, (None, 0.0))
        age = ages.get(g)
        t = float(is_test_path(g))
        test_of_seed = t * float(bool(seed_set & set(edges.imports.get(g, ()))))
        x = [
            1.0,
            1.0 / (r + 1) if r is not None else 0.0,
            ratio,
            float(g in ident_files),
            co.get(g, 0.0),
            1.0 / (age + 1) if age is not None else 0.0,
            math.log1p(history.changes(g)) if history is not None else 0.0,
            t,
            float(g in linked),
            test_of_seed,
            t * float(_test_subject(g) in seed_stems),
            float(top_dir is not None and g != seeds[0] and g.rpartition("/")[0] == top_dir),
            small,
            log_words,
            test_cue * t,
            habit_tests * t,
        ]
        out.append(Candidate(g, x))
    return out, seeds, habit_files


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def estimate(
    index: CodeIndex,
    retrieval: Retrieval,
    history: CoChange | None,
    query: str,
    model: FootprintModel = MODEL,
) -> Footprint:
    """The footprint estimate of ``query`` (module docstring, steps 1–5). Without any candidate, n̂_f = 0
    (and the router does not use the score)."""
    cands, seeds, habit_files = candidates(index, retrieval, history, query)
    return assemble(cands, habit_files, text_features(query), model, seeds)


def assemble(
    cands: list[Candidate],
    habit_files: float,
    words: list[float],
    model: FootprintModel,
    seeds: list[str] = (),
) -> Footprint:
    """Probabilities, n̂_f and the size score from candidates' features (also what the fit replays)."""
    for c in cands:
        c.p = _sigmoid(sum(w * v for w, v in zip(model.weights, c.x, strict=True)))
    cands.sort(key=lambda c: (-c.p, c.path))
    n_hat = sum(c.p for c in cands)
    z = sum(w * v for w, v in zip(model.size_weights, size_features(n_hat, habit_files, words), strict=True))
    return Footprint(cands, n_hat, habit_files, z, list(seeds))


def size_features(expected_files: float, habit_files: float, words: list[float]) -> list[float]:
    """:data:`SIZE_FEATURES` for n̂_f, the habit and :func:`~libraryfs.features.code.cues.text_features`
    (n̂_f is floored at 0.05 so that an empty estimate stays finite)."""
    return [1.0, math.log(max(expected_files, 0.05)), math.log(max(habit_files, 1.0)), *words]
