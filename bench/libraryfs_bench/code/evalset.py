"""Routing tasks from real git history, gold labels from a written rubric, and the statistics (issue 9 item 4).

Each non-merge, non-bot commit with a parent becomes one task: the **task** is the commit message (subject and
body), the **footprint** is what the commit really changed (code files, the symbols whose lines it
changed, their top-level directories), and the **gold topology** comes from :data:`RUBRIC` applied to that
footprint. The router sees only the message and the repository *as it was at the parent commit* (the
index is built from git objects, so the future never leaks in); the regex baseline sees only the message.

Gold labels never read the router's thresholds: the rubric's constants live here, written from the
paper's definitions of the topologies (a single-file edit; one specialist for up to three files; a
pipeline or swarm beyond; an investigation), and are applied to the true footprint that the router must
*predict* from the message.

Statistics: misrouting rate with a Wilson 95% interval, and McNemar's exact test (two-sided binomial on
the discordant pairs) of router against baseline on the same tasks.
"""

from __future__ import annotations

import math
import os
import random
import re
import subprocess
from dataclasses import dataclass, field, replace

from libraryfs.features.code.index import MAX_FILE_BYTES, CodeIndex, is_indexable
from libraryfs.features.code.parse import FileParse, parse_source
from libraryfs.features.code.retrieve import Retriever
from libraryfs.features.code.router import TOPOLOGIES, regex_route, route

RUBRIC = """\
Gold topology of a commit, from its footprint (never from the router):
  code files  = files the commit changes whose suffix is a programming language
                (.py .pyi .js .mjs .cjs .jsx .ts .tsx .go .rs .c .h .cc .cpp .hpp .java .rb .sh .bash .bats),
                tests included; docs, data, lock files, symlinks, submodules and vendored code (a path
                component vendor, vendored, _vendor, third_party or thirdparty) excluded. A renamed file
                (git's rename detection, ≥ 50% similar) is one file, under its new name.
  symbols     = functions/classes/methods whose lines the commit changes (indexed languages only; the
                innermost definition around each changed line, on either side of the diff).
  0. Excluded: merge commits, root commits, commits by bots (author name ending in "[bot]"),
     commits that change no code file.
  1. DEEPRESEARCH if the subject line presents the work as an investigation: it contains
     investigate, explore, research, spike, experiment, prototype, profile, or is a question.
  2. FASTPATH     if exactly 1 code file changes and at most 3 of its symbols change.
  3. SUBAGENT     if 1 to 3 code files change (all the work fits one specialist).
  4. MULTIAGENT   if more than 3 code files change.
"""
GOLD_FAST_FILES = 1
GOLD_FAST_SYMBOLS = 3
GOLD_SUB_FILES = 3
CODE_SUFFIXES = frozenset(
    ".py .pyi .js .mjs .cjs .jsx .ts .tsx .go .rs .c .h .cc .cpp .hpp .java .rb .sh .bash " ".bats".split()
)
VENDOR_DIRS = frozenset({"vendor", "vendored", "_vendor", "third_party", "thirdparty"})
#: Above this many code files a commit's symbols are not computed (its label, MULTIAGENT or DEEPRESEARCH,
#: does not depend on them); the task records ``symbols_skipped``.
MAX_SYMBOL_FILES = 60
_GOLD_DEEP = re.compile(
    r"\b(investigat\w*|explor\w*|research\w*|spike|experiment\w*|prototyp\w*|profil\w*)\b|\?\s*$", re.I
)
_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.M)
_NO_FILE = "0" * 40
_SPECIAL_MODES = ("120000", "160000")  # symlink, submodule (gitlink)
_WHOLE = [(1, 1 << 30)]


def _git(repo: str, *args: str, input: bytes | None = None) -> bytes:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, input=input).stdout


def is_code_file(path: str) -> bool:
    """Whether a path counts as a code file under :data:`RUBRIC` (language suffix, not vendored)."""
    parts = path.split("/")
    name = parts[-1]
    if any(p in VENDOR_DIRS for p in parts[:-1]):
        return False
    return "." in name and name[name.rfind(".") :] in CODE_SUFFIXES


def is_bot(author: str) -> bool:
    """Whether a commit author is a bot under :data:`RUBRIC` rule 0 (``dependabot[bot]``, ``pre-commit-ci[bot]``)."""
    return author.strip().lower().endswith("[bot]")


