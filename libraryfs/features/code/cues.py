"""What the words of a task say before any retrieval: its intent and a few size cues (PAPERS.md §3).

Everything here reads the task's text only. :func:`classify_intent` names what the task asks for:

* ``read`` — a lookup that edits nothing: "who calls X", "where is X defined", "callers of X", "find the
  usages of X", "explain X", "what does X do", "how does X work";
* ``explore`` — an investigation: a conceptual question (why…, how does/can…, investigate…, ends in "?");
* ``small`` — a text-only edit (typo, spelling, docstring, comment, wording, whitespace) or a version
  bump ("release version 2.1.0");
* ``edit`` — anything else.

The regular expressions of the keyword baseline (:data:`RX_DEEP`, :data:`RX_MULTI`, :data:`RX_FAST`) live
here too: the router's size estimate uses the last two as two of its inputs (the fitted weights decide how
much they count), so the baseline's evidence is never hidden from the router.
"""

from __future__ import annotations

import math
import re

READ = re.compile(
    r"^\s*(who|what|which)\s+(calls|uses|imports|references|depends\s+on|raises|handles)\b|"
    r"^\s*where\s+(is|are|does|do)\b|"
    r"^\s*(callers|usages?|uses|references|importers|dependents)\s+(of|to)\b|"
    r"^\s*(find|show|list|locate)\s+(me\s+)?(the\s+|all\s+)?(callers|usages?|uses|references|"
    r"definitions?|implementations?|importers|subclasses)\b|"
    r"^\s*(explain|describe|summari[sz]e)\b|"
    r"^\s*what\s+(does|do|is|are)\b|"
    r"^\s*how\s+(does|do|is|are)\b.*\bwork",
    re.I,
)
EXPLORATORY = re.compile(
    r"^\s*(why|how\s+(does|do|can|could|should)|what\s+(is|are|if)|investigate|explore|"
    r"research|figure\s+out|understand|evaluate\s+whether|should\s+we|is\s+it)\b|\?\s*$",
    re.I,
)
#: Edits that change text, not behaviour, or only the version: one file, no test.
SMALL = re.compile(
    r"\b(typos?|misspell\w*|spelling|docstrings?|comments?|wording|grammar|whitespace|punctuation|"
    r"(release|start|bump)\w*\s+(to\s+)?(version\s+)?v?\d+(\.\d+)+)\b",
    re.I,
)
TEST = re.compile(r"\btest\w*\b", re.I)

RX_DEEP = re.compile(r"\b(investigate|explore|research|why|spike|experiment|prototype|figure out)\b|\?", re.I)
RX_MULTI = re.compile(
    r"\b(refactor\w*|rewrite|redesign|migrat\w+|across|all|every|overhaul|architecture|"
    r"restructur\w+|framework|system|multiple)\b",
    re.I,
)
RX_FAST = re.compile(
    r"\b(typo|rename|bump|version|comment|docstring|whitespace|lint|format|spelling|"
    r"one-line|small|minor|trivial)\b",
    re.I,
)
INTENTS = ("read", "explore", "small", "edit")


def first_line(text: str) -> str:
    """The task's first non-blank line (a commit's subject)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def classify_intent(query: str, qtype: str) -> str:
    """One of :data:`INTENTS` for the first line of ``query`` (module docstring); ``qtype`` is the
    retrieval's query type (an exploratory question must be ``conceptual``: "why does parse_x fail?" names
    its target, and is routed like any other task about it)."""
    first = first_line(query)
    if READ.search(first):
        return "read"
    if qtype == "conceptual" and EXPLORATORY.search(first):
        return "explore"
    if SMALL.search(first):
        return "small"
    return "edit"


def text_features(query: str) -> list[float]:
    """The size cues of a task's words: [the baseline's small-edit words, its broad-change words,
    ln(1 + words)] (whole text)."""
    return [
        float(bool(RX_FAST.search(query))),
        float(bool(RX_MULTI.search(query))),
        math.log1p(len(query.split())),
    ]


def regex_route(query: str) -> str:
    """Keyword baseline: DEEPRESEARCH for exploratory words, MULTIAGENT for broad-change words, FASTPATH for
    small-edit words, else SUBAGENT."""
    if RX_DEEP.search(query):
        return "DEEPRESEARCH"
    if RX_MULTI.search(query):
        return "MULTIAGENT"
    if RX_FAST.search(query):
        return "FASTPATH"
    return "SUBAGENT"
