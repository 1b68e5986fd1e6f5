"""Pages and node records of the name catalogue (:mod:`libraryfs.index.catalogue`): packing, rendering and
the B+tree's upkeep above re-rendered leaves. No store access here except through the callables given.

Every page stays within the bound C (``max_tokens``, o200k tokens as counted by ``count_tokens``): a leaf
is cut at name boundaries before its lines exceed the budget, an inner page before its range lines do, and
the master line is one line. A line that alone exceeds a page (a path near PATH_MAX with C near its
minimum) is left out rather than break the bound.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from libraryfs.fs.backend import prefix_end  # noqa: F401  (re-exported for the catalogue)
from libraryfs.fs.generated import CATALOGUE_DIRNAME, INDEX_FILE, PAGES_DIRNAME, page_file
from libraryfs.index.toc import display_name, pack

HEAD_TOKENS = 140  #: a page's header comment, title (two names of ≤ 60 characters), up line and slack
LABEL_CHARS = 60  #: names in range labels and titles are cut here
LineT = tuple[str, Any, bool]  # (key, what its line shows: an entry path for a name, starts a key)


_LEAD_PUNCT = "_-.~!@#$%^&*+=:;,/\\|?'\"`<>()[]{} "


def sort_key(name: str) -> str:
    """A name's place in the catalogue: lower-cased, leading punctuation ignored (as a book's index files
    ``__init__`` under I and ``--help`` under H)."""
    return (name.lstrip(_LEAD_PUNCT) or name).lower()


def _shown_key(name: str) -> str:
    return name.lstrip(_LEAD_PUNCT) or name


def _prefix_not_of(key: str, other: str | None) -> int:
    """Length of the shortest prefix of ``key`` that is not a prefix of ``other`` (all of ``key`` when
    ``key`` is a prefix of ``other``); 1 without ``other``."""
    if other is None:
        return min(1, len(key)) or len(key)
    n = 0
    while n < len(key) and n < len(other) and key[n] == other[n]:
        n += 1
    return min(len(key), n + 1)


def range_labels(kids: list[list], noun: str = "name") -> list[str]:
    """``lo … hi`` labels of consecutive child pages, with the shortest prefixes that still separate each
    range from its neighbours (a prefix B-tree's separators): every key of a child lies between its ``lo``
    and ``hi`` (a key starting with ``hi`` included), and no key of its neighbours does."""
    keys = [(sort_key(k[2]), sort_key(k[3])) if k[4] else None for k in kids]
    out = []
    for i, k in enumerate(kids):
        if not k[4]:
            out.append(f"(no {noun}s)")
            continue
        first, last = keys[i]  # type: ignore[misc]
        prev = next((keys[j][1] for j in range(i - 1, -1, -1) if keys[j]), None)  # type: ignore[index]
        nxt = next((keys[j][0] for j in range(i + 1, len(kids)) if keys[j]), None)  # type: ignore[index]
        lo = _shown_key(k[2])[: _prefix_not_of(first, prev)]
        # at least one character past what first and last share, so that hi never reads as coming before lo
        # (``att … a`` for attach … axis: a valid separator, read backwards by people; now ``att … ax``)
        hi_len = max(_prefix_not_of(last, nxt), _prefix_not_of(last, first))
        hi = _shown_key(k[3])[:hi_len]
        out.append(_label(lo) if k[2] == k[3] or lo.lower() == hi.lower() else f"{_label(lo)} … {_label(hi)}")
    return out


def _label(name: str, n: int = LABEL_CHARS) -> str:
    s = display_name(name.encode("utf-8", "surrogateescape"))
    s = s if len(s) <= n else s[: n - 1] + "…"
    return s.replace(" … ", " ... ")


def path_link(path: bytes, prefix: str) -> str:
    """Relative link from a catalogue page to the entry at absolute ``path`` (each component percent-encoded;
    ``unquote_to_bytes`` gives the exact bytes back)."""
    parts = [urllib.parse.quote(c, safe="-._~+,=@") for c in path.strip(b"/").split(b"/")]
    return prefix + "/".join(parts)


def leaf_line(name: str, path: bytes, prefix: str) -> str:
    """``- [name](link)``: one name and the entry that defines it."""
    return f"- [{_label(name, 200)}]({path_link(path, prefix)})"


def _page_link(page: int, from_root: bool) -> str:
    return (f"{PAGES_DIRNAME}/" if from_root else "") + page_file(page)


def range_line(kid: list, label: str, from_root: bool, noun: str = "name") -> str:
    """``- [lo … hi](NNNN.md) — N names`` for one child page (``label`` from :func:`range_labels`)."""
    page, n = kid[0], kid[4]
    return f"- [{label}]({_page_link(page, from_root)}) — {n:,} {noun}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Style:
    """What a paged A–Z index is about: the catalogue of names (:data:`NAMES`) or the subject index
    (:mod:`libraryfs.index.subjects`). ``line(key, payload, link prefix)`` renders one leaf line; ``noun``
    counts keys on range lines (``— 40 names``); ``title``/``intro`` head its pages; ``tag`` names it in
    the header comment."""

    title: str
    intro: str
    noun: str
    tag: str
    line: Callable[[str, Any, str], str]


NAMES = Style(
    "Name catalogue",
    "Every name this library's entries define (functions, classes, methods, options, terms), A–Z "
    "(case and leading punctuation ignored: `__init__` under I); each links to the entry that defines it.",
    "name",
    "catalogue",
    lambda name, path, prefix: leaf_line(name, path, prefix),
)


#: the label of the catalogue's line in the master ``INDEX.md``: a name index, not a key range of words
MASTER_LABEL = "names A–Z"


def master_line(root: dict, prefix: str = "") -> str:
    """The catalogue's one line in the master ``INDEX.md``: labelled as what it is — an A–Z index of exact
    names — with its size, and no ``first … last`` range labels. Range labels of the catalogue's pages
    (``. … re.``) in the master page read as a key range of *words*, so a walk for a sentence entered
    them for every word it held (docs/findability.md, "the catalogue attracts topic walks"); one line
    labelled ``names A–Z`` is entered for a name and passed over for a phrase. ``prefix``: the way from the
    master page to the library root (``../`` when the master page is ``.index/INDEX.md``: the user owns
    ``INDEX.md``)."""
    n = int(root.get("n", 0))
    return (
        f"- [{MASTER_LABEL}]({prefix}{CATALOGUE_DIRNAME}/{INDEX_FILE}) — name index: {n:,} exact name"
        f"{'' if n == 1 else 's'} (API names, symbols, headwords), each linked to the entry that defines it"
    )


def _head(page: int, node: dict, style: Style) -> list[str]:
    n, noun = int(node.get("n", 0)), style.noun
    lines = [f"<!-- libraryfs {style.tag}: page={page} {noun}s={n} -->"]
    if page == 0:
        lines += [f"# {style.title}", style.intro, f"{n:,} {noun}s"]
    else:
        first, last = _shown_key(node.get("first", "")), _shown_key(node.get("last", ""))
        span = _label(first) if first == last else f"{_label(first)} … {_label(last)}"
        lines.append(f"# {style.title} — {span or f'(no {noun}s)'}")
    return lines + [""]


def _page(page: int, node: dict, body: list[str], style: Style) -> str:
    tail = ["", f"- [↑ up](../{INDEX_FILE})"] if page else []
    empty = [f"_(no {style.noun}s in this range)_"]
    return "\n".join(_head(page, node, style) + (body or empty) + tail) + "\n"


def _common(a: str, b: str) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def pack_leaves(
    lines: list[LineT],
    max_tokens: int,
    count_tokens: Callable[[str], int],
    even: bool = False,
    style: Style = NAMES,
) -> list[list[LineT]]:
    """Cut ``lines`` into leaves whose rendered lines fit ``max_tokens`` minus the header allowance.

    Cuts fall only where a name starts, and among the last :data:`SPLIT_WINDOW` of a leaf's lines at the
    place where neighbouring names share the shortest prefix, so the separators above are short (suffix
    truncation, Bayer & Unterauer's prefix B-trees). ``even``: leaves of about equal size (a B-tree's
    split of one overflowing leaf, so neither half is nearly empty) instead of full ones (bulk loading).
    Lines that alone exceed the budget are dropped."""
    budget = max_tokens - HEAD_TOKENS
    costs = []
    kept: list[LineT] = []
    for ln in lines:
        c = count_tokens(style.line(ln[0], ln[1], "../../")) + 1
        if c <= budget:
            kept.append(ln)
            costs.append(c)
    if even and sum(costs) > budget:
        pieces = -(-sum(costs) // budget)
        budget = -(-sum(costs) // pieces) + max(costs)  # about equal shares, still within the bound
        budget = min(budget, max_tokens - HEAD_TOKENS)
    out: list[list[LineT]] = []
    start = 0
    while start < len(kept):
        end, cost = start, 0
        while end < len(kept) and cost + costs[end] <= budget:
            cost += costs[end]
            end += 1
        end = max(end, start + 1)
        if end < len(kept):
            end = _best_cut(kept, start, end)
        out.append(kept[start:end])
        start = end
    return out


SPLIT_WINDOW = 0.2  #: share of a full leaf searched for the cut with the shortest separator


def _best_cut(lines: list[LineT], start: int, end: int) -> int:
    """The cut in ``(start, end]`` (a name start) within the window before ``end`` whose neighbouring
    sort keys share the shortest prefix; ``end`` when no name starts in the window.

    A cut never falls inside a prefix chain (``mod``, ``mod.f``, ``mod.f.x``): it moves back before the
    chain's head (while the page keeps a line), so no page ends with a name that the next page's names
    start with — a range ``lo … hi`` then holds every name starting with ``hi`` and its neighbours none."""
    lo = max(start + 1, end - max(1, int((end - start) * SPLIT_WINDOW)))
    best, best_len = end, None
    for cut in range(end, lo - 1, -1):
        if not lines[cut][2]:
            continue
        shared = _common(sort_key(lines[cut - 1][0]), sort_key(lines[cut][0]))
        if best_len is None or shared < best_len:
            best, best_len = cut, shared
    while best - 1 > start and best < len(lines) and _is_prefix_cut(lines, best):
        best -= 1
    return best


def _is_prefix_cut(lines: list[LineT], cut: int) -> bool:
    """Whether the name before ``cut`` is a prefix of the name at ``cut`` (or ``cut`` starts no name)."""
    return not lines[cut][2] or sort_key(lines[cut][0]).startswith(sort_key(lines[cut - 1][0]))


def leaf_node(lines: list[LineT], lo: bytes, hi: bytes | None, up: int) -> dict:
    """The node record of a leaf over ``[lo, hi)`` holding ``lines``."""
    return {
        "k": "leaf",
        "up": up,
        "lo": lo.hex(),
        "hi": hi.hex() if hi is not None else None,
        "n": len(lines),
        "first": lines[0][0] if lines else "",
        "last": lines[-1][0] if lines else "",
        "depth": 1,
    }


def render_leaf(
    page: int, lines: list[LineT], node: dict, count_tokens: Callable[[str], int], style: Style = NAMES
) -> tuple[bytes, int]:
    """``(page bytes, tokens)`` of a leaf page."""
    prefix = "../" if page == 0 else "../../"
    text = _page(page, node, [style.line(n, p, prefix) for n, p, _s in lines], style)
    return text.encode("utf-8", "surrogateescape"), count_tokens(text)


def render_inner(
    page: int, node: dict, count_tokens: Callable[[str], int], style: Style = NAMES
) -> tuple[bytes, int]:
    """``(page bytes, tokens)`` of an inner page (one range line per child page)."""
    labels = range_labels(node["kids"], style.noun)
    body = [range_line(k, lab, page == 0, style.noun) for k, lab in zip(node["kids"], labels, strict=True)]
    text = _page(page, node, body, style)
    return text.encode("utf-8", "surrogateescape"), count_tokens(text)


def _pack_kids(
    kids: list[list], max_tokens: int, count_tokens: Callable[[str], int], style: Style = NAMES
) -> list[list[list]]:
    """Consecutive child pages grouped into inner pages within the bound. A line's cost is taken with its
    label among all of ``kids`` (on a page its label can only get shorter: a missing neighbour)."""
    labels = range_labels(kids, style.noun)
    costs = [
        count_tokens(range_line([9999, *kid[1:]], lab, True, style.noun)) + 1
        for kid, lab in zip(kids, labels, strict=True)
    ]
    return [[kids[k] for k in g] for g in pack(costs, max_tokens - HEAD_TOKENS)]


def _inner_node(kids: list[list], up: int, depth: int) -> dict:
    named = [k for k in kids if k[4]]
    return {
        "k": "inner",
        "up": up,
        "kids": kids,
        "n": sum(k[4] for k in kids),
        "first": named[0][2] if named else "",
        "last": named[-1][3] if named else "",
        "depth": depth,
    }


def _kid(page: int, node: dict) -> list:
    lo = node["lo"] if node["k"] == "leaf" else node["kids"][0][1]
    return [page, lo, node.get("first", ""), node.get("last", ""), int(node.get("n", 0))]


def render_all(
    leaves: list[list[LineT]],
    keys: list[bytes],
    max_tokens: int,
    count_tokens: Callable[[str], int],
    style: Style = NAMES,
    first_key: bytes = b"n",
) -> tuple[dict[int, dict], dict[int, tuple[bytes, int]]]:
    """Every node and page of a catalogue built from scratch: ``leaves`` (packed lines), ``keys`` the row
    key prefix of each line (leaf ranges start at their first name's key; the first at ``first_key``, the
    catalogue's row prefix). Page 0 is the root."""
    nodes: dict[int, dict] = {}
    if len(leaves) == 1:
        nodes[0] = leaf_node(leaves[0], first_key, None, -1)
        return nodes, {0: render_leaf(0, leaves[0], nodes[0], count_tokens, style)}
    pos = 0
    next_page = 1
    level: list[list] = []
    for k, lines in enumerate(leaves):
        lo = first_key if k == 0 else keys[pos]
        pos += len(lines)
        hi = keys[pos] if k + 1 < len(leaves) else None
        nodes[next_page] = leaf_node(lines, lo, hi, -1)
        level.append(_kid(next_page, nodes[next_page]))
        next_page += 1
    depth = 2
    while True:
        groups = _pack_kids(level, max_tokens, count_tokens, style)
        if len(groups) == 1:
            nodes[0] = _inner_node(groups[0], -1, depth)
            for kid in groups[0]:
                nodes[kid[0]]["up"] = 0
            break
        nxt = []
        for g in groups:
            nodes[next_page] = _inner_node(g, -1, depth)
            for kid in g:
                nodes[kid[0]]["up"] = next_page
            nxt.append(_kid(next_page, nodes[next_page]))
            next_page += 1
        level, depth = nxt, depth + 1
    pages: dict[int, tuple[bytes, int]] = {}
    k = 0
    for page, node in nodes.items():
        if node["k"] == "leaf":
            pages[page] = render_leaf(page, leaves[k], node, count_tokens, style)
            k += 1
        else:
            pages[page] = render_inner(page, node, count_tokens, style)
    return nodes, pages


def replace_kid(
    node: Callable[[int], dict], plan, parent: int, old: int, new: list[int], changed: set[int]
) -> None:
    """In inner page ``parent``, replace child ``old`` by the pages ``new`` (a re-rendered leaf, split)."""
    if parent < 0:
        return
    p = node(parent)
    kids = [k for k in p["kids"] if k[0] != old]
    at = next((i for i, k in enumerate(p["kids"]) if k[0] == old), len(kids))
    kids[at:at] = [_kid(pg, plan.nodes[pg]) for pg in new]
    for pg in new:
        plan.nodes[pg]["up"] = parent
    p["kids"] = kids
    plan.nodes[parent] = p
    changed.add(parent)


def update_ancestors(
    node: Callable[[int], dict], plan, changed: set[int], max_tokens: int, count_tokens: Callable[[str], int]
) -> None:
    """Re-render the changed inner pages level by level up to the root, splitting one that outgrew the
    bound (its new siblings are appended pages). Raises :class:`RootSplit` when the root must split."""
    while changed:
        nxt: set[int] = set()
        for page in sorted(changed):
            p = node(page)
            groups = _pack_kids(p["kids"], max_tokens, count_tokens)
            if len(groups) > 1 and page == 0:
                raise RootSplit()
            pages = [page] + [plan.npages + k for k in range(len(groups) - 1)]
            plan.npages += len(groups) - 1
            for pg, g in zip(pages, groups, strict=True):
                n = _inner_node(g, p.get("up", -1), p.get("depth", 2))
                plan.nodes[pg] = n
                for kid in g:
                    child = node(kid[0])
                    if child.get("up") != pg:
                        child["up"] = pg
                        plan.nodes[kid[0]] = child
                plan.pages[pg] = render_inner(pg, n, count_tokens)
            if p.get("up", -1) >= 0:
                replace_kid(node, plan, p["up"], page, pages, nxt)
            for pg in pages:  # node() must see the new records
                node(pg).update(plan.nodes[pg])
        changed = nxt


class RootSplit(Exception):
    """The root page outgrew the bound: the catalogue is rebuilt (the tree grows one level)."""
