"""Plain-text answers of a small model judged per item; groupings kept across small listing changes.

The answers below are real answers of SmolLM2-135M-Instruct recorded in docs/llm.md ("The local model") and
bench/results, plus the failure modes listed there; the checks are the builder's own (no model needed).
"""

from __future__ import annotations

import pytest

from libraryfs.daemon.tocs import adapt_groups
from libraryfs.index.jobs import Group
from libraryfs.llm import textmode as T
from libraryfs.llm.builder import count_bucket

ITEM = {"name": "random.rst.txt", "path": "library/random.rst.txt", "text": "This module implements …"}


@pytest.mark.parametrize(
    "answer, expected",
    [
        (
            "This module provides a set of functions to generate pseudo-random numbers, including uniform and "
            "normal distributions. It is designed for generating random integers",
            "This module provides a set of functions to generate pseudo-random numbers, including uniform and "
            "normal distributions.",
        ),
        (
            ':section::\n*   "JSON (JavaScript Object Notation) is a lightweight data interchange format."\n* It',
            "JSON (JavaScript Object Notation) is a lightweight data interchange format.",
        ),
        (
            "Summary: Generates pseudo-random numbers for simulations.",
            "Generates pseudo-random numbers for simulations.",
        ),
    ],
)
def test_the_first_sentence_is_taken(answer, expected):
    assert T.parse(T.SUMMARIZE, answer, ITEM) == expected


def test_a_long_sentence_is_cut_to_the_word_limit():
    line = T.parse(T.SUMMARIZE, " ".join(["word"] * 40) + ".", ITEM)
    assert line is not None and len(line.split()) == 21 and line.endswith("…")


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "random.rst.txt",
        "Random.",
        "The document above is a concise summary of the Functional Programming Modules chapter in Python.",
        "Here is a summary of the document in one sentence.",
        '{"type":"object","properties":{"id":1}}',
        "type':'object','items':{ the summary",
        "!!! ??? ...",
    ],
)
def test_refused_answers(answer):
    assert T.parse(T.SUMMARIZE, answer, ITEM) is None


def test_filing_accepts_only_an_existing_section():
    sections = ["python/library", "python/tutorial", "recipes"]
    assert T.parse(T.FILE, "python/library", {}, sections) == "python/library"
    assert T.parse(T.FILE, "The best section is recipes.", {}, sections) == "recipes"
    assert T.parse(T.FILE, "Python/Tutorial.", {}, sections) == "python/tutorial"
    assert T.parse(T.FILE, "networking", {}, sections) is None


def test_model_text_cannot_start_a_markdown_block():
    line = T.parse(T.DESCRIBE, "## Heading <!-- hidden --> and more words here.", {"path": "x"})
    assert line is not None and not line.startswith("#") and "<" not in line


def test_count_bucket():
    assert [count_bucket(n) for n in (0, 49, 50, 120, 129, 130, 1234)] == [0, 49, 50, 120, 120, 130, 1200]


def test_a_stored_grouping_follows_small_changes():
    groups = [["Alpha things", ["a1", "a2", "a3"]], ["Beta things", ["b1", "b2"]]]
    out = adapt_groups(groups, ["a1", "a3", "a25", "b1", "b2", "b3", "0first"], 200)
    assert out == [
        Group("Alpha things", ["a1", "a3", "0first", "a25"]),
        Group("Beta things", ["b1", "b2", "b3"]),
    ]
    assert adapt_groups(groups, ["b1"], 200) == [Group("Beta things", ["b1"])]
    assert adapt_groups(groups, ["a1", "a2", "a3", "a4"], 3) is None  # a group would exceed max_items
    assert adapt_groups(None, ["a1"], 200) is None
