"""Summary, table and plot of a ``bench/workloads.py`` run (medians of interleaved repetitions).

Every figure is the median over the run's repetitions of one cell (metric × filesystem); a median marked
``†`` includes at least one repetition measured under load (see ``workloads.py``: load average and the CPU
other processes used during the cell).
"""

from __future__ import annotations

import statistics

ROWS = [  # (label, metrics): the rows of issue 18's table
    ("untar python3 html docs ({docs} files) + sync", ("untar",)),
    ("`ls -laR` cold / warm", ("ls_cold", "ls_warm")),
    ("`rg -c import` cold / warm", ("rg_cold", "rg_warm")),
    ("`git clone` + status + log", ("git",)),
    ("{files:,} × create {kib} / stat / read / unlink", ("create", "stat", "read", "unlink")),
    (
        "sqlite {commits:,} autocommits (rollback journal) / WAL / one {rows:,}-row txn",
        ("sqlite_rollback", "sqlite_wal", "sqlite_bulk"),
    ),
    ("{procs} processes × {proc_files:,} creates (own dirs)", ("procs_create",)),
    ("{procs} processes × {proc_files:,} cold reads", ("procs_read",)),
    ("{procs} processes × {fsync_files:,} creates + fsync (own dirs)", ("procs_fsync",)),
]
COLUMNS = ("tmpfs", "bindfs", "bindfs-mt", "binding", "libraryfs-noidx", "libraryfs")
HEADS = {"binding": "bare binding", "libraryfs-noidx": "libraryfs, no indexer", "libraryfs": "libraryfs"}


def summarize(cells: list[dict]) -> dict:
    """``{metric: {fs: {median_s, n, loaded, min_s, max_s, server_cpu_s}}}`` over the run's repetitions."""
    acc: dict = {}
    for c in cells:
        acc.setdefault(c["metric"], {}).setdefault(c["fs"], []).append(c)
    out: dict = {}
    for metric, by_fs in acc.items():
        for fs, cs in by_fs.items():
            ok = [c for c in cs if c["seconds"] is not None]
            secs = [c["seconds"] for c in ok]
            cpu = [c["server_cpu_s"] for c in ok if c.get("server_cpu_s") is not None]
            out.setdefault(metric, {})[fs] = {
                "median_s": round(statistics.median(secs), 4) if secs else None,
                "n": len(secs),
                "failed": len(cs) - len(ok),
                "errors": sorted({c["error"] for c in cs if c.get("error")}),
                "loaded": sum(1 for c in ok if c["loaded"]),
                "min_s": round(min(secs), 4) if secs else None,
                "max_s": round(max(secs), 4) if secs else None,
                "server_cpu_s": round(statistics.median(cpu), 4) if cpu else None,
            }
    return out


def ratios(summary: dict, base: str = "bindfs") -> dict:
    """``{metric: {fs/base: ratio of medians}}`` for every filesystem against ``base`` (and bindfs-mt)."""
    out: dict = {}
    for metric, by_fs in summary.items():
        for b in (base, base + "-mt"):
            if b not in by_fs or not by_fs[b]["median_s"]:
                continue
            for fs, s in by_fs.items():
                if fs != b and s["median_s"] is not None:
                    out.setdefault(metric, {})[f"{fs}/{b}"] = round(s["median_s"] / by_fs[b]["median_s"], 2)
    return out


def _fmt(s: dict | None) -> str:
    if not s:
        return "–"
    v = s["median_s"]
    if v is None:
        return "fails"
    txt = f"{v:.3f}" if v < 1 else f"{v:.2f}"
    return txt + ("†" if s["loaded"] else "")


def _label(label: str, sizes: dict, docs: int) -> str:
    kib = f"{sizes['file_bytes'] / 1024:g} KiB" if sizes["file_bytes"] >= 1024 else f"{sizes['file_bytes']} B"
    return label.format(
        docs=f"{docs:,}",
        files=sizes["files"],
        kib=kib,
        commits=sizes["sqlite_commits"],
        rows=sizes["sqlite_rows"],
        procs=sizes["procs"],
        proc_files=sizes["proc_files"],
        fsync_files=max(1, sizes["proc_files"] // 10),
    )


def table(summary: dict, sizes: dict, docs: int, key: str = "median_s") -> str:
    """Markdown table in the layout of issue 18: seconds per filesystem, then libraryfs / bindfs."""
    present = [c for _, ms in ROWS for m in ms for c in summary.get(m, {})]
    cols = [c for c in COLUMNS if c in present]
    cols += sorted({c for c in present if c not in COLUMNS})  # libraryfs@LABEL variants (workload_fs.make)
    lib_cols = [c for c in cols if c.startswith("libraryfs")]
    head = ["workload"] + [HEADS.get(c, c) for c in cols] + [f"{HEADS.get(c, c)} / bindfs" for c in lib_cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, metrics in ROWS:
        if not any(m in summary for m in metrics):
            continue
        row = [_label(label, sizes, docs)]
        for c in cols:
            vals = [summary.get(m, {}).get(c) for m in metrics]
            if key == "median_s":
                row.append(" / ".join(_fmt(v) for v in vals) if any(vals) else "–")
            else:
                row.append(" / ".join("–" if not v or v.get(key) is None else f"{v[key]:.2f}" for v in vals))
        for c in lib_cols:
            parts = []
            for m in metrics:
                s = summary.get(m, {})
                r = _ratio(s, c, "bindfs", key)
                mt = _ratio(s, c, "bindfs-mt", key)
                parts.append((f"{r:.2f}×" if r else "–") + (f" (mt {mt:.2f}×)" if mt else ""))
            row.append(" / ".join(parts))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _ratio(s: dict, a: str, b: str, key: str) -> float | None:
    if a in s and b in s and s[b].get(key) and s[a].get(key) is not None:
        return s[a][key] / s[b][key]
    return None


def plot(summary: dict, path: str, title: str) -> bool:
    """Bar chart of each filesystem's median over bindfs's, per metric (log scale); False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    metrics = [m for _, ms in ROWS for m in ms if m in summary and "bindfs" in summary[m]]
    if not metrics:
        metrics = [m for _, ms in ROWS for m in ms if m in summary]
    base = "bindfs" if any("bindfs" in summary[m] for m in metrics) else "tmpfs"
    series = [c for c in COLUMNS if c != base and any(c in summary[m] for m in metrics)]
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(metrics)), 4.5))
    width = 0.8 / max(1, len(series))
    for k, fs in enumerate(series):
        xs, ys = [], []
        for i, m in enumerate(metrics):
            s = summary[m]
            x = i + (k - (len(series) - 1) / 2) * width
            if fs in s and s[fs]["median_s"] is None:  # every repetition failed
                ax.text(x, 1.0, "fails", rotation=90, fontsize=6, ha="center", va="bottom", color="red")
            elif fs in s and base in s and s[base]["median_s"]:
                xs.append(x)
                ys.append(s[fs]["median_s"] / s[base]["median_s"])
        ax.bar(xs, ys, width, label=HEADS.get(fs, fs))
    ax.axhline(1.0, color="black", lw=0.8)
    if base == "bindfs":
        ax.axhline(1.5, color="grey", lw=0.8, ls="--", label="1.5× bindfs")
    ax.set_yscale("log")
    ax.set_xticks(range(len(metrics)))
    ax.set_xticklabels(metrics, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel(f"median time / {base}")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
