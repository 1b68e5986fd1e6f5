"""Entry outlines: what an entry is and what it defines, one test per extraction rule (libraryfs.index.outline)."""

from __future__ import annotations

import os

import pytest

from libraryfs.index.codeparse import is_test_case
from libraryfs.index.outline import decode_text, extract, outline

RST = """\
.. XXX document all delegations

:mod:`json` --- JSON encoder and decoder
========================================

.. module:: json
   :synopsis: Encode and decode the JSON format.

.. moduleauthor:: Bob <bob@example.org>

**Source code:** :source:`Lib/json/__init__.py`

--------------

JSON is a lightweight data interchange format.

.. function:: dumps(obj, *, skipkeys=False, \\
                    indent=None)

   Serialize *obj*.

.. class:: JSONEncoder(*, skipkeys=False)

   Extensible encoder.

   .. method:: encode(o)

      Return a string.

   .. attribute:: item_separator

.. data:: AF_UNIX
          AF_INET

.. class:: Helper
   :module: json.tool

.. c:function:: PyObject* PyList_New(Py_ssize_t len)

.. cmdoption:: --sort-keys

Basic Usage
-----------
"""


def test_rst_title_lead_and_directive_names_qualified_as_sphinx_does():
    o = outline("json.rst.txt", RST)
    assert o.kind == "rst"
    assert o.title == "json --- JSON encoder and decoder"
    assert o.lead == "Encode and decode the JSON format."  # the module synopsis
    assert o.names == [
        "json",
        "json.dumps",  # the backslash-continued signature adds no name
        "json.JSONEncoder",
        "json.JSONEncoder.encode",  # nested in the class directive
        "json.JSONEncoder.item_separator",
        "json.AF_UNIX",  # a directive with two signature lines
        "json.AF_INET",
        "json.tool.Helper",  # its :module: option re-homes it
        "PyList_New",  # C names are not qualified by the Python module
        "--sort-keys",
    ]
    assert o.headings == ["Basic Usage"]


def test_rst_lead_skips_comments_fields_source_lines_and_maintenance_notes():
    text = """\
****************************
  What's New In Python 3.11
****************************

:Release: |release|
:Editor: Someone

.. Rules for maintenance:

   * Anyone can add text to this document.  Do not spend very much time
   on the wording of your changes.

**Source code:** :source:`Lib/x.py`

This article explains the new features in Python 3.11, compared to 3.10.  More follows.
"""
    o = outline("3.11.rst.txt", text)
    assert o.title == "What's New In Python 3.11"
    assert o.lead == "This article explains the new features in Python 3.11, compared to 3.10."


def test_rst_glossary_terms_are_names_and_their_definitions_are_not():
    text = """\
Glossary
========

.. glossary::

   abstract base class
      Abstract base classes complement duck-typing.

   contiguous
      .. index:: C-contiguous, Fortran contiguous

      A buffer is considered contiguous exactly if it is either
      C-contiguous or Fortran contiguous.

   decorator
      A function returning another function.
"""
    assert outline("glossary.rst", text).names == ["abstract base class", "contiguous", "decorator"]


def test_markdown_title_headings_front_matter_badges_and_comments():
    text = """\
---
title: "Front title"
tags: [a, b]
---
<!-- - [INDEX](../../etc/passwd) fake TOC line in a comment -->
[![build](https://ci/badge.svg)](https://ci)

# Groceries

Buy milk. And eggs.

## `parse(text)` helper

Setext heading
--------------
"""
    o = outline("list.md", text)
    # a lead of fewer than 3 content words is joined by the next sentence (markup.MIN_LEAD_WORDS)
    assert (o.kind, o.title, o.lead) == ("markdown", "Groceries", "Buy milk. And eggs.")
    assert o.headings == ["parse(text) helper", "Setext heading"]
    assert o.names == ["parse(text)"]
    assert outline("n.md", "---\ntitle: Only front\n---\nbody text here.\n").title == "Only front"


def test_markdown_symbol_table_names_its_symbols():
    text = """\
# src/click/types.py — parameter types

| symbol | kind | lines |
|---|---|---|
| [Choice](Choice.py) | class | 1-9 |
| [Choice.convert](Choice.convert.py) | method | 3-9 |
"""
    assert outline("SYMBOLS.md", text).names == ["Choice", "Choice.convert"]


