"""A notes corpus: short untitled Markdown notes cut from the Python FAQ (Debian ``python3-doc``).

Issue 13 asks that "a user who only writes notes (no code, no docs) gets lines that tell notes apart". No
real personal notes collection is available offline, so this corpus is made from an independent real
text whose shape is close to a notes folder: each question of the Python FAQ (``faq/*.rst.txt``:
programming, library, design, general, extending, windows, gui, installed) becomes one note holding the
*answer only* — its first paragraphs, at most :data:`NOTE_MAX_WORDS` words, reStructuredText markup turned
into plain text, no heading — named ``note-NNN.md`` in the section of its FAQ page (``programming/`` …).
That is the hard case for a TOC line: no title, a generic file name, and leads such as ``Yes.`` or ``It
depends.``; the line has to come from the body.

The question is kept out of the note, so it serves as an independent topic query: "How do I …?" → the
note that answers it (``kind`` ``topic``, the same id/split scheme as the other query sets). Run it with

    python -m libraryfs_bench.findability.notes DEST          # DEST/notes/…, DEST/queries.jsonl
    python -m libraryfs_bench.findability --custom notes=DEST/notes,DEST/queries.jsonl --corpus notes
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass

from .corpora import python_docs_dir
from .queries import make_query

#: FAQ pages used (in this order), each one section of notes
FAQ_PAGES = ("programming", "library", "design", "general", "extending", "windows", "gui", "installed")
NOTE_MAX_WORDS = 120
NOTE_MIN_WORDS = 8
SECTION = "notes"

_UNDERLINE = re.compile(r"^([-=~^\"'`#*+])\1{3,}\s*$")
_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LINK = re.compile(r"`([^`<]+?)\s*<[^>]*>`__?")
_LITERAL = re.compile(r"``([^`]+)``")


@dataclass
class Note:
    """One note: its section (FAQ page), file name, the question it answers (kept out of the text)."""

    section: str
    name: str
    question: str
    text: str

    @property
    def path(self) -> str:
        """Library-relative path when ingested ``--into notes``."""
        return f"{SECTION}/{self.section}/{self.name}"


def plain(text: str) -> str:
    """reStructuredText inline markup → plain text (roles, links, literals); whitespace collapsed."""
    text = _ROLE.sub(lambda m: m.group(1).strip() or m.group(0), text)
    text = _LINK.sub(r"\1", text)
    text = _LITERAL.sub(r"\1", text)
    text = re.sub(r"`([^`]+)`_?", r"\1", text)
    return " ".join(text.replace("\\", "").split())


def _questions(lines: list[str]) -> list[tuple[str, list[str]]]:
    """``(question, body lines)`` for every underlined heading that ends in ``?``."""
    heads = [
        k
        for k in range(1, len(lines))
        if _UNDERLINE.match(lines[k])
        and lines[k - 1].strip()
        and len(lines[k].strip()) >= len(lines[k - 1].strip())
    ]
    out = []
    for j, k in enumerate(heads):
        end = heads[j + 1] - 1 if j + 1 < len(heads) else len(lines)
        q = lines[k - 1].strip()
        if q.endswith("?"):
            out.append((q, lines[k + 1 : end]))
    return out


def _paragraphs(body: list[str]) -> list[str]:
    """Prose paragraphs of an answer: no directives, comments, literal blocks or list-free indents."""
    paras, cur = [], []
    for ln in [*body, ""]:
        if ln.strip():
            cur.append(ln)
            continue
        if cur:
            first = cur[0]
            if not first.startswith((" ", "\t", "..", ">>>")) and not first.strip().startswith(("..", "|")):
                p = plain(" ".join(x.strip() for x in cur))
                p = p[:-1] + "." if p.endswith("::") else p
                if p:
                    paras.append(p)
            cur = []
    return paras


def answer_text(body: list[str], max_words: int = NOTE_MAX_WORDS) -> str:
    """The first paragraphs of an answer, whole paragraphs while they fit ``max_words`` (at least one,
    cut at ``max_words``)."""
    out: list[str] = []
    used = 0
    for p in _paragraphs(body):
        n = len(p.split())
        if out and used + n > max_words:
            break
        out.append(p if n <= max_words else " ".join(p.split()[:max_words]) + " …")
        used += n
    return "\n\n".join(out)


def faq_notes(doc_dir: str | None = None) -> list[Note]:
    """Every FAQ question with a prose answer of at least :data:`NOTE_MIN_WORDS` words, as a note.
    Raises :class:`~.corpora.CorpusUnavailable` without python3-doc."""
    doc_dir = doc_dir or python_docs_dir()
    notes: list[Note] = []
    for page in FAQ_PAGES:
        path = os.path.join(doc_dir, "faq", f"{page}.rst.txt")
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        k = 0
        for q, body in _questions(lines):
            text = answer_text(body)
            if len(text.split()) < NOTE_MIN_WORDS:
                continue
            k += 1
            notes.append(Note(page, f"note-{k:03d}.md", plain(q), text))
    return notes


def write_notes(dest: str, notes: list[Note]) -> None:
    """Write ``dest/<section>/<name>`` for every note (the tree to ingest ``--into notes``)."""
    for n in notes:
        os.makedirs(os.path.join(dest, n.section), exist_ok=True)
        with open(os.path.join(dest, n.section, n.name), "w", encoding="utf-8") as f:
            f.write(n.text + "\n")


def notes_queries(notes: list[Note]) -> list[dict]:
    """Topic queries: each note's question → that note (the question is not in the note)."""
    return [make_query(SECTION, "topic", n.question, [n.path], "python3-doc FAQ question") for n in notes]


def main(argv: list[str] | None = None) -> int:
    """``python -m libraryfs_bench.findability.notes DEST``: write the notes and their queries."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python -m libraryfs_bench.findability.notes DEST", file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    notes = faq_notes()
    write_notes(os.path.join(args[0], SECTION), notes)
    with open(os.path.join(args[0], "queries.jsonl"), "w", encoding="utf-8") as f:
        for row in notes_queries(notes):
            f.write(json.dumps(row) + "\n")
    print(f"{len(notes)} notes in {len(set(n.section for n in notes))} sections under {args[0]}/{SECTION}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
