"""Index construction jobs (ARCHITECTURE §4): the seam between the indexer and whoever writes the index.

The indexer calls an :class:`IndexBuilder` for four jobs, always in batches:

=====================  ===================================  ==========================================
job                    with an LLM (libraryfs.llm)          :class:`DeterministicBuilder` (the default)
=====================  ===================================  ==========================================
summarize entries      one line, ≤ ~20 words                title, first sentence and the names it
                                                            defines (:mod:`libraryfs.index.lines`)
describe sections      one line from its entries' lines     terms most of its entries share, and names
                                                            (:mod:`libraryfs.index.sections`)
file inbox entries     existing section or a new name       best lexical match among sections, else
                                                            ``unsorted``
group a large TOC      named semantic groups                ``None``: contiguous name ranges (B-tree)
=====================  ===================================  ==========================================

Builders return plain text; the TOC renderer (:mod:`libraryfs.index.toc`) sanitises it and decides every path and
link, so model output can never inject a path or an escape sequence. The LLM never decides what a lookup
returns (PAPERS.md §1: the LLM builds the index, deterministic code navigates it).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from libraryfs.fs.generated import GENERATED_NAMES
from libraryfs.index.lines import entry_summary
from libraryfs.index.outline import Outline, binary_kind, outline

SUMMARY_MAX_WORDS = 20
SAMPLE_BYTES = 8192  #: bytes of an entry's content given to a builder


@dataclass
class EntryDoc:
    """An entry to summarise or file. ``text`` is a decoded prefix (≤ SAMPLE_BYTES), '' if binary."""

    path: str  #: library-relative path, e.g. ``"library/os.rst.txt"`` (surrogate escapes for odd bytes)
    name: str
    content_hash: str  #: sha256 hex of the whole content
    text: str
    size_bytes: int
    is_binary: bool = False
    outline: Outline | None = None  #: from the whole text (the indexer's), else computed from ``text``
    head: bytes = b""  #: first bytes of a binary entry (its type)


@dataclass
class SectionDoc:
    """A directory: its library-relative path (``""`` = root) and ``(name, summary line)`` of its entries."""

    path: str
    entries: list[tuple[str, str]] = field(default_factory=list)
    description: str = ""
    profile: dict[str, int] | None = None  #: term → entries below holding it (the indexer's)
    names: list[str] | None = None  #: representative names defined below it


@dataclass
class Group:
    """A named group of TOC items (entry names) for a directory whose TOC needs several pages."""

    title: str
    names: list[str]


class IndexBuilder(Protocol):
    """What the indexer needs from an index writer. Every method returns one result per input, in order."""

    name: str  #: e.g. ``"deterministic"`` or ``"llm:gpt-4o-mini"``

    def summarize(self, docs: list[EntryDoc]) -> list[str]:
        """One-line summary per entry (≤ ~20 words)."""
        ...

    def describe(self, sections: list[SectionDoc]) -> list[str]:
        """One-line description per section."""
        ...

    def file(self, docs: list[EntryDoc], sections: list[SectionDoc]) -> list[str]:
        """Target section path per inbox entry: an existing section's path or a new safe name."""
        ...

    def group(self, section: SectionDoc, max_items: int) -> list[Group] | None:
        """Named groups covering every entry exactly once, or ``None`` for contiguous name ranges."""
        ...

    def status(self) -> dict:
        """Facts for ``status.json`` (requests, fallbacks, last error, spend)."""
        ...


_STOP = frozenset(
    """a an and are as at be by for from has have in into is it its of on or that the this to was
were will with not no can you your we our they their which when what how use used using also may
than then there these those such each other more most some any all one two new see via per if
but so do does did been being only over under about after before between both same own very
entry entries section index rst txt html pdf bytes tok tokens empty file""".split()
)
_WORD = re.compile(r"\b[A-Za-z][A-Za-z0-9_'-]{2,29}\b")  # ≤ 30 chars: no 250-char names as terms
_ROLE = re.compile(r":[a-z:]+:`~?!?([^`<]*?)(?:\s*<[^>]*>)?`")
_MARKUP = re.compile(r"[*`|]+")


def clean_line(text: str, max_words: int = SUMMARY_MAX_WORDS) -> str:
    """Collapse whitespace, strip reST/Markdown markup and truncate to ``max_words`` words (… appended)."""
    text = _ROLE.sub(r"\1", text)
    text = _MARKUP.sub("", text)
    words = text.split()
    if len(words) > max_words:
        return " ".join(words[:max_words]) + " …"
    return " ".join(words)


def deterministic_summary(doc: EntryDoc) -> str:
    """What the entry is and what it defines (:func:`libraryfs.index.lines.entry_summary` of its outline);
    the type and size of a binary entry."""
    if doc.is_binary:
        return f"{binary_kind(doc.head)}, {doc.size_bytes:,} bytes"
    o = doc.outline or outline(doc.name, doc.text, size_bytes=doc.size_bytes)
    return entry_summary(o, doc.name) or f"{doc.size_bytes:,} bytes of text"


