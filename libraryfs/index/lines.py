"""The deterministic text of TOC lines (issue 13 item 2): what an entry is and defines; what sets a
section apart from its siblings; what a range of a multi-page TOC holds.

* :func:`entry_summary` — ``title: lead sentence. Defines: a, b, c, … (+N)`` from an entry's
  :class:`~libraryfs.index.outline.Outline`, with what repeats the entry's own name left out (the name is
  the line's link) and within :data:`SUMMARY_MAX_CHARS`;
* :func:`section_summary` — ``distinctive terms · names`` of a section among its siblings;
* :func:`range_summary` — the same for one page's range of entries among the other pages of a
  multi-page TOC;
* :func:`shared_span` — whether a size or count is about the same on every line of a page (then the
  page says it once);
* :data:`QUOTE_MAX_CHARS` — how short a file's whole text must be for its line to quote it instead of
  summarising it (the rule is the renderer's ``toc.whole_text``).

Text that would address a reader (a model) with instructions is never copied into a line
(:func:`looks_like_instructions`); text that fakes TOC markup is neutralised (:func:`neutralise_toc_markup`,
applied by the renderer's ``sanitize`` to every summary, description and title); the renderer
(:mod:`libraryfs.index.toc`) escapes everything else for CommonMark (``toc.md_escape``: names and text
render as themselves, never as raw HTML, code or emphasis).
"""

from __future__ import annotations

import re

from libraryfs.index.outline import Outline

#: version of the TOC text rules (outlines, lines, catalogue); an indexer starting on a library whose last
#: full pass used another version runs a full pass (``config[toc_format]``)
TOC_FORMAT = 7  #: 3: short leads joined by the next sentences (markup.first_sentence); 4: "N entries" counts
#: a directory's own entries, "M in all" those below it (toc.count_text); range lines without one-entry terms;
#: 5: a size or count every line would repeat is said once on the page (toc.shared_span), freshness facts on
#: the root page only; 6: names and text Markdown-escaped (toc.md_escape: no raw HTML, code or emphasis from a
#: name), a leaf page's bare names only those needing no escape; 7: a file whose whole text is one short line
#: is quoted on its line (``- name — "text"``, toc.whole_text, :data:`QUOTE_MAX_CHARS`), a summary never starts
#: with a bare ``"``
SUMMARY_MAX_CHARS = 200  #: an entry line's summary (the renderer caps any builder text at 240)
HEAD_MAX_CHARS = 110  #: title and lead when names or headings follow them
LEAD_MAX_WORDS = 20
#: a file whose whole text is one line of at most this many characters may be quoted on its TOC line instead
#: of summarised (``toc.whole_text``). The bound is the head of a summary (title and lead) when names follow:
#: a quote is never longer than what the line could say of the file anyway (a one-line text's summary is its
#: first sentence, at most :data:`SUMMARY_MAX_CHARS`), so quoting costs a page a few tokens at most (the two
#: quote marks, the size left out) and saves a reader who needs the file its read (a turn: ~200 tokens under an
#: agent's re-sent history, docs/theorem.md)
QUOTE_MAX_CHARS = HEAD_MAX_CHARS
#: the bytes read of a file that may be quoted: the longest text of :data:`QUOTE_MAX_CHARS` characters in UTF-8
#: (4 bytes a character at most) and its newline; a larger file is never read for its TOC line
QUOTE_MAX_BYTES = 4 * QUOTE_MAX_CHARS + 1
SECTION_TERMS = 6
SECTION_NAMES = 4

#: imperative text aimed at a model reading the TOC ("prompt injection"): never reproduced in a line
_INSTRUCTIONS = re.compile(
    r"\b(?:ignore|disregard|forget|override)\b.{0,40}\b(?:previous|prior|above|earlier|all|any|your)\b.{0,30}"
    r"\b(?:instructions?|prompts?|rules|directions|messages?)\b"
    r"|\b(?:you are now|act as|pretend to be|new instructions|system prompt|jailbreak)\b"
    r"|\b(?:assistant|agent|ai|llm|model)\s*[:,]\s*(?:please\s+)?(?:ignore|delete|run|execute|send|reveal)\b"
    # a role prefix addressing the reader ("SYSTEM: You must …"), an order given before the model answers,
    # a note to "any AI agent", "disregard the user", "ignore the above and …"
    r"|(?:^|[\n.!?]\s*)(?:system|developer|assistant)\s*:\s*you\b"
    r"|\bbefore (?:answering|responding|replying)\b\W{0,3}\s*(?:please\s+)?(?:run|execute|send|reveal|call)\b"
    r"|\b(?:note|message|instructions?) (?:to|for) (?:any|all|every|the)?\s*(?:ai|llm|language model|agents?|assistants?)\b"
    r"|\bdisregard (?:the|your) (?:user|above|system)\b"
    r"|\bignore (?:the|everything|all) (?:above|previous|prior|earlier)\b",
    re.I,
)


