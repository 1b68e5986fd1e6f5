"""Counted nouns in what the commands print (libraryfs/words.py): "1 file", never "1 files" or "file(s)"."""

import pytest

from libraryfs.words import count


@pytest.mark.parametrize(
    ("n", "word", "said"),
    [
        (1, "file", "1 file"),
        (2, "file", "2 files"),
        (0, "entry", "0 entries"),
        (1, "entry", "1 entry"),
        (3, "summary", "3 summaries"),
        (1, "journal record", "1 journal record"),
        (5, "inbox entry", "5 inbox entries"),
        (2, "TOC", "2 TOCs"),
        (1200, "more problem", "1200 more problems"),
    ],
)
def test_count_agrees_in_number(n, word, said):
    assert count(n, word) == said
