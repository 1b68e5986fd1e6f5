"""Final-answer extraction and answer equivalence for the tiered solver (KACE, PAPERS.md §2).

Two jobs:

* :func:`extract_answer` — the final answer of one attempt's text: the last ``\\boxed{…}``, else an explicit
  "answer is …" / "Answer: …", else the answer-bearing phrase of the last sentence of plain prose
  ("… is 771.", "There are 29 strings …", "No, …").
* :func:`equivalent` — whether two extracted answers denote the same value: equal after normalisation, the
  same yes/no verdict, or equal according to ``math-verify`` (sympy; ``2^(n-1)`` ≡ ``2^{n-1}``, ``1/2`` ≡ ``0.5``).

``math-verify`` can time its parser out with ``signal.alarm`` (wall clock). We never let it: a wall-clock
bound makes the verdict depend on the machine's load (a loaded 2-core machine turned ``x^2`` "unparsable"),
and a ``SIGALRM`` raised in whatever Python code runs at that moment (a garbage-collection callback, another
library's handler) is not ours to raise. The work is bounded by the input instead, deterministically:
answers longer than :data:`MAX_SYMBOLIC_CHARS` and answers whose value sympy cannot build in bounded time
(:func:`symbolic_work_bounded`: power towers, huge exponents, factorials and binomials of huge numbers) are
compared as strings only.
"""

from __future__ import annotations

import functools
import logging
import re

from math_verify import parse as _mv_parse
from math_verify import verify as _mv_verify


class _NoTimeoutNotice(logging.Filter):
    """Drops math-verify's one-time "Timeout is disabled … you must provide the logic" warning: we do, by
    bounding the input (:func:`symbolic_work_bounded`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False (drop) for that notice, True for every other record (logging.Filter's contract)."""
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_NoTimeoutNotice())


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_IS = re.compile(r"(?i)\b(?:final answer|answer)\s*(?:is|:|=)\s*(?::\s*)?(.+)")
_COPULA = re.compile(r"(?i)\s(?:is|are|equals|=|be|was|were)\s+")
#: Answers longer than this (normalised) are compared as strings only.
MAX_SYMBOLIC_CHARS = 80
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
_YESNO = re.compile(r"(?i)^\W*(yes|no)\b")
#: Words allowed inside a plain-text math phrase (function names, connectives of lists/ranges).
_MATH_WORDS = {
    "sqrt",
    "sin",
    "cos",
    "tan",
    "log",
    "ln",
    "exp",
    "pi",
    "mod",
    "and",
    "or",
    "to",
    "infinity",
    "...",
    "\\dots",
    "\\cdots",
}
_MATHY = re.compile(r"[0-9^*/+=±√()\\{}_<>≤≥!-]")
_SENTENCE_END = re.compile(r"(?<=[a-z0-9)$}][.!?])\s+(?=[A-Z$\\])")
#: Filler between a copula and the value ("is given by the formula 2^n", "is approximately 3.14").
_FILLER = re.compile(
    r"(?i)^(?:(?:given|represented|expressed|determined)\s+by\s+|(?:approximately|exactly|equal\s+to|"
    r"simply|just|therefore|thus|then)\s+|(?:the|a|an)\s+(?:formula|expression|value|number|answer)"
    r"(?:\s+of)?\s*:?\s+)+"
)
_INLINE = re.compile(r"^\s*(?:\$\$?|\\\(|\\\[)(.+?)(?:\$\$?|\\\)|\\\])")


def _boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{…}`` in ``text`` with balanced braces, in order."""
    out = []
    for m in _BOXED.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            out.append(text[m.end() : i - 1].strip())
    return out


def _last_sentence(text: str) -> str:
    """The last non-empty sentence of ``text`` (periods between digits do not end a sentence)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    parts = [p.strip() for p in _SENTENCE_END.split(lines[-1]) if p.strip()]
    last = parts[-1] if parts else lines[-1]
    return last[:-1] if last.endswith(".") and not last.endswith("...") else last


