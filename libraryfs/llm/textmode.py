"""Plain-text prompts for small models (``index_answers = "text"``): one item per request, one sentence back.

A 135M-parameter model does not keep to a JSON contract (docs/llm.md, "The local model": 0 of 12 answers
parseable without a grammar, the schema echoed with a generic one), but the *first sentence* of a plain
"summarise the document above in one sentence" answer was a usable summary in 6 of 12 documents, against 4
of 12 for the best JSON set-up. This mode asks that, per item, and validates each answer on its own:

- the first sentence only (the model rarely stops at one), cut to the job's word limit;
- refused (→ the deterministic line for that item): empty, fewer than 3 words, no letters, the file name,
  text about the task or the document itself ("The document above is …", "Here is a summary"), fragments of
  a JSON schema or of the prompt. A sentence copied from the document is accepted (it is a true line; the
  measurement in docs/llm.md counts it as not *useful*, since the deterministic line quotes it too);
- filing accepts only an existing section named in the answer (never a new one: the model cannot be trusted
  to name a subject), else the deterministic filing;
- grouping is not asked at all (the deterministic name ranges are used).

Every accepted line is cleaned by :func:`libraryfs.llm.prompts.model_line` and then by the TOC renderer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from libraryfs.index.jobs import SUMMARY_MAX_WORDS
from libraryfs.llm.prompts import DESCRIPTION_MAX_WORDS, excerpt, model_line

TEXT_VERSION = 1  #: part of the cache key of every text-mode answer (bump when a prompt below changes)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])|\n")
_LABEL = re.compile(r"^(?::[\w-]+:+\s*)+")  # reST roles/directives the model imitates
_PREFIX = re.compile(r"^\s*(?:summary|description|answer|sentence|section)\s*[:\-–]\s*", re.I)
_ABOUT_TASK = re.compile(
    r"\b(?:the (?:document|text|file|folder|section) above|this (?:document|text) (?:is|provides) a summary|"
    r"here is|here's|i (?:can|cannot|can't|will|would)|as an ai|summar(?:y|ise|ize|ized|ised) of the "
    r"(?:document|text)|in one sentence|at most \d+ words|the user)\b",
    re.I,
)
_SCHEMA = re.compile(r"[{}\[\]]|[\"']type[\"']\s*:|[\"']properties[\"']|additionalProperties")


@dataclass(frozen=True)
class TextJob:
    """A job asked in plain text: messages for one item, and the parse of one answer (None = refused)."""

    name: str
    max_tokens: int

    @property
    def prompt_version(self) -> str:
        """``"<job>/text<v>"``: text answers never share cache entries with JSON ones."""
        return f"{self.name}/text{TEXT_VERSION}"


SUMMARIZE = TextJob("summarize", 60)
DESCRIBE = TextJob("describe", 70)
FILE = TextJob("file", 20)
JOBS = {j.name: j for j in (SUMMARIZE, DESCRIBE, FILE)}


def messages(job: TextJob, item: dict[str, Any], sections: list[str] | None = None) -> list[dict[str, str]]:
    """The chat messages asking ``job`` about one ``item`` (the JSON payload item of the JSON mode)."""
    system = "You are a careful librarian. Answer with one short sentence."
    if job.name == "summarize":
        user = (
            f"{excerpt(item['text'])}\n\nSummarize the document above in one sentence of at most "
            f"{SUMMARY_MAX_WORDS} words."
        )
    elif job.name == "describe":
        lines = "\n".join(f"- {e['name']}: {e['summary']}" for e in item["entries"][:20])
        user = (
            f"A folder named {item['path']} holds {item['entry_count']} files, among them:\n{lines}\n\n"
            f"Say in one sentence of at most {DESCRIPTION_MAX_WORDS} words what the folder holds."
        )
    elif job.name == "file":
        menu = ", ".join(sections or [])
        user = (
            f"{excerpt(item['text'], 800)}\n\nLibrary sections: {menu}.\n"
            "Which section fits the document above best? Answer with the section name only."
        )
    else:  # pragma: no cover - the builder asks only the jobs above
        raise ValueError(f"no text prompt for {job.name}")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def first_sentence(text: str) -> str:
    """The first sentence of the first line of ``text`` with at least 3 words, after dropping list and
    quote markers, reST/Markdown labels (``:section::``, ``Summary:``) and surrounding quotes."""
    for raw in text.splitlines():
        line = _LABEL.sub("", raw.strip())
        line = _PREFIX.sub("", line.lstrip("*-•>#·+ \t").strip().strip("\"'`").strip())
        if len(line.split()) >= 3:
            s = _SENTENCE_END.split(line, maxsplit=1)[0]
            return " ".join(s.split()).strip("\"'` ")
    return ""


def parse(job: TextJob, answer: str, item: dict[str, Any], sections: list[str] | None = None) -> str | None:
    """The accepted value of one plain-text ``answer`` for ``item``, or None (refused: see module doc)."""
    if job.name == "file":
        return _section_named(answer, sections or [])
    limit = SUMMARY_MAX_WORDS if job.name == "summarize" else DESCRIPTION_MAX_WORDS
    s = first_sentence(answer.replace("\x1b", " "))
    words = s.split()
    if len(words) < 3 or not any(c.isalpha() for c in s):
        return None
    name = str(item.get("name") or item.get("path") or "").lower()
    if name and (s.lower().rstrip(".") == name or s.lower().startswith(name.rsplit(".", 1)[0] + ".")):
        return None
    if _ABOUT_TASK.search(s) or _SCHEMA.search(s):
        return None
    line = model_line(s, limit)
    return line if line and any(c.isalnum() for c in line) else None


def _section_named(answer: str, sections: list[str]) -> str | None:
    """The existing section an answer names: exact (case-insensitive) first, else the longest one whose
    path occurs in the answer as a word; None when none does."""
    a = " ".join(answer.strip().strip("\"'`.").split()).lower()
    folded = {s.lower(): s for s in sections}
    if a.strip("/") in folded:
        return folded[a.strip("/")]
    named = [s for s in sections if re.search(r"(?<![\w/-])" + re.escape(s.lower()) + r"(?![\w/-])", a)]
    return max(named, key=len) if named else None
