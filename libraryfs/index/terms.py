"""Terms that tell entries and sections apart: keywords of an entry, term profiles of a section, and the
terms that distinguish one group from its siblings (tf-idf; no stopwords).

* :func:`keywords` — an entry's characteristic words: those of its title, lead sentence, headings and
  defined names weigh most, then the body by (log) frequency. Kept in ``EntryMeta.keywords``.
* :func:`merge_profiles` — a section's profile: for each term, how many entries below it hold it (the
  top :data:`PROFILE_TERMS` only, so a profile is bounded at any size). Kept in ``SectionMeta.profile``;
  a parent builds its own from its children's, never from the whole subtree.
* :func:`distinctive` — for sibling groups (the subsections of a directory, or the pages of a
  multi-page TOC), the terms frequent in one group and rare in the others:
  ``df_g(t) / n_g · log(1 + G / groups holding t)``, a term of a single entry counting only when
  nothing better is left.

Deterministic: ties are broken by the term itself, so the same input gives the same words.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable

PROFILE_TERMS = 128  #: terms kept in a section's profile
ENTRY_KEYWORDS = 16  #: keywords kept per entry
BODY_CHARS = 60_000  #: characters of an entry's body counted for its keywords

_WORD = re.compile(r"[^\W\d_][^\W_]*(?:'[^\W\d_]+)?")
_CAMEL = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")

#: English function words and words of every document (markup, file formats), never a keyword
STOPWORDS = frozenset(
    """
a about above after again against all almost along already also although always am among an and another
any anyone anything are aren't around as at away be became because become becomes been before being
below beside besides between beyond both but by can can't cannot could couldn't did didn't do does
doesn't doing don't done down during each either else enough etc even ever every few for from further
get gets getting given gives go goes going got had hadn't has hasn't have haven't having he her here
hers herself him himself his how however i if in instead into is isn't it it's its itself just last
least less let like made make makes many may me might mine more most much must my myself near need
needs neither never next no nor not now of off often on once one only onto or other others otherwise
our ours ourselves out over own per perhaps quite rather really same see seen several shall she
should shouldn't since so some something sometimes still such than that that's the their theirs them
themselves then there there's therefore these they thing things this those though through thus to
together too toward towards two under unless until up upon us use used uses using usually very via
want was wasn't way we well were weren't what whatever when whenever where whether which while who
whoever whole whom whose why will with within without won't would wouldn't yet you your yours
yourself yourselves
new also e.g i.e etc via per first second third
rst txt html htm pdf md png jpg gif http https www com org net
entry entries section sections index file files page pages tok tokens bytes empty
""".split()
)


@functools.lru_cache(maxsize=1 << 16)
def _parts(w: str) -> tuple[str, ...]:
    """The words one token of text yields (camelCase split, lower-cased, stopwords and short or long parts
    dropped). Cached: a library's vocabulary repeats across its entries."""
    parts = _CAMEL.findall(w) if w.isascii() and not w.islower() and not w.isupper() else [w]
    out = []
    for p in parts:
        p = p.lower()
        if 3 <= len(p) <= 30 and p not in STOPWORDS and not p.isdigit():
            out.append(p)
    return tuple(out)


def words(text: str) -> list[str]:
    """Lower-case words of ``text`` (3–30 letters/digits of any script, starting with a letter),
    camelCase and snake_case split into parts, stopwords dropped."""
    out: list[str] = []
    for w in _WORD.findall(text[: BODY_CHARS * 2]):
        out.extend(_parts(w))
    return out


def word_counts(text: str) -> Counter[str]:
    """``Counter(words(text))``, computed per distinct token (a long body repeats most of its words)."""
    out: Counter[str] = Counter()
    for w, c in Counter(_WORD.findall(text[: BODY_CHARS * 2])).items():
        for p in _parts(w):
            out[p] += c
    return out


def name_words(names: Iterable[str]) -> list[str]:
    """Words of defined names: each dotted/underscored part, camelCase split (``json.JSONDecoder`` →
    ``json``, ``decoder``…)."""
    out: list[str] = []
    for n in names:
        out.extend(words(re.sub(r"[._:-]+", " ", n)))
    return out


def keywords(
    title: str, lead: str, headings: list[str], names: list[str], body: str, limit: int = ENTRY_KEYWORDS
) -> list[str]:
    """An entry's keywords (see the module docstring), best first."""
    score: dict[str, float] = defaultdict(float)
    for w in set(words(title)):
        score[w] += 6.0
    for w in set(words(lead)):
        score[w] += 3.0
    for w in set(words(" ".join(headings[:20]))):
        score[w] += 2.0
    for w, c in Counter(name_words(names[:200])).items():
        score[w] += 1.0 + math.log(c)
    for w, c in word_counts(body[:BODY_CHARS]).items():
        if c >= 2:
            score[w] += math.log(c)
    return [w for w, _s in sorted(score.items(), key=lambda x: (-x[1], x[0]))[:limit]]


def merge_profiles(
    parts: Iterable[Counter[str] | dict[str, int]], limit: int = PROFILE_TERMS
) -> dict[str, int]:
    """Sum of term → entry-count profiles, cut to the ``limit`` largest counts (ties by term)."""
    total: Counter[str] = Counter()
    for p in parts:
        total.update(p)
    return dict(sorted(total.items(), key=lambda x: (-x[1], x[0]))[:limit])


def distinctive(
    groups: list[dict[str, int]],
    sizes: list[int],
    top: int = 6,
    exclude: Iterable[str] = (),
    singles: bool = True,
) -> list[list[str]]:
    """For each group (term → entries holding it; ``sizes[g]`` entries), its ``top`` distinctive terms.

    Score ``df_g(t) / n_g · log(G / G_t)`` where ``G`` is the number of groups and ``G_t`` those holding
    ``t`` (a term every group holds tells nothing apart and is left out; with one group, terms rank by
    ``df``). A term
    held by one entry only ranks after every term held by two or more (a single entry's rare word
    describes the entry, not the group) unless the group has one entry; with ``singles`` False such terms
    are left out altogether (a range line of a multi-page TOC: the entry's own line, one read below, says
    them, and a sample of its entries' words is no description of a range whose entries share none — the
    keys of a key-value store). ``exclude``: terms never returned (e.g. the parent's own name).
    """
    skip = set(exclude)
    n_groups = len(groups)
    held = Counter(t for g in groups for t in g)
    out = []
    for g, size in zip(groups, sizes, strict=False):
        n = max(1, size)
        ranked = []
        for t, df in g.items():
            if t in skip:
                continue
            idf = math.log(n_groups / held[t]) if n_groups > 1 else 1.0
            s = (df / n) * idf
            if s <= 0:
                continue
            single = df < 2 and n > 1
            if single and not singles:
                continue
            ranked.append((single, -s, -df, t))
        ranked.sort()
        out.append([r[-1] for r in ranked[:top]])
    return out