def terms(text: str) -> list[str]:
    """Lower-cased content words of ``text`` (stop words and short tokens dropped)."""
    return [w for w in (m.group(0).lower().strip("'-") for m in _WORD.finditer(text)) if w not in _STOP]


def deterministic_description(section: SectionDoc, top: int = 6) -> str:
    """The terms most of its entries share and a few names below it, from the indexer's profile
    (:func:`libraryfs.index.sections.describe`); without one, ``"<n> entries: t1, t2, …"`` with the most
    frequent terms of the entries' names and lines."""
    n = len(section.entries)
    if not n:
        return "empty section"
    if section.profile is not None:
        from libraryfs.index.sections import describe

        own = set(terms(section.path.rsplit("/", 1)[-1].replace("-", " ").replace("_", " ")))
        return describe(section.profile, section.names or [], n, own) or f"{n} entr{'y' if n == 1 else 'ies'}"
    c: Counter[str] = Counter()
    for name, line in section.entries:
        c.update(set(terms(name.replace("_", " ").replace("-", " ").rsplit(".", 1)[0])))
        c.update(set(terms(line)))
    common = [w for w, _ in c.most_common(top)]
    return f"{n} entr{'y' if n == 1 else 'ies'}" + (f": {', '.join(common)}" if common else "")


def _ext(name: str) -> str:
    return name.split(".", 1)[1].lower() if "." in name.strip(".") else ""


SAFE_SECTION = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


_GENERATED_LOWER = frozenset(n.lower() for n in GENERATED_NAMES)  #: never a section name, in any case


def safe_section_name(name: str) -> str | None:
    """A proposed section path made safe: lower-case ``[a-z0-9._-]`` components (≤ 64 bytes), ≤ 3 levels.

    Returns ``None`` when nothing usable remains (then the caller files into ``unsorted``).
    """
    parts = []
    for comp in name.strip().strip("/").split("/"):
        comp = re.sub(r"[^a-z0-9._-]+", "-", comp.strip().lower()).strip("-.")
        if not comp or comp in (".", "..", "inbox") or not SAFE_SECTION.match(comp):
            return None
        parts.append(comp)
    if not parts or len(parts) > 3 or parts[0].lower() in _GENERATED_LOWER:
        return None
    return "/".join(parts)


class DeterministicBuilder:
    """The embedded default builder: no model, no network, same output for the same input."""

    name = "deterministic"

    def summarize(self, docs: list[EntryDoc]) -> list[str]:
        """See :func:`deterministic_summary`."""
        return [deterministic_summary(d) for d in docs]

    def describe(self, sections: list[SectionDoc]) -> list[str]:
        """See :func:`deterministic_description`."""
        return [deterministic_description(s) for s in sections]

    def file(self, docs: list[EntryDoc], sections: list[SectionDoc]) -> list[str]:
        """Best lexical match (shared terms, weighted by rarity) among sections, else ``"unsorted"``."""
        prof: list[tuple[str, Counter[str]]] = []
        df: Counter[str] = Counter()
        for s in sections:
            c: Counter[str] = Counter()
            c.update(terms(s.path.replace("/", " ").replace("-", " ")) * 3)
            c.update(terms(s.description))
            for name, line in s.entries:
                c.update(terms(name.replace("_", " ").replace("-", " ")))
                c.update(terms(line))
            prof.append((s.path, c))
            df.update(set(c))
        shape: dict[str, tuple[Counter[str], Counter[str], int]] = {}
        for s in sections:
            exts: Counter[str] = Counter(_ext(n) for n, _l in s.entries)
            initials: Counter[str] = Counter(n[:1].lower() for n, _l in s.entries)
            shape[s.path] = (exts, initials, max(1, len(s.entries)))
        out = []
        for d in docs:
            words = Counter(terms(d.name.replace("_", " ").replace("-", " ") + " " + d.text[:4000]))
            best, best_score = "unsorted", 0.0
            for path, c in prof:
                score = sum(min(words[w], 3) * min(c[w], 5) / (1 + df[w]) for w in words if w in c)
                exts, initials, n = shape[path]
                # entries of one kind go together: same file type, same initial (alphabetic sections)
                score += 2.0 * exts[_ext(d.name)] / n + 1.5 * initials[d.name[:1].lower()] / n
                if score > best_score:
                    best, best_score = path, score
            out.append(best if best_score >= 1.0 else "unsorted")
        return out

    def group(self, section: SectionDoc, max_items: int) -> list[Group] | None:
        """Contiguous name ranges: the renderer's B-tree split (returns ``None``)."""
        return None

    def status(self) -> dict:
        """``{"builder": "deterministic"}``."""
        return {"builder": self.name}