@dataclass(slots=True)
class Task:
    """One routing task from one commit. ``parent_files``: the changed code files as named at the parent
    (existing there); ``retrieved_files``: files of the router's top hits (for footprint recall)."""

    repo: str
    commit: str
    parent: str
    author: str
    time_s: int
    message: str
    code_files: list[str]
    symbols: list[str]
    gold: str
    predicted: str = ""
    baseline: str = ""
    vector: dict = field(default_factory=dict)
    symbols_skipped: bool = False
    parent_files: list[str] = field(default_factory=list)
    retrieved_files: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Change:
    """One file a commit changes (``git diff --raw -M``): status letter (A, M, D, R, T…), old and new path
    (the same unless renamed; the absent side of an add/delete repeats the present path) and blob ids
    (``None`` on the absent side)."""

    status: str
    old_path: str
    new_path: str
    old_sha: str | None
    new_sha: str | None


def gold_label(message: str, code_files: list[str], symbols: list[str]) -> str:
    """Apply :data:`RUBRIC` (rules 1–4) to a footprint."""
    subject = message.strip().splitlines()[0] if message.strip() else ""
    if _GOLD_DEEP.search(subject):
        return "DEEPRESEARCH"
    if len(code_files) == GOLD_FAST_FILES and len(symbols) <= GOLD_FAST_SYMBOLS:
        return "FASTPATH"
    if len(code_files) <= GOLD_SUB_FILES:
        return "SUBAGENT"
    return "MULTIAGENT"


