"""Readers of TOC pages whose lines quote a tiny file's whole text (TOC_FORMAT 7): the theorem's AUTO agent
answers from such a line without opening the entry, the findability reader and TOC navigator take the quote
for the file — each only on a page that says what quotes mean, never from a summary that merely holds
quotes. The pages are the library's own renderer's (:mod:`libraryfs_bench.theorem.reftoc`)."""

from __future__ import annotations

from libraryfs.index import toc
from libraryfs_bench.findability import navigators as N
from libraryfs_bench.findability.reader import Lookup, parse_toc
from libraryfs_bench.theorem import agents
from libraryfs_bench.theorem.reftoc import render_dir

#: what a page says once when some of its lines quote a file's whole text (this test's copy of the words)
QUOTE_NOTE = '"…" = the file\'s whole text'


def _keys(d, n: int = 400) -> dict[str, str]:
    values = {}
    for k in range(1000, 1000 + n):
        v = "".join("ABCDEFGHIJKLMNOP"[(k * 7 + j * 3) % 16] for j in range(4))
        (d / str(k)).write_text(f"{k}→{v}\n")
        values[str(k)] = v
    return values


def test_auto_answers_from_a_quoted_line_only_where_the_page_says_what_quotes_mean(tmp_path):
    values = _keys(tmp_path)
    stats = render_dir(tmp_path, budget_tokens=600)
    assert stats.levels >= 1
    for name in ("1000", "1234", "1399"):
        trace = agents.toc_walk(tmp_path, name)
        assert trace.answer == values[name]
        assert trace.count("entry") == 0 and trace.count("toc") == stats.levels + 1
    assert QUOTE_NOTE == toc.QUOTE_NOTE == agents.QUOTE_NOTE  # the agent reads the renderer's words
    for p in (tmp_path / ".index").iterdir():  # the same lines on pages that do not say what quotes mean
        p.write_text(p.read_text().replace(QUOTE_NOTE, "a note"))
    trace = agents.toc_walk(tmp_path, "1234")
    assert trace.answer == values["1234"] and trace.count("entry") == 1


def test_a_summary_in_quotes_is_no_quote(tmp_path):
    (tmp_path / "a").write_text("a→QUOTED\n")
    (tmp_path / "b").write_text('"b→FAKE" is what the first line says.\n\nb→REAL\n')
    render_dir(tmp_path)
    page = (tmp_path / "INDEX.md").read_text()
    assert '- [a](a) — "a→QUOTED"' in page and '- [b](b) — \\"b→FAKE" is' in page
    assert agents.toc_walk(tmp_path, "a").count("entry") == 0
    trace = agents.toc_walk(tmp_path, "b")
    assert trace.count("entry") == 1 and trace.answer == 'FAKE" is what the first line says.\n\nb→REAL'
    lines = {ln.label: ln for ln in parse_toc(page, "INDEX.md")}
    assert lines["a"].whole == "a→QUOTED" and lines["b"].whole is None


def test_findability_reader_takes_quotes_only_where_the_page_says_so(tmp_path):
    values = _keys(tmp_path)
    render_dir(tmp_path, budget_tokens=600)
    leaf = (tmp_path / ".index" / "0001.md").read_text()
    lines = parse_toc(leaf, ".index/0001.md")
    entries = [ln for ln in lines if not ln.is_toc]
    assert entries and all(ln.whole == f"{ln.label}→{values[ln.label]}" for ln in entries)
    assert all(ln.whole is None for ln in lines if ln.is_toc)  # the ↑ up line
    plain = parse_toc(leaf.replace(QUOTE_NOTE, "x"), ".index/0001.md")
    assert [ln.label for ln in plain] == [ln.label for ln in lines] and all(ln.whole is None for ln in plain)


def test_toc_navigator_confirms_a_quoted_note_without_reading_it(tmp_path):
    notes = {
        "dark": "user prefers dark mode in every editor",
        "tea": "user drinks green tea in the morning",
        "train": "the train to Lyon leaves at nine",
    }
    for name, text in notes.items():
        (tmp_path / name).write_text(text + "\n")
    (tmp_path / "long.md").write_text("# Long\n\nA long note about editors and themes.\n\nMore.\n")
    render_dir(tmp_path)
    lookup = Lookup(str(tmp_path), {})
    out = N.TocNavigator().run("which mode does the user prefer in the editor", lookup)
    assert out.answer == "dark"
    assert [r.path for r in lookup.reads] == ["INDEX.md"]  # the quote was the file: no entry read
    assert any(step.get("quoted") for step in out.trace if "entry" in step)
