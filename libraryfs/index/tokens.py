"""Token counts in o200k_base (the tokenizer of current OpenAI models), offline via ``bpe_openai``.

``tiktoken`` cannot download its encodings here; ``bpe-openai`` bundles o200k_base (a Rust BPE in its
extension module ``bpe_openai._bindings``) with a tiktoken-like API. This module is the one place the
project counts tokens.

Why not ``bpe_openai.get_encoding``: ``import bpe_openai`` builds the package's model registry at import
time, which decodes *three* vocabularies (cl100k, o200k, voyage3: 3.6 MB of gzipped base64, parsed line by
line in Python), then ``get_encoding`` builds o200k's rank table once more — ~0.9 s of CPU in every process
that counts a token (each CLI call of ``recall``/``answer``, each indexer, each test process). Its
``Encoding.encode`` only sanitises the text and calls the Rust tokenizer
(``_bindings.tokenizer_for_encoding("o200k_base").encode``); the Python rank table serves decoding.
So :func:`count_tokens` and :func:`encode` load the extension module alone (~50 ms: the Rust side builds
o200k once per process) and call that same tokenizer; :func:`decode_bytes`, which needs the rank table,
parses o200k's data file alone, on first use. ``tests/unit/test_tokens.py`` compares every function with
``bpe_openai.get_encoding("o200k_base")`` on the same texts.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Iterable

ENCODING = "o200k_base"
_PACKAGE = "bpe_openai"
_BINDINGS = "bpe_openai._bindings"


def _package_dir() -> str:
    """The directory of the installed ``bpe_openai`` package, found without importing it.

    Raises ``ModuleNotFoundError`` when the package is not installed."""
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"No module named {_PACKAGE!r}", name=_PACKAGE)
    return list(spec.submodule_search_locations)[0]


def _load_bindings():
    """``bpe_openai._bindings`` (the Rust extension module) without running ``bpe_openai/__init__.py``.

    The module is already loaded when something imported ``bpe_openai``: that one is used. Otherwise the
    extension file is loaded by the standard extension loader under its own name (which registers it in
    ``sys.modules``; a later ``import bpe_openai`` then runs its ``__init__`` and reuses it). Should the
    package's layout change, the ordinary import is the fallback (slow, same tokenizer)."""
    loaded = sys.modules.get(_BINDINGS)
    if loaded is not None:
        return loaded
    try:
        pkg = _package_dir()
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(pkg, "_bindings" + suffix)
            if os.path.exists(path):
                loader = importlib.machinery.ExtensionFileLoader(_BINDINGS, path)
                spec = importlib.util.spec_from_file_location(_BINDINGS, path, loader=loader)
                if spec is None:
                    break
                module = importlib.util.module_from_spec(spec)
                loader.exec_module(module)
                return module
    except ImportError:
        pass
    return importlib.import_module(_BINDINGS)


@functools.lru_cache(maxsize=1)
def _tokenizer():
    """The Rust o200k_base tokenizer (``PyTokenizer``: ``encode(str) -> list[int]``), built once."""
    return _load_bindings().tokenizer_for_encoding(ENCODING)


@functools.lru_cache(maxsize=1)
def _rank_bytes() -> tuple[bytes, ...]:
    """Token id → its bytes, from o200k's data file in the package (``<base64 bytes> <rank>`` per line,
    gzipped; the file ``bpe_openai``'s own loader reads). Ids without bytes (the special tokens, which
    :func:`encode` never yields) map to ``b""``."""
    import base64
    import gzip

    ranks: dict[int, bytes] = {}
    with gzip.open(os.path.join(_package_dir(), "data", f"{ENCODING}.tiktoken.gz"), "rb") as f:
        for line in f:
            line = line.strip()
            if line:
                token_b64, rank_text = line.split(b" ")
                ranks[int(rank_text)] = base64.b64decode(token_b64)
    table = [b""] * (max(ranks) + 1)
    for rank, token in ranks.items():
        table[rank] = token
    return tuple(table)


