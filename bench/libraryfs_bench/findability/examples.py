"""Print failures of the TOC navigator on **dev** queries with the TOC lines it saw (to guide TOC work).

``python -m libraryfs_bench.findability.examples [LOOKUPS.jsonl] [--n 10]``: failures are picked round-robin
over corpus × kind (deterministically: by query id order), never from the held-out split.
"""

from __future__ import annotations

import argparse
import json
from itertools import zip_longest


def failures(path: str, n: int, navigator: str = "toc") -> list[dict]:
    """Up to ``n`` failed dev lookups of ``navigator``, round-robin over (corpus, kind)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r.get("navigator") == navigator and r.get("split") == "dev" and not r.get("hit"):
                groups.setdefault((r["corpus"], r["kind"]), []).append(r)
    lists = [sorted(v, key=lambda r: r["id"]) for _, v in sorted(groups.items())]
    out = [r for row in zip_longest(*lists) for r in row if r is not None]
    return out[:n]


def render(r: dict, targets: dict[str, list[str]] | None = None, max_pages: int = 4) -> str:
    """One failure as Markdown: query, target, answer, and the top lines of the first pages read."""
    lines = [
        f"- **{r['corpus']} / {r['kind']}** `{r['query']}` → target "
        f"`{', '.join((targets or {}).get(r['id'], ['?']))}`; answered `{r['answer']}` after {r['reads']} reads"
    ]
    for where in r.get("target_lines") or []:
        if where:
            lines.append(f"  - the target's line, on `{where[0]}`: `{where[1][:200]}`")
    for t in r.get("trace", [])[:max_pages]:
        if "page" in t and "top" in t:
            lines.append(f"  - read `{t['page']}`; best lines:")
            lines += [f"    - ({s}) `{raw[:160]}`" for s, raw in t["top"][:2]]
        elif "page" in t:  # a subject-index page (subjectnav): the query words it was read for
            lines.append(f"  - read subject page `{t['page']}` for {', '.join(t.get('words') or [])}")
        elif "candidates" in t:
            shown = ", ".join(f"`{p}` ({s})" for s, p in t["candidates"][:3]) or "none"
            lines.append(f"  - candidates from the subject index: {shown}")
        else:
            lines.append(f"  - read entry `{t['entry']}` (holds {t['share']:.0%} of the query's terms)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("lookups", nargs="?", default="bench/results/findability/lookups.jsonl")
    ap.add_argument("--n", type=int, default=10)
    a = ap.parse_args(argv)
    from .queries import load_queries, query_file

    targets: dict[str, list[str]] = {}
    for corpus in ("python", "gcide", "code", "click"):
        try:
            targets.update({q["id"]: q["targets"] for q in load_queries(query_file(corpus))})
        except FileNotFoundError:
            pass
    for r in failures(a.lookups, a.n):
        print(render(r, targets))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