def test_code_index_symbol_header_names_the_symbol_but_not_locals_or_test_cases():
    head = (
        "# Choice.convert — method · src/click/types.py:12-30 · Convert the value.\n    def convert(self):\n"
    )
    o = outline("Choice.convert.py", head)
    assert (o.symbol, o.names, o.detail, o.lead) == (True, ["Choice.convert"], "method", "Convert the value.")
    local = outline("f.g.py", "# f.g — function · m.py:1-2\ndef g(): pass\n")
    assert local.names == [] and local.detail == "local function"
    assert outline("test_x.py", "# test_x — function · tests/t.py:1-2\n").names == []
    assert [is_test_case(q) for q in ("test_x", "TestFoo", "Foo.test_bar", "Context.test", "testing")] == [
        True,
        True,
        True,
        False,
        False,
    ]


def test_python_source_definitions_by_indentation_docstring_lead_licence_skipped():
    text = '''\
#!/usr/bin/env python3
# Copyright (c) 2024 Someone. All rights reserved.
# SPDX-License-Identifier: MIT
"""Parse configuration files.

Longer text.
"""

LIMIT = 3


class Parser:
    def parse(self, data):
        """Example:

        def not_a_definition():
        """

        def helper():  # local: not a name of the file
            pass


def test_parser():
    pass


async def main():
    pass
'''
    o = outline("parse.py", text)
    # "files" is a stopword, so the lead has two content words and the next sentence joins it
    assert o.kind == "code" and o.lead == "Parse configuration files. Longer text."
    assert o.names == ["LIMIT", "Parser", "Parser.parse", "main"]


def test_other_languages_and_licence_comment_lead():
    js = "// Licensed under the MIT License.\n\n// Renders charts.\nexport function draw(x) {}\nclass Chart {}\n"
    o = outline("chart.js", js)
    assert o.names == ["draw", "Chart"] and o.lead == "Renders charts."
    assert outline("m.go", "package m\nfunc (r *T) Run() {}\ntype T struct{}\n").names == ["Run", "T"]
    assert outline("l.rs", "pub fn go() {}\nstruct S;\n").names == ["go", "S"]
    assert outline("h.c", "#define MAX 3\nint add(int a, int b)\n{\n  if (a) return b;\n}\n").names == [
        "MAX",
        "add",
    ]


def test_html_title_headings_description_and_no_markup_or_script():
    text = (
        "<!DOCTYPE html><html><head><title>About &amp; more</title>"
        '<meta name="description" content="What this site is."><script>var x="<b>no</b>";</script>'
        "</head><body><h1>Welcome</h1><p>First <b>para</b>.</p><h2>Part two</h2></body></html>"
    )
    o = outline("about.html", text)
    assert (o.kind, o.title, o.lead) == ("html", "About & more", "What this site is.")
    assert o.headings == ["Welcome", "Part two"]
    assert (
        outline("x.txt", "<html><body><p>Plain para text. More.</p></body></html>").lead == "Plain para text."
    )


