"""What a directory holds, in bounded form, and how its children differ (issue 13 item 2).

When the indexer renders a directory it knows each child's facts from ``meta`` only: an entry's keywords
and defined names (``EntryMeta.keywords`` / ``defines``), a subsection's profile and names
(``SectionMeta.profile`` / ``names``). From those — never from the whole subtree — this module computes

* the directory's own profile (:func:`profile_of`: term → entries below holding it, bounded) and its
  representative names (:func:`names_of`), stored in its ``SectionMeta`` for its parent's turn;
* its deterministic description (:func:`describe`): the terms most entries below it share, and names;
* the line of each subsection among its siblings (:func:`sibling_lines`): the terms that set it apart
  (:func:`libraryfs.index.terms.distinctive`) and a few of its names.

So one write costs the re-render of its directory and its ancestors (as before), each reading only its
own children's records.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field

from libraryfs.index.lines import (
    NO_TERMS,
    SECTION_NAMES,
    SECTION_TERMS,
    neutralise_toc_markup,
    section_summary,
)
from libraryfs.index.terms import distinctive, merge_profiles, name_words, words

SECTION_NAMES_KEPT = 24  #: names stored per section record
MAX_TERMS = 16  #: terms on the line of the largest sections


@dataclass
class Child:
    """One child of a directory as the TOC sees it: ``terms`` is a profile (an entry's keywords count
    once each), ``names`` its defined or representative names, ``entries`` the entries it stands for."""

    name: str
    is_dir: bool
    entries: int = 1
    terms: dict[str, int] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    tokens: int = 0


def entry_terms(keywords: list[str] | None, defines: list[str] | None, name: str) -> dict[str, int]:
    """An entry's profile: its keywords, the words of its name and of its first defined names (once each)."""
    return dict.fromkeys(_entry_terms(tuple(keywords or ()), tuple((defines or [])[:8]), name), 1)


@functools.lru_cache(maxsize=1 << 14)
def _entry_terms(keywords: tuple[str, ...], defines: tuple[str, ...], name: str) -> tuple[str, ...]:
    """The terms of :func:`entry_terms`, sorted. Cached: a directory's TOC is rendered again after every
    change in it, from the same entry records."""
    stem = re.sub(r"\.(rst\.txt|[A-Za-z0-9]{1,8})$", "", name)
    found = set(keywords) | set(words(re.sub(r"[._-]+", " ", stem)))
    found |= set(name_words(defines))
    return tuple(sorted(found))


def profile_of(children: list[Child]) -> dict[str, int]:
    """The directory's profile: the children's summed (bounded by :data:`~.terms.PROFILE_TERMS`)."""
    return merge_profiles(c.terms for c in children)


def _rank_name(n: str) -> tuple:
    short = n.rsplit(".", 1)[-1]
    return (short.startswith("_"), n.count("."), not short[:1].isupper(), len(n))


def names_of(children: list[Child], limit: int = SECTION_NAMES_KEPT) -> list[str]:
    """Representative names of a directory: round-robin over its children, largest first, each child's
    best names first (public before ``_private``, top-level before members, classes before functions)."""
    ordered = sorted(children, key=lambda c: (-c.entries, -c.tokens, c.name))
    queues = [
        sorted(
            dict.fromkeys(n for n in c.names if len(n.rsplit(".", 1)[-1].strip("_-")) >= 3), key=_rank_name
        )[:limit]
        for c in ordered
        if c.names
    ]
    out: dict[str, None] = {}
    depth = 0
    while len(out) < limit and any(depth < len(q) for q in queues):
        for q in queues:
            if depth < len(q) and len(out) < limit:
                out.setdefault(q[depth], None)
        depth += 1
    return list(out)


def describe(
    profile: dict[str, int], names: list[str], n_entries: int, exclude: set[str] | None = None
) -> str:
    """A directory's own description: the terms held by most entries below it, and a few names. A term
    held by one entry only is no description of a directory of several (the keys of a key-value store
    would each be one)."""
    skip = exclude or set()
    least = 2 if n_entries > 1 else 1
    common = [
        t for t, c in sorted(profile.items(), key=lambda x: (-x[1], x[0])) if t not in skip and c >= least
    ]
    return section_summary(common[:SECTION_TERMS], names[:SECTION_NAMES], n_entries)


def sibling_lines(children: list[Child], parent_name: str = "") -> list[str | None]:
    """For each child that is a directory, its line among its siblings (None for entries).

    Siblings are all children of the directory: entries count as one-entry groups, so a subsection's
    terms are those it does not share with the entries beside it either. Terms of the parent's own name
    are left out (every child of ``json/`` is about JSON).
    """
    exclude = set(words(re.sub(r"[._-]+", " ", parent_name)))
    groups = [c.terms for c in children]
    sizes = [max(1, c.entries) for c in children]
    top = distinctive(groups, sizes, top=MAX_TERMS, exclude=exclude)
    out: list[str | None] = []
    for c, terms in zip(children, top, strict=False):
        if not c.is_dir:
            out.append(None)
            continue
        own = set(words(re.sub(r"[._-]+", " ", c.name)))  # its label says those already
        terms = [t for t in terms if t not in own][: terms_for(c.entries)]
        out.append(section_summary(terms, c.names[:SECTION_NAMES], c.entries) or None)
    return out


def terms_for(entries: int) -> int:
    """How many terms a line describing ``entries`` entries carries: more for more (4 for one entry, 8
    for 8, 13 for 64, at most :data:`MAX_TERMS`) — a big section holds more that must be told apart."""
    return max(SECTION_TERMS - 2, min(MAX_TERMS, round(SECTION_TERMS - 2 + 1.5 * math.log2(max(1, entries)))))


def child_of_entry(name: str, keywords: list[str] | None, defines: list[str] | None, tokens: int) -> Child:
    """The :class:`Child` of an entry from its meta record's facts."""
    return Child(name, False, 1, entry_terms(keywords, defines, name), list(defines or [])[:8], tokens)


def child_of_section(
    name: str, profile: dict[str, int] | None, names: list[str] | None, entries: int, tokens: int
) -> Child:
    """The :class:`Child` of a subsection from its section record's facts (its own name's words count
    for every entry below it: ``json/`` is about JSON throughout)."""
    terms = dict(profile or {})
    for w in words(re.sub(r"[._-]+", " ", name)):
        terms[w] = max(terms.get(w, 0), max(1, entries))
    return Child(name, True, max(1, entries), terms, list(names or []), tokens)


def apply_children(
    items: list, children: list[Child], title: str, relative: bool
) -> tuple[dict[str, int], list[str]]:
    """Give each TOC item (:class:`libraryfs.index.toc.Item`, parallel to ``children``) what it holds, for
    the range lines of a multi-page TOC, and — when ``relative`` (the deterministic builder) — give each
    subsection its line among its siblings (:func:`sibling_lines`). Returns the directory's own profile
    and names (for its section record and its parent's turn)."""
    if relative:
        for it, line in zip(items, sibling_lines(children, title), strict=False):
            if line:
                it.summary = line
    for it, c in zip(items, children, strict=False):
        if c.is_dir and not neutralise_toc_markup(it.summary or "").strip():  # blank, or facts alone
            # ("2 entries", which the renderer strips): a blank line would read as the line's facts alone
            it.summary = NO_TERMS
        it.terms, it.names = c.terms, c.names[:1] if not c.is_dir else c.names[:2]
    return profile_of(children), names_of(children)
