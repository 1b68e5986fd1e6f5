"""The subject index through a real FUSE mount: ``/.subjects/`` appears once entries are indexed, is
resolved but never listed, its master line is labelled, a word only an entry's body uses (not its name or
title) leads to that entry (the link opens), and an edit moves the word to the entry that now uses it."""

from __future__ import annotations

import errno
import os
import posixpath
import re
import urllib.parse

import pytest
from helpers.files import read_file

_WORD_LINE = re.compile(r"^- (\S+) — ([\d,]+) entr(?:y|ies): (.*)$", re.M)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _word_links(mounted, word: str) -> list[str] | None:
    """Mount paths the subject index links for ``word`` (None: no line), following its range pages."""
    page = ".subjects/INDEX.md"
    pages = [page]
    n = 0
    while pages and n < 50:
        page = pages.pop(0)
        n += 1
        text = read_file(mounted.p(page), "rb").decode()
        base = posixpath.dirname(page)
        for w, _df, rest in _WORD_LINE.findall(text):
            if w == word:
                rel = [urllib.parse.unquote(t) for t in _LINK.findall(rest)]
                return [mounted.p(posixpath.normpath(posixpath.join(base, r))) for r in rel]
        for target in re.findall(r"^- \[[^\]]*\]\((\.index/\d+\.md|\d+\.md)\)", text, re.M):
            pages.append(posixpath.normpath(posixpath.join(base, target)))
    return None


def test_subject_index_lists_body_words_and_follows_edits(mounted):
    with pytest.raises(OSError) as e:  # reserved before it exists: the name is not the user's
        os.mkdir(mounted.p(".subjects"))
    assert e.value.errno == errno.EACCES
    os.makedirs(mounted.p("garden"))
    with open(mounted.p("garden/beds.md"), "w") as f:
        f.write("# Raised beds\n\nSpread a thick layer of mulch over the soil every spring.\n")
    with open(mounted.p("garden/tools.md"), "w") as f:
        f.write("# Tools\n\nA spade, a rake and a wheelbarrow.\n")
    mounted.wait_indexed()
    assert ".subjects" not in os.listdir(mounted.mnt)  # resolved, never listed
    assert os.path.isdir(mounted.p(".subjects"))
    with pytest.raises(OSError) as e:
        os.mkdir(mounted.p(".subjects"))
    assert e.value.errno == errno.EEXIST
    master = read_file(mounted.p("INDEX.md"), "rb").decode()
    assert "[subjects](.subjects/INDEX.md) — subject index:" in master
    assert _word_links(mounted, "mulch") == [mounted.p("garden/beds.md")]  # a body word, not the title's
    assert _word_links(mounted, "wheelbarrow") == [mounted.p("garden/tools.md")]
    assert read_file(mounted.p("garden/beds.md"), "rb").startswith(b"# Raised beds")  # the link opens
    with open(mounted.p("garden/beds.md"), "w") as f:  # the word moves to the other entry
        f.write("# Raised beds\n\nCompost them in autumn.\n")
    with open(mounted.p("garden/tools.md"), "a") as f:
        f.write("Keep the mulch fork by the shed.\n")
    mounted.wait_indexed()
    assert _word_links(mounted, "mulch") == [mounted.p("garden/tools.md")]
    assert _word_links(mounted, "compost") == [mounted.p("garden/beds.md")]
    with pytest.raises(OSError) as e:  # generated pages are read-only
        os.unlink(mounted.p(".subjects/INDEX.md"))
    assert e.value.errno == errno.EACCES
