"""A user who only writes notes gets TOC lines that tell the notes apart (issue 13, acceptance).

The corpus is real text from an independent source: the Python FAQ of Debian's python3-doc, each answer
cut into an untitled Markdown note named ``note-NNN.md`` (:mod:`libraryfs_bench.findability.notes`), so a
line cannot lean on a title or a file name, and several notes open with ``Yes.``. The notes are written
through a real mount; the deterministic indexer makes the TOCs; the lines are read back through the mount
(every page of a section, ``INDEX.md`` and ``.index/``). Per section of at least 8 notes, each note's line:

* differs from every other note's line;
* carries at least one of the note's own distinctive words — a word of the note found in at most a tenth
  of the section's notes (word lists and stopwords are this test's own, not libraryfs's);
* is not made of the section's common words (those in half its notes or more).
"""

from __future__ import annotations

import collections
import os
import re

from helpers.facility import unavailable
from helpers.files import read_file

from libraryfs_bench.findability import corpora
from libraryfs_bench.findability import notes as notes_mod

MIN_SECTION_NOTES = 8
_LINE = re.compile(r"^- \[((?:\\.|[^\]\\])*)\]\(([^)\s]+)\) — (.*?)(?: \(~?[\d,]+ tok\))?$")
#: an entry line of a leaf page that says ``files: ../NAME``: its name without a link (TOC_FORMAT 5)
_BARE = re.compile(r"^- ([^\s\[\]()]+) — (.*?)(?: \(~?[\d,]+ tok\))?$")
_WORD = re.compile(r"[a-z][a-z0-9_]+")
_STOP = frozenset(
    """the and for that this with are you can not but from have has was were use used using how what there
    which when will its into than then them they their also any all one such more some only other does
    doesn don isn may might could would should been being about your yes not""".split()
)


def words(text: str) -> set[str]:
    """Content words (lower case, ≥ 3 characters, no stopwords) of ``text``."""
    return {w for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in _STOP}


def section_lines(mnt: str, section: str) -> dict[str, str]:
    """Entry name → its line's summary, from every TOC page of ``section`` read through the mount."""
    d = os.path.join(mnt, section)
    pages = [os.path.join(d, "INDEX.md")]
    if os.path.isdir(os.path.join(d, ".index")):
        pages += [os.path.join(d, ".index", p) for p in sorted(os.listdir(os.path.join(d, ".index")))]
    out: dict[str, str] = {}
    for p in pages:
        text = read_file(p, "rb").decode()
        bare = "\nfiles: ../NAME" in text
        for ln in text.splitlines():
            m = _LINE.match(ln)
            if m and m.group(1).startswith("note-") and " … " not in m.group(1):  # not a range line
                out[m.group(1)] = m.group(3)
            b = _BARE.match(ln) if bare and not m else None
            if b and b.group(1).startswith("note-"):
                out[b.group(1)] = b.group(2)
    return out


def test_note_lines_are_distinct_and_carry_each_notes_own_words(mounted):
    try:
        notes = notes_mod.faq_notes()
    except corpora.CorpusUnavailable as e:
        unavailable(str(e))
    notes_mod.write_notes(mounted.p("notes"), notes)
    mounted.wait_indexed(timeout_s=120)
    by_section = collections.defaultdict(list)
    for n in notes:
        by_section[n.section].append(n)
    checked = 0
    for section, group in sorted(by_section.items()):
        if len(group) < MIN_SECTION_NOTES:
            continue
        lines = section_lines(mounted.mnt, f"notes/{section}")
        assert set(lines) == {n.name for n in group}, f"{section}: every note has one line"
        dupes = [s for s, c in collections.Counter(lines.values()).items() if c > 1]
        assert not dupes, f"{section}: notes share a line: {dupes[:3]}"
        df = collections.Counter(w for n in group for w in words(n.text))
        rare = max(1, len(group) // 10)
        for n in group:
            line_words = words(lines[n.name])
            own = {w for w in words(n.text) if df[w] <= rare}
            assert line_words & own, f"{section}/{n.name}: {lines[n.name]!r} has none of its own words"
            common = {w for w in line_words if df[w] * 2 >= len(group)}
            assert len(common) * 2 < len(line_words), f"{section}/{n.name}: {lines[n.name]!r} is common words"
            checked += 1
    assert checked >= 100  # the corpus really was checked (170 notes, 6 sections of ≥ 8)
