"""Typed retrieval over a code index: BM25 and structural signals fused by reciprocal rank fusion (PAPERS.md §3).

A query is typed first (:func:`classify`):

=============  ==========================================================  ==================================
type           recognised by                                               retrievers fused
=============  ==========================================================  ==================================
exact          a quoted string or code punctuation (``(``, ``=``, ``->``)  substring over signatures/summaries
                                                                           (and sources when the checkout is
                                                                           readable), BM25
dependency     "who calls", "callers of", "used by", "depends on" …       identifier match, graph neighbours
                                                                           (callers/importers first), BM25
structural     "all/list … classes/functions/files", "subclass", "layout"  path match, identifier match, BM25
identifier     the query is one code-like token (``parse_source``,         identifier match, BM25, path match
               ``Foo.bar``, ``CodeIndex``)
conceptual     anything else (natural language)                            BM25, identifier match, path match,
                                                                           graph neighbours of the BM25 seeds
=============  ==========================================================  ==================================

Each retriever returns a ranked list of node ids (a file path, or ``path::qualname``); the lists are fused
by reciprocal rank fusion, score(d) = Σ_r 1/(k + rank_r(d)) with k = 60 (Cormack et al., 2009).

The **subgraph** a task touches (what :mod:`libraryfs.features.code.complexity` measures) is selected by evidence
strength, not by a fixed k, so that its size carries information: the top fused hit, then for an exact
query its substring matches, for an identifier query its name matches, and otherwise every BM25 hit
scoring ≥ ``BM25_KEEP_RATIO`` of the best BM25 score (among the first ``SUBGRAPH_MAX``) plus every
identifier match, and for dependency queries the direct graph neighbours of the matched identifiers —
capped at ``SUBGRAPH_MAX`` nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rank_bm25 import BM25Okapi

from libraryfs.features.code.index import CodeIndex

RRF_K = 60
BM25_KEEP_RATIO = 0.6
SUBGRAPH_MAX = 12
QUERY_TYPES = ("exact", "dependency", "structural", "identifier", "conceptual")

_SPLIT = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CODE_TOKEN = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*$")
_STOP = frozenset(
    """a an and are as at be by can do does for from has have how i in into is it its of on or
that the this to was we what when where which who why will with add added adds fix fixed fixes use make
new update updated support should not all any""".split()
)
_DEPENDENCY = re.compile(
    r"\b(who|what|which)\s+(calls|uses|imports|depends\s+on|references)\b|"
    r"\b(callers|callees|usages?|uses|dependents|dependencies|references)\s+(of|to)\b|"
    r"\b(calls\s+to|called\s+by|used\s+by|imported\s+by|depends\s+on|referenced\s+by)\b",
    re.I,
)
_STRUCTURAL = re.compile(
    r"\b(?:all|every|list|each)\b.*\b(?:class(?:es)?|functions?|methods?|files?|"
    r"modules?|symbols?|types?)\b|\b(?:subclass\w*|inherit\w*|hierarchy|layout|"
    r"directory\s+structure)\b",
    re.I,
)
_EXACT = re.compile(r"\"[^\"]+\"|'[^']+'|`[^`]*[^\w`.][^`]*`|\(|\)|->|=>|==|::|\{|\}|;")


#: Abbreviations common in identifiers, expanded on both sides (query and index) so that "command" meets
#: ``recall_cmd`` and "config" meets ``cfg`` (identifier expansion, as in Hill et al., MSR 2008).
ABBREVIATIONS = {
    "cmd": "command",
    "cmds": "command",
    "cfg": "config",
    "conf": "config",
    "msg": "message",
    "arg": "argument",
    "args": "argument",
    "param": "parameter",
    "params": "parameter",
    "repo": "repository",
    "dir": "directory",
    "func": "function",
    "fn": "function",
    "impl": "implementation",
    "db": "database",
    "err": "error",
    "ctx": "context",
    "env": "environment",
    "opt": "option",
    "opts": "option",
    "idx": "index",
    "attr": "attribute",
    "attrs": "attribute",
    "lib": "library",
    "util": "utility",
    "utils": "utility",
}


def _stem(w: str) -> str:
    for suf in ("ing", "ed", "es", "s"):
        if len(w) > len(suf) + 2 and w.endswith(suf):
            return w[: -len(suf)]
    return w


def tokenize(text: str) -> list[str]:
    """Lower-cased, stemmed word pieces: identifiers split at ``_``, ``.`` and camelCase; abbreviations expanded
    (:data:`ABBREVIATIONS`); stop words dropped."""
    out: list[str] = []
    for word in _WORD.findall(text):
        for piece in _SPLIT.findall(word):
            piece = piece.lower()
            piece = ABBREVIATIONS.get(piece, piece)
            if len(piece) > 1 and piece not in _STOP:
                out.append(_stem(piece))
    return out


def classify(query: str) -> str:
    """Query type: one of :data:`QUERY_TYPES` (rules in the module docstring, tried in that order)."""
    q = query.strip()
    if _EXACT.search(q):
        return "exact"
    if _DEPENDENCY.search(q):
        return "dependency"
    if _STRUCTURAL.search(q):
        return "structural"
    if _CODE_TOKEN.match(q) and (
        ("_" in q) or ("." in q) or re.search(r"[a-z][A-Z]", q) or q[:1].isupper() or len(q.split()) == 1
    ):
        return "identifier"
    return "conceptual"


@dataclass(slots=True)
class Hit:
    """One fused result: node id, fused RRF score, and the library path an agent opens for it."""

    node: str
    score: float
    path: str


@dataclass(slots=True)
class Retrieval:
    """What :func:`retrieve` returns. ``coverage`` = share of the query's content terms found anywhere in the
    index vocabulary (0..1); ``ranks`` = each retriever's ranked list (for inspection)."""

    query: str
    qtype: str
    hits: list[Hit]
    subgraph: list[str]
    coverage: float
    ranks: dict[str, list[str]] = field(default_factory=dict)


