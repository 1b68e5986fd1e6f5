"""Routing tasks from real git history, gold labels from a written rubric (issue 9 item 4, issue 17).

Each non-merge, non-bot commit with a parent becomes one task: the **task** is the commit message (subject and
body), the **footprint** is what the commit really changed (code files, the symbols whose lines it
changed), and the **gold topology** comes from :data:`RUBRIC` applied to that footprint. The router sees only
the message, the repository *as it was at the parent commit* (the index is built from git objects) and the
history *reachable from the parent* (:class:`RepoHistory`), so the future never leaks in; the regex baseline
sees only the message.

Gold labels never read the router's features or thresholds: the rubric's constants live here, written from
the paper's definitions of the topologies (a single-file edit; one specialist for up to three files; a
pipeline or swarm beyond; an investigation), and are applied to the true footprint that the router must
*predict*. Each task also stores the router's features (intent, candidate files with their feature vectors)
so that :mod:`libraryfs_bench.code.fit` can fit and evaluate without rebuilding anything.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
from dataclasses import dataclass, field, replace

from libraryfs.features.code.cues import text_features
from libraryfs.features.code.history import CoChange
from libraryfs.features.code.index import MAX_FILE_BYTES, CodeIndex, is_indexable
from libraryfs.features.code.parse import FileParse, parse_source
from libraryfs.features.code.retrieve import Retriever
from libraryfs.features.code.router import regex_route, route

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
    """One routing task from one commit. ``time_s``: author time, ``commit_time_s``: committer time (the
    split's order); ``parent_files``: the changed code files as named at the parent (existing there);
    ``retrieved_files``: files of the router's top hits; ``intent``/``qtype``/``coverage``: the router's
    reading of the message; ``candidates``: ``[path, features]`` of the footprint candidates
    (:data:`libraryfs.features.code.footprint.FEATURES`); ``habit_files``: median files of recent commits;
    ``text_features``: :func:`libraryfs.features.code.cues.text_features` of the message;
    ``footprint_files``/``expected_files``: the estimate under the model the task was routed with."""

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
    commit_time_s: int = 0
    intent: str = ""
    qtype: str = ""
    coverage: float = 0.0
    candidates: list = field(default_factory=list)
    habit_files: float = 1.0
    text_features: list[float] = field(default_factory=list)
    footprint_files: list[str] = field(default_factory=list)
    expected_files: float = 0.0

    def label_files(self) -> set[str]:
        """The changed code files under either name (a candidate is right if it is one of them)."""
        return set(self.code_files) | set(self.parent_files)


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
        if self.proc.stdout:
            self.proc.stdout.close()


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
    rev: str = "HEAD",
) -> tuple[list[tuple[str, str, str, int, str, int]], dict]:
    """The commits reachable from ``rev`` (``git log``; ``since``/``until`` compare committer dates, any form
    git accepts) that rule 0 keeps before looking at files: not merges, not roots, not bots. Of those, the
    ``max_commits`` most recent, or (``sample``) a uniform random sample of that size drawn with ``seed``.
    Returns ``([(sha, parent, author, author_time_s, message, commit_time_s)], counts)``, newest first."""
    args = ["log", "--format=%H%x00%P%x00%an%x00%at%x00%ct%x00%B%x1e", rev, "--"]
    args[1:1] = ([f"--since={since}"] if since else []) + ([f"--until={until}"] if until else [])
    log = _git(repo, *args)
    counts = {"commits": 0, "merge": 0, "root": 0, "bot": 0}
    eligible: list[tuple[str, str, str, int, str, int]] = []
    for rec in log.split(b"\x1e"):
        rec = rec.strip(b"\n")
        if not rec:
            continue
        sha, parents, author, at, ct, body = (x.decode("utf-8", "replace") for x in rec.split(b"\0", 5))
        counts["commits"] += 1
        ps = parents.split()
        if len(ps) > 1:
            counts["merge"] += 1
        elif not ps:
            counts["root"] += 1
        elif is_bot(author):
            counts["bot"] += 1
        else:
            eligible.append((sha, ps[0], author, int(at), body.strip(), int(ct)))
    counts["eligible"] = len(eligible)
    if len(eligible) > max_commits:
        if sample:
            eligible = sorted(random.Random(seed).sample(eligible, max_commits), key=lambda c: -c[3])
        else:
            eligible = eligible[:max_commits]
    counts["selected"] = len(eligible)
    return eligible, counts


class RepoHistory:
    """Every commit reachable from ``rev`` with its parents, committer time and indexable source files (one
    ``git log``); :meth:`at` gives the :class:`~libraryfs.features.code.history.CoChange` a router would have
    seen at a commit — its ancestors only."""

    def __init__(self, repo: str, rev: str = "HEAD") -> None:
        out = _git(repo, "log", "-M", "--name-only", "-z", "--format=%x1e%H %ct %P", rev, "--")
        self.parents: dict[str, list[str]] = {}
        self.time: dict[str, int] = {}
        self.files: dict[str, tuple[str, ...]] = {}
        for rec in out.split(b"\x1e")[1:]:
            head, _, body = rec.partition(b"\0")
            sha, ct, *parents = head.decode().split()
            self.parents[sha], self.time[sha] = parents, int(ct)
            if len(parents) <= 1:  # merges: no co-change evidence of their own (their commits count)
                paths = (os.fsdecode(p).strip("\n") for p in body.split(b"\0"))
                self.files[sha] = tuple(p for p in paths if p and is_indexable(p))

    def at(self, commit: str) -> CoChange:
        """History up to and including ``commit``: its non-merge ancestors that changed source files, oldest
        first (committer time, then id)."""
        seen: set[str] = set()
        stack = [commit]
        while stack:
            c = stack.pop()
            if c in seen or c not in self.parents:
                continue
            seen.add(c)
            stack.extend(self.parents[c])
        order = sorted((c for c in seen if self.files.get(c)), key=lambda c: (self.time[c], c))
        return CoChange(self.files[c] for c in order)


def repo_name(path: str) -> str:
    """A checkout's name: its directory's name without a ``.git`` suffix (``/x/click.git`` → ``click``)."""
    base = os.path.basename(os.path.abspath(path).rstrip("/"))
    return base[:-4] if base.endswith(".git") and len(base) > 4 else base


def build_tasks(
    repo: str,
    max_commits: int = 500,
    since: str | None = None,
    until: str | None = None,
    sample: bool = False,
    seed: int = 0,
    rev: str = "HEAD",
) -> tuple[list[Task], dict]:
    """Turn the commits :func:`select_commits` picks into :class:`Task` s with gold labels, each routed against
    an index and a history of its parent. Returns ``(tasks, counts)``; counts says how many commits were
    seen and why others were excluded (``merge``, ``root``, ``bot``, ``no_code``; ``renames``: renamed code
    files counted once; ``symbols_skipped``: tasks over :data:`MAX_SYMBOL_FILES` code files) and ``head``,
    the commit ``rev`` resolved to. Raises ``subprocess.CalledProcessError`` if ``repo`` is not a git
    repository (or ``rev`` is unknown)."""
    repo = os.path.abspath(repo)
    head = _git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}").decode().strip()
    commits, counts = select_commits(repo, max_commits, since, until, sample, seed, head)
    counts.update(no_code=0, tasks=0, renames=0, symbols_skipped=0, head=head)
    tasks: list[Task] = []
    name = repo_name(repo)
    reader = BlobReader(repo)
    try:
        for sha, parent, author, at, body, ct in commits:
            task = _task(reader, name, sha, parent, author, at, body, counts)
            if task is not None:
                task.commit_time_s = ct
                tasks.append(task)
        counts["tasks"] = len(tasks)
        history = RepoHistory(repo, head)
        for t in tasks:
            route_task(t, index_at(reader, t.parent, t.repo), history.at(t.parent))
    finally:
        reader.close()
    return tasks, counts


def _task(
    reader: BlobReader, name: str, sha: str, parent: str, author: str, at: int, body: str, counts: dict
) -> Task | None:
    """The task of one commit, or ``None`` (counted) when it changes no code file."""
    code = [
        c for c in changes(reader.repo, parent, sha) if is_code_file(c.new_path) or is_code_file(c.old_path)
    ]
    if not code:
        counts["no_code"] += 1
        return None
    counts["renames"] += sum(c.status == "R" for c in code)
    symbols: list[str] = []
    skipped = len(code) > MAX_SYMBOL_FILES
    if skipped:
        counts["symbols_skipped"] += 1
    else:
        for c in code:
            symbols += touched_symbols(reader, c)
    files = [c.new_path for c in code]
    return Task(
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


def route_task(t: Task, idx: CodeIndex, history: CoChange) -> None:
    """Route ``t`` against the parent's index and history with the shipped router; record its prediction,
    the regex baseline's, and the features :mod:`libraryfs_bench.code.fit` refits on."""
    d = route(Retriever(idx), t.message, history=history)
    t.predicted, t.baseline, t.vector = d.topology, regex_route(t.message), d.vector.as_dict()
    t.retrieved_files = list(dict.fromkeys(h.node.split("::", 1)[0] for h in d.hits))
    t.parent_files = [p for p in t.parent_files if p in idx.files]
    t.intent, t.qtype, t.coverage = d.intent, d.qtype, d.coverage
    fp = d.footprint
    if fp is not None:
        t.candidates = [[c.path, [round(v, 6) for v in c.x]] for c in sorted(fp.files, key=lambda c: c.path)]
        t.habit_files = fp.habit_files
        t.expected_files = round(fp.expected_files, 6)
    t.text_features = [round(v, 6) for v in text_features(t.message)]
    t.footprint_files = d.files


def save_tasks(path: str, tasks: list[Task], public: bool = False) -> None:
    """Write tasks as JSON lines (gzip when ``path`` ends in ``.gz``). ``public``: without messages, and with
    each author replaced by a short hash (enough for clustering) — what ``bench/…/code/data/`` keeps."""
    import gzip
    import hashlib
    import json
    from dataclasses import asdict

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        for t in tasks:
            d = asdict(t)
            if public:
                d["message"] = ""
                d["author"] = hashlib.sha256(t.author.encode()).hexdigest()[:12]
            f.write(json.dumps(d, separators=(",", ":")) + "\n")


def load_tasks(path: str) -> list[Task]:
    """Read what :func:`save_tasks` wrote. Raises ``ValueError`` on a line that is not a task."""
    import gzip
    import json

    opener = gzip.open if path.endswith(".gz") else open
    out: list[Task] = []
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(Task(**json.loads(line)))
            except (TypeError, json.JSONDecodeError) as e:
                raise ValueError(f"{path}:{n}: not a task ({e})") from None
    return out
