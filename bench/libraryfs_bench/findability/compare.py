"""Before/after table of one navigator from two runs' ``summary.json`` (same queries, two libraryfs commits).

    python -m libraryfs_bench.findability.compare BEFORE/summary.json AFTER/summary.json [--navigator toc]
        [--split heldout]

Prints a Markdown table per (corpus, kind, split): n, k (``6 → 5`` when the fan-out moved it), success within k reads, found, reads and tokens per
lookup (÷ flat cost) before → after, and the commits of both runs. Rows present in only one run are shown
with "—" on the other side. Exit status 2 when a file cannot be read.
"""

from __future__ import annotations

import json
import sys

import click


def _rows(path: str, navigator: str) -> tuple[dict, dict[tuple, dict]]:
    with open(path) as f:
        s = json.load(f)
    rows = {(r["corpus"], r["kind"], r["split"]): r for r in s["rows"] if r["navigator"] == navigator}
    return s, rows


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def _cell(before: dict | None, after: dict | None, fmt) -> str:
    b = fmt(before) if before else "—"
    a = fmt(after) if after else "—"
    return f"{b} → {a}"


def table(before_path: str, after_path: str, navigator: str = "toc", split: str | None = None) -> str:
    """The Markdown comparison (see module docstring)."""
    sb, before = _rows(before_path, navigator)
    sa, after = _rows(after_path, navigator)
    keys = sorted(set(before) | set(after), key=lambda k: (k[2] != "heldout", k[0], k[1]))
    if split:
        keys = [k for k in keys if k[2] == split]

    def commit(s: dict) -> str:
        lf = s.get("libraryfs") or {}
        return f"{str(lf.get('commit', '?'))[:7]}{'-dirty' if lf.get('dirty') else ''}"

    out = [
        f"{navigator} navigator, before `{commit(sb)}` ({sb.get('created', '?')}) → after `{commit(sa)}` "
        f"({sa.get('created', '?')})",
        "",
        "| corpus | kind | split | n | k | found ≤ k reads | found | reads | tokens (÷ flat) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key in keys:
        b, a = before.get(key), after.get(key)
        ref = a or b
        k = f"{b['k']} → {a['k']}" if a and b and a["k"] != b["k"] else str(ref["k"])  # k follows b
        out.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {ref['n']} | {k} | "
            + " | ".join(
                [
                    _cell(b, a, lambda r: _pct(r.get("success_at_k"))),
                    _cell(b, a, lambda r: _pct(r.get("found"))),
                    _cell(b, a, lambda r: f"{r['mean_reads']:.1f}"),
                    _cell(b, a, lambda r: f"{r['mean_tokens']:,.0f} ({100 * r['flat_ratio']:.3f}%)"),
                ]
            )
            + " |"
        )
    return "\n".join(out)


@click.command()
@click.argument("before", type=click.Path(dir_okay=False))
@click.argument("after", type=click.Path(dir_okay=False))
@click.option("--navigator", default="toc", show_default=True)
@click.option("--split", type=click.Choice(["dev", "heldout"]), default=None, help="Only these rows.")
def main(before: str, after: str, navigator: str, split: str | None) -> None:
    """Print the before/after table of NAVIGATOR from two summary.json files."""
    try:
        click.echo(table(before, after, navigator, split))
    except (OSError, ValueError, KeyError) as e:
        click.echo(f"error: cannot read the summaries: {e}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
