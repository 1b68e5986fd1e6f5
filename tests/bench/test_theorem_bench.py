"""``libraryfs bench theorem`` on a plain directory, the token model, and T-step compounding."""

from __future__ import annotations

import json

from click.testing import CliRunner

from libraryfs_bench.cli import bench
from libraryfs_bench.theorem.accounting import Call, resent_history_tokens
from libraryfs_bench.theorem.compounding import fit_exponent, run_compounding
from libraryfs_bench.theorem.reftoc import render_dir
from libraryfs_bench.theorem.stores import StoreSpec, write_item_store


def test_resent_history_is_quadratic():
    calls = [Call("read_page", {"page_num": i}, "Page: " + "x " * 50, "page") for i in range(40)]
    per_turn = resent_history_tokens("sys", "user", calls)
    diffs = [b - a for a, b in zip(per_turn, per_turn[1:], strict=False)]
    assert all(d > 50 for d in diffs)  # each turn re-sends every earlier result
    assert fit_exponent(list(range(10, 41)), [sum(per_turn[:t]) for t in range(10, 41)]) > 1.6


def test_cli_runs_and_writes_outputs(tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(
        bench,
        [
            "theorem",
            "--dir",
            str(tmp_path / "root"),
            "--n",
            "50,2000",
            "--steps",
            "60",
            "--out",
            str(out),
            "--content",
            "hash,numeric",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "regenerate their target" in res.output
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    first = trials[0]
    for field in (
        "condition",
        "model",
        "n",
        "num_pages",
        "trial",
        "target_key",
        "target_val",
        "answer",
        "correct",
        "answered",
        "page_reads",
        "index_reads",
        "section_index_reads",
        "num_turns",
        "total_tokens",
        "wall_time_s",
        "error",
    ):
        assert field in first
    assert all(t["correct"] for t in trials)
    summary = json.loads((out / "summary.json").read_text())
    sep = {s["n"]: s for s in summary["separation"]}
    assert sep[2000]["flat_over_indexed"] > 140  # the paper: 154× at N = 2,000
    assert all(a["within_bound"] for a in summary["auto"])
    cmp = json.loads((out / "comparison.json").read_text())
    flat2000 = [c for c in cmp if c["condition"] == "FLAT" and c["n"] == 2000][0]
    assert flat2000["flat_reads_equal"][0] == flat2000["flat_reads_equal"][1] == 20
    for png in ("reads_vs_n.png", "tokens_vs_n.png", "compounding.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"


def test_cli_rejects_bad_options(tmp_path):
    res = CliRunner().invoke(bench, ["theorem", "--dir", str(tmp_path), "--conditions", "NOPE"])
    assert res.exit_code != 0 and "unknown condition" in res.output
    res = CliRunner().invoke(bench, ["theorem", "--dir", str(tmp_path), "--mount", str(tmp_path)])
    assert res.exit_code != 0 and "at most one" in res.output


def test_compounding_flat_vs_library(tmp_path):
    store = write_item_store(tmp_path, StoreSpec("hash", 500, 0, 1000))
    res = run_compounding(tmp_path, store, steps=150, toc_writer=lambda d: render_dir(d, budget_tokens=500))
    assert res.final_value_flat == res.final_value_library
    assert res.direct_opens == 0 and max(res.library_toc_reads) >= 2
    assert res.flat_cumulative[-1] > 3 * res.library_cumulative[-1]
    assert res.flat_exponent > 1.7 and res.library_exponent < 1.5


def test_through_a_real_mount(tmp_path):
    """Default mode: a temporary library is mounted; AUTO follows the mount's own INDEX.md pages."""
    import os
    import shutil

    if not os.path.exists("/dev/fuse") or not (shutil.which("fusermount3") or shutil.which("fusermount")):
        from helpers.facility import unavailable

        unavailable("no FUSE here (/dev/fuse or fusermount3 missing)")
    out = tmp_path / "out"
    res = CliRunner().invoke(
        bench,
        [
            "theorem",
            "--n",
            "200",
            "--conditions",
            "AUTO,PATH,INDEXED",
            "--content",
            "hash",
            "--steps",
            "0",
            "--no-plots",
            "--trials",
            "3",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "library mounted at" in res.output
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    auto = [t for t in trials if t["condition"] == "AUTO"]
    assert auto and all(t["correct"] and t["via"] == "mount" and t["index_reads"] >= 1 for t in auto)


def test_without_dict_gcide_it_says_what_to_install(tmp_path, monkeypatch):
    from libraryfs_bench.theorem import content

    monkeypatch.setattr(content, "GCIDE_INDEX", str(tmp_path / "no-dictd" / "gcide.index"))
    res = CliRunner().invoke(bench, ["theorem", "--dir", str(tmp_path / "d"), "--n", "50", "--steps", "0"])
    assert res.exit_code != 0
    assert "apt-get install dict-gcide" in res.output and res.output.count("\n") == 1, res.output
    assert not (tmp_path / "d").exists()  # nothing ran
