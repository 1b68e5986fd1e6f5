"""Answer extraction (boxed and plain) and equivalence via math-verify."""

import signal

import pytest

from libraryfs.features.cards.answers import (
    equivalent,
    extract_answer,
    normalize,
    parsed,
    symbolic_work_bounded,
)


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


def test_math_verify_never_arms_a_timer():
    """The verdict must not depend on the machine's load: math-verify runs without its ``signal.alarm``
    (which also fired inside unrelated code, a hypothesis GC callback). A timer of ours armed before the
    calls is still armed after them (math-verify's ``alarm(0)`` cancelled it)."""
    prev = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("SIGALRM delivered"))
    signal.setitimer(signal.ITIMER_REAL, 3600.0)
    try:
        assert parsed("x^{3}+7") and equivalent("x^{3}+7", "7+x^3") and not equivalent("y^{2}", "y^{3}")
        remaining_s, _ = signal.getitimer(signal.ITIMER_REAL)
        assert remaining_s > 3000.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, prev)


@pytest.mark.parametrize(
    "ans",
    ["10^{10^{10}}", "9^9^9", "(x+1)^{999}", "2**10**10", "100001!", "\\binom{200000}{100000}", "x" * 90],
)
def test_answers_too_costly_for_sympy_are_compared_as_strings(ans):
    """Bounded by the text, not a clock: the same verdict on an idle and on a loaded machine."""
    assert not symbolic_work_bounded(ans) and parsed(ans) == ()
    assert equivalent(ans, ans) and not equivalent(ans, ans + "+1")


@pytest.mark.parametrize("ans", ["2^{100}", "(x+1)^{20}", "x^2+y^2", "1000!", "\\binom{10}{5}", "e^{i\\pi}"])
def test_ordinary_answers_are_compared_symbolically(ans):
    assert symbolic_work_bounded(ans) and parsed(ans)