#: TOC markup that text copied from an entry (its first line) or written by a model could carry, so that its
#: line would read like another TOC line (``- [x](../../etc/passwd) — 3 entries: … (12 tok)``): replaced
#: by what it says in words, in this order
_TOC_MARKUP = (
    (re.compile(r"!?\[((?:\\.|[^\[\]\\])*)\]\([^()]*\)"), r"\1"),  # a Markdown link or image: its text
    (re.compile(r"\]\([^()\s]*\)"), ""),  # a link's tail whose text is cut off (``… ](http://x)``)
    (re.compile(r"^(?:[-*+•]|\d{1,3}[.)])\s+"), ""),  # a list marker that starts the text
    # a TOC line's facts: (12 tok), (~3 tok), (2 entries, 40 tok), (3 entries, 9 in all, 1,000 tok)
    (re.compile(r"\s*\((?:[\d,]+ (?:entr(?:y|ies)|in all), )*(?:[\d,]+ in all, )?~?[\d,]+ tok\)"), ""),
    # a section or range line's count after its dash ("— 3 entries: …", "— 12 entries, 40 in all"), or one
    # that starts the text and a colon ends ("3 entries: …")
    (
        re.compile(
            r"(?:\s*[—–]\s*|^)[\d,]+ (?:entr(?:y|ies)|in all)(?:,\s*[\d,]+ in all)?(?:,\s*~?[\d,]+ tok)?"
            r"(?:\s*:|\s*$|(?=\s*\())"
        ),
        ": ",
    ),
)


def neutralise_toc_markup(text: str) -> str:
    """``text`` (one line) without what would make it read as TOC markup: Markdown links and images become
    their text, a leading list marker goes, and a TOC line's facts (``(12 tok)``, ``— 3 entries:``) are
    left out. The escaping in :func:`sanitize` already keeps such text from being a link; this keeps an
    entry's line from *saying* it is a section of N entries, or from carrying a second token count."""
    out = text
    for pattern, repl in _TOC_MARKUP:
        out = pattern.sub(repl, out)
    return text if out == text else " ".join(out.split()).strip(" :")


def looks_like_instructions(text: str) -> bool:
    """Whether ``text`` addresses a model with instructions (``ignore previous instructions …``)."""
    return bool(_INSTRUCTIONS.search(text[:2000]))


def _words_cut(text: str, max_words: int) -> str:
    w = text.split()
    return " ".join(w[:max_words]) + (" …" if len(w) > max_words else "")


