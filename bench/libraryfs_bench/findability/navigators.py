"""Deterministic navigators that read only what an agent can read through the mount.

* :class:`TocNavigator` — an agent with no world knowledge: it reads ``INDEX.md`` pages only (master →
  section → ``.index/NNNN.md``), scores every link line by lexical match with the query, and walks
  depth-first along the best lines, backtracking when a branch runs dry. Reaching an entry costs a read of it
  (unless its line quotes the file's whole text on a page that says so: then the quote is the entry, no
  read); the entry is *confirmed* when it contains most of the query's terms, or when it was reached by the line of an A–Z
  name index whose label is exactly the queried name; else the walk goes on. Inside an A–Z name index
  (entered by its ``names A–Z`` line) a name query follows only the range lines whose ``lo … hi`` holds
  the whole name, as a reader of a book's index does. When the read budget runs out it answers the best
  entry it read.
* :class:`FindNavigator` — ``ls .find/<query>/`` through the mount (``libraryfs find`` for a query that
  cannot be a path component), then the same confirming reads down the ranked list.

Both use only :mod:`.text` for matching; neither imports libraryfs's finder or TOC code.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from libraryfs.fs.generated import FIND_DIRNAME

from .reader import INDEX_NAME, Lookup, TocLine, is_hit, parse_toc
from .text import query_terms, stem, terms

#: an entry is confirmed when it holds at least this share of the query's distinct (stemmed) terms
CONFIRM_SHARE = 0.6
_RANGE = re.compile(r"^(.*?)\s+…\s+(.*)$")
#: a line labelled as an alphabetical index of names (``names A–Z``): the whole key space, for names only
_NAME_INDEX = re.compile(r"\bA\s*[–-]\s*Z$", re.IGNORECASE)


def is_name_query(query: str) -> bool:
    """Whether a query is one name (``json.dumps``, ``--verbose``, a headword) rather than a phrase: it has
    no whitespace. An A–Z index is where one looks up a name, never a sentence."""
    return bool(query.strip()) and len(query.split()) == 1


#: leading characters an A–Z index files a name without (``__init__`` under I, ``--help`` under H), as
#: the catalogue's pages say in their introduction
_LEAD_PUNCT = "_-.~!@#$%^&*+=:;,/\\|?'\"`<>()[]{} "


def index_key(name: str) -> str:
    """Where a name is filed in an A–Z index: case ignored, leading punctuation ignored."""
    return (name.lstrip(_LEAD_PUNCT) or name).lower()


def range_holds(key: str, label: str) -> bool | None:
    """Whether the alphabetical range of a range line's label (``lo … hi``, or one prefix ``n``) holds the
    index key ``key`` (a key starting with ``hi`` included; a label cut with a trailing ``…`` is a
    prefix); None when the label states no range (``(no names)``)."""
    text = label.strip()
    if not text or text.startswith("("):
        return None
    m = _RANGE.match(text)
    lo, hi = (m.group(1), m.group(2)) if m else (text, text)
    lo, hi = index_key(lo.rstrip("…")), index_key(hi.rstrip("…"))
    return lo <= key <= hi + "\uffff"


def is_name_index(line: TocLine) -> bool:
    """Whether a TOC line labels itself an A–Z index of names (its label ends in ``A–Z``)."""
    return bool(_NAME_INDEX.search(line.label.strip()))


def stem_set(text: str) -> set[str]:
    """Stemmed terms of ``text`` (stopwords kept out)."""
    return {stem(t) for t in terms(text)}


def entry_share(qterms: list[str], text_terms: set[str]) -> float:
    """Share of the query's stemmed terms present in a text's term set."""
    qs = {stem(t) for t in qterms}
    return sum(1 for t in qs if t in text_terms) / len(qs) if qs else 0.0


@dataclass
class Outcome:
    """What a navigator did for one query: its answer, ranking (if any), reads and notes."""

    answer: str | None
    ranked: list[str] = field(default_factory=list)
    reads: list = field(default_factory=list)
    trace: list[dict] = field(default_factory=list)
    error: str | None = None
    api_tokens: int = 0


class _TermCache:
    """Stemmed term sets of entries, computed once per path (a computation cache; every read is still a
    real counted read through the mount)."""

    def __init__(self) -> None:
        self.sets: dict[str, set[str]] = {}

    def get(self, path: str, text: str) -> set[str]:
        s = self.sets.get(path)
        if s is None:
            s = self.sets[path] = stem_set(text)
        return s


def score_lines(qterms: list[str], lines: list[TocLine], name_query: bool = False) -> list[float]:
    """Lexical score of each line of one page: Σ over query terms of (3 if in the name/label, 1 if in the
    rest) × the term's rarity on this page (log(1 + lines / lines holding it)), plus up to 1 for a range
    label ``first … last`` whose span holds query terms in name order, plus 0.5 for a section whose name
    is a prefix of a query term (a key-ordered split such as ``s/``), plus 1 for a line labelled as an A–Z
    name index when the query is a name (``name_query``; for a phrase such a line is never followed, see
    :func:`rank_lines`). Uses nothing but the page."""
    n = len(lines)
    qs = [stem(t) for t in qterms]
    label_sets = [
        stem_set(ln.label) | {stem(t) for t in terms(os.path.basename(ln.path.rstrip("/")))} for ln in lines
    ]
    rest_sets = [stem_set(ln.rest) for ln in lines]
    df = {t: sum(1 for a, b in zip(label_sets, rest_sets, strict=False) if t in a or t in b) for t in qs}
    out = []
    for k, ln in enumerate(lines):
        s = 0.0
        for t in qs:
            w = math.log(1 + n / (1 + df[t]))
            if t in label_sets[k]:
                s += 3 * w
            elif t in rest_sets[k]:
                s += w
        m = _RANGE.match(ln.label)
        if m and qterms:
            lo, hi = m.group(1).lower(), m.group(2).lower()
            inside = [t for t in qterms if lo <= t <= hi + "\uffff"]
            s += len(inside) / len(qterms)
        key = ln.label.rstrip("/").lower()
        if ln.is_toc and not m and key and any(t.startswith(key) and t != key for t in qterms):
            s += 0.5  # a section named like a key prefix ("s/" for "sabbatarian") holds those keys
        if name_query and is_name_index(ln):
            s += 1.0  # an A–Z index of names holds every name in key order
        out.append(s)
    return out


_ENTRIES = re.compile(r"(\d[\d,]*) entr(?:y|ies)\b")
_IN_ALL = re.compile(r"(\d[\d,]*) in all\b")


def line_entries(line: TocLine) -> int | None:
    """The entry count a section or range line states, else None: everything below it when the line says
    so (``12 entries, 497 in all`` → 497: TOC_FORMAT 4 says a directory's own entries as ``N entries`` and
    those below it as ``M in all``), else ``317 entries``."""
    m = _IN_ALL.search(line.rest) or _ENTRIES.search(line.rest)
    return int(m.group(1).replace(",", "")) if m else None


def rank_lines(
    qterms: list[str], lines: list[TocLine], name_query: bool = False, index_name: str | None = None
) -> list[tuple[float, TocLine]]:
    """The lines of one page worth following, best first: every line that matches (score > 0), then the
    non-matching sections, largest first (with nothing to go on, the biggest section is the likeliest
    place). Empty sections and non-matching entries are never worth a read, nor an A–Z name index for a
    phrase (``name_query`` False): one does not look a sentence up in an index of names.

    ``index_name``: the page belongs to an A–Z index of names (reached through its ``names A–Z`` line) and
    the query is this name: a range line is followed only when its range holds the whole name's index key
    (:func:`range_holds`), as a reader of a book's index turns to the page whose head words bracket the
    word, whatever its parts (``os``, ``path``) match elsewhere on the page."""
    scores = score_lines(qterms, lines, name_query)
    key = index_key(index_name) if index_name else None
    keep = []
    for k, (s, ln) in enumerate(zip(scores, lines, strict=False)):
        n = line_entries(ln)
        if n == 0 or (s <= 0 and not ln.is_toc) or (not name_query and is_name_index(ln)):
            continue
        if key is not None and ln.is_toc and range_holds(key, ln.label) is False:
            continue  # an A–Z range that cannot hold the name
        keep.append((-s, 0 if ln.is_toc else 1, -(n or 0), k, s, ln))
    keep.sort(key=lambda x: x[:4])
    return [(x[4], x[5]) for x in keep]


class TocNavigator:
    """Depth-first walk over TOC pages by lexical match, backtracking (see the module docstring).

    On each page the lines are ranked by :func:`rank_lines`; the walk follows the best, and when a branch
    is exhausted returns to the next line of the page above. ``max_reads``: budget per lookup (TOC pages
    + entries)."""

    name = "toc-walk"

    def __init__(self, max_reads: int = 16) -> None:
        self.max_reads = max_reads
        self.terms = _TermCache()

    def run(
        self,
        query: str,
        lookup: Lookup,
        root_text: str | None = None,
        best: tuple[float, str] | None = None,
        read: list[str] | None = None,
        name_index_first: bool = False,
    ) -> Outcome:
        """Navigate from ``INDEX.md`` for ``query``; reads are recorded in ``lookup``. A caller that read
        the master page already passes its text (``root_text``), the best entry it read (``(share,
        path)``) and the paths it read (``read``: not read again). ``name_index_first``: for a name query,
        the master page's A–Z name index is followed first, whatever the lexical scores of the other lines."""
        qterms = query_terms(query)
        name_query = is_name_query(query)
        trace: list[dict] = []
        seen = {INDEX_NAME, *(read or [])}
        root = root_text if root_text is not None else lookup.read(INDEX_NAME)
        stack: list[tuple[list[tuple[float, TocLine]], bool]] = []  # (lines left, page of an A–Z index)
        if root is not None:
            ranked = self._expand(qterms, name_query, root, INDEX_NAME, seen, trace)
            if name_index_first and name_query:
                ranked.sort(key=lambda sl: not is_name_index(sl[1]))  # stable: the rest keep their order
            stack.append((ranked, False))
        while stack and len(lookup.reads) < self.max_reads:
            if not stack[-1][0]:
                stack.pop()
                continue
            _s, line = stack[-1][0].pop(0)
            named = name_query and stack[-1][1] and line.label == query.strip()  # the index names it
            if line.path in seen:
                continue
            seen.add(line.path)
            quoted = not line.is_toc and line.whole is not None
            text = line.whole if quoted else lookup.read(line.path)  # a quote is the whole file: no read
            if text is None:
                continue
            if line.is_toc:
                az = stack[-1][1] or is_name_index(line)
                name = query.strip() if az and name_query else None
                stack.append((self._expand(qterms, name_query, text, line.path, seen, trace, name), az))
                continue
            share = entry_share(qterms, self.terms.get(line.path, text))
            step = {"entry": line.path, "share": round(share, 2)}
            trace.append({**step, "quoted": True} if quoted else step)
            if best is None or share > best[0]:
                best = (share, line.path)
            if share >= CONFIRM_SHARE or named:  # an A–Z index line of exactly this name is trusted
                return Outcome(line.path, [line.path], trace=trace)
        return Outcome(best[1] if best else None, [best[1]] if best else [], trace=trace)

    def _expand(
        self,
        qterms: list[str],
        name_query: bool,
        text: str,
        path: str,
        seen: set[str],
        trace: list[dict],
        index_name: str | None = None,
    ):
        lines = [ln for ln in parse_toc(text, path) if ln.path not in seen]
        ranked = rank_lines(qterms, lines, name_query, index_name)
        trace.append({"page": path, "top": [[round(s, 2), ln.raw[:200]] for s, ln in ranked[:3]]})
        return ranked


