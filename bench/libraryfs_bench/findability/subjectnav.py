"""A TOC-only navigator that uses a labelled subject index (a back-of-book index) when the master page has one.

The policy an agent with no world knowledge follows, from what the pages say about themselves:

1. read the master ``INDEX.md``;
2. a query of one word (no whitespace: a name) walks the TOC as :class:`~.navigators.TocNavigator` does,
   but enters a line labelled as an ``A–Z`` name index first when the master page has one (one looks a name
   up in the index of names before browsing the shelves; the walk's lexical scores depend on how many lines
   the page holds, so one more master line could outrank it);
3. otherwise, if a line of the master page says it is a *subject index* (its text says so), read that
   index's root page and descend, for the query's content words, to the alphabetical range pages that
   hold them — pages holding more of the words first, at most ``page_reads`` of them below the root;
4. on those pages, each word's line says how many entries use it and links the entries where it weighs most;
   score every linked entry by Σ over the query's words of log(1 + 1000 / entries using the word) ×
   a rank weight (first link 1, then 0.7, 0.5) — rare words count most — and read the best ones (at most
   ``entry_reads``), stopping at one that holds most of the query's words (the walk's confirmation rule);
5. if nothing was confirmed, answer the best entry read when it holds at least ``fallback_below`` of the
   query's words; otherwise (or with no candidate at all) walk the TOC from the master page as before,
   keeping the best entry read so far.

It uses the query's words only (never its kind label), the benchmark's own lexical helpers (:mod:`.text`) and
its own Markdown parsing; nothing from libraryfs's subject index code.
"""

from __future__ import annotations

import math
import posixpath
import re
import urllib.parse

from .navigators import CONFIRM_SHARE, Outcome, TocNavigator, entry_share, is_name_query
from .reader import INDEX_NAME, Lookup, TocLine, parse_toc
from .text import stem

#: a master-page line that calls itself a subject index
_SUBJECT_INDEX = re.compile(r"\bsubject index\b", re.IGNORECASE)
#: ``- word — N entries: [name](link), …``: one word's line on a subject page
_WORD_LINE = re.compile(r"^\s*[-*]\s+(\S+)\s+—\s+([\d,]+)\s+entr(?:y|ies):\s*(.*)$")
_LINK = re.compile(r"\[((?:\\.|[^\]\\])*)\]\(([^)\s]+)\)")
_RANGE = re.compile(r"^(.*?)\s+…\s+(.*)$")
RANK_WEIGHTS = (1.0, 0.7, 0.5)
_WORD = re.compile(r"^[a-z]{3,}$")


def subject_index_line(lines: list[TocLine]) -> TocLine | None:
    """The master page's line to a subject index (its text says ``subject index``), else None."""
    return next((ln for ln in lines if ln.is_toc and _SUBJECT_INDEX.search(ln.rest)), None)


def index_words(qterms: list[str]) -> list[str]:
    """The query words worth looking up: plain words of at least 3 letters (an index of words lists no
    numbers), longest first (a longer word is usually a rarer one)."""
    words = [t for t in qterms if _WORD.match(t)]
    return sorted(dict.fromkeys(words), key=lambda w: -len(w))


def in_range(word: str, label: str) -> bool:
    """Whether ``word`` lies in an alphabetical range label ``lo … hi`` (a key starting with ``hi``
    included) or equals/starts with a single-key label."""
    m = _RANGE.match(label.strip())
    lo, hi = (m.group(1), m.group(2)) if m else (label.strip(), label.strip())
    lo, hi = lo.lower(), hi.lower()
    return lo <= word <= hi + "\uffff"


def word_lines(text: str, page: str) -> list[tuple[str, int, list[str]]]:
    """``(word, entries using it, [entry path, …])`` of each word line of a subject page (paths
    library-relative, resolved against ``page``)."""
    base = posixpath.dirname(page)
    out = []
    for raw in text.splitlines():
        m = _WORD_LINE.match(raw)
        if not m:
            continue
        paths = []
        for _label, target in _LINK.findall(m.group(3)):
            p = posixpath.normpath(posixpath.join(base, urllib.parse.unquote(target)))
            if not p.startswith(".."):
                paths.append(p)
        out.append((m.group(1).lower(), int(m.group(2).replace(",", "")), paths))
    return out


