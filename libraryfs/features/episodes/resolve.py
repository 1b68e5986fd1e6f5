"""Resolving a typed question (:mod:`.query`) against a timeline of facts — the one resolver used twice.

Recall resolves a question against the complete unit index of an episode (every occurrence list known,
every ordinal exact) and packs the facts it used (:attr:`Resolver.trace`) first; the deterministic reader
resolves the same question against the facts parsed from the packed evidence alone (:mod:`.reader`),
where only some occurrences are visible. The rules are written for the partial case and are exact on the
complete one:

- the k-th occurrence is the visible one carrying ordinal ``#k`` (when no ordinals are shown, the k-th
  visible one); the last is the latest visible one;
- inside a window (a visit, a step range, after/before another reference) the k-th is counted among the
  visible occurrences in the window — recall therefore packs every occurrence up to the one it chose;
- a count over a window is ``last ordinal − first ordinal + 1`` when ordinals are shown (the first is 1 for
  a window that starts at the episode's first step, else the smallest visible in the window — recall packs
  the first and the last occurrence of a window before the others), else the number of visible ones.
"""

from __future__ import annotations

from typing import Protocol

from libraryfs.features.episodes.query import LAST, Query, Ref, Span

#: one fact used: (step, fragment) with fragment ("ev"|"gain"|"lose"|"rise"|"drop"|"visit"|"end", name),
#: ("field", field, exclude) or ("line",) (the whole step)
Fact = tuple[int, tuple[str, ...]]


class Timeline(Protocol):
    """What the resolver reads. Implemented by the unit index and by parsed evidence."""

    start_t: int  #: the episode's first step

    def occurrences(self, kind: str, name: str) -> list[tuple[int, int | None]]:
        """``[(t, ordinal or None)]`` of (kind, name) by step; kind ``visit`` lists visit starts."""
        ...

    def visits(self, label: str) -> list[tuple[int | None, int | None, int | None]]:
        """``[(k or None, first step or None, last step or None)]`` of the visits to ``label``."""
        ...

    def value(self, t: int, field: str, exclude: str | None = None) -> str | None:
        """The answer string of ``field`` at step ``t`` (None when unknown); ``exclude`` for ``where``."""
        ...


def _global(occs: list[tuple[int, int | None]], k: int) -> int | None:
    if not occs:
        return None
    if k == LAST:
        return occs[-1][0]
    marked = [t for t, o in occs if o == k]
    if marked:
        return marked[0]
    if all(o is None for _, o in occs) and len(occs) >= k:
        return occs[k - 1][0]
    return None


def _in(t: int, lo: int | None, hi: int | None) -> bool:
    return (lo is None or t >= lo) and (hi is None or t <= hi)


