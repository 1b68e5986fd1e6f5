"""The before/after table of two findability summaries: rows matched by corpus × kind × split."""

from __future__ import annotations

import json

from click.testing import CliRunner

from libraryfs_bench.findability.compare import main


def _summary(path, commit: str, found: float, extra_row: bool = False) -> str:
    row = {"corpus": "python", "kind": "name", "navigator": "toc", "n": 10, "k": 5, "found": found}
    row |= {"success_at_k": found / 2, "mean_reads": 6.0, "mean_tokens": 1500.0, "flat_ratio": 0.0015}
    rows = [row | {"split": "heldout"}, row | {"split": "dev"}, row | {"split": "dev", "navigator": "bm25"}]
    if extra_row:
        rows.append(row | {"split": "heldout", "kind": "topic"})
    path.write_text(
        json.dumps({"created": "t", "libraryfs": {"commit": commit, "dirty": False}, "rows": rows})
    )
    return str(path)


def test_rows_matched_and_missing_sides_marked(tmp_path):
    before = _summary(tmp_path / "b.json", "aaaaaaa111", 0.4)
    after = _summary(tmp_path / "a.json", "bbbbbbb222", 0.8, extra_row=True)
    out = CliRunner().invoke(main, [before, after, "--split", "heldout"])
    assert out.exit_code == 0, out.output
    lines = [ln for ln in out.output.splitlines() if ln.startswith("| python")]
    assert lines == [
        "| python | name | heldout | 10 | 5 | 20% → 40% | 40% → 80% | 6.0 → 6.0 | 1,500 (0.150%) → 1,500 (0.150%) |",
        "| python | topic | heldout | 10 | 5 | — → 40% | — → 80% | — → 6.0 | — → 1,500 (0.150%) |",
    ]
    assert "`aaaaaaa` " in out.output and "`bbbbbbb` " in out.output
    bad = CliRunner().invoke(main, [str(tmp_path / "missing.json"), after])
    assert bad.exit_code == 2 and "cannot read" in bad.output


def test_toc_navigator_reads_a_sections_size_in_all():
    """TOC_FORMAT 4 states a section's own entries as ``N entries`` and everything below it as ``M in
    all``: the navigator's largest-section rule reads the size below it (as it did when ``N entries`` was
    the recursive count), and an old-style line still reads."""
    from libraryfs_bench.findability.navigators import line_entries
    from libraryfs_bench.findability.reader import TocLine

    def line(rest: str) -> TocLine:
        return TocLine("s/", "s/INDEX.md", rest, True, "- [s/](s/INDEX.md) — " + rest)

    assert line_entries(line("terms (12 entries, 1,497 in all, 9 tok)")) == 1497
    assert line_entries(line("terms (7 in all, 9 tok)")) == 7
    assert line_entries(line("terms (317 entries, 9 tok)")) == 317
    assert line_entries(line("— 2 entries, 0 in all")) == 0
    assert line_entries(line("no count here")) is None
