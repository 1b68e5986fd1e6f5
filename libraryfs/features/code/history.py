"""Co-change history of a repository's source files: what past commits changed together (PAPERS.md §3).

A change rarely touches only the code a task's words name: a fix comes with its test, a new option touches
the command and its documentation example, a rename ripples through the importers. The files that changed
*together* in the past are the best evidence of what a change to one of them touches next (Zimmermann et
al., "Mining version histories to guide software changes", ICSE 2004).

:class:`CoChange` keeps, for each past non-merge commit, the indexable source files it changed (git's rename
detection: a renamed file under its new name). From that it answers, for a file ``f``:

* :meth:`CoChange.changes` — how many past commits changed ``f`` (its support);
* :meth:`CoChange.partners` — for every other file ``g``, the confidence P(g | f) = commits changing both /
  commits changing ``f`` (commits over :data:`PAIR_MAX_FILES` files — mass reformatting, vendoring — do not
  count as evidence of coupling);
* :meth:`CoChange.sizes` — the number of source files each past commit touching ``f`` changed.

Built from ``git log`` of a checkout (:meth:`CoChange.from_git`, the most recent :data:`MAX_COMMITS`), or
from any list of commits (the evaluation builds one per task from the commits *reachable from the task's
parent*, so the future never leaks in). Serialized with the code index (``.codeindex.json``, key
``history``).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Sequence

from libraryfs.features.code.index import is_indexable

#: Commits changing more files than this are kept for sizes but not as co-change evidence.
PAIR_MAX_FILES = 30
#: History read by :meth:`CoChange.from_git`: the most recent non-merge commits.
MAX_COMMITS = 5000


class CoChange:
    """Co-change statistics over past commits; ``commits`` = one tuple of source paths per commit, oldest
    first (order is only used by :meth:`recent_sizes`)."""

    def __init__(self, commits: Iterable[Sequence[str]]) -> None:
        self.commits: list[tuple[str, ...]] = [tuple(dict.fromkeys(c)) for c in commits if c]
        self.by_file: dict[str, list[int]] = {}
        for i, files in enumerate(self.commits):
            for f in files:
                self.by_file.setdefault(f, []).append(i)

    def __len__(self) -> int:
        """Number of past commits held."""
        return len(self.commits)

    def changes(self, path: str) -> int:
        """Past commits that changed ``path``."""
        return len(self.by_file.get(path, ()))

    def sizes(self, path: str) -> list[int]:
        """Source files changed by each past commit that changed ``path`` (oldest first)."""
        return [len(self.commits[i]) for i in self.by_file.get(path, ())]

    def recent_sizes(self, n: int = 200) -> list[int]:
        """Source files changed by each of the last ``n`` commits (the repository's habit)."""
        return [len(c) for c in self.commits[-n:]]

    def partners(self, path: str, min_support: int = 2) -> dict[str, float]:
        """P(g | ``path``) for every file ``g`` changed together with ``path`` in at least ``min_support``
        commits of at most :data:`PAIR_MAX_FILES` files. Empty when ``path`` has no history."""
        idx = self.by_file.get(path, ())
        if not idx:
            return {}
        counts: dict[str, int] = {}
        for i in idx:
            files = self.commits[i]
            if len(files) > PAIR_MAX_FILES:
                continue
            for g in files:
                if g != path:
                    counts[g] = counts.get(g, 0) + 1
        n = len(idx)
        return {g: k / n for g, k in counts.items() if k >= min_support}

    # ---- persistence and construction ------------------------------------------------------------------
    def to_list(self) -> list[list[str]]:
        """JSON-ready form (one list of paths per commit, oldest first)."""
        return [list(c) for c in self.commits]

    @classmethod
    def from_list(cls, data: Iterable[Sequence[str]]) -> CoChange:
        """Inverse of :meth:`to_list`."""
        return cls(data)

    @classmethod
    def from_git(cls, repo: str, rev: str = "HEAD", max_commits: int = MAX_COMMITS) -> CoChange | None:
        """History of ``repo`` (a checkout or bare repository) up to ``rev``: the last ``max_commits``
        non-merge commits, each reduced to its indexable source files. ``None`` when ``repo`` is not a git
        repository or git is missing (the router then works without history)."""
        if not os.path.isdir(repo):
            return None
        try:
            out = subprocess.run(
                ["git", "-C", repo, "log", "--no-merges", "-M", "--name-only", "-z",
                 f"--max-count={max_commits}", "--format=%x1e%H", rev, "--"],
                check=True, capture_output=True,
            ).stdout  # fmt: skip
        except (OSError, subprocess.CalledProcessError):
            return None
        return cls(reversed(parse_name_only_log(out)))


def parse_name_only_log(out: bytes) -> list[list[str]]:
    """The indexable paths of each commit in ``git log --name-only -z --format=%x1e%H`` output, in log
    order (newest first)."""
    commits: list[list[str]] = []
    for rec in out.split(b"\x1e")[1:]:
        fields = rec.split(b"\n", 1)
        body = fields[1] if len(fields) > 1 else b""
        paths = [os.fsdecode(p).strip("\n") for p in body.split(b"\0")]
        commits.append([p for p in paths if p and is_indexable(p)])
    return commits
