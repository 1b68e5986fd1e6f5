"""Flat baselines: everything is read; no TOC. Their cost per lookup is the flat cost (every entry).

* :class:`GrepBaseline` — GNU ``grep`` over a copy of all entries (copied once out of the mount, byte for
  byte): first ``grep -rliF -e QUERY`` (the whole query, case-insensitive); when that matches nothing,
  ``grep -rciF -e TERM`` per content term, ranking files by distinct terms matched, then matching lines.
  Ties keep path order (grep has no ranking of its own).
* :class:`BM25Baseline` — Okapi BM25 (``rank_bm25.BM25Okapi``, k1 = 1.5, b = 0.75, its defaults) over the
  same entries, tokenised with :func:`.text.terms` and :func:`.text.stem`. ``rank_bm25`` is already a
  libraryfs dependency (episodic recall, code retrieval) and has no native parts; bm25s is faster on
  millions of documents, which no corpus here approaches.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from .navigators import Outcome
from .text import query_terms, stem, terms


class GrepBaseline:
    """``grep -r`` over a local copy of the entries (see module docstring)."""

    name = "grep"

    def __init__(self, texts: dict[str, bytes]) -> None:
        if shutil.which("grep") is None:
            raise RuntimeError("grep is not installed")
        self.dir = tempfile.mkdtemp(prefix="findbench-grep-")
        for rel, data in texts.items():
            p = os.path.join(self.dir, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)

    def close(self) -> None:
        """Remove the copy."""
        shutil.rmtree(self.dir, ignore_errors=True)

    def _grep(self, *args: str) -> list[str]:
        p = subprocess.run(
            ["grep", "-r", *args, "."], cwd=self.dir, capture_output=True, text=True, errors="replace"
        )
        if p.returncode > 1:
            raise RuntimeError(f"grep failed: {p.stderr.strip()}")
        return [ln[2:] if ln.startswith("./") else ln for ln in p.stdout.splitlines()]

    def run(self, query: str) -> Outcome:
        """Ranked files for ``query``."""
        q = query.strip()
        if not q:
            return Outcome(None)
        files = sorted(self._grep("-liF", "-e", q))
        if not files:
            score: dict[str, list[int]] = {}
            for t in query_terms(q):
                for ln in self._grep("-ciF", "-e", t):
                    path, _, n = ln.rpartition(":")
                    if n.isdigit() and int(n) > 0:
                        s = score.setdefault(path, [0, 0])
                        s[0] += 1
                        s[1] += int(n)
            files = [p for p, _ in sorted(score.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))]
        return Outcome(files[0] if files else None, files[:50])


def bm25_tokens(text: str) -> list[str]:
    """BM25 tokens: stemmed content terms."""
    return [stem(t) for t in terms(text)]


class BM25Baseline:
    """Okapi BM25 over every entry (see module docstring)."""

    name = "bm25"

    def __init__(self, texts: dict[str, bytes]) -> None:
        from rank_bm25 import BM25Okapi

        self.paths = sorted(texts)
        self.bm25 = BM25Okapi([bm25_tokens(texts[p].decode("utf-8", "replace")) for p in self.paths])

    def run(self, query: str) -> Outcome:
        """The 50 best entries for ``query``."""
        toks = bm25_tokens(query) or [query.lower()]
        scores = self.bm25.get_scores(toks)
        order = sorted(range(len(self.paths)), key=lambda i: (-scores[i], i))[:50]
        ranked = [self.paths[i] for i in order if scores[i] > 0]
        return Outcome(ranked[0] if ranked else None, ranked)
