"""Complexity-conditioned topology router and a regex baseline (CODE-AGENT / RGAO, PAPERS.md §3).

Topologies (the paper's four): FASTPATH (a single-file edit, no delegation), SUBAGENT (one specialist,
n_f ≤ 3), MULTIAGENT (a pipeline or swarm, n_f > 3), DEEPRESEARCH (the query is ambiguous: investigate
first).

Rules, tried in order on the query q, its retrieval and c = (d_dep, n_f, n_s, h_t, ρ_x):

1. DEEPRESEARCH if nothing was retrieved (n_f = 0), or the query's terms are mostly unknown to the code
   (coverage < ``T_COVERAGE`` = 0.5), or q is exploratory in form (a question, or starts with
   investigate/explore/research/why/how does/figure out…) and its type is conceptual.
2. FASTPATH if n_f ≤ ``T_FAST_FILES`` (1) and n_s ≤ ``T_FAST_SYMBOLS`` (3).
3. SUBAGENT if n_f ≤ ``T_SUB_FILES`` (3) and not (ρ_x > ``T_COUPLING`` (0.6) and d_dep ≥ ``T_DEP`` (3)):
   a few files, unless they are tightly coupled to a deep dependency chain.
4. MULTIAGENT otherwise; ``shape`` says ``pipeline`` when d_dep ≥ ``T_DEP`` (stages follow the import
   chain) and ``swarm`` when the files are independent.

The thresholds are constants here and in docs/code.md; the evaluation's gold labels never read them
(:mod:`libraryfs_bench.code.evalset` applies its own written rubric to real footprints).

The regex baseline (:func:`regex_route`) looks at the words of q only, as a keyword router would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from libraryfs.features.code.complexity import ComplexityVector, complexity
from libraryfs.features.code.index import CodeIndex
from libraryfs.features.code.retrieve import Retrieval, Retriever

TOPOLOGIES = ("FASTPATH", "SUBAGENT", "MULTIAGENT", "DEEPRESEARCH")
T_COVERAGE = 0.5
T_FAST_FILES = 1
T_FAST_SYMBOLS = 3
T_SUB_FILES = 3
T_COUPLING = 0.6
T_DEP = 3

_EXPLORATORY = re.compile(
    r"^\s*(why|how\s+(does|do|can|could|should)|what\s+(is|are|if)|investigate|explore|"
    r"research|figure\s+out|understand|evaluate\s+whether|should\s+we|is\s+it)\b|\?\s*$",
    re.I,
)


@dataclass(slots=True)
class RouteDecision:
    """A routing decision: topology, the vector it was computed from, the query type, the MULTIAGENT shape
    (``pipeline``/``swarm``, else ``""``), the rule that fired, and the retrieval's hits."""

    topology: str
    vector: ComplexityVector
    qtype: str
    coverage: float
    rule: str
    shape: str = ""
    hits: list = field(default_factory=list)

    def as_dict(self) -> dict:
        """JSON-ready dict (hits as ``{"node", "score", "path"}``)."""
        return {
            "topology": self.topology,
            "shape": self.shape,
            "rule": self.rule,
            "query_type": self.qtype,
            "coverage": self.coverage,
            "vector": self.vector.as_dict(),
            "hits": [{"node": h.node, "score": h.score, "path": h.path} for h in self.hits],
        }


def decide(query: str, vec: ComplexityVector, qtype: str, coverage: float) -> tuple[str, str, str]:
    """Apply the documented thresholds (module docstring). Returns ``(topology, shape, rule)``."""
    if vec.n_f == 0:
        return "DEEPRESEARCH", "", "nothing retrieved"
    if coverage < T_COVERAGE:
        return "DEEPRESEARCH", "", f"coverage {coverage:.2f} < {T_COVERAGE}"
    if qtype == "conceptual" and _EXPLORATORY.search(query):
        return "DEEPRESEARCH", "", "exploratory conceptual query"
    if vec.n_f <= T_FAST_FILES and vec.n_s <= T_FAST_SYMBOLS:
        return "FASTPATH", "", f"n_f={vec.n_f} ≤ {T_FAST_FILES}, n_s={vec.n_s} ≤ {T_FAST_SYMBOLS}"
    coupled = vec.rho_x > T_COUPLING and vec.d_dep >= T_DEP
    if vec.n_f <= T_SUB_FILES and not coupled:
        return "SUBAGENT", "", f"n_f={vec.n_f} ≤ {T_SUB_FILES}"
    shape = "pipeline" if vec.d_dep >= T_DEP else "swarm"
    why = (
        f"n_f={vec.n_f} > {T_SUB_FILES}"
        if vec.n_f > T_SUB_FILES
        else f"ρ_x={vec.rho_x} > {T_COUPLING}, d_dep={vec.d_dep}"
    )
    return "MULTIAGENT", shape, why


def route(retriever: Retriever, query: str, limit: int = 10) -> RouteDecision:
    """Retrieve for ``query``, measure the subgraph, decide. Time: see bench/code_bench.py."""
    r: Retrieval = retriever.retrieve(query, limit=limit)
    vec = complexity(retriever.index, r.subgraph)
    topology, shape, rule = decide(query, vec, r.qtype, r.coverage)
    return RouteDecision(topology, vec, r.qtype, r.coverage, rule, shape, r.hits)


def route_index(index: CodeIndex, query: str, limit: int = 10) -> RouteDecision:
    """:func:`route` for a one-off query (builds the BM25 model first)."""
    return route(Retriever(index), query, limit)


_RX_DEEP = re.compile(
    r"\b(investigate|explore|research|why|spike|experiment|prototype|figure out)\b|\?", re.I
)
_RX_MULTI = re.compile(
    r"\b(refactor\w*|rewrite|redesign|migrat\w+|across|all|every|overhaul|architecture|"
    r"restructur\w+|framework|system|multiple)\b",
    re.I,
)
_RX_FAST = re.compile(
    r"\b(typo|rename|bump|version|comment|docstring|whitespace|lint|format|spelling|"
    r"one-line|small|minor|trivial)\b",
    re.I,
)


def regex_route(query: str) -> str:
    """Keyword baseline: DEEPRESEARCH for exploratory words, MULTIAGENT for broad-change words, FASTPATH for
    small-edit words, else SUBAGENT."""
    if _RX_DEEP.search(query):
        return "DEEPRESEARCH"
    if _RX_MULTI.search(query):
        return "MULTIAGENT"
    if _RX_FAST.search(query):
        return "FASTPATH"
    return "SUBAGENT"
