"""libraryfs.index.tokens counts, encodes and decodes exactly as ``bpe_openai.get_encoding("o200k_base")``
did, without importing the ``bpe_openai`` package (issue 18: CLI latency)."""

import glob
import os
import random
import subprocess
import sys

import pytest

from libraryfs.index import tokens

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def reference():
    """The package's own o200k_base Encoding (what tokens.py called before)."""
    import bpe_openai

    return bpe_openai.get_encoding("o200k_base")


def _ref_encode(enc, text: str) -> list[int]:
    """The former ``tokens.encode``: the package's encode, chunk by chunk, special tokens as text."""
    out: list[int] = []
    for c in tokens._chunks(text):
        out.extend(enc.encode(c, disallowed_special=()))
    return out


def _texts() -> list[str]:
    """Real text (this repository's docs and sources) and edge cases: scripts, emoji, special-token text,
    lone surrogates, whitespace runs, a text over one chunk."""
    out = []
    for p in (
        sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))[:6]
        + sorted(glob.glob(os.path.join(REPO, "libraryfs", "index", "*.py")))[:6]
    ):
        with open(p, encoding="utf-8") as f:
            out.append(f.read())
    rng = random.Random(18)
    alphabet = "abc XYZ 0123 \n\t.,;:'\"-_/é日本語😀\u0301\u200b"
    out += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 400))) for _ in range(200)]
    out += [
        "",
        "hello world",
        "<|endoftext|> and <|endofprompt|> are text here",
        "lone \ud800 surrogate and a split pair \ud83d\ude00",
        "   \n\n\n   trailing   ",
        "t=9518 act=do place=zone-1-1 area=cave face=water near=coal,lava ev=collect_drink#167",
        ("a line of text that repeats\n" * 5000) + "x" * 120_000,  # several chunks, one without a newline
    ]
    return out


def test_count_and_encode_equal_the_package_encoding(reference):
    for text in _texts():
        want = _ref_encode(reference, text)
        assert tokens.encode(text) == want, text[:80]
        assert tokens.count_tokens(text) == len(want), text[:80]
        assert tokens.count_tokens(text.encode("utf-8", "surrogatepass")) == len(
            _ref_encode(reference, text.encode("utf-8", "surrogatepass").decode("utf-8", "replace"))
        )


def test_decode_bytes_equals_the_package_decoding(reference):
    for text in _texts()[:40] + ["héllo 日本語 😀 \u0301"]:
        ids = tokens.encode(text)
        assert tokens.decode_bytes(ids) == reference.decode_bytes(ids)
        for k in (1, len(ids) // 2, len(ids) - 1):  # prefixes may end inside a character
            assert tokens.decode_bytes(ids[:k]) == reference.decode_bytes(ids[:k])
    with pytest.raises(KeyError):
        tokens.decode_bytes([199_999])  # <|endoftext|>: not an ordinary token


def _python(code: str) -> str:
    """stdout of ``code`` run by a fresh interpreter (a process that has not imported the package yet)."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_counting_does_not_import_the_package():
    """The package's ``__init__`` (which decodes three vocabularies) never runs to count or encode."""
    out = _python(
        "import sys\n"
        "from libraryfs.index.tokens import count_tokens, encode\n"
        "assert count_tokens('hello world') == 2 and encode('hello world') == [24912, 2375]\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'bpe_openai'))\n"
    )
    assert out == "['bpe_openai._bindings']"  # the extension alone: no compat, no registry


def test_the_package_imported_after_reuses_the_extension_and_works():
    out = _python(
        "import sys\n"
        "from libraryfs.index.tokens import count_tokens, _load_bindings\n"
        "n = count_tokens('hello world')\n"
        "import bpe_openai\n"  # after the direct load: its __init__ runs and finds the extension loaded
        "enc = bpe_openai.get_encoding('o200k_base')\n"
        "assert len(enc.encode('hello world')) == n == 2\n"
        "assert _load_bindings() is sys.modules['bpe_openai._bindings']\n"
        "print('ok')\n"
    )
    assert out == "ok"


def test_the_piece_counter_counts_as_the_tokenizer():
    """:class:`tokens.PieceCounter` (the sum of the pre-tokeniser pieces' counts) equals ``count_tokens`` on
    every text: ASCII texts whose pieces are all in its table (this repository's docs, random printable
    ASCII with every ASCII whitespace, contractions and newline runs), texts with pieces it lacks, and
    non-ASCII texts (both counted by the tokenizer)."""
    rng = random.Random(3)
    alphabet = "abcXYZ019 \t\n\r\x0b\x0c\x1c\x1f.,;:'\"=#-_/?!()sStTdD"
    ascii_texts = [t for t in _texts() if t.isascii() and len(t) <= tokens._CHUNK_CHARS]
    ascii_texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60))) for _ in range(3000)]
    ascii_texts += [
        "it's I'LL we've x's 'd 'S",
        "a  \n\n  b",
        "a\n\tb /\n/c",
        "t=12 obs: I saw it.\nt=13 act=do",
    ]
    counter = tokens.PieceCounter(tokens.piece_counts(ascii_texts))
    for t in ascii_texts:
        assert counter(t) == tokens.count_tokens(t), repr(t)
        assert sum(counter.table[p] for p in tokens.pieces(t)) == counter(t), repr(t)
    partial = tokens.PieceCounter(tokens.piece_counts(["hello world"]))
    non_ascii = [t for t in _texts() if not t.isascii()][:20]
    for t in ["hello world", "hello there", "héllo wörld", "日本語 text", *non_ascii]:
        assert partial(t) == tokens.count_tokens(t), repr(t[:80])
    assert tokens.pieces("héllo") is None
