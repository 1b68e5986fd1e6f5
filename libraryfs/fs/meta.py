"""The ``meta`` table's records: :class:`EntryMeta` (a file or symlink) and :class:`SectionMeta` (a directory),
their codec, and the compact JSON encoding of store values (:func:`dumps`/:func:`loads`, also used for the JSON
``config`` values).

:mod:`libraryfs.fs.schema` owns the table layout (``meta`` key ``ino:u64`` → one of these records, invariant
I8) and re-exports these names; this module owns what is inside a record. A ``meta`` value is a JSON object. A
record with a ``name`` key is an entry record (the indexer writes ``name`` and ``parent`` into every one), any
other a section record. Decoding is tolerant of what older or newer releases wrote: a missing key takes its
default, an unknown key is kept in ``extra`` and written back unchanged by :meth:`_MetaRecord.encode` (so an
older indexer never drops a newer one's facts). A known key whose value has the wrong JSON type, a value that
is not a JSON object, or bytes that are not JSON raise :class:`~libraryfs.errors.Corrupt` (``check`` reports
them as I8; the records are derived data that the indexer rebuilds once ``check --repair`` drops them).
``None`` stands for an absent key and is not written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from libraryfs.errors import Corrupt


class _MetaRecord:
    """Shared codec of :class:`EntryMeta` and :class:`SectionMeta` (``_TYPES``: key → JSON type; ``_known``:
    the positional constructor from a record of known keys)."""

    __slots__ = ()
    _TYPES: ClassVar[dict[str, type]]
    extra: dict[str, Any]

    def encode(self) -> bytes:
        """The ``meta`` value: compact JSON of the known fields that are not None, plus ``extra``."""
        out = dict(self.extra)
        for key in self._TYPES:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return dumps(out)

    @classmethod
    def from_fields(cls, obj: dict[str, Any]) -> Any:
        """Build from a decoded JSON object; raises Corrupt on a known key of the wrong type."""
        types = cls._TYPES
        for key, value in obj.items():
            if type(value) is not types.get(key):
                break  # an unknown key, a None or a wrong type: the careful path below
        else:  # the common case (every key known, every type right): positional, on read paths
            _check_items(obj)
            return cls._known(obj)  # type: ignore[attr-defined]  # each subclass's classmethod
        known: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in obj.items():
            want = types.get(key)
            if want is None:
                extra[key] = value
            elif value is None:
                continue
            elif type(value) is not want:
                raise Corrupt(f"meta record: {key}={value!r} is not of type {want.__name__}")
            else:
                known[key] = value
        _check_items(known)
        return cls(**known, extra=extra)  # type: ignore[call-arg]  # the dataclass subclasses' fields


#: known keys whose values are containers: the type every item (dict: every value, keys are str) must have
_ITEM_TYPES = {"toc_page_tokens": int, "defines": str, "keywords": str, "names": str, "profile": int}


def _check_items(obj: dict[str, Any]) -> None:
    """Raise Corrupt when a container value of a known key holds an item of the wrong type (``links``: each
    item a ``[int, str]`` pair)."""
    links = obj.get("links")
    if links is not None and any(
        type(x) is not list or len(x) != 2 or type(x[0]) is not int or type(x[1]) is not str for x in links
    ):
        raise Corrupt(f"meta record: links={links!r} holds an item that is not an [int, str] pair")
    for key, want in _ITEM_TYPES.items():
        value = obj.get(key)
        if value is None:
            continue
        items = value.values() if isinstance(value, dict) else value
        if any(type(x) is not want for x in items):
            raise Corrupt(f"meta record: {key}={value!r} holds an item that is not of type {want.__name__}")


@dataclass(slots=True)
class EntryMeta(_MetaRecord):
    """The indexer's record of a regular file or symlink (``meta`` table).

    ``name``/``parent``: where it was last indexed (name decoded with surrogateescape); ``size`` (bytes) and
    ``gen`` (inode generation) when examined; ``hash``: ``sha256`` hex of the content, ``"big:<size>:<gen>"``
    past the hashing limit, ``"link:<16 hex>"`` for a symlink; ``tokens``: o200k tokens of the content
    (an estimate of bytes/4 when ``approx``); ``summary``: the TOC line, written by builder ``by``
    (``"deterministic"`` when the configured builder fell back). None: never examined/summarised.
    ``defines``: the names the entry defines (API objects, code symbols, glossary terms; fully qualified
    where the document says so, in document order, at most 400); ``keywords``: its characteristic words
    (at most 16, best first); ``outline``: the version of the extraction that wrote both
    (:data:`libraryfs.index.outline.OUTLINE_VERSION`; None: never extracted).
    ``links``: every name of a hard-linked entry that the index holds, ``[[parent ino, name], …]`` sorted
    by (parent, name bytes), ``name``/``parent`` being the first (:mod:`libraryfs.index.names`); None
    while the entry has one such name.
    """

    name: str = ""
    parent: int = 0
    size: int | None = None
    gen: int = 0
    hash: str | None = None
    tokens: int | None = None
    approx: bool = False
    link: bool = False
    summary: str | None = None
    by: str | None = None
    defines: list[str] | None = None
    keywords: list[str] | None = None
    outline: int | None = None
    links: list[list[Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def _known(cls, d: dict[str, Any]) -> EntryMeta:
        """From a record whose keys are all known (positional: twice as fast as ``cls(**d)``)."""
        g = d.get
        return cls(
            g("name", ""),
            g("parent", 0),
            g("size"),
            g("gen", 0),
            g("hash"),
            g("tokens"),
            g("approx", False),
            g("link", False),
            g("summary"),
            g("by"),
            g("defines"),
            g("keywords"),
            g("outline"),
            g("links"),
        )

    _TYPES: ClassVar[dict[str, type]] = {
        "name": str,
        "parent": int,
        "size": int,
        "gen": int,
        "hash": str,
        "tokens": int,
        "approx": bool,
        "link": bool,
        "summary": str,
        "by": str,
        "defines": list,
        "keywords": list,
        "outline": int,
        "links": list,
    }


@dataclass(slots=True)
class SectionMeta(_MetaRecord):
    """The indexer's record of a directory (a section) and of its rendered TOC (``meta`` table).

    ``description``: the section's one-line description (None: never rendered); ``tokens_total`` /
    ``entries_total``: tokens and entries below it (recursively); ``toc_generation``: the directory's inode
    generation the TOC was built from; ``toc_journal_seq``: the journal seq it reflects (None: no TOC yet,
    shown as stale); ``toc_pages``/``toc_levels``: pages and levels of the bounded TOC;
    ``toc_page_tokens``: o200k tokens of each page (the mount never loads the tokenizer);
    ``toc_max_page_tokens``: their maximum. ``profile``: term → entries below holding it (the top 64,
    :mod:`libraryfs.index.sections`); ``names``: representative names defined below it (at most 24);
    both None until rendered by a release that keeps them. ``entries_direct``: the directory's own entries
    (its TOC's lines: files and subsections directly in it; None until rendered by a release that keeps it).
    """

    description: str | None = None
    tokens_total: int = 0
    entries_total: int = 0
    toc_generation: int = 0
    toc_journal_seq: int | None = None
    toc_pages: int = 0
    toc_levels: int = 0
    toc_max_page_tokens: int = 0
    toc_page_tokens: list[int] = field(default_factory=list)
    profile: dict[str, int] | None = None
    names: list[str] | None = None
    entries_direct: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def _known(cls, d: dict[str, Any]) -> SectionMeta:
        """From a record whose keys are all known (positional: twice as fast as ``cls(**d)``)."""
        g = d.get
        return cls(
            g("description"),
            g("tokens_total", 0),
            g("entries_total", 0),
            g("toc_generation", 0),
            g("toc_journal_seq"),
            g("toc_pages", 0),
            g("toc_levels", 0),
            g("toc_max_page_tokens", 0),
            g("toc_page_tokens", []),
            g("profile"),
            g("names"),
            g("entries_direct"),
        )

    _TYPES: ClassVar[dict[str, type]] = {
        "description": str,
        "tokens_total": int,
        "entries_total": int,
        "toc_generation": int,
        "toc_journal_seq": int,
        "toc_pages": int,
        "toc_levels": int,
        "toc_max_page_tokens": int,
        "toc_page_tokens": list,
        "profile": dict,
        "names": list,
        "entries_direct": int,
    }


def decode_meta(raw: bytes) -> EntryMeta | SectionMeta:
    """Decode a ``meta`` value: an :class:`EntryMeta` if it has a ``name`` key, else a :class:`SectionMeta`.

    Raises :class:`~libraryfs.errors.Corrupt` for bytes that are not a JSON object or a known key of the
    wrong type.
    """
    try:
        obj = json.loads(raw)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise Corrupt(f"meta record is not JSON: {e}") from e
    if type(obj) is not dict:
        raise Corrupt(f"meta record is not a JSON object: {raw[:40]!r}")
    return (EntryMeta if "name" in obj else SectionMeta).from_fields(obj)


def dumps(obj: object) -> bytes:
    """Compact JSON bytes for ``meta``/``config`` values."""
    try:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a non-UTF-8 name (surrogateescape): ASCII JSON keeps \udcXX (round-trips)
        return json.dumps(obj, separators=(",", ":")).encode()


def loads(raw: bytes | None, default: object = None) -> object:
    """Inverse of :func:`dumps`; ``default`` for a missing value."""
    if raw is None:
        return default
    return json.loads(raw)
