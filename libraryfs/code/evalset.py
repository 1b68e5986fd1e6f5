"""Routing tasks from real git history, gold labels from a written rubric, and the statistics (issue 9 item 4).

Each non-merge commit with a parent becomes one task: the **task** is the commit message (subject and
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
import re
import subprocess
from dataclasses import dataclass, field, replace

from libraryfs.code.index import CodeIndex, is_indexable
from libraryfs.code.parse import FileParse, parse_source
from libraryfs.code.retrieve import Retriever
from libraryfs.code.router import TOPOLOGIES, regex_route, route

RUBRIC = """\
Gold topology of a commit, from its footprint (never from the router):
  code files  = files the commit changes whose suffix is a programming language
                (.py .pyi .js .mjs .cjs .jsx .ts .tsx .go .rs .c .h .cc .cpp .hpp .java .rb .sh .bash .bats),
                tests included; docs, data, lock files and generated files excluded.
  symbols     = functions/classes/methods whose lines the commit changes (indexed languages only).
  0. Excluded: merge commits, root commits, commits that change no code file.
  1. DEEPRESEARCH if the subject line presents the work as an investigation: it contains
     investigate, explore, research, spike, experiment, prototype, profile, or is a question.
  2. FASTPATH     if exactly 1 code file changes and at most 3 of its symbols change.
  3. SUBAGENT     if 1 to 3 code files change (all the work fits one specialist).
  4. MULTIAGENT   if more than 3 code files change.
