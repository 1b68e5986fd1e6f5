"""Counted nouns in what the commands print (libraryfs/words.py): "1 file", never "1 files" or "file(s)"."""

import ast
import re
from pathlib import Path

import pytest

from libraryfs.words import count, noun


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


def test_noun_agrees_without_the_number():
    assert (noun(1, "placeholder"), noun(2, "placeholder"), noun(0, "budget dimension")) == (
        "placeholder",
        "placeholders",
        "budget dimensions",
    )


def test_no_message_says_word_s():
    """No string the code prints, logs or raises says ``file(s)``: every literal (f-strings included) of the
    packages but docstrings is searched; a counted noun goes through :func:`count` or :func:`noun`."""
    root = Path(__file__).resolve().parents[2]
    found = []
    for pkg in ("libraryfs", "daemon", "cli"):
        for path in sorted((root / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            docstrings = {
                id(node.body[0].value)
                for node in ast.walk(tree)
                if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and node.body
                and isinstance(node.body[0], ast.Expr)
                and isinstance(node.body[0].value, ast.Constant)
            }
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and id(node) not in docstrings
                    and re.search(r"\w\(s\)", node.value)
                ):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    assert found == []
