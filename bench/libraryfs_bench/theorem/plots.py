"""PNG plots of the benchmark (matplotlib, Agg backend): reads vs N, tokens vs N (log–log) with the
paper's points overlaid, and cumulative tokens vs T for the compounding run."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from libraryfs_bench.theorem.compare import PaperRow

COLOURS = {
    "FLAT": "tab:red",
    "FLAT-SORTED": "tab:orange",
    "INDEXED": "tab:blue",
    "DEEP-INDEXED": "tab:purple",
    "INDEXED-CORRUPTED": "tab:brown",
    "PATH": "tab:green",
    "AUTO": "tab:cyan",
}


def _plt():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _medians(rows: list, field: str, get) -> dict:  # type: ignore[no-untyped-def]
    cells: dict = defaultdict(list)
    for r in rows:
        cells[(get(r, "condition"), get(r, "n"))].append(get(r, field))
    return {k: statistics.median(v) for k, v in cells.items()}


def plot_vs_n(ours: list[dict], paper: list[PaperRow], out_dir: Path) -> list[Path]:
    """``reads_vs_n.png`` and ``tokens_vs_n.png`` (hash content): our medians as lines per condition, the
    paper's gpt-4o-mini medians as hollow markers. Returns the paths written."""
    plt = _plt()
    ours = [r for r in ours if r["content"] == "hash"]
    paper = [r for r in paper if r.content == "hash" and r.model == "gpt-4o-mini"]
    d = lambda r, k: r[k]  # noqa: E731
    a = lambda r, k: getattr(r, k)  # noqa: E731
    written = []
    for field, name, label in (
        ("page_reads", "reads_vs_n.png", "page reads (median)"),
        ("total_tokens", "tokens_vs_n.png", "total tokens (median)"),
    ):
        mine, theirs = _medians(ours, field, d), _medians(paper, field, a)
        fig, ax = plt.subplots(figsize=(8, 5.5))
        for cond, colour in COLOURS.items():
            pts = sorted((n, v) for (c, n), v in mine.items() if c == cond)
            if pts:
                ax.plot(
                    [p[0] for p in pts],
                    [max(p[1], 0.5) for p in pts],
                    "-o",
                    color=colour,
                    ms=3,
                    label=f"{cond} (libraryfs, scripted)",
                )
            pp = sorted((n, v) for (c, n), v in theirs.items() if c == cond)
            if pp:
                ax.plot(
                    [p[0] for p in pp],
                    [max(p[1], 0.5) for p in pp],
                    "s",
                    mfc="none",
                    color=colour,
                    ms=7,
                    label=f"{cond} (paper, gpt-4o-mini)",
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("N (items)")
        ax.set_ylabel(label)
        ax.set_title(f"Library Theorem: {label} vs N")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        path = out_dir / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def plot_compounding(result: dict, out_dir: Path) -> Path:
    """``compounding.png``: cumulative tokens vs T (log–log) for flat history and library, with slopes."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 5))
    ts = result["checkpoints"]
    ax.plot(
        ts,
        result["flat_cumulative"],
        "-o",
        color="tab:red",
        ms=3,
        label=f"flat history (slope {result['flat_exponent']:.2f})",
    )
    ax.plot(
        ts,
        result["library_cumulative"],
        "-o",
        color="tab:cyan",
        ms=3,
        label=f"library (slope {result['library_exponent']:.2f})",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("T (steps)")
    ax.set_ylabel("cumulative tokens")
    ax.set_title("T-step compounding: Θ(T²) vs O(T log T)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    path = out_dir / "compounding.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
