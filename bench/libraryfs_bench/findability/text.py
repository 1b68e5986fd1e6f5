"""Lexical helpers shared by the benchmark's no-knowledge navigators and baselines.

Nothing here comes from libraryfs: the benchmark must not share its matching code with the finder or the
TOC builder it measures. Terms are lower-cased runs of letters and digits; a dotted or underscored name
(``json.dumps``, ``lru_cache``) also yields its parts, so a name query can meet a page that spells it
differently. A small closed stopword list (function words only) keeps topic queries to their content.
"""

from __future__ import annotations

import re

_TERM = re.compile(r"[a-z0-9]+(?:[._][a-z0-9]+)*")
_PART = re.compile(r"[a-z0-9]+")
#: English function words (no domain words: "python", "module", "file" stay terms)
STOPWORDS = frozenset(
    """
a about above after again against all also an and any are as at be because been before being below between
both but by can could did do does doing down during each either else etc for from further had has have
having he her here hers him his how i if in into is it its itself just may me might more most must my no
nor not now of off on once only or other our out over own per same shall she should so some such than that
the their them then there these they this those through to too under until up upon us very via was we were
what when where which while who whom why will with within without would yet you your one two used use using
""".split()
)


def terms(text: str, keep_stopwords: bool = False) -> list[str]:
    """Lower-cased terms of ``text`` in order: each dotted/underscored word, then its parts (deduplicated
    per word). Stopwords are dropped unless ``keep_stopwords``."""
    out: list[str] = []
    for m in _TERM.finditer(text.lower()):
        w = m.group(0)
        parts = _PART.findall(w)
        for t in ([w] if len(parts) > 1 else []) + parts:
            if keep_stopwords or t not in STOPWORDS:
                out.append(t)
    return out


def query_terms(text: str) -> list[str]:
    """Distinct content terms of a query, in first-seen order (a query of stopwords only keeps them)."""
    seen: dict[str, None] = {}
    for t in terms(text) or terms(text, keep_stopwords=True):
        seen.setdefault(t, None)
    return list(seen)


def stem(t: str) -> str:
    """A crude suffix strip (plural/verb endings) so ``parsing`` meets ``parse`` and ``queues`` meets
    ``queue``; applied alike to queries and pages, never to names with dots or underscores."""
    if "." in t or "_" in t or len(t) <= 4:
        return t
    for suf in ("ations", "ation", "ings", "ing", "ies", "es", "ed", "s"):
        if t.endswith(suf) and len(t) - len(suf) >= 3:
            return t[: -len(suf)] + ("y" if suf == "ies" else "")
    return t