class Resolver:
    """Resolves one :class:`Query` against a :class:`Timeline`; :attr:`trace` lists the facts used, in
    the order a reader needs them (chain bases first, the answer's fact last)."""

    def __init__(self, tl: Timeline, last_t: int | None = None) -> None:
        self.tl = tl
        self.last_t = last_t  #: the episode's last step when known (an ongoing visit ends there)
        self.trace: list[Fact] = []

    def note(self, t: int | None, frag: tuple[str, ...]) -> None:
        """Record a used fact (once)."""
        if t is not None and (t, frag) not in self.trace:
            self.trace.append((t, frag))

    # -- references ----------------------------------------------------------------------------------------
    def visit(self, label: str, k: int) -> tuple[int | None, int | None]:
        """(first step, last step) of the k-th visit to ``label``; (None, None) when not visible."""
        vs = self.tl.visits(label)
        if not vs:
            return None, None
        if all(v[0] is None for v in vs):
            pick = vs[-1] if k == LAST else (vs[k - 1] if len(vs) >= k else None)
        elif k == LAST:
            pick = max((v for v in vs if v[0] is not None), key=lambda v: v[0] or 0)
        else:
            pick = next((v for v in vs if v[0] == k), None)
        if pick is None:
            return None, None
        return pick[1], pick[2]

    def span(self, s: Span) -> tuple[int | None, int | None] | None:
        """Inclusive (lo, hi) of a span (None = open end); None when a visit is not visible."""
        if s.op == "range":
            return s.lo, s.hi
        start, end = self.visit(s.name or "", s.k)
        if start is None:
            return None
        self.note(start, ("visit", s.name or ""))
        if end is not None:
            self.note(end, ("end", s.name or ""))
        elif self.last_t is not None:
            end = self.last_t
        return start, end

    def _window(self, r: Ref) -> tuple[bool, int | None, int | None]:
        """(restricted?, lo, hi) of an occurrence reference; lo > hi or a missing part gives (True, 1, 0)."""
        lo: int | None = None
        hi: int | None = None
        if r.within is not None:
            sp = self.span(r.within)
            if sp is None:
                return True, 1, 0
            lo, hi = sp
        for link, sign in ((r.after, 1), (r.before, -1)):
            if link is None:
                continue
            t = self.ref(link)
            if t is None:
                return True, 1, 0
            if sign > 0:
                lo = t + 1 if lo is None else max(lo, t + 1)
            else:
                hi = t - 1 if hi is None else min(hi, t - 1)
        restricted = r.within is not None or r.after is not None or r.before is not None
        return restricted, lo, hi

    def occ(self, r: Ref) -> int | None:
        """Step of the k-th occurrence ``r`` (within its window)."""
        restricted, lo, hi = self._window(r)
        occs = self.tl.occurrences(r.kind or "", r.name or "")
        frag = (r.kind or "", r.name or "")
        if not restricted:
            t = _global(occs, r.k)
            self.note(t, frag)
            return t
        cand = [t for t, _ in occs if _in(t, lo, hi)]
        if not cand or (r.k != LAST and len(cand) < r.k):
            return None
        if r.k == LAST:
            self.note(cand[-1], frag)
            return cand[-1]
        for t in cand[: r.k]:
            self.note(t, frag)
        return cand[r.k - 1]

    def ref(self, r: Ref) -> int | None:
        """The step a reference resolves to, or None."""
        if r.op == "step":
            return r.t
        if r.op == "offset":
            b = self.ref(r.base) if r.base else None
            return None if b is None else b + r.d
        if r.op == "visit":
            start, end = self.visit(r.name or "", r.k)
            t = start if r.edge == "start" else end
            self.note(t, ("visit" if r.edge == "start" else "end", r.name or ""))
            return t
        if r.op == "occ":
            return self.occ(r)
        return None

    # -- answers --------------------------------------------------------------------------------------------
    def count(self, r: Ref) -> int | None:
        """How many occurrences of (r.kind, r.name) lie in ``r.within`` (whole episode when None)."""
        lo, hi = None, None
        if r.within is not None:
            sp = self.span(r.within)
            if sp is None:
                return None
            lo, hi = sp
        occs = self.tl.occurrences(r.kind or "", r.name or "")
        cand = [(t, o) for t, o in occs if _in(t, lo, hi)]
        frag = (r.kind or "", r.name or "")
        order = cand[:1] + cand[-1:] + cand[1:-1]
        for t, _ in order:
            self.note(t, frag)
        if not cand:
            return 0
        if any(o is None for _, o in cand):
            return len(cand)
        first_o = 1 if lo is None or lo <= self.tl.start_t else min(o for _, o in cand if o is not None)
        return max(o for _, o in cand if o is not None) - first_o + 1

    def answer(self, q: Query) -> str | None:
        """The answer string of ``q`` (None when the timeline does not determine it)."""
        if q.type == "count" and q.count is not None:
            n = self.count(q.count)
            return None if n is None else str(n)
        if q.type == "order" and q.order is not None:
            a, b = q.order
            ta, tb = self.ref(a), self.ref(b)
            if ta is None or tb is None:
                return None
            if ta == tb:
                return "same step"
            pick = (a if ta < tb else b) if q.field != "later" else (a if ta > tb else b)
            return pick.name or f"step {min(ta, tb) if q.field != 'later' else max(ta, tb)}"
        if q.ref is None:
            return None
        t = self.ref(q.ref)
        if t is None:
            return None
        if q.type == "step":
            return str(t)
        if not q.field:  # the step is known, what is asked about it is not: its whole line is the evidence
            self.note(t, ("line",))
            return None
        exclude = _inside_label(q.ref) if q.field == "where" else None
        self.note(t, ("field", q.field, exclude or ""))
        return self.tl.value(t, q.field, exclude)


def _inside_label(r: Ref | None) -> str | None:
    """The label of the visit a reference's chain is inside (for ``where``), if any."""
    while r is not None:
        if r.within is not None and r.within.op == "visit":
            return r.within.name
        r = r.base or r.after
    return None


def resolve(tl: Timeline, q: Query, last_t: int | None = None) -> tuple[str | None, list[Fact]]:
    """``(answer, trace)`` of ``q`` over ``tl`` (see :class:`Resolver`)."""
    r = Resolver(tl, last_t)
    return r.answer(q), r.trace