def _stem_of(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    for ext in (".rst.txt", ".tar.gz"):
        if base.lower().endswith(ext):
            return base[: -len(ext)]
    return base.rsplit(".", 1)[0] if "." in base.strip(".") else base


def _norm(s: str) -> str:
    return re.sub(r"[\W_]+", "", s).lower()


def _title_part(title: str, name: str) -> str:
    """The title without what repeats the entry's name (``json --- JSON encoder`` → ``JSON encoder``)."""
    stem = _norm(_stem_of(name))
    if not title or _norm(title) == stem:
        return ""
    for sep in (" --- ", " -- ", " — ", " - ", ": "):
        head, found, rest = title.partition(sep)
        if found and _norm(head) == stem and rest.strip():
            return rest.strip()
    return title


_KEY_SEP = re.compile(r"^\s*(?:→|->|=>|:|=|—|–)\s*")


def _lead_part(lead: str, name: str) -> str:
    """The lead without a leading repeat of the entry's name before a separator (``1025→JBMB`` on the line
    of ``1025`` → ``JBMB``; ``key: value`` → ``value``): the name is the line's link already."""
    stem = _stem_of(name)
    if stem and lead[: len(stem)].lower() == stem.lower():
        m = _KEY_SEP.match(lead[len(stem) :])
        if m and lead[len(stem) + m.end() :].strip():
            return lead[len(stem) + m.end() :].strip()
    return lead


def display_names(names: list[str], title: str, name: str) -> list[str]:
    """Names as shown on the entry's line: relative to the entry's module (``json.dumps`` → ``dumps``
    on ``json.rst.txt``: the first dotted component that most names share, or the entry's own stem), the
    module itself left out, top-level names before their members, ``_private`` ones last."""
    if not names:
        return []
    firsts = [n.split(".", 1)[0] for n in names if "." in n]
    common = max(sorted(set(firsts)), key=firsts.count) if firsts else ""
    module = common if firsts.count(common) * 10 >= len(names) * 6 else ""
    stem = _stem_of(name)
    prefixes = [p + "." for p in (module, stem) if p]
    shown = []
    for n in names:
        if n in (module, stem) and len(names) > 1:
            continue
        for p in prefixes:
            if n.startswith(p) and len(n) > len(p):
                n = n[len(p) :]
                break
        shown.append(n)
    rank = {n: k for k, n in enumerate(shown)}
    return sorted(dict.fromkeys(shown), key=lambda n: (n.startswith("_"), n.count("."), rank[n]))


def entry_summary(o: Outline, name: str, max_chars: int = SUMMARY_MAX_CHARS) -> str:
    """One line saying what the entry is and what it defines (see the module docstring)."""
    if o.kind in ("binary", "empty"):
        return o.detail
    title = _title_part(o.title, name)
    lead = o.lead
    if lead and looks_like_instructions(lead):
        lead = "text addressed to an AI model as instructions (not reproduced)"
    if title and looks_like_instructions(title):
        title = "instructions addressed to an AI model"
    if lead and title and _norm(lead).startswith(_norm(title)):
        title = ""
    lead = _words_cut(_lead_part(lead, name), LEAD_MAX_WORDS)
    if o.symbol:  # a code-index symbol file: its name is the line's link
        head = o.detail + (f": {lead}" if lead else "")
    else:
        head = ": ".join(p for p in (title, lead) if p) or o.detail
    names = display_names(o.names, o.title, name) if not o.symbol else []
    extra, label = (names, "defines") if names else (o.headings, "sections")
    room = HEAD_MAX_CHARS if extra else max_chars
    head = _chars_cut(head.rstrip(), room)
    return _append_list(head, label, extra, max_chars)


def _chars_cut(text: str, max_chars: int) -> str:
    """``text`` cut at a word boundary to at most ``max_chars`` characters (… appended when cut)."""
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars - 1]
    if " " in cut[max_chars // 2 :]:
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + "…"


def _append_list(head: str, label: str, items: list[str], max_chars: int) -> str:
    """``head`` + ``. Label: a, b, … (+N)`` with as many items as fit in ``max_chars``."""
    if not items:
        return head or "text"
    sep = ". " if head and not head.endswith((".", "…", "!", "?", ":")) else " "
    prefix = f"{head}{sep}{label.capitalize()}: " if head else f"{label.capitalize()}: "
    room = max_chars - len(prefix)
    shown: list[str] = []
    used = 0
    for k, it in enumerate(items):
        more = len(items) - k - 1
        tail = f" (+{more})" if more else ""
        cost = len(it) + (2 if shown else 0)
        if used + cost + len(tail) > room:
            break
        shown.append(it)
        used += cost
    if not shown:
        return head or f"{label}: {items[0][:max_chars]}"
    rest = len(items) - len(shown)
    return prefix + ", ".join(shown) + (f" (+{rest})" if rest else "")


#: the line of a section whose entries hold no word to describe it by (empty files, binary data, names of
#: one or two letters): said in words, never left blank (a count alone would be taken for the line's facts)
NO_TERMS = "no words to describe it by (empty, binary or very short entries)"


def section_summary(terms: list[str], names: list[str], n_entries: int) -> str:
    """A section's line among its siblings: its distinctive terms, then a few names defined below it;
    ``"empty section"`` without entries, ``""`` when its entries give neither (its parent's TOC then says
    :data:`NO_TERMS`: :func:`libraryfs.index.sections.apply_children`)."""
    parts = []
    if terms:
        parts.append(", ".join(terms))
    if names:
        parts.append("names: " + ", ".join(names))
    return " · ".join(parts) if parts else ("empty section" if not n_entries else "")


def range_summary(terms: list[str], names: list[str]) -> str:
    """What one page's range of entries holds, among the other pages of the same TOC."""
    return section_summary(terms, names, 1)


#: a fact every line of a page would repeat is said once on the page: when the values differ by at most
#: this share of the largest or by :data:`SHARED_ABS` (token counts of tiny files: 5–8), over at least
#: :data:`SHARED_MIN_LINES` lines
SHARED_SPREAD = 0.1
SHARED_ABS = 3
SHARED_MIN_LINES = 3


def shared_span(values: list[int]) -> tuple[int, int] | None:
    """``(least, largest)`` of ``values`` when they are about the same — within :data:`SHARED_SPREAD` of the
    largest or :data:`SHARED_ABS` apart, over :data:`SHARED_MIN_LINES` or more — else None. A TOC then
    says the figure once for a page (``each file 6–7 tok``, ``each range 41–42 entries``) instead of on
    every line, where it cost a line as much as its name (a key-value store's lines, docs/theorem.md)."""
    if len(values) < SHARED_MIN_LINES:
        return None
    lo, hi = min(values), max(values)
    return (lo, hi) if hi - lo <= max(SHARED_ABS, int(hi * SHARED_SPREAD)) else None


def span_text(span: tuple[int, int]) -> str:
    """``6`` or ``6–7`` (thousands separated)."""
    lo, hi = span
    return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"
