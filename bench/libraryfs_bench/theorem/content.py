"""Item content for the Library Theorem stores: hash, numeric and encyclopedia (key, value) items.

An *item* is ``(key, value)``. Hash keys are ints and values 4-letter strings, seeded exactly as the
paper's ``code/experiment.py`` (PAPERS.md §1): trial ``t`` draws its keys with ``random.Random(t).sample``
and then its values with ``choices`` from the same generator; the target is item
``Random(t + 10000).randrange(n)`` of the *unsorted* store. Numeric items are ``(i, i)`` for i = 1..M
(the paper's ordered-integer content). Encyclopedia items are ``(headword, first definition sentence)``
from the GNU Collaborative International Dictionary of English (Debian ``dict-gcide``), a real stand-in
for the paper's LLM-written corpus, which was never published.
"""

from __future__ import annotations

import functools
import gzip
import random
import re
import string
from collections.abc import Sequence

#: Item key (int for hash/numeric, headword for encyclopedia) and its value.
Item = tuple[int | str, int | str]

CONTENTS = ("hash", "numeric", "encyclopedia")

GCIDE_DICT = "/usr/share/dictd/gcide.dict.dz"
GCIDE_INDEX = "/usr/share/dictd/gcide.index"
#: Size of the encyclopedia topic list; a store of M items takes its first M topics (as the paper's
#: ``generate_corpus.py`` takes the first M of an alphabetically sorted 5,000-word list).
ENCYCLOPEDIA_TOPICS = 5000


def paper_key_low(condition: str, n: int, model: str = "gpt-4o-mini") -> int:
    """Lowest hash key of the paper's store for (condition, n, model): keys are drawn from
    ``range(key_low, 10 * key_low)``.

    The paper's early gpt-4o-mini FLAT / INDEXED / INDEXED-CORRUPTED runs at N ≤ 500 used 3-digit keys
    (100–999); every other published run used 4-digit keys (1000–9999). Past the paper (N > 9,000 items
    cannot have distinct 4-digit keys) we use ``10 ** len(str(n))`` so keys keep one digit count per
    store (lexical order == numeric order, which the mount's name-ordered TOC pages rely on).
    Verified against all 1,994 published rows: see :func:`libraryfs_bench.theorem.compare.verify_stores`.
    """
    early = {"FLAT", "INDEXED", "INDEXED-CORRUPTED"}
    if model.split("/")[-1] == "gpt-4o-mini" and condition in early and n <= 500:
        return 100
    return hash_key_low(n)


def hash_key_low(n: int) -> int:
    """Key lower bound for a hash store of ``n`` items outside the paper's early runs (1000 up to 9,000
    items, then the next power of ten above ``n``)."""
    return 1000 if n <= 9000 else 10 ** len(str(n))


def hash_items(n: int, trial: int, key_low: int = 1000) -> list[Item]:
    """The paper's hash store for trial ``trial``: ``n`` (key, 4-letter value) pairs in drawing order.

    Keys are distinct ints from ``range(key_low, 10 * key_low)``. Raises ValueError when ``n`` exceeds
    the key range. Source: Mainen 2026, ``make_store`` (PAPERS.md §1 seeds).
    """
    rng = random.Random(trial)
    keys = rng.sample(range(key_low, 10 * key_low), n)
    values = ["".join(rng.choices(string.ascii_uppercase, k=4)) for _ in range(n)]
    return list(zip(keys, values, strict=False))


def target_position(n: int, trial: int) -> int:
    """Index (0-based, in drawing order) of trial ``trial``'s target: ``Random(trial + 10000).randrange(n)``."""
    return random.Random(trial + 10000).randrange(n)


def numeric_items(m: int) -> list[Item]:
    """Ordered-integer content: item i holds i, i = 1..m (the paper's benchmark_v3_numeric)."""
    return [(i, i) for i in range(1, m + 1)]


def encyclopedia_items(m: int) -> list[Item]:
    """The first ``m`` (headword, first definition sentence) pairs of the GCIDE topic list.

    Raises FileNotFoundError when ``dict-gcide`` is not installed, ValueError when m > 5,000.
    """
    topics = gcide_topics()
    if m > len(topics):
        raise ValueError(f"encyclopedia content has {len(topics)} topics, asked for {m}")
    return list(topics[:m])


