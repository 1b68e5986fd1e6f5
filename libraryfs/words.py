"""Counted nouns in what the commands print: ``1 file``, ``2 files``, ``0 entries`` (never ``1 files`` or
``file(s)``). No dependencies: every layer (core, daemons, CLI) may use it."""

from __future__ import annotations

#: Nouns whose plural is not the singular + ``s`` (the ones the messages use).
_IRREGULAR = {
    "entry": "entries",
    "summary": "summaries",
    "directory": "directories",
    "index": "indexes",
    "match": "matches",
    "pass": "passes",
}


def plural(word: str) -> str:
    """The plural of ``word`` (its last word, for a compound: ``inbox entry`` → ``inbox entries``): from
    :data:`_IRREGULAR`, else the last word + ``s`` (``TOC`` → ``TOCs``)."""
    head, sep, last = word.rpartition(" ")
    return head + sep + _IRREGULAR.get(last, last + "s")


def noun(n: int, word: str) -> str:
    """``word`` agreeing with ``n``, without the number: ``noun(1, "placeholder")`` → ``"placeholder"``,
    ``noun(2, "placeholder")`` → ``"placeholders"`` (for "unknown placeholders: @A@, @B@")."""
    return word if n == 1 else plural(word)


def count(n: int, word: str, many: str | None = None) -> str:
    """``n`` and ``word`` agreeing in number: ``count(1, "file")`` → ``"1 file"``, ``count(2, "entry")`` →
    ``"2 entries"``, ``count(0, "record")`` → ``"0 records"``, ``count(1200, "inbox entry")`` → ``"1200
    inbox entries"`` (no digit grouping: scripts parse these lines); ``many`` overrides the plural."""
    return f"{n} {word}" if n == 1 else f"{n} {many or plural(word)}"