#: bytes of a search term the finder takes (``libraryfs.index.find.TERM_MAX``, NAME_MAX: ``.find/TERM`` is one
#: path component; ``libraryfs find`` refuses a longer term with exit status 2)
FIND_TERM_MAX = 255


class FindNavigator:
    """``.find/<query>/`` through the mount (``libraryfs find`` when the query cannot be a path
    component), then confirming reads down the ranked list (at most ``max_entry_reads``)."""

    name = "find"

    def __init__(self, libdir: str, max_entry_reads: int = 5) -> None:
        self.libdir = libdir
        self.max_entry_reads = max_entry_reads
        self.terms = _TermCache()

    def ranked(self, query: str, lookup: Lookup) -> list[str]:
        """The finder's ranked result paths (library-relative); the listing is charged as one read. A query
        over :data:`FIND_TERM_MAX` bytes is refused by every front end of the finder (``.find/`` by the
        kernel, ``libraryfs find`` and MCP by its term rule): no results, nothing read."""
        root = lookup.root
        term = query.strip()
        if len(os.fsencode(term)) > FIND_TERM_MAX:
            return []
        if term and "/" not in term and "\0" not in term and term not in (".", ".."):
            d = os.path.join(root, FIND_DIRNAME, term)
            try:
                names = sorted(os.listdir(d))
            except OSError:
                names = []
            out = []
            for n in names:
                target = os.readlink(os.path.join(d, n))
                out.append(os.path.normpath(os.path.join(FIND_DIRNAME, term, target)).lstrip("./"))
            lookup.charge(f"{FIND_DIRNAME}/{term}/", "\n".join(names))
            return [p for p in out if p]
        from .corpora import run_cli

        # exit status 1 is "no match" (documented by `libraryfs find`)
        listing = run_cli("find", self.libdir, term, "--limit", "50", ok_codes=(0, 1)) if term else ""
        lookup.charge("libraryfs find", listing)
        prefix = os.path.realpath(root)
        paths = []
        for ln in listing.splitlines():
            p = ln.strip()
            if p.startswith(prefix + "/"):
                p = p[len(prefix) + 1 :]
            paths.append(p.lstrip("/"))
        return [p for p in paths if p]

    def run(self, query: str, lookup: Lookup) -> Outcome:
        """Rank with the finder, then read down the list until an entry is confirmed."""
        ranked = self.ranked(query, lookup)
        qterms = query_terms(query)
        best: tuple[float, str] | None = None
        for p in ranked[: self.max_entry_reads]:
            text = lookup.read(p)
            if text is None:
                continue
            share = entry_share(qterms, self.terms.get(p, text))
            if best is None or share > best[0]:
                best = (share, p)
            if share >= CONFIRM_SHARE:
                return Outcome(p, ranked)
        return Outcome(best[1] if best else (ranked[0] if ranked else None), ranked)


def hits_at(ranked: list[str], targets: list[str], k: int) -> bool:
    """Whether a target is among the first ``k`` ranked paths."""
    return any(is_hit(p, targets) for p in ranked[:k])
