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


def count_tokens(text: str | bytes) -> int:
    """Number of o200k_base tokens in ``text`` (bytes are decoded as UTF-8 with replacement)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not text:
        return 0
    return len(_encoding().encode(text, disallowed_special=()))


def encode(text: str) -> list[int]:
    """o200k_base token ids of ``text``."""
    return list(_encoding().encode(text, disallowed_special=()))
