"""The complexity vector of a retrieved subgraph (CODE-AGENT, PAPERS.md §3).

c = (d_dep, n_f, n_s, h_t, ρ_x) for a set S of index nodes (file paths and ``path::qualname`` symbol ids):

* **d_dep** — max dependency depth: the longest chain of in-repository imports starting at any file of S,
  counted in edges. Import cycles are collapsed first (strongly connected components; a cycle counts as
  one step), so the depth is well defined: it is the longest path in the condensation DAG. 0 when no file
  of S imports anything in the repository.
* **n_f** — files: distinct files of S (a symbol contributes its file).
* **n_s** — symbols: symbol nodes in S.
* **h_t** — tree depth: the deepest node of S in the index tree root → directory → file → symbol, with the
  root at 0, each path component one level (``a/b/c.py`` is at 3) and each symbol one level below its
  enclosing symbol or file (a method of a class in ``a/b/c.py`` is at 5).
* **ρ_x** — cross-module coupling ratio (module = file): of the resolved call edges with an endpoint in S
  (a symbol of S, or module-level code of a file in S), the fraction whose two ends are in different
  files. 0.0 when there are no such edges.

The per-file depths are computed once per index state in O(|V|+|E|) (iterative Tarjan + one DP pass) and
cached; a vector then costs O(|S| + edges incident to S).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from libraryfs.features.code.index import CodeIndex


@dataclass(frozen=True, slots=True)
class ComplexityVector:
    """c = (d_dep, n_f, n_s, h_t, rho_x); see the module docstring for each definition."""

    d_dep: int
    n_f: int
    n_s: int
    h_t: int
    rho_x: float

    def as_dict(self) -> dict:
        """JSON-ready dict."""
        return asdict(self)


def import_depths(graph: dict[str, list[str]]) -> dict[str, int]:
    """Longest import chain (edges) from each node of ``graph`` (node → successors), cycles collapsed into
    one node each. O(|V|+|E|). Successors missing from ``graph`` are treated as leaves."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    comp: dict[str, int] = {}
    comps: list[list[str]] = []
    counter = 0
    nodes = list(graph)
    for extra in {t for ts in graph.values() for t in ts} - set(graph):
        nodes.append(extra)
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(graph.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph.get(w, ()))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp[w] = len(comps)
                    members.append(w)
                    if w == v:
                        break
                comps.append(members)
    # Tarjan emits components in reverse topological order: successors' components come first.
    depth_c = [0] * len(comps)
    for c, members in enumerate(comps):
        best = 0
        for v in members:
            for w in graph.get(v, ()):
                cw = comp[w]
                if cw != c:
                    best = max(best, depth_c[cw] + 1)
        depth_c[c] = best
    return {v: depth_c[comp[v]] for v in nodes}


_DEPTH_CACHE: dict[int, tuple[object, dict[str, int]]] = {}


def _file_depths(index: CodeIndex) -> dict[str, int]:
    edges = index.edges
    cached = _DEPTH_CACHE.get(id(index))
    if cached is not None and cached[0] is edges:
        return cached[1]
    depths = import_depths(edges.imports)
    _DEPTH_CACHE[id(index)] = (edges, depths)
    return depths


def _symbol_level(index: CodeIndex, path: str, qualname: str) -> int:
    fp = index.files[path]
    by_qual = {s.qualname: s for s in fp.symbols}
    level = 1
    s = by_qual.get(qualname)
    while s is not None and s.parent:
        level += 1
        s = by_qual.get(s.parent)
    return level


def complexity(index: CodeIndex, nodes: Iterable[str]) -> ComplexityVector:
    """Complexity vector of the subgraph ``nodes`` (file paths and ``path::qualname`` ids; unknown ids are
    ignored). See the module docstring for definitions."""
    files: set[str] = set()
    syms: set[str] = set()
    h_t = 0
    for nid in nodes:
        path, _, qual = nid.partition("::")
        if path not in index.files:
            continue
        files.add(path)
        level = path.count("/") + 1
        if qual:
            syms.add(nid)
            level += _symbol_level(index, path, qual)
        h_t = max(h_t, level)
    depths = _file_depths(index)
    d_dep = max((depths.get(f, 0) for f in files), default=0)

    edges = index.edges
    seen: set[tuple[str, str]] = set()
    for src in list(syms) + sorted(files):
        for dst in edges.calls.get(src, ()):
            seen.add((src, dst))
        for caller in edges.callers.get(src, ()):
            seen.add((caller, src))
    cross = sum(1 for a, b in seen if a.partition("::")[0] != b.partition("::")[0])
    rho = cross / len(seen) if seen else 0.0
    return ComplexityVector(d_dep=d_dep, n_f=len(files), n_s=len(syms), h_t=h_t, rho_x=round(rho, 4))