def items_for(content: str, n: int, trial: int, key_low: int = 1000) -> list[Item]:
    """Items of a store in drawing order for any content type (hash depends on trial, others do not)."""
    if content == "hash":
        return hash_items(n, trial, key_low)
    if content == "numeric":
        return numeric_items(n)
    if content == "encyclopedia":
        return encyclopedia_items(n)
    raise ValueError(f"unknown content {content!r} (expected one of {', '.join(CONTENTS)})")


# --------------------------------------------------------------------------- GCIDE (dict-gcide)

_B64 = {c: i for i, c in enumerate(string.ascii_uppercase + string.ascii_lowercase + string.digits + "+/")}
_WORD = re.compile(r"^[a-z]{4,14}$")


def _dictd_number(text: str) -> int:
    value = 0
    for ch in text:
        value = value * 64 + _B64[ch]
    return value


def _strip_brackets(text: str) -> str:
    """Remove (nested) ``[...]`` groups: etymologies, source tags, accent markup."""
    previous = None
    while previous != text:
        previous = text
        text = re.sub(r"\[[^\[\]]*\]", "", text)
    return text


_HEADER = re.compile(
    r"^[^,]*?,\s*(?:(?:n|v|a|adv|prep|conj|interj|pron|p|pr|pl|t|i|imp|vb|adj|obs|sing|fem|masc)\.\s*(?:&\s*)?)+",
    re.IGNORECASE,
)


def first_definition_sentence(entry: str) -> str | None:
    """First definition sentence of one GCIDE entry (text as stored in gcide.dict), or None.

    Heuristic: keep the first paragraph, drop the pronunciation (``\\...\\``), bracketed etymologies and
    source tags, the part-of-speech header, subject labels such as ``(Zool.)`` and a sense number, then
    cut at the first full stop. Returns None when fewer than three words remain.
    """
    para = entry.split("\n\n", 1)[0]
    text = " ".join(para.split())
    text = re.sub(r"\\[^\\]*\\", "", text)
    text = _strip_brackets(text)
    text = text.replace("{", "").replace("}", "")
    match = _HEADER.match(text)
    if not match:
        return None
    text = text[match.end() :].strip()
    text = re.sub(r"^(?:\([A-Z][^)]{0,30}\)\s*)+", "", text)
    text = re.sub(r"^(?:\d+\.\s*)?(?:\([A-Z][^)]{0,30}\)\s*)*", "", text)
    cut = re.search(r"[.;:](?:\s|$)", text)
    sentence = text[: cut.start()] if cut else text
    sentence = sentence.strip(" ,-")
    if len(sentence.split()) < 3 or "--" in sentence:
        return None
    return sentence[0].upper() + sentence[1:] + "."


@functools.lru_cache(maxsize=1)
def gcide_topics(count: int = ENCYCLOPEDIA_TOPICS, seed: int = 2026) -> tuple[Item, ...]:
    """``count`` alphabetically sorted (headword, sentence) pairs drawn from GCIDE, deterministic.

    Eligible headwords: letters only (lowercased), 4–14 long, first index occurrence; ``Random(seed)``
    orders the candidates, the first ``count`` with a usable definition are kept, then sorted.
    Costs ~1 s (decompresses the 40 MB dictionary once). Raises FileNotFoundError without dict-gcide.
    """
    seen: dict[str, tuple[int, int]] = {}
    with open(GCIDE_INDEX, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            word = parts[0].lower() if len(parts) == 3 else ""
            if not _WORD.match(word) or word in seen:
                continue
            seen[word] = (_dictd_number(parts[1]), _dictd_number(parts[2]))
    with gzip.open(GCIDE_DICT) as f:
        data = f.read()
    words = sorted(seen)
    random.Random(seed).shuffle(words)
    chosen: list[Item] = []
    for word in words:
        offset, length = seen[word]
        entry = data[offset : offset + length].decode("utf-8", errors="replace")
        if not entry.lower().startswith(word):
            continue  # index points into another word's entry
        sentence = first_definition_sentence(entry)
        if sentence:
            chosen.append((word, sentence))
            if len(chosen) == count:
                break
    return tuple(sorted(chosen))


def sorted_items(items: Sequence[Item]) -> list[Item]:
    """Items in key order (the paper sorts by key for every condition except FLAT)."""
    return sorted(items, key=lambda kv: kv[0])