def score_entries(words: list[str], found: list[tuple[str, int, list[str]]]) -> list[tuple[float, str]]:
    """Entries linked from the word lines matching the query's words (equal, or equal after the crude
    stem), scored as the module docstring says; best first."""
    scores: dict[str, float] = {}
    for w in words:
        sw = stem(w)
        best: dict[str, float] = {}
        for lw, df, paths in found:
            if lw != w and stem(lw) != sw:
                continue
            idf = math.log(1 + 1000 / max(df, 1))
            for r, p in enumerate(paths):
                v = idf * RANK_WEIGHTS[min(r, len(RANK_WEIGHTS) - 1)]
                best[p] = max(best.get(p, 0.0), v)
        for p, v in best.items():
            scores[p] = scores.get(p, 0.0) + v
    return sorted(((s, p) for p, s in scores.items()), key=lambda x: (-x[0], x[1]))


class SubjectNavigator:
    """The policy of the module docstring; ``max_reads`` bounds a lookup as the walk's does."""

    name = "toc"

    def __init__(
        self,
        max_reads: int = 16,
        page_reads: int = 2,
        entry_reads: int = 1,
        fallback_below: float = 0.3,
    ) -> None:
        self.walk = TocNavigator(max_reads)
        self.page_reads = page_reads
        self.entry_reads = entry_reads
        self.fallback_below = fallback_below

    def run(self, query: str, lookup: Lookup) -> Outcome:
        """Navigate for ``query``; reads are recorded in ``lookup``."""
        root = lookup.read(INDEX_NAME)
        if root is None:
            return Outcome(None)
        line = None if is_name_query(query) else subject_index_line(parse_toc(root, INDEX_NAME))
        words = index_words(self.walk_terms(query))
        if line is None or not words:
            return self.walk.run(query, lookup, root_text=root, name_index_first=True)
        trace: list[dict] = []
        found = self._lookup_words(words, line.path, lookup, trace)
        ranked = score_entries(words, found)
        trace.append({"candidates": [[round(s, 2), p] for s, p in ranked[:5]]})
        qterms = self.walk_terms(query)
        best: tuple[float, str] | None = None
        for _s, p in ranked[: self.entry_reads]:
            text = lookup.read(p)
            if text is None:
                continue
            share = entry_share(qterms, self.walk.terms.get(p, text))
            trace.append({"entry": p, "share": round(share, 2)})
            if best is None or share > best[0]:
                best = (share, p)
            if share >= CONFIRM_SHARE:
                return Outcome(p, [p], trace=trace)
        if best is not None and best[0] >= self.fallback_below:
            return Outcome(best[1], [best[1]], trace=trace)
        out = self.walk.run(query, lookup, root_text=root, best=best, read=[p for _s, p in ranked])
        out.trace = trace + out.trace
        return out

    @staticmethod
    def walk_terms(query: str) -> list[str]:
        """The query's content terms (:func:`~.text.query_terms`)."""
        from .text import query_terms

        return query_terms(query)

    def _lookup_words(
        self, words: list[str], index_page: str, lookup: Lookup, trace: list[dict]
    ) -> list[tuple[str, int, list[str]]]:
        """Descend the subject index from its root for ``words``, depth first, the range pages holding more
        of the words first, at most ``page_reads`` pages below the root. Returns the word lines read."""
        found: list[tuple[str, int, list[str]]] = []
        reads = 0

        def visit(page: str, body: str, want: list[str]) -> None:
            """Take the page's word lines, then its range pages holding the most of ``want``, depth first."""
            nonlocal reads
            found.extend(word_lines(body, page))
            kids: dict[str, list[str]] = {}
            for ln in parse_toc(body, page):
                if ln.is_toc and not ln.label.startswith("↑"):
                    for w in want:
                        if in_range(w, ln.label) and w not in kids.setdefault(ln.path, []):
                            kids[ln.path].append(w)
            order = sorted(
                ((p, ws) for p, ws in kids.items() if ws),
                key=lambda kv: (-len(kv[1]), -len(max(kv[1], key=len))),
            )
            for kid, ws in order:
                if reads >= self.page_reads:
                    return
                text = lookup.read(kid)
                reads += 1
                trace.append({"page": kid, "words": ws})
                if text is not None:
                    visit(kid, text, ws)

        root = lookup.read(index_page)
        if root is not None:
            visit(index_page, root, words)
        return found
