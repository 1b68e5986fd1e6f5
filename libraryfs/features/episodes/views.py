"""Anchor views of an episode, materialised as ordinary files so the indexer gives each directory its
bounded INDEX.md and every anchor is a path an agent can ``cat`` (S3Mem's anchors, PAPERS.md §4)::

    episodes/<id>/
      steps.jsonl                      the appended step records (the agent writes this)
      episode.md                       counts, labels, events; how to navigate (rewritten per build)
      steps/000123.md                  one unit, every field (observation, deltas and extra fields too)
      timeline/000100-000199.md        one line per step, 100 steps per page
      by-location/<label>/000123.md    every step at a location label (every kind: place, area, ...)
      by-object/<object>/000123.md     every step with <object> within 2 cells
      by-event/<event>/000123.md       every step where <event> happened (with its ordinal #k)
      visits/<label>/<k>.md, last.md   the k-th (and latest) visit to a label: first step, last step
      transitions/<item>/gained/000123.md, .../lost/000123.md
      vitals/<vital>/rose/000123.md, .../dropped/000123.md
      ask/<name> → recall/<name>.md, answer/<name>.md   question files, evidence and answer (:mod:`.builder`)

Labels of different kinds share ``by-location/`` and ``visits/`` (a label is named by its value); each view
file starts with a ``# `` heading line (what the deterministic indexer shows as its summary), then the
unit's evidence line and a relative link to ``steps/``.
"""

from __future__ import annotations

import json
import os
import re

from libraryfs.features.episodes.index import state_line, stored_line
from libraryfs.features.episodes.units import Unit
from libraryfs.fs.tree import DirTree, Tree

STEP_DIGITS = 6
TIMELINE_PAGE = 100  #: steps per timeline page


def step_name(t: int) -> str:
    """File name of step ``t`` (zero-padded so names sort by step): ``000123.md``."""
    return f"{t:0{STEP_DIGITS}d}.md"


def safe(name: str) -> str:
    """A name usable as one path component (``/``, NUL, leading dots replaced), ≤ 100 characters."""
    s = re.sub(r"[/\x00]", "_", name.strip()) or "_"
    if s.startswith("."):
        s = "_" + s[1:]
    return s[:100]


def _kv(d: dict | None, signed: bool = False) -> str:
    return ", ".join(
        f"{k} {v:+d}" if signed and isinstance(v, int) else f"{k} {v}" for k, v in (d or {}).items()
    )


def _marks_md(u: Unit) -> list[str]:
    marks = [
        f"visit {k} to {u.locations[kind]} ({kind}) begins (visits/{safe(u.locations[kind])}/{k}.md)"
        for kind, k in u.marks.get("visit", {}).items()
        if kind in u.locations
    ]
    for key, word in (
        ("ev", "event"),
        ("gain", "gained"),
        ("lose", "lost"),
        ("rise", "rose"),
        ("drop", "dropped"),
    ):
        for n, k in u.marks.get(key, {}).items():
            marks.append(f"{word} {n} #{k}")
    return marks


def step_md(u: Unit) -> str:
    """The full view of one unit (``steps/<t>.md``): every field of the unit."""
    rel = "; ".join(" ".join(r) for r in u.relations) or "-"
    inv = ", ".join(f"{k} {v}" for k, v in sorted((u.inventory or {}).items())) or "none"
    where = ", ".join(f"{k} {v}" for k, v in u.locations.items()) or "-"
    lines = [
        f"# step {u.t}: {u.summary}",
        "",
        f"- action: {u.action or '-'}",
        f"- location: {where}" + (f" at ({u.position[0]}, {u.position[1]})" if u.position else ""),
        f"- objects nearby: {', '.join(u.objects) or 'none'}",
        f"- events: {', '.join(u.events) or 'none'}",
        f"- relations: {rel}",
        f"- inventory: {inv}; change: {_kv(u.inventory_delta, True) or 'none'}",
        f"- gained: {', '.join(u.gained or []) or 'none'}; lost: {', '.join(u.lost or []) or 'none'}",
        f"- vitals: {_kv(u.vitals) or '-'}; change: {_kv(u.vitals_delta, True) or 'none'}",
        f"- observation: {' '.join(u.observation.split()) or '-'}",
        f"- anchors: {'; '.join(_marks_md(u)) or 'none'}",
    ]
    if u.extra:
        lines.append(f"- other fields: {json.dumps(u.extra, ensure_ascii=False, sort_keys=True)[:2000]}")
    lines += [
        f"- previous: {step_name(u.t - 1) if u.t > 0 else '-'}; next: {step_name(u.t + 1)}",
        "",
        "```",
        stored_line(u),
        state_line(u),
        "```",
        "",
    ]
    return "\n".join(lines)


def _ref(u: Unit, title: str, depth: int) -> str:
    up = "../" * depth
    return f"# {title}\n\n{stored_line(u)}\n{state_line(u)}\n\nstep: {up}steps/{step_name(u.t)}\n"


def visit_md(label: str, k: int, start: int, end: int | None, start_line: str) -> str:
    """View of the k-th visit to ``label`` (``end`` None while the visit goes on)."""
    span = (
        f"steps {start}–{end} ({end - start + 1} steps)"
        if end is not None
        else f"from step {start} (ongoing)"
    )
    return (
        f"# visit {k} to {label}: {span}\n\nfirst step: {start}\nlast step: "
        f"{end if end is not None else 'ongoing'}\n\n{start_line}\n\nstep: ../../steps/{step_name(start)}\n"
    )