"""
GOLD_FAST_FILES = 1
GOLD_FAST_SYMBOLS = 3
GOLD_SUB_FILES = 3
CODE_SUFFIXES = frozenset(".py .pyi .js .mjs .cjs .jsx .ts .tsx .go .rs .c .h .cc .cpp .hpp .java .rb .sh .bash "
                          ".bats".split())
_GOLD_DEEP = re.compile(r"\b(investigat\w*|explor\w*|research\w*|spike|experiment\w*|prototyp\w*|profil\w*)\b|\?\s*$",
                        re.I)
_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.M)


def _git(repo: str, *args: str, input: bytes | None = None) -> bytes:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, input=input).stdout


def is_code_file(path: str) -> bool:
    """Whether a path counts as a code file under :data:`RUBRIC`."""
    name = path.rsplit("/", 1)[-1]
    return "." in name and name[name.rfind("."):] in CODE_SUFFIXES


@dataclass(slots=True)
class Task:
    """One routing task from one commit."""

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
        self.proc = subprocess.Popen(["git", "-C", repo, "cat-file", "--batch"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        self.parses: dict[tuple[str, str], FileParse] = {}

    def blob(self, sha: str) -> bytes:
        """Content of one blob."""
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(sha.encode() + b"\n")
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().split()
        if len(header) < 3 or header[1] != b"blob":
            return b""
        data = self.proc.stdout.read(int(header[2]))
        self.proc.stdout.read(1)
        return data

    def parse(self, path: str, sha: str) -> FileParse:
        """Parse of a blob at ``path`` (cached by blob id and suffix)."""
        key = (sha, path[path.rfind("."):])
        fp = self.parses.get(key)
        if fp is None:
            fp = self.parses[key] = parse_source(path, self.blob(sha), sha=sha)
        return fp if fp.path == path else replace(fp, path=path)

    def close(self) -> None:
        """End the git process."""
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait()


def index_at(reader: BlobReader, rev: str, name: str) -> CodeIndex:
    """A :class:`CodeIndex` of the tree at ``rev`` built from git objects (no checkout needed)."""
    idx = CodeIndex(name)
    out = _git(reader.repo, "ls-tree", "-r", "-z", rev)
    for entry in out.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        mode, kind, sha = meta.split()
        p = os.fsdecode(path)
        if kind == b"blob" and mode != b"120000" and is_indexable(p):
            idx.add_parse(reader.parse(p, sha.decode()))
        elif kind == b"blob" and p == "go.mod":
            for line in reader.blob(sha.decode()).decode("utf-8", "replace").splitlines():
                if line.startswith("module "):
                    idx.go_module = line.split()[1]
    return idx


def _touched_symbols(reader: BlobReader, commit: str, parent: str, path: str, diff: bytes) -> list[str]:
    new_ranges, old_ranges = [], []
    for m in _HUNK.finditer(diff):
        o_start, o_len = int(m.group(1)), int(m.group(2) or 1)
        n_start, n_len = int(m.group(3)), int(m.group(4) or 1)
        if n_len:
            new_ranges.append((n_start, n_start + n_len - 1))
        if o_len:
            old_ranges.append((o_start, o_start + o_len - 1))
    touched: list[str] = []
    for rev, ranges in ((commit, new_ranges), (parent, old_ranges)):
        if not ranges:
            continue
        try:
            sha = _git(reader.repo, "rev-parse", f"{rev}:{path}").decode().strip()
        except subprocess.CalledProcessError:
            continue  # file absent on that side
        fp = reader.parse(path, sha)
        for lo, hi in ranges:
            inner = [s for s in fp.symbols if s.start_line <= hi and lo <= s.end_line]
            # count the innermost symbols only (a changed method is one symbol, not also its class)
            for s in inner:
                if not any(o is not s and o.parent == s.qualname for o in inner) and s.qualname not in touched:
                    touched.append(s.qualname)
    return [f"{path}::{q}" for q in touched]


def build_tasks(repo: str, max_commits: int = 500) -> tuple[list[Task], dict]:
    """Turn up to ``max_commits`` recent non-merge commits of ``repo`` into :class:`Task` s with gold labels.
    Returns ``(tasks, counts)`` where counts says how many commits were seen and why others were excluded.
    Raises ``subprocess.CalledProcessError`` if ``repo`` is not a git checkout."""
    repo = os.path.abspath(repo)
    log = _git(repo, "log", "--no-merges", f"--max-count={max_commits}", "--format=%H%x00%P%x00%an%x00%at%x00%B%x1e")
    counts = {"commits": 0, "root": 0, "no_code": 0, "tasks": 0}
    tasks: list[Task] = []
    reader = BlobReader(repo)
    try:
        for rec in log.split(b"\x1e"):
            rec = rec.strip(b"\n")
            if not rec:
                continue
            counts["commits"] += 1
            sha, parents, author, at, body = (x.decode("utf-8", "replace") for x in rec.split(b"\0", 4))
            if not parents.strip():
                counts["root"] += 1
                continue
            parent = parents.split()[0]
            names = [os.fsdecode(p) for p in _git(repo, "diff", "--no-renames", "--name-only", "-z", parent, sha).split(b"\0") if p]
            code = [p for p in names if is_code_file(p)]
            if not code:
                counts["no_code"] += 1
                continue
            symbols: list[str] = []
            for p in code:
                if is_indexable(p):
                    diff = _git(repo, "diff", "--no-renames", "--unified=0", parent, sha, "--", p)
                    symbols += _touched_symbols(reader, sha, parent, p, diff)
            tasks.append(Task(os.path.basename(repo), sha, parent, author, int(at), body.strip(), code, symbols,
                              gold_label(body, code, symbols)))
        counts["tasks"] = len(tasks)
        # route each task against the repository as it was at its parent
        for t in tasks:
            idx = index_at(reader, t.parent, t.repo)
            d = route(Retriever(idx), t.message)
            t.predicted, t.baseline, t.vector = d.topology, regex_route(t.message), d.vector.as_dict()
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


def summarize(tasks: list[Task], counts: dict | None = None) -> dict:
    """Misrouting rates (router, baseline) with Wilson intervals, McNemar p, confusion matrix and
    independence facts (repos, authors, time span)."""
    n = len(tasks)
    r_wrong = sum(t.predicted != t.gold for t in tasks)
    b_wrong = sum(t.baseline != t.gold for t in tasks)
    b = sum(t.predicted != t.gold and t.baseline == t.gold for t in tasks)
    c = sum(t.predicted == t.gold and t.baseline != t.gold for t in tasks)
    confusion = {g: {p: 0 for p in TOPOLOGIES} for g in TOPOLOGIES}
    for t in tasks:
        confusion[t.gold][t.predicted] += 1
    times = [t.time_s for t in tasks]
    return {
        "n": n,
        "counts": counts or {},
        "router": {"misrouted": r_wrong, "rate": r_wrong / n if n else None, "wilson95": wilson(r_wrong, n)},
        "baseline": {"misrouted": b_wrong, "rate": b_wrong / n if n else None, "wilson95": wilson(b_wrong, n)},
        "mcnemar": {"router_only_wrong": b, "baseline_only_wrong": c, "p": mcnemar_exact(b, c)},
        "gold_distribution": {g: sum(t.gold == g for t in tasks) for g in TOPOLOGIES},
        "confusion_gold_by_predicted": confusion,
        "independence": {"repos": len({t.repo for t in tasks}), "authors": len({t.author for t in tasks}),
                         "span_days": round((max(times) - min(times)) / 86400, 1) if times else 0},
    }