class BlobReader:
    """Reads blobs through one ``git cat-file --batch`` process and caches parses by blob id."""

    def __init__(self, repo: str) -> None:
        self.repo = repo
        self.proc = subprocess.Popen(
            ["git", "-C", repo, "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self.parses: dict[tuple[str, str], FileParse] = {}

    def blob(self, sha: str) -> bytes:
        """Content of one blob (``b""`` if ``sha`` is not a blob)."""
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(sha.encode() + b"\n")
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().split()
        if len(header) < 3:  # "<sha> missing"
            return b""
        data = self.proc.stdout.read(int(header[2]))
        self.proc.stdout.read(1)
        return data if header[1] == b"blob" else b""

    def parse(self, path: str, sha: str) -> FileParse:
        """Parse of a blob at ``path`` (cached by blob id and suffix). A blob over
        :data:`~libraryfs.features.code.index.MAX_FILE_BYTES` (generated or minified code) parses as empty."""
        key = (sha, path[path.rfind(".") :])
        fp = self.parses.get(key)
        if fp is None:
            data = self.blob(sha)
            fp = self.parses[key] = parse_source(path, b"" if len(data) > MAX_FILE_BYTES else data, sha=sha)
        return fp if fp.path == path else replace(fp, path=path)

    def close(self) -> None:
        """End the git process."""
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait()


def index_at(reader: BlobReader, rev: str, name: str) -> CodeIndex:
    """A :class:`CodeIndex` of the tree at ``rev`` built from git objects (no checkout needed). Skips what
    :meth:`CodeIndex.build` skips: symlinks, submodules, unindexable paths and blobs over
    :data:`~libraryfs.features.code.index.MAX_FILE_BYTES`."""
    idx = CodeIndex(name)
    out = _git(reader.repo, "ls-tree", "-r", "-l", "-z", rev)
    for entry in out.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        mode, kind, sha, size = meta.split()
        p = os.fsdecode(path)
        if kind == b"blob" and mode != b"120000" and is_indexable(p) and int(size) <= MAX_FILE_BYTES:
            idx.add_parse(reader.parse(p, sha.decode()))
        elif kind == b"blob" and p == "go.mod":
            for line in reader.blob(sha.decode()).decode("utf-8", "replace").splitlines():
                if line.startswith("module "):
                    idx.go_module = line.split()[1]
    return idx


def changes(repo: str, parent: str, commit: str) -> list[Change]:
    """Files changed from ``parent`` to ``commit`` with git's rename detection (``diff --raw -M -z``)."""
    out = _git(repo, "diff", "--raw", "-z", "--no-abbrev", "-M", parent, commit)
    fields = out.split(b"\0")
    result: list[Change] = []
    i = 0
    while i < len(fields) - 1:
        meta = fields[i].decode()
        if not meta.startswith(":"):
            i += 1
            continue
        old_mode, new_mode, old_sha, new_sha, status = meta[1:].split()
        if status[0] in "RC":
            old_path, new_path = os.fsdecode(fields[i + 1]), os.fsdecode(fields[i + 2])
            i += 3
        else:
            old_path = new_path = os.fsdecode(fields[i + 1])
            i += 2
        if old_mode in _SPECIAL_MODES or new_mode in _SPECIAL_MODES:
            continue  # symlink or submodule: not code under the rubric
        result.append(
            Change(
                status[0],
                old_path,
                new_path,
                None if old_sha == _NO_FILE else old_sha,
                None if new_sha == _NO_FILE else new_sha,
            )
        )
    return result


def _ranges(diff: bytes) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Changed line ranges ``(old, new)`` (1-based inclusive) from a ``--unified=0`` diff."""
    new_ranges, old_ranges = [], []
    for m in _HUNK.finditer(diff):
        o_start, o_len = int(m.group(1)), int(m.group(2) or 1)
        n_start, n_len = int(m.group(3)), int(m.group(4) or 1)
        if n_len:
            new_ranges.append((n_start, n_start + n_len - 1))
        if o_len:
            old_ranges.append((o_start, o_start + o_len - 1))
    return old_ranges, new_ranges


def touched_symbols(reader: BlobReader, ch: Change) -> list[str]:
    """Ids ``new_path::qualname`` of the innermost symbols whose lines ``ch`` changes, on either side (an
    added file: all its symbols; a deleted one: all it had; a pure rename: none)."""
    if ch.old_sha and ch.new_sha:
        old_ranges, new_ranges = _ranges(
            _git(reader.repo, "diff", "--unified=0", "--no-color", ch.old_sha, ch.new_sha)
        )
    else:
        old_ranges, new_ranges = (_WHOLE if ch.old_sha else []), (_WHOLE if ch.new_sha else [])
    touched: list[str] = []
    for sha, path, ranges in ((ch.new_sha, ch.new_path, new_ranges), (ch.old_sha, ch.old_path, old_ranges)):
        if not ranges or not sha or not is_indexable(path):
            continue
        fp = reader.parse(path, sha)
        for lo, hi in ranges:
            inner = [s for s in fp.symbols if s.start_line <= hi and lo <= s.end_line]
            # count the innermost symbols only (a changed method is one symbol, not also its class)
            for s in inner:
                if (
                    not any(o is not s and o.parent == s.qualname for o in inner)
                    and s.qualname not in touched
                ):
                    touched.append(s.qualname)
    return [f"{ch.new_path}::{q}" for q in touched]


def select_commits(
    repo: str,
    max_commits: int = 500,
    since: str | None = None,
    until: str | None = None,
    sample: bool = False,
    seed: int = 0,
) -> tuple[list[tuple[str, str, str, int, str]], dict]:
    """The commits reachable from ``repo``'s HEAD (``git log``; ``since``/``until`` compare committer dates,
    any form git accepts) that rule 0 keeps before looking at files: not merges, not roots, not bots. Of those, the ``max_commits`` most recent, or (``sample``) a uniform random sample of that size
    drawn with ``seed``. Returns ``([(sha, parent, author, time_s, message)], counts)``, newest first."""
    args = ["log", "--format=%H%x00%P%x00%an%x00%at%x00%B%x1e"]
    args += [f"--since={since}"] if since else []
    args += [f"--until={until}"] if until else []
    log = _git(repo, *args)
    counts = {"commits": 0, "merge": 0, "root": 0, "bot": 0}
    eligible: list[tuple[str, str, str, int, str]] = []
    for rec in log.split(b"\x1e"):
        rec = rec.strip(b"\n")
        if not rec:
            continue
        sha, parents, author, at, body = (x.decode("utf-8", "replace") for x in rec.split(b"\0", 4))
        counts["commits"] += 1
        ps = parents.split()
        if len(ps) > 1:
            counts["merge"] += 1
        elif not ps:
            counts["root"] += 1
        elif is_bot(author):
            counts["bot"] += 1
        else:
            eligible.append((sha, ps[0], author, int(at), body.strip()))
    counts["eligible"] = len(eligible)
    if len(eligible) > max_commits:
        if sample:
            eligible = sorted(random.Random(seed).sample(eligible, max_commits), key=lambda c: -c[3])
        else:
            eligible = eligible[:max_commits]
    counts["selected"] = len(eligible)
    return eligible, counts


def build_tasks(
    repo: str,
    max_commits: int = 500,
    since: str | None = None,
    until: str | None = None,
    sample: bool = False,
    seed: int = 0,
) -> tuple[list[Task], dict]:
    """Turn the commits :func:`select_commits` picks into :class:`Task` s with gold labels, each routed against
    an index of its parent. Returns ``(tasks, counts)``; counts says how many commits were seen and why
    others were excluded (``merge``, ``root``, ``bot``, ``no_code``; ``renames``: renamed code files
    counted once; ``symbols_skipped``: tasks over :data:`MAX_SYMBOL_FILES` code files).
    Raises ``subprocess.CalledProcessError`` if ``repo`` is not a git checkout."""
    repo = os.path.abspath(repo)
    commits, counts = select_commits(repo, max_commits, since, until, sample, seed)
    counts.update(no_code=0, tasks=0, renames=0, symbols_skipped=0)
    tasks: list[Task] = []
    name = os.path.basename(repo.rstrip("/"))
    reader = BlobReader(repo)
    try:
        for sha, parent, author, at, body in commits:
            code = [
                c for c in changes(repo, parent, sha) if is_code_file(c.new_path) or is_code_file(c.old_path)
            ]
            if not code:
                counts["no_code"] += 1
                continue
            counts["renames"] += sum(c.status == "R" for c in code)
            symbols: list[str] = []
            skipped = len(code) > MAX_SYMBOL_FILES
            if skipped:
                counts["symbols_skipped"] += 1
            else:
                for c in code:
                    symbols += touched_symbols(reader, c)
            files = [c.new_path for c in code]
            tasks.append(
                Task(
                    name,
                    sha,
                    parent,
                    author,
                    at,
                    body,
                    files,
                    symbols,
                    gold_label(body, files, symbols),
                    symbols_skipped=skipped,
                    parent_files=[c.old_path for c in code if c.old_sha],
                )
            )
        counts["tasks"] = len(tasks)
        # route each task against the repository as it was at its parent
        for t in tasks:
            idx = index_at(reader, t.parent, t.repo)
            d = route(Retriever(idx), t.message)
            t.predicted, t.baseline, t.vector = d.topology, regex_route(t.message), d.vector.as_dict()
            t.retrieved_files = list(dict.fromkeys(h.node.split("::", 1)[0] for h in d.hits))
            t.parent_files = [p for p in t.parent_files if p in idx.files]
    finally:
        reader.close()
    return tasks, counts


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (95% by default). (0, 1) when n = 0."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for discordant counts b (A wrong, B right) and c (A right, B wrong)."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def cluster_key(t: Task) -> tuple[str, str, int]:
    """The cluster a task belongs to for the bootstrap: (repo, author, week of authoring). Commits of one
    author in one week are usually one piece of work (a pull request's commits) and share files."""
    return t.repo, t.author, t.time_s // (7 * 86400)


def cluster_bootstrap(tasks: list[Task], iters: int = 2000, seed: int = 0) -> dict:
    """Percentile 95% intervals of the router's and the baseline's misrouting rates and of their difference
    (router − baseline), resampling whole clusters (:func:`cluster_key`) with replacement ``iters`` times.
    Wider than Wilson's when tasks inside a cluster are alike (Wilson assumes independent tasks). With fewer
    than 2 clusters the intervals are ``None``; with a handful they are unreliable."""
    groups: dict[tuple, list[int]] = {}
    for t in tasks:
        g = groups.setdefault(cluster_key(t), [0, 0, 0])
        g[0] += 1
        g[1] += t.predicted != t.gold
        g[2] += t.baseline != t.gold
    sums = list(groups.values())
    if len(sums) < 2:  # one cluster: resampling cannot show any variation, so there is no interval
        return {"clusters": len(sums), "router95": None, "baseline95": None, "diff95": None}
    rng = random.Random(seed)
    r_rates, b_rates, diffs = [], [], []
    for _ in range(iters):
        n = rw = bw = 0
        for g in rng.choices(sums, k=len(sums)):
            n += g[0]
            rw += g[1]
            bw += g[2]
        r_rates.append(rw / n)
        b_rates.append(bw / n)
        diffs.append((rw - bw) / n)

    def pct(xs: list[float]) -> tuple[float, float]:
        xs.sort()
        return xs[int(0.025 * (len(xs) - 1))], xs[int(math.ceil(0.975 * (len(xs) - 1)))]

    return {"clusters": len(sums), "router95": pct(r_rates), "baseline95": pct(b_rates), "diff95": pct(diffs)}


def summarize(tasks: list[Task], counts: dict | None = None) -> dict:
    """Misrouting rates (router, regex baseline, and the trivial majority-class rule) with Wilson intervals,
    McNemar p, a cluster bootstrap (:func:`cluster_bootstrap`), per-repository rates, the confusion matrix,
    footprint recall (share of the changed files that existed at the parent found among the router's top
    hits: retrieval quality apart from the thresholds) and independence facts (repos, authors, clusters,
    time span)."""
    n = len(tasks)
    r_wrong = sum(t.predicted != t.gold for t in tasks)
    b_wrong = sum(t.baseline != t.gold for t in tasks)
    b = sum(t.predicted != t.gold and t.baseline == t.gold for t in tasks)
    c = sum(t.predicted == t.gold and t.baseline != t.gold for t in tasks)
    confusion = {g: {p: 0 for p in TOPOLOGIES} for g in TOPOLOGIES}
    for t in tasks:
        confusion[t.gold][t.predicted] += 1
    gold_dist = {g: sum(t.gold == g for t in tasks) for g in TOPOLOGIES}
    majority = max(TOPOLOGIES, key=lambda g: gold_dist[g])
    m_wrong = n - gold_dist[majority]
    by_repo: dict[str, dict] = {}
    for t in tasks:
        r = by_repo.setdefault(t.repo, {"n": 0, "router_misrouted": 0, "baseline_misrouted": 0})
        r["n"] += 1
        r["router_misrouted"] += t.predicted != t.gold
        r["baseline_misrouted"] += t.baseline != t.gold
    for r in by_repo.values():
        r["router_wilson95"] = wilson(r["router_misrouted"], r["n"])
        r["baseline_wilson95"] = wilson(r["baseline_misrouted"], r["n"])
    times = [t.time_s for t in tasks]
    boot = cluster_bootstrap(tasks)
    with_fp = [t for t in tasks if t.parent_files]
    recall = (
        (
            sum(len(set(t.parent_files) & set(t.retrieved_files)) / len(t.parent_files) for t in with_fp)
            / len(with_fp)
        )
        if with_fp
        else None
    )
    any_hit = sum(bool(set(t.parent_files) & set(t.retrieved_files)) for t in with_fp)
    return {
        "n": n,
        "counts": counts or {},
        "router": {"misrouted": r_wrong, "rate": r_wrong / n if n else None, "wilson95": wilson(r_wrong, n)},
        "baseline": {
            "misrouted": b_wrong,
            "rate": b_wrong / n if n else None,
            "wilson95": wilson(b_wrong, n),
        },
        "majority": {
            "label": majority,
            "misrouted": m_wrong,
            "rate": m_wrong / n if n else None,
            "wilson95": wilson(m_wrong, n),
        },
        "mcnemar": {"router_only_wrong": b, "baseline_only_wrong": c, "p": mcnemar_exact(b, c)},
        "cluster_bootstrap": boot,
        "footprint_recall": {
            "tasks": len(with_fp),
            "mean_recall": recall,
            "any_hit": any_hit,
            "any_hit_wilson95": wilson(any_hit, len(with_fp)),
        },
        "by_repo": by_repo,
        "gold_distribution": gold_dist,
        "confusion_gold_by_predicted": confusion,
        "independence": {
            "repos": len({t.repo for t in tasks}),
            "authors": len({t.author for t in tasks}),
            "clusters": boot["clusters"],
            "span_days": round((max(times) - min(times)) / 86400, 1) if times else 0,
            "first": min(times) if times else None,
            "last": max(times) if times else None,
        },
    }
