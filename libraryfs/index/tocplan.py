"""The TOC planner: where a multi-page directory's leaves are cut (ARCHITECTURE §2, "the B-tree").

A lookup through a two-level TOC reads the root page and one leaf; under an agent's re-sent history (PAPERS.md
§1: every call re-sends every earlier result) the root is sent :data:`ROOT_SENDS` times and the leaf
:data:`LEAF_SENDS` times — once fewer each when the leaf's line quotes the file's whole text (the reader needs
no entry read: :data:`QUOTED_SENDS`). The planner picks the leaf size that makes that least (docs/theorem.md,
AUTO against INDEXED); :mod:`libraryfs.index.toc` renders the pages.
"""

from __future__ import annotations

from collections.abc import Callable

#: what a range line costs on the root page (label, link, count and what the range holds): the first guess
#: of a plan, replaced by what the planned root's lines really cost
RANGE_LINE_TOKENS = 45
MIN_LEAF_TOKENS = 300  #: a leaf page is never planned smaller than this (lines of tiny entries)
#: how often a two-level lookup's pages are sent to the model under the paper's re-sent history (PAPERS.md
#: §1: every call re-sends all earlier results): the root at the leaf's, the entry's and the answer's turn,
#: the leaf at the last two
ROOT_SENDS, LEAF_SENDS = 3, 2
#: the same for an entry whose leaf line quotes its whole text (``toc.quote_of``): the lookup ends at the leaf
#: (root sent at the leaf's and the answer's turn, the leaf at the answer's)
QUOTED_SENDS = (2, 1)


def sends(answered: list[bool] | None) -> tuple[float, float]:
    """``(root sends, leaf sends)`` of a lookup, averaged over the entries: :data:`QUOTED_SENDS` for those
    ``answered`` from their line, ``(ROOT_SENDS, LEAF_SENDS)`` for the others (all of them when None)."""
    n = len(answered) if answered else 0
    q = sum(1 for a in answered or [] if a) / n if n else 0.0
    return (ROOT_SENDS - q * (ROOT_SENDS - QUOTED_SENDS[0]), LEAF_SENDS - q * (LEAF_SENDS - QUOTED_SENDS[1]))


def balanced_leaf_budget(
    s_tokens: int,
    budget: int,
    range_tokens: float = RANGE_LINE_TOKENS,
    root_leaf_sends: tuple[float, float] = (ROOT_SENDS, LEAF_SENDS),
) -> int:
    """The leaf page size (tokens of lines) for a directory that needs more than one page, whose entry
    lines (as leaf pages show them) cost ``s_tokens`` tokens in all and whose range lines cost
    ``range_tokens`` each.

    A lookup through a two-level TOC reads the root and one leaf; under the re-sent history of an agent
    (PAPERS.md §1) it pays ``R · m · r + L · S / m`` tokens for ``m`` leaves, range lines of ``r`` tokens,
    ``S`` tokens of entry lines, and root and leaf sent ``R`` and ``L`` times (``root_leaf_sends``, by
    default ``ROOT_SENDS`` and ``LEAF_SENDS``; :func:`sends` for a directory with quoted lines): least at
    ``m = √(L · S / (R · r))``, i.e. leaves of ``√(R · S · r / L)`` tokens, not full ones (full leaves under a
    short root cost up to ``C`` per read where much less suffices; ``bench theorem``'s AUTO condition,
    docs/theorem.md). Returns ``budget`` (full leaves) when the root of ``m`` such range lines would not
    fit one page: a directory too big for two levels keeps full leaves (its fan-out bounds the depth)."""
    r = max(1.0, range_tokens)
    root_sends, leaf_sends = root_leaf_sends
    target = max(MIN_LEAF_TOKENS, int((root_sends * s_tokens * r / max(leaf_sends, 1e-9)) ** 0.5))
    if target >= budget:
        return budget
    leaves = -(-s_tokens // target)
    if leaves * r > budget:  # would not fit one root page: three or more levels anyway
        return budget
    return target


Leaf = tuple[str, list[str], str, list[int]]  #: a leaf page: (group title, lines, range label, item indexes)
#: what ``toc._index_levels`` returns: (root lines, lines of pages 1.., their titles, levels, notes)
Levels = tuple[list[str], list[list[str]], list[str], int, list[str]]
Plan = tuple[list[Leaf], Levels]  #: leaves and the levels above them


def cheapest_plan(
    plan: Callable[[int], Plan],
    leaf_cost: list[int],
    budget: int,
    count_tokens: Callable[[str], int],
    answered: list[bool] | None = None,
) -> Plan:
    """The leaf cut that costs a lookup least: ``plan(target)`` cuts leaves of about ``target`` tokens and
    builds the levels above them; tried at the balanced size for the guessed range-line cost, again for the
    cost the planned root's range lines really have (what a range line says varies by directory: a name
    range alone is ~20 tokens, with its distinctive terms up to ~60), and with full leaves. Among the
    two-level results the one of least :func:`lookup_cost` wins; with none, full leaves (more levels).
    ``answered[k]``: entry ``k``'s line quotes its whole text (a lookup of it ends at the leaf, :func:`sends`);
    ``leaf_cost[k]`` is that line's real cost, quote included."""
    s_tokens = sum(leaf_cost)
    rl = sends(answered)
    best: tuple[float, Plan] | None = None
    full: Plan | None = None  # full leaves, when they need three levels or more
    tried: set[int] = set()
    guess = float(RANGE_LINE_TOKENS)
    for target in (balanced_leaf_budget(s_tokens, budget, guess, rl), -1, budget):
        if target == -1:  # the measured range-line cost of the first plan
            if best is None:
                continue
            leaves0, (root0, *_rest) = best[1]
            ranged = root0[: len(leaves0)]  # the range lines (the root's extra lines are in every plan)
            measured = sum(count_tokens(ln) + 1 for ln in ranged) / max(1, len(ranged))
            target = balanced_leaf_budget(s_tokens, budget, measured, rl)
        if target in tried:
            continue
        tried.add(target)
        leaves, built = plan(target)
        if built[3] != 2:
            if target == budget:
                full = (leaves, built)
            continue
        cost = lookup_cost(leaves, built[0], leaf_cost, count_tokens, answered)
        if best is None or cost < best[0]:
            best = (cost, (leaves, built))
    if best is None:
        return full if full is not None else plan(budget)
    return best[1]


def lookup_cost(
    leaves: list[Leaf],
    root_lines: list[str],
    leaf_cost: list[int],
    count_tokens: Callable[[str], int],
    answered: list[bool] | None = None,
) -> float:
    """Tokens a two-level lookup sends, expected over the items (heads left out: the same in every plan):
    ``ROOT_SENDS`` × the root's lines + ``LEAF_SENDS`` × the lines of the leaf that holds the item, or
    :data:`QUOTED_SENDS` for an item ``answered`` from its quoted line (``answered[k]`` for item ``k``)."""
    n = max(1, sum(len(idxs) for *_x, idxs in leaves))
    root = sum(count_tokens(ln) + 1 for ln in root_lines)
    root_total = leaf_total = 0.0
    for *_x, idxs in leaves:
        page = sum(leaf_cost[k] for k in idxs)
        for k in idxs:
            r, lf = QUOTED_SENDS if answered and answered[k] else (ROOT_SENDS, LEAF_SENDS)
            root_total += r * root
            leaf_total += lf * page
    return (root_total + leaf_total) / n