def _math_prefix(phrase: str) -> str | None:
    """The longest leading run of math-like tokens of ``phrase`` (``"29 valid strings"`` → ``"29"``)."""
    toks = []
    for tok in phrase.replace("$", " ").split():
        word = tok.strip(",;:").lower()
        if _MATHY.search(tok) or len(word) == 1 or word in _MATH_WORDS:
            toks.append(tok)
        else:
            break
    while toks and toks[-1].strip(",;:").lower() in _MATH_WORDS - {"pi", "infinity"}:
        toks.pop()
    ans = " ".join(toks).strip(" ,;:")
    return ans if ans and (_MATHY.search(ans) or ans.lower() in ("pi", "infinity")) else None


def extract_answer(text: str | None) -> str | None:
    """The final answer of one attempt (a short string), or ``None`` when none can be found.

    Order: last ``\\boxed{}`` → last "answer is X"/"Answer: X" → in the last sentence, a leading yes/no,
    the math phrase after the last copula ("is", "are", "=", …), else the last math-like token.
    """
    if not text:
        return None
    boxed = _boxed_contents(text)
    if boxed:
        return boxed[-1]
    hits = _ANSWER_IS.findall(text)
    if hits:
        tail = _last_sentence(hits[-1]) if "." in hits[-1] else hits[-1]
        ans = _math_prefix(tail) or tail.strip(" .$")
        if ans:
            return ans
    sent = _last_sentence(text)
    yn = _YESNO.match(sent)
    if yn:
        return yn.group(1).lower()
    cops = list(_COPULA.finditer(sent))
    for m in reversed(cops):
        tail = _FILLER.sub("", sent[m.end() :])
        inline = _INLINE.match(tail)
        ans = inline.group(1).strip() if inline else _math_prefix(tail)
        if ans:
            return ans
    toks = [t.strip(",;:$") for t in sent.split() if _MATHY.search(t)]
    return toks[-1] if toks else None