def timeline_page(t: int) -> str:
    """Timeline page holding step ``t``: ``000100-000199.md``."""
    a = t // TIMELINE_PAGE * TIMELINE_PAGE
    return f"{a:0{STEP_DIGITS}d}-{a + TIMELINE_PAGE - 1:0{STEP_DIGITS}d}.md"


class ViewWriter:
    """Writes view files into a :class:`~libraryfs.fs.tree.Tree` under ``episodes/<id>/``.

    Over a :class:`DirTree` (a mountpoint) new files are written in place with one ``open``/``write``
    (views are derived data, rebuilt from the units; an atomic temp-and-rename would double the FUSE
    round trips); over any other tree :meth:`Tree.write_bytes` is used.
    """

    def __init__(self, tree: Tree, root: str) -> None:
        self.tree = tree
        self.root = root.strip("/")
        self._dirs: set[str] = set()
        self._pages: set[str] = set()
        self.files_written = 0

    def put(self, rel: str, text: str) -> None:
        """Create or replace ``<root>/<rel>`` with ``text``."""
        full = f"{self.root}/{rel}"
        self.files_written += 1
        if isinstance(self.tree, DirTree):
            p = os.path.join(self.tree.root, *full.split("/"))
            d = os.path.dirname(p)
            if d not in self._dirs:
                os.makedirs(d, exist_ok=True)
                self._dirs.add(d)
            with open(p, "wb") as f:
                f.write(text.encode())
        else:
            self.tree.write_bytes(full, text.encode())

    def append(self, rel: str, text: str) -> None:
        """Append ``text`` to ``<root>/<rel>``."""
        self.files_written += 1
        self.tree.append_bytes(f"{self.root}/{rel}", text.encode())

    # -- per unit ---------------------------------------------------------------------------------------
    def unit(self, u: Unit) -> None:
        """Write every view of one (marked) unit, except visit ends (see :meth:`visit`)."""
        name = step_name(u.t)
        self.put(f"steps/{name}", step_md(u))
        page = timeline_page(u.t)
        if page not in self._pages and (
            u.t % TIMELINE_PAGE == 0 or not self.tree.exists(f"{self.root}/timeline/{page}")
        ):
            self.put(f"timeline/{page}", f"# timeline: steps {page[:-3].replace('-', '–')}\n\n")
        self._pages.add(page)
        self.append(f"timeline/{page}", stored_line(u) + "\n")
        for kind, label in u.locations.items():
            self.put(
                f"by-location/{safe(label)}/{name}", _ref(u, f"step {u.t} at {label} ({kind}): {u.action}", 2)
            )
        for o in u.objects:
            self.put(f"by-object/{safe(o)}/{name}", _ref(u, f"step {u.t} near {o}: {u.action}", 2))
        for e in u.events:
            k = u.marks.get("ev", {}).get(e)
            self.put(f"by-event/{safe(e)}/{name}", _ref(u, f"{e} #{k} at step {u.t}", 2))
        for top, key, word, names in (
            ("transitions", "gain", "gained", u.gained),
            ("transitions", "lose", "lost", u.lost),
            ("vitals", "rise", "rose", u.rises),
            ("vitals", "drop", "dropped", u.drops),
        ):
            for n in names or []:
                k = u.marks.get(key, {}).get(n)
                self.put(f"{top}/{safe(n)}/{word}/{name}", _ref(u, f"{n} {word} #{k} at step {u.t}", 3))

    def visit(self, label: str, k: int, start: int, end: int | None, start_line: str) -> None:
        """Write ``visits/<label>/<k>.md`` and ``last.md`` (the latest visit) for a visit."""
        text = visit_md(label, k, start, end, start_line)
        self.put(f"visits/{safe(label)}/{k}.md", text)
        self.put(
            f"visits/{safe(label)}/last.md", text.replace(f"# visit {k}", f"# last visit (visit {k})", 1)
        )

    def overview(self, ep: str, n_units: int, state: dict, last_t: int) -> None:
        """Rewrite ``episode.md``: counts and how to navigate."""
        labels = "; ".join(
            f"{kind}: " + ", ".join(f"{p} ({n} visits)" for p, n in sorted(per.items()))
            for kind, per in state.get("visits", {}).items()
        )
        events = ", ".join(f"{e} ×{n}" for e, n in sorted(state.get("ev", {}).items())) or "none"
        gains = ", ".join(f"{e} ×{n}" for e, n in sorted(state.get("gain", {}).items())) or "none"
        self.put(
            "episode.md",
            (
                f"# episode {ep}: {n_units} steps (0–{last_t})\n\n"
                f"- locations: {labels or 'none'}\n- events: {events}\n- items gained: {gains}\n\n"
                "Paths: steps/<t:06>.md · timeline/ · by-location/<label>/ · by-object/<object>/ · "
                "by-event/<event>/ · visits/<label>/<k>.md and last.md · transitions/<item>/{gained,lost}/ · "
                "vitals/<vital>/{rose,dropped}/\n"
                "Ask: write a question to ask/<name>; the evidence appears in recall/<name>.md and the answer in "
                "answer/<name>.md (first line `budget: N` sets the token budget).\n"
            ),
        )