def _sanitize(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD (what ``bpe_openai``'s ``Encoding`` does first)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


_CHUNK_CHARS = 100_000  #: bpe_openai refuses texts over ~200k tokens: count in line-aligned chunks


def _chunks(text: str):
    i = 0
    while i < len(text):
        j = min(len(text), i + _CHUNK_CHARS)
        if j < len(text):
            k = text.rfind("\n", i, j)
            j = k + 1 if k > i else j
        yield text[i:j]
        i = j


def count_tokens(text: str | bytes) -> int:
    """Number of o200k_base tokens in ``text`` (bytes are decoded as UTF-8 with replacement).

    Texts of any length: counted in line-aligned chunks of ≤ 100,000 characters (the sum can differ from a
    whole-text count by a few tokens at chunk borders). Special-token text (``<|endoftext|>``) counts as
    ordinary text.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not text:
        return 0
    tok = _tokenizer()
    return sum(len(tok.encode(_sanitize(c))) for c in _chunks(text))


def encode(text: str) -> list[int]:
    """o200k_base token ids of ``text`` (chunked like :func:`count_tokens`)."""
    tok = _tokenizer()
    out: list[int] = []
    for c in _chunks(text):
        out.extend(tok.encode(_sanitize(c)))
    return out


def decode_bytes(ids: list[int]) -> bytes:
    """The bytes that o200k_base token ids ``ids`` stand for (a prefix of :func:`encode`'s ids decodes to a
    prefix of its text's UTF-8, possibly ending inside a character). Raises ``KeyError`` for an id that is
    not an ordinary token. The first call reads o200k's rank table (~0.3 s)."""
    table = _rank_bytes()
    out = []
    for i in ids:
        b = table[i] if 0 <= i < len(table) else b""
        if not b:
            raise KeyError(f"token id {i} is not an ordinary {ENCODING} token")
        out.append(b)
    return b"".join(out)


#: o200k_base's pre-tokeniser (the ``pat_str`` of ``bpe_openai``'s registry, which is tiktoken's) for ASCII
#: text: ``\p{L}`` is ``[A-Za-z]``, its upper-case classes ``[A-Z]``, its lower-case ones ``[a-z]``, ``\p{N}``
#: ``[0-9]`` and ``\s`` (Unicode White_Space) ``[\t\n\v\f\r ]`` — not Python's ``\s``, which also matches
#: ``\x1c``–``\x1f``. Python's ``re`` picks alternatives leftmost-first with greedy backtracking, as the
#: pattern's engines do.
_WS = "\t\n\x0b\x0c\r "
_ASCII_PIECES = re.compile(
    r"[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[0-9]{1,3}"
    rf"| ?[^{_WS}A-Za-z0-9]+[\r\n/]*"
    rf"|[{_WS}]*[\r\n]+"
    rf"|[{_WS}]+(?![^{_WS}])"
    rf"|[{_WS}]+"
)


def pieces(text: str) -> list[str] | None:
    """The pre-tokeniser's pieces of ``text`` (o200k_base: BPE merges only within a piece, so the token
    count of a text is the sum of its pieces' counts), or None when ``text`` is not ASCII."""
    return _ASCII_PIECES.findall(text) if text.isascii() else None


def piece_counts(texts: Iterable[str], known: dict[str, int] | None = None) -> dict[str, int]:
    """Piece → its o200k_base token count, for every piece of the ASCII ``texts`` (the table of
    :class:`PieceCounter`), added to a copy of ``known`` (a table made before: only pieces it lacks are
    counted)."""
    table: dict[str, int] = dict(known or {})
    for text in texts:
        for p in pieces(text) or ():
            if p not in table:
                table[p] = count_tokens(p)
    return table


class PieceCounter:
    """:func:`count_tokens` of texts made of known pieces, without the tokenizer: the sum of the counts of
    their pre-tokeniser pieces (:func:`pieces`) from ``table`` (:func:`piece_counts`). A text that is not
    ASCII, longer than :func:`count_tokens` counts at once, or with a piece not in the table is counted by
    :func:`count_tokens` (whose tokenizer is then built: ~50 ms once per process). Equal to
    :func:`count_tokens` on every text (``tests/unit/test_tokens.py``)."""

    def __init__(self, table: dict[str, int]) -> None:
        self.table = table

    def __call__(self, text: str) -> int:
        """The o200k_base token count of ``text``."""
        if len(text) <= _CHUNK_CHARS:
            split = pieces(text)
            if split is not None:
                get = self.table.get
                total = 0
                for p in split:
                    n = get(p)
                    if n is None:
                        break
                    total += n
                else:
                    return total
        return count_tokens(text)
