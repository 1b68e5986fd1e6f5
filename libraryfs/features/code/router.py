"""Topology router: intent, estimated footprint, fitted thresholds; and a regex baseline (PAPERS.md §3).

Topologies (the paper's four): FASTPATH (a single-file edit, or a question the index answers: no
delegation), SUBAGENT (one specialist, a few files), MULTIAGENT (a pipeline or a swarm), DEEPRESEARCH (the
task is a question to investigate, or names nothing the code knows).

A decision, in order (:func:`decide`):

1. **Intent** of the first line (:func:`~libraryfs.features.code.cues.classify_intent`): ``read`` — a
   lookup that edits nothing ("who calls X", "where is X defined", "explain X", "what does X do");
   ``explore`` — an investigation (a question, or why/investigate/how does… in a conceptual query);
   ``small`` — a text-only edit (typo, docstring, comment, wording, a version bump); else ``edit``.
2. ``read`` → FASTPATH when the index has a target (any candidate file), else DEEPRESEARCH, and its files
   are the retrieved subgraph (the target and, for a dependency query, its callers/importers); ``explore`` →
   DEEPRESEARCH; nothing known at all (no candidate file) → DEEPRESEARCH; ``small`` → FASTPATH with the
   most probable file as the footprint.
3. ``edit``: the footprint estimate (:mod:`libraryfs.features.code.footprint`) gives z, an estimate of
   ln(files the change touches); FASTPATH if z ≤ ``fast_max``, SUBAGENT if z ≤ ``sub_max``, else MULTIAGENT (``pipeline`` when the chosen
   files form an import chain of depth ≥ :data:`T_DEP`, else ``swarm``).

The thresholds (:data:`THRESHOLDS`) and the footprint weights are **fitted** on the time-ordered training
split of real commits (``libraryfs code eval --fit``; docs/code.md) — never on the held-out split, and the
gold labels come from a written rubric applied to what the commits really changed, not from these features.

The complexity vector c = (d_dep, n_f, n_s, h_t, ρ_x) is measured on the estimated footprint (its files and
the retrieved symbols inside them).

The regex baseline (:func:`~libraryfs.features.code.cues.regex_route`) looks at the words of the task only,
as a keyword router would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from libraryfs.features.code.complexity import ComplexityVector, complexity
from libraryfs.features.code.cues import INTENTS, classify_intent, regex_route
from libraryfs.features.code.footprint import MODEL, Footprint, FootprintModel, estimate
from libraryfs.features.code.history import CoChange
from libraryfs.features.code.index import CodeIndex
from libraryfs.features.code.retrieve import Retriever

TOPOLOGIES = ("FASTPATH", "SUBAGENT", "MULTIAGENT", "DEEPRESEARCH")
__all__ = ["TOPOLOGIES", "INTENTS", "Thresholds", "THRESHOLDS", "RouteDecision", "classify_intent", "decide",
           "regex_route", "route", "route_index"]  # fmt: skip
T_DEP = 3
#: Hits retrieved to build the candidates (more than are shown).
CANDIDATE_HITS = 30


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Cut points on the size score z (estimated ln files): FASTPATH ≤ ``fast_max`` < SUBAGENT ≤ ``sub_max``."""

    fast_max: float
    sub_max: float

    def as_dict(self) -> dict:
        """JSON-ready dict."""
        return {"fast_max": self.fast_max, "sub_max": self.sub_max}


#: Fitted with the footprint weights (:data:`libraryfs.features.code.footprint.MODEL`); see docs/code.md.
THRESHOLDS = Thresholds(fast_max=0.5004, sub_max=1.0207)


@dataclass(slots=True)
class RouteDecision:
    """A routing decision: topology, the complexity vector of the estimated footprint, the query type and
    intent, the footprint (files by falling probability, n̂_f, score), the MULTIAGENT shape
    (``pipeline``/``swarm``, else ``""``), the rule that fired, and the retrieval's hits."""

    topology: str
    vector: ComplexityVector
    qtype: str
    coverage: float
    rule: str
    shape: str = ""
    hits: list = field(default_factory=list)
    intent: str = "edit"
    footprint: Footprint | None = None
    files: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """JSON-ready dict (hits as ``{"node", "score", "path"}``)."""
        fp = self.footprint
        return {
            "topology": self.topology,
            "shape": self.shape,
            "rule": self.rule,
            "intent": self.intent,
            "query_type": self.qtype,
            "coverage": self.coverage,
            "vector": self.vector.as_dict(),
            "footprint": {
                "files": self.files,
                "expected_files": round(fp.expected_files, 4) if fp else 0.0,
                "score": round(fp.score, 4) if fp and math.isfinite(fp.score) else None,
                "candidates": [{"path": c.path, "p": round(c.p, 4)} for c in (fp.files[:10] if fp else [])],
            },
            "hits": [{"node": h.node, "score": h.score, "path": h.path} for h in self.hits],
        }


def decide(intent: str, fp: Footprint, thresholds: Thresholds = THRESHOLDS) -> tuple[str, str, int]:
    """Apply the rules of the module docstring except the pipeline/swarm shape. Returns ``(topology, rule,
    n_files)``: the rule in words and how many of the footprint's most probable files the topology works on
    (0 when it reads nothing)."""
    if intent == "explore":
        return "DEEPRESEARCH", "exploratory question", 0
    if not fp.files:
        return "DEEPRESEARCH", "nothing in the index matches", 0
    if intent == "read":
        return "FASTPATH", "read-only lookup: no edit", len(fp.chosen())
    if intent == "small":
        return "FASTPATH", "text-only edit: one file", 1
    z, n = fp.score, len(fp.chosen())
    if z <= thresholds.fast_max:
        return "FASTPATH", f"z={z:.2f} ≤ {thresholds.fast_max:g} (≈{math.exp(z):.1f} files)", 1
    if z <= thresholds.sub_max:
        return "SUBAGENT", f"{thresholds.fast_max:g} < z={z:.2f} ≤ {thresholds.sub_max:g}", n
    return "MULTIAGENT", f"z={z:.2f} > {thresholds.sub_max:g} (≈{math.exp(z):.1f} files)", n


def route(
    retriever: Retriever,
    query: str,
    limit: int = 10,
    history: CoChange | None = None,
    model: FootprintModel = MODEL,
    thresholds: Thresholds = THRESHOLDS,
) -> RouteDecision:
    """Retrieve for ``query``, estimate the footprint (with ``history`` when given), decide. Time: see
    bench/code_bench.py."""
    r = retriever.retrieve(query, limit=max(limit, CANDIDATE_HITS))
    fp = estimate(retriever.index, r, history, query, model)
    intent = classify_intent(query, r.qtype)
    topology, rule, n = decide(intent, fp, thresholds)
    if intent == "read":  # a lookup reads what retrieval found (the target, its callers), nothing is edited
        files = list(dict.fromkeys(node.partition("::")[0] for node in r.subgraph))
    else:
        files = fp.chosen()[:n] if n else []
    chosen = set(files)
    sub = files + [h.node for h in r.hits if "::" in h.node and h.node.partition("::")[0] in chosen]
    vec = complexity(retriever.index, sub)
    shape = ("pipeline" if vec.d_dep >= T_DEP else "swarm") if topology == "MULTIAGENT" else ""
    return RouteDecision(topology, vec, r.qtype, r.coverage, rule, shape, r.hits[:limit], intent, fp, files)


def route_index(
    index: CodeIndex, query: str, limit: int = 10, history: CoChange | None = None
) -> RouteDecision:
    """:func:`route` for a one-off query (builds the BM25 model first)."""
    return route(Retriever(index), query, limit, history)