class Retriever:
    """BM25 + structural retrieval over one :class:`CodeIndex` (build once, query many times)."""

    def __init__(self, index: CodeIndex) -> None:
        self.index = index
        self.ids: list[str] = []
        docs: list[list[str]] = []
        self.name_of: dict[str, list[str]] = {}  # lower-cased name/qualname → node ids
        for path, fp in index.files.items():
            self.ids.append(path)
            docs.append(tokenize(path) + tokenize(fp.summary))
            stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0].lower()
            self.name_of.setdefault(stem, []).append(path)
            for s in fp.symbols:
                sid = f"{path}::{s.qualname}"
                self.ids.append(sid)
                name_toks = tokenize(s.qualname)
                docs.append(name_toks * 2 + tokenize(s.signature) + tokenize(s.summary) + tokenize(path))
                for key in {s.name.lower(), s.qualname.lower()}:
                    self.name_of.setdefault(key, []).append(sid)
        self.vocab = {t for d in docs for t in d}
        self.path_terms = {path: frozenset(tokenize(path)) for path in index.files}
        self.bm25 = BM25Okapi(docs) if docs else None

    # ---- single retrievers ----------------------------------------------------------------------------
    def _bm25(self, terms: list[str]) -> tuple[list[str], list[float]]:
        if self.bm25 is None or not terms:
            return [], []
        scores = self.bm25.get_scores(terms)
        order = sorted((i for i in range(len(scores)) if scores[i] > 0), key=lambda i: -scores[i])[:50]
        return [self.ids[i] for i in order], [float(scores[i]) for i in order]

    def _identifiers(self, query: str) -> list[str]:
        out: list[str] = []
        for tok in re.findall(r"[A-Za-z_][\w.]*", query):
            tok = tok.strip(".").lower()
            if len(tok) < 3 or tok in _STOP:
                continue
            # the dotted token itself, else its last component ("Foo.bar" → "bar")
            key = tok if tok in self.name_of else tok.rsplit(".", 1)[-1]
            for nid in self.name_of.get(key, ()):
                if nid not in out:
                    out.append(nid)
        return out

    def _paths(self, terms: list[str]) -> list[str]:
        want = set(terms)
        scored = []
        for path, comps in self.path_terms.items():
            n = len(want & comps)
            if n:
                scored.append((-n, path.count("/"), path))
        return [p for _, _, p in sorted(scored)][:50]

    def _neighbours(self, seeds: list[str], reverse_first: bool) -> list[str]:
        e = self.index.edges
        out: list[str] = []
        for s in seeds:
            if "::" in s:
                fwd, rev = e.calls.get(s, []), e.callers.get(s, [])
            else:
                fwd, rev = e.imports.get(s, []), e.importers.get(s, [])
            for n in rev + fwd if reverse_first else fwd + rev:
                if n not in out and n not in seeds:
                    out.append(n)
        return out[:50]

    def _exact(self, query: str) -> list[str]:
        needles = [m.strip("\"'`") for m in re.findall(r"\"[^\"]+\"|'[^']+'|`[^`]+`", query)] or [
            query.strip()
        ]
        out: list[str] = []
        for path, fp in self.index.files.items():
            for s in fp.symbols:
                text = f"{s.qualname} {s.signature} {s.summary}"
                if any(n in text for n in needles):
                    out.append(f"{path}::{s.qualname}")
        if not out and self.index.root:
            out = self._grep(needles)
        return out[:50]

    def _grep(self, needles: list[str]) -> list[str]:
        import os

        out: list[str] = []
        for path, fp in self.index.files.items():
            try:
                with open(os.path.join(self.index.root, path), "rb") as f:
                    data = f.read()
            except OSError:
                continue
            for n in needles:
                pos = data.find(n.encode())
                if pos < 0:
                    continue
                owner = path
                for s in fp.symbols:  # innermost symbol containing the match
                    if s.start_byte <= pos < s.end_byte:
                        owner = f"{path}::{s.qualname}"
                out.append(owner)
                break
        return out

    # ---- fused --------------------------------------------------------------------------------------
    def retrieve(self, query: str, limit: int = 10) -> Retrieval:
        """Type the query, run the retrievers for its type, fuse by RRF; see the module docstring.
        Returns a :class:`Retrieval` with at most ``limit`` hits (paths are library-relative)."""
        from libraryfs.features.code.render import file_dir, symbol_filenames

        qtype = classify(query)
        terms = tokenize(query)
        coverage = (sum(t in self.vocab for t in set(terms)) / len(set(terms))) if terms else 0.0
        bm_ids, bm_scores = self._bm25(terms)
        idents = self._identifiers(query)
        ranks: dict[str, list[str]] = {"bm25": bm_ids, "identifier": idents}
        if qtype == "exact":
            ranks["exact"] = self._exact(query)
        if qtype in ("structural", "identifier", "conceptual"):
            ranks["path"] = self._paths(terms)
        if qtype == "dependency":
            ranks["graph"] = self._neighbours(idents[:3] or bm_ids[:3], reverse_first=True)
        elif qtype == "conceptual":
            ranks["graph"] = self._neighbours(bm_ids[:3], reverse_first=False)

        fused: dict[str, float] = {}
        for ranked in ranks.values():
            for r, nid in enumerate(ranked):
                fused[nid] = fused.get(nid, 0.0) + 1.0 / (RRF_K + r + 1)
        order = sorted(fused, key=lambda n: -fused[n])

        sub: list[str] = order[:1]
        if qtype == "exact" and ranks["exact"]:
            sub += ranks["exact"][:SUBGRAPH_MAX]
        elif qtype == "identifier" and idents:
            sub += idents[:SUBGRAPH_MAX]
        elif bm_scores:
            top = bm_scores[0]
            sub += [
                n
                for n, s in zip(bm_ids[:SUBGRAPH_MAX], bm_scores, strict=False)
                if s >= BM25_KEEP_RATIO * top
            ]
        if qtype not in ("exact", "identifier"):
            sub += idents[:SUBGRAPH_MAX]
        if qtype == "dependency":
            sub += ranks["graph"][:SUBGRAPH_MAX]
        subgraph = list(dict.fromkeys(sub))[:SUBGRAPH_MAX]

        hits: list[Hit] = []
        for nid in order[:limit]:
            path, _, qual = nid.partition("::")
            if qual:
                fp = self.index.files[path]
                name = next(
                    n for s, n in zip(fp.symbols, symbol_filenames(fp), strict=False) if s.qualname == qual
                )
                lib = f"{file_dir(self.index.name, path)}/{name}"
            else:
                lib = f"{file_dir(self.index.name, path)}/SYMBOLS.md"
            hits.append(Hit(nid, round(fused[nid], 6), lib))
        return Retrieval(query, qtype, hits, subgraph, round(coverage, 3), ranks)
