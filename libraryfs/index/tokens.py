"""Token counts in o200k_base (the tokenizer of current OpenAI models), offline via ``bpe_openai``.

``tiktoken`` cannot download its encodings here; ``bpe-openai`` bundles o200k_base with a tiktoken-like API.
"""

from __future__ import annotations

import functools

ENCODING = "o200k_base"


@functools.lru_cache(maxsize=1)
def _encoding():
    import bpe_openai

    return bpe_openai.get_encoding(ENCODING)


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
    whole-text count by a few tokens at chunk borders).
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not text:
        return 0
    enc = _encoding()
    return sum(len(enc.encode(c, disallowed_special=())) for c in _chunks(text))


def encode(text: str) -> list[int]:
    """o200k_base token ids of ``text`` (chunked like :func:`count_tokens`)."""
    enc = _encoding()
    out: list[int] = []
    for c in _chunks(text):
        out.extend(enc.encode(c, disallowed_special=()))
    return out


def decode_bytes(ids: list[int]) -> bytes:
    """The bytes that o200k_base token ids ``ids`` stand for (a prefix of :func:`encode`'s ids decodes to a
    prefix of its text's UTF-8, possibly ending inside a character)."""
    return _encoding().decode_bytes(ids)
