"""The TOC planner: where a multi-page directory's leaves are cut (ARCHITECTURE §2, "the B-tree").

A lookup through a two-level TOC reads the root page and one leaf; under an agent's re-sent history (PAPERS.md
§1: every call re-sends every earlier result) the root is sent :data:`ROOT_SENDS` times and the leaf
:data:`LEAF_SENDS` times. The planner picks the leaf size that makes that least (docs/theorem.md, AUTO against
INDEXED); :mod:`libraryfs.index.toc` renders the pages.
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


def balanced_leaf_budget(s_tokens: int, budget: int, range_tokens: float = RANGE_LINE_TOKENS) -> int:
    """The leaf page size (tokens of lines) for a directory that needs more than one page, whose entry
    lines (as leaf pages show them) cost ``s_tokens`` tokens in all and whose range lines cost
    ``range_tokens`` each.

    A lookup through a two-level TOC reads the root and one leaf; under the re-sent history of an agent
    (PAPERS.md §1) it pays ``ROOT_SENDS · m · r + LEAF_SENDS · S / m`` tokens for ``m`` leaves, range lines
    of ``r`` tokens and ``S`` tokens of entry lines: least at ``m = √(LEAF_SENDS · S / (ROOT_SENDS · r))``,
    i.e. leaves of ``√(ROOT_SENDS · S · r / LEAF_SENDS)`` tokens, not full ones (full leaves under a short
    root cost up to ``C`` per read where much less suffices; ``bench theorem``'s AUTO condition,
    docs/theorem.md). Returns ``budget`` (full leaves) when the root of ``m`` such range lines would not
    fit one page: a directory too big for two levels keeps full leaves (its fan-out bounds the depth)."""
    r = max(1.0, range_tokens)
    target = max(MIN_LEAF_TOKENS, int((ROOT_SENDS * s_tokens * r / LEAF_SENDS) ** 0.5))
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
    plan: Callable[[int], Plan], leaf_cost: list[int], budget: int, count_tokens: Callable[[str], int]
) -> Plan:
    """The leaf cut that costs a lookup least: ``plan(target)`` cuts leaves of about ``target`` tokens and
    builds the levels above them; tried at the balanced size for the guessed range-line cost, again for the
    cost the planned root's range lines really have (what a range line says varies by directory: a name
    range alone is ~20 tokens, with its distinctive terms up to ~60), and with full leaves. Among the
    two-level results the one of least :func:`lookup_cost` wins; with none, full leaves (more levels)."""
    s_tokens = sum(leaf_cost)
    best: tuple[float, Plan] | None = None
    full: Plan | None = None  # full leaves, when they need three levels or more
    tried: set[int] = set()
    guess = float(RANGE_LINE_TOKENS)
    for target in (balanced_leaf_budget(s_tokens, budget, guess), -1, budget):
        if target == -1:  # the measured range-line cost of the first plan
            if best is None:
                continue
            leaves0, (root0, *_rest) = best[1]
            ranged = root0[: len(leaves0)]  # the range lines (the root's extra lines are in every plan)
            measured = sum(count_tokens(ln) + 1 for ln in ranged) / max(1, len(ranged))
            target = balanced_leaf_budget(s_tokens, budget, measured)
        if target in tried:
            continue
        tried.add(target)
        leaves, built = plan(target)
        if built[3] != 2:
            if target == budget:
                full = (leaves, built)
            continue
        cost = lookup_cost(leaves, built[0], leaf_cost, count_tokens)
        if best is None or cost < best[0]:
            best = (cost, (leaves, built))
    if best is None:
        return full if full is not None else plan(budget)
    return best[1]


def lookup_cost(
    leaves: list[Leaf], root_lines: list[str], leaf_cost: list[int], count_tokens: Callable[[str], int]
) -> float:
    """Tokens a two-level lookup sends, expected over the items (heads left out: the same in every plan):
    ``ROOT_SENDS`` × the root's lines + ``LEAF_SENDS`` × the lines of the leaf that holds the item."""
    n = max(1, sum(len(idxs) for *_x, idxs in leaves))
    root = sum(count_tokens(ln) + 1 for ln in root_lines)
    leaf = sum(len(idxs) * sum(leaf_cost[k] for k in idxs) for *_x, idxs in leaves) / n
    return ROOT_SENDS * root + LEAF_SENDS * leaf