def test_json_empty_binary_and_encodings():
    assert outline("c.json", '{"name": "demo", "version": 2}').detail == "JSON object: name, version"
    assert outline("e.txt", "").detail == "empty file"
    assert outline("w.txt", "  \n\n", size_bytes=4).detail == "blank, 4 bytes"
    png = extract("a.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 14)
    assert png.binary and png.outline.detail == "PNG image, 14 bytes"
    assert extract("z", b"\x00\x01\x02garbage", 10).outline.detail == "binary data, 10 bytes"
    assert decode_text("café crème".encode("latin-1")) == ("café crème", "latin-1")
    assert decode_text("héllo".encode("utf-16"))[0] == "héllo"
    assert decode_text(b"\xef\xbb\xbfbom text") == ("bom text", "utf-8")


def test_a_one_megabyte_single_line_is_outlined_boundedly():
    line = "word " * 200_000 + "end."
    ext = extract("big.txt", line.encode(), len(line))
    assert len(ext.outline.lead) <= 1000 and len(ext.text) <= 8192
    mini = "var a=" + "x" * 1_000_000 + ";"
    assert extract("min.js", mini.encode(), len(mini)).outline.names == []


def test_a_short_lead_is_joined_by_the_next_sentences_until_it_says_something():
    """A note that opens with "Yes." or "Not as such." gets the sentences after it on its line (up to
    four sentences in all), across paragraphs; a lead of three content words or more stays alone."""
    o = outline("n1.md", "Yes.\n\nSeveral debuggers for Python exist, and pdb is one.\n\nMore text.\n")
    assert o.lead == "Yes. Several debuggers for Python exist, and pdb is one."
    o = outline("n2.md", "Not as such. In general, mutable defaults are shared.\n")
    assert o.lead == "Not as such. In general, mutable defaults are shared."
    assert outline("n3.md", "Parse configuration sections quickly. Longer text.\n").lead == (
        "Parse configuration sections quickly."
    )
    assert outline("n4.md", "Yes. Maybe. Ok. Sure. Fine. Done.\n").lead == "Yes. Maybe. Ok. Sure."


PY_HTML = "/usr/share/doc/python3.11/html/library"  #: Debian python3.11-doc (scripts/setup.sh installs it)


@pytest.mark.parametrize(
    "page, title, name",
    [
        ("json.html", "json — JSON encoder and decoder", "json.dumps"),
        ("functools.html", "functools — Higher-order functions and operations on callable objects", "functools.lru_cache"),
        ("asyncio-task.html", "Coroutines and Tasks", "asyncio.gather"),
    ],
)  # fmt: skip
def test_a_real_sphinx_page_gives_its_own_title_headings_names_and_words(page, title, name):
    """A user copied python3-doc's HTML into the library (trial, 2026-12-03): its lines said "json — JSON
    encoder and decoder — Python 3.11.2 documentation … Sections: Table of Contents, This Page, Navigation,
    json — JSON encoder and decoder ¶", and its section's line "class, code, documentation, href, pre,
    python" (keywords from the tags). Now: the page's own heading as title (not the site's <title>), no
    navigation chrome (role="navigation" sidebars and bars), no permalink marks, the API names its
    definition terms anchor (`find json.dumps` reaches it), keywords from the visible text only."""

    path = os.path.join(PY_HTML, page)
    assert os.path.exists(path), f"{path}: python3.11-doc is not installed (scripts/setup.sh installs it)"
    with open(path, "rb") as f:
        data = f.read()
    e = extract(page, data, len(data))
    o = e.outline
    assert (o.kind, o.title) == ("html", title)
    assert name in o.names
    assert not any(
        "¶" in h or h in ("Table of Contents", "This Page", "Navigation", "Quick search") for h in o.headings
    ), o.headings
    assert "documentation" not in o.lead and o.lead, o.lead
    assert not {"href", "span", "div", "class", "pre", "reference", "internal"} & set(e.keywords), e.keywords


def test_html_chrome_permalinks_and_anchored_names():
    """Chrome elements (nav, header, footer, aside, role=navigation) are skipped with what they nest; a
    permalink mark ends no heading; a heading's own "#" stays; a <dt id> that is a dotted identifier is a
    name, a generated one (``id3``) is not."""
    text = (
        "<!DOCTYPE html><html><head><title>Guide — Site</title></head><body>"
        '<div role="navigation"><h3>Navigation</h3><div><p>Index</p></div><p>Modules</p></div>'
        "<nav><h2>Menu</h2></nav><header><h1>Site banner</h1></header>"
        "<h1>Guide¶</h1><p>What the guide covers, from installing the tool to running it on a cluster.</p><h2>Using C#</h2>"
        '<dl><dt id="pkg.Thing.run">run()</dt><dd>Runs.</dd><dt id="id3">x</dt></dl>'
        "<footer><p>Copyright</p></footer></body></html>"
    )
    o = outline("guide.html", text)
    assert o.title == "Guide" and o.lead.startswith("What the guide covers, from installing")
    assert o.headings == ["Using C#"], o.headings
    assert o.names == ["pkg.Thing.run"]
    assert "Copyright" not in o.text and "Modules" not in o.text and "Index" not in o.text
