"""Answer extraction (boxed and plain) and equivalence via math-verify."""

import pytest

from libraryfs.features.cards.answers import equivalent, extract_answer, normalize


@pytest.mark.parametrize(
    "text,expected",
    [
        ("so we get \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("first \\boxed{3}, then corrected: \\boxed{x^{2}+1}", "x^{2}+1"),
        ("The final answer is 42.", "42"),
        ("Answer: 2^(n-1)", "2^(n-1)"),
        ("The total number of strings, where digits differ by at most 1, is 239.", "239"),
        ("There are 252 strings of length 5 using the digits {0, 1, ..., 9} with increasing digits.", "252"),
        ("No, there is no such integer.", "no"),
        ("Yes.", "yes"),
        ("The number of ways is given by the formula $n(n+1)2^{n-2}$.", "n(n+1)2^{n-2}"),
        ("There are 11,264 rearrangements.", "11,264"),
        ("", None),
        ("I could not solve it", None),
    ],
)
def test_extract(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "a,b",
    [
        ("1/2", "0.5"),
        ("\\frac{1}{2}", "1/2"),
        ("2^(n-1)", "2^{n-1}"),
        ("11,264", "11264"),
        ("3", "3.0"),
        ("n(n+1)*2^(n-2)", "n(n+1)2^{n-2}"),
        ("Yes", "yes, it is"),
        ("sqrt(2)", "\\sqrt{2}"),
    ],
)
def test_equivalent(a, b):
    assert equivalent(a, b) and equivalent(b, a)


@pytest.mark.parametrize(
    "a,b", [("1/2", "0.51"), ("2^n", "2^{n-1}"), ("yes", "no"), ("3", None), (None, None), ("7", "x")]
)
def test_not_equivalent(a, b):
    assert not equivalent(a, b)


def test_normalize():
    assert normalize(" $ 12 $. ") == "12" and normalize("\\text{yes}") == "yes"