def normalize(ans: str) -> str:
    """Canonical string of an answer for cheap comparison (lower case, no spaces/``$``/trailing dots)."""
    s = ans.strip().rstrip(".").strip().strip("$").strip().lower()
    s = re.sub(r"\\(?:text|mathrm)\{([^}]*)\}", r"\1", s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\,", "").replace("\\!", "")
    s = re.sub(r"^\\\(|\\\)$", "", re.sub(r"\s+", "", s))
    return re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", s) if re.fullmatch(r"-?\d{1,3}(,\d{3})+", s) else s


def _to_latex(ans: str) -> str:
    """Plain math to the LaTeX ``math-verify`` parses best: ``sqrt(2)`` → ``\\sqrt{2}``, ``±`` → ``\\pm``."""
    s = ans.strip().strip("$")
    s = re.sub(r"sqrt\(([^()]*)\)", r"\\sqrt{\1}", s)
    s = s.replace("√", "\\sqrt").replace("±", "\\pm ").replace("≤", "\\le ").replace("≥", "\\ge ")
    s = s.replace("−", "-").replace("·", "*").replace("×", "*")
    return f"${s}$"


#: Largest integer exponent, factorial argument and binomial argument handed to sympy. ``(x+1)^{300}``
#: takes sympy ~4 s of CPU to compare, ``(x+1)^{999}`` and ``10^{10^{10}}`` do not end.
MAX_EXPONENT = 100
MAX_FACTORIAL_ARG = 10000
_INT = re.compile(r"\d+")
_FACTORIAL = re.compile(r"(\d+)\s*!")
_BINOM = re.compile(r"\\(?:binom|dbinom|tbinom|choose)\s*\{([^{}]*)\}\s*\{([^{}]*)\}")


def _group(s: str, i: int) -> int:
    """End index (exclusive) of the group starting at ``s[i]``: a balanced ``{…}``/``(…)``, else a run of
    digits, else one character."""
    close = {"{": "}", "(": ")"}.get(s[i]) if i < len(s) else None
    if close:
        depth, j = 0, i
        while j < len(s):
            depth += (s[j] == s[i]) - (s[j] == close)
            j += 1
            if depth == 0:
                return j
        return j
    j = i
    while j < len(s) and s[j].isdigit():
        j += 1
    return max(j, i + 1)


def symbolic_work_bounded(ans: str) -> bool:
    """Whether sympy can parse and compare answer ``ans`` in bounded time, decided from the text alone
    (no clock, so the verdict is the same on an idle and a loaded machine): no power inside an exponent or
    chained powers (``10^{10^{10}}``, ``9^9^9``), integer exponents ≤ :data:`MAX_EXPONENT`, factorial and
    binomial arguments ≤ :data:`MAX_FACTORIAL_ARG`, and at most :data:`MAX_SYMBOLIC_CHARS` characters."""
    s = ans.replace("**", "^")
    if len(s) > MAX_SYMBOLIC_CHARS:
        return False
    for i, c in enumerate(s):
        if c != "^":
            continue
        start = i + 1
        while start < len(s) and s[start].isspace():
            start += 1
        end = _group(s, start)
        exponent = s[start:end]
        rest = s[end:].lstrip()
        if (
            "^" in exponent
            or rest.startswith("^")
            or any(int(n) > MAX_EXPONENT for n in _INT.findall(exponent))
        ):
            return False
    args = _FACTORIAL.findall(s) + [n for m in _BINOM.findall(s) for part in m for n in _INT.findall(part)]
    return all(int(n) <= MAX_FACTORIAL_ARG for n in args)


@functools.cache
def _warm() -> None:
    """Load math-verify's LaTeX grammar and sympy's lazily imported parts once, before the first timed call:
    the first parse of a process costs ~4x a later one (0.9 s against 0.2 s of CPU for ``x^2``), and on a
    loaded machine that one-time cost made answers time out while math-verify's clock still bounded them
    (no call has a clock now, see the module doc: the warm-up only keeps the first real call fast)."""
    bound = None
    try:
        x2, x2b, five = (_mv_parse(f"${e}$", parsing_timeout=bound) for e in ("x^2", "x^{2}", "5"))
        _mv_verify(x2, x2b, timeout_seconds=bound)  # equal expressions, then an expression against a number
        _mv_verify(x2, five, timeout_seconds=bound)
    except Exception:  # noqa: BLE001 - a failed warm-up only leaves the first real call slower
        pass


@functools.lru_cache(maxsize=65536)
def parsed(ans: str) -> tuple:
    """``math-verify`` parse of an answer (cached): a tuple of sympy objects/strings, empty if unparsable or
    if its value is too costly to build (:func:`symbolic_work_bounded`). Never arms a timer."""
    if not symbolic_work_bounded(ans):
        return ()
    _warm()
    try:
        return tuple(_mv_parse(_to_latex(ans), parsing_timeout=None))
    except Exception:  # noqa: BLE001 - math-verify raises assorted sympy/timeout errors: treat as unparsable
        return ()


def _verdict(ans: str) -> str | None:
    m = _YESNO.match(ans)
    return m.group(1).lower() if m else None


@functools.lru_cache(maxsize=262144)
def equivalent(a: str | None, b: str | None) -> bool:
    """Whether two extracted answers are the same value. ``None`` (no answer) equals nothing.

    Yes/no answers compare by verdict; otherwise normalised strings, then ``math-verify`` ``verify``
    (symbolic and numeric equality, 6-digit float rounding).
    """
    if a is None or b is None:
        return False
    na, nb = normalize(a), normalize(b)
    if na == nb:
        return True
    va, vb = _verdict(a), _verdict(b)
    if va or vb:
        return va == vb
    if _NUMBER.match(na) and _NUMBER.match(nb):  # fast path: two plain numbers
        return abs(float(na) - float(nb)) <= 1e-6 * max(1.0, abs(float(na)))
    if len(na) > MAX_SYMBOLIC_CHARS or len(nb) > MAX_SYMBOLIC_CHARS:
        return False  # prose, not a final answer: sympy on it is slow and meaningless
    pa, pb = parsed(a), parsed(b)
    if not pa or not pb:
        return False
    try:
        return bool(_mv_verify(list(pa), list(pb), timeout_seconds=None))
    except Exception:  # noqa: BLE001 - same as above: a failed comparison is "not equal"
        return False
