"""Questions about a recorded episode with exact answers and gold evidence steps (S3Mem's Crafter QA,
PAPERS.md §4), generated from the raw step records (ground truth), never from the units.

Families (``Question.family``):

- ``single``      — single-step recall: "What action did I take at step 412?"
- ``occurrence``  — k-th / last occurrence: "At which step did I collect wood for the second time?",
                    "At which step did my third visit to zone-2-1 begin?"
- ``offset``      — temporal offset: "What action did I take two steps after I placed a table for the first time?"
- ``transition``  — state transition: "How many wood did I have when I first got the wood pickaxe?",
                    "What was I facing just before I got stone for the third time?"
- ``multihop``    — occurrence + offset + another field: "Where was I four steps after my second visit to
                    zone-1-2 began?"
- ``counting``    — "How many times did I collect stone between step 200 and step 450?" (1–6 occurrences)

``Question.spec`` is the structured form (the gold anchor tuple plus the focus); ``gold_steps`` the minimal
evidence chain (anchor step(s) and the target step); ``answer`` a normalised string.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

FAMILIES = ("single", "occurrence", "offset", "transition", "multihop", "counting")
ORD_WORDS = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", -1: "last"}
NUM_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


@dataclass
class Question:
    """A generated question. ``spec``: ``{"focus", "kind", "name", "k", "offset", "t", "range"}``."""

    family: str
    text: str
    spec: dict
    answer: str
    gold_steps: list[int]
    episode: str = ""
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """JSON-ready dict."""
        return asdict(self)


def event_phrase(e: str) -> str:
    """Natural phrase of a Crafter event: ``collect_wood`` → ``collected wood``."""
    if e == "collect_drink":
        return "drank water"
    if e == "wake_up":
        return "woke up"
    if e == "died":
        return "died"
    verb, _, rest = e.partition("_")
    obj = rest.replace("_", " ")
    past = {"collect": "collected", "place": "placed", "make": "made", "eat": "ate", "defeat": "defeated"}
    art = "" if obj in ("wood", "stone", "coal", "iron", "diamond") else "a "
    return f"{past.get(verb, verb)} {art}{obj}"


def item_phrase(i: str) -> str:
    """``wood_pickaxe`` → ``the wood pickaxe``; raw materials stay bare."""
    return ("the " if "_" in i else "") + i.replace("_", " ")


# -- ground truth -------------------------------------------------------------------------------------------
class Truth:
    """Occurrence lists and per-step facts of a list of step records (see ``crafter_data``)."""

    def __init__(self, recs: list[dict]) -> None:
        self.recs = {r["t"]: r for r in recs}
        self.T = max(self.recs)
        self.occ: dict[tuple[str, str], list[int]] = {}
        prev_place = None
        for r in recs:
            for e in r.get("achievements", []):
                self.occ.setdefault(("ev", e), []).append(r["t"])
            for i in r.get("gained", []):
                self.occ.setdefault(("gain", i), []).append(r["t"])
            for i in r.get("lost", []):
                self.occ.setdefault(("lose", i), []).append(r["t"])
            if r["place"] != prev_place:
                self.occ.setdefault(("visit", r["place"]), []).append(r["t"])
            prev_place = r["place"]

    def value(self, t: int, focus: str) -> str:
        """Normalised answer of ``focus`` at step ``t``."""
        r = self.recs[t]
        if focus == "action":
            return r["action"]
        if focus == "place":
            return r["place"]
        if focus == "facing":
            return r["facing"]
        if focus == "near":
            return ",".join(sorted(r["nearby"])) or "none"
        if focus.startswith("inv:"):
            return str(r["inventory"].get(focus[4:], 0))
        raise ValueError(focus)


def answer_spec(truth: Truth, spec: dict) -> tuple[str, list[int]] | None:
    """``(answer, gold_steps)`` of a spec over the ground truth, None if undefined."""
    focus, kind, k, off = spec["focus"], spec.get("kind"), spec.get("k"), spec.get("offset", 0)
    if focus == "count":
        lo, hi = spec["range"]
        occ = [t for t in truth.occ.get((kind, spec["name"]), []) if lo <= t <= hi]
        return str(len(occ)), occ
    if kind is None:
        anchor = spec["t"]
    else:
        occ = truth.occ.get((kind, spec["name"]), [])
        if not occ or (k != -1 and k > len(occ)):
            return None
        anchor = occ[-1] if k == -1 else occ[k - 1]
    target = anchor + off
    if target not in truth.recs:
        return None
    if focus == "step":
        return str(target), [target]
    gold = sorted({anchor, target})
    return truth.value(target, focus), gold


def _occ_clause(kind: str, name: str, k: int) -> str:
    o = ORD_WORDS[k]
    if kind == "visit":
        return f"my {o} visit to {name} began"
    if kind == "ev":
        return f"I {event_phrase(name)} for the {o} time"
    verb = "got" if kind == "gain" else "lost"
    return f"I {verb} {item_phrase(name)} for the {o} time"


def _focus_q(focus: str) -> str:
    if focus == "action":
        return "What action did I take"
    if focus == "place":
        return "Where was I"
    if focus == "facing":
        return "What was I facing"
    if focus == "near":
        return "What was near me"
    return f"How many {focus[4:].replace('_', ' ')} did I have"


def _offset_phrase(off: int) -> str:
    if off == 1:
        return "right after"
    if off == -1:
        return "just before"
    return f"{NUM_WORDS.get(abs(off), str(abs(off)))} steps {'after' if off > 0 else 'before'}"


def generate(recs: list[dict], per_family: int = 10, seed: int = 0, episode: str = "") -> list[Question]:
    """Up to ``per_family`` questions of each family about one episode (deterministic for a seed)."""
    rng = random.Random(seed)
    tr = Truth(recs)
    items = sorted({i for r in recs for i in r["inventory"]} | {"wood", "stone", "sapling"})
    out: list[Question] = []

    def occ_choices(kinds: tuple[str, ...], min_n: int = 1) -> list[tuple[str, str]]:
        return sorted(key for key, v in tr.occ.items() if key[0] in kinds and len(v) >= min_n)

    def emit(family: str, text: str, spec: dict) -> bool:
        got = answer_spec(tr, spec)
        if got is None or any(q.text == text for q in out):
            return False
        out.append(Question(family, text, spec, got[0], got[1], episode))
        return True

    def pick_k(n: int, allow_last: bool = True) -> int:
        ks = [k for k in (1, 2, 3, 4, 5) if k <= n] + ([-1] if allow_last and n > 1 else [])
        return rng.choice(ks)

    for family in FAMILIES:
        made, tries = 0, 0
        while made < per_family and tries < per_family * 30:
            tries += 1
            if family == "single":
                t = rng.randint(0, tr.T)
                focus = rng.choice(["action", "place", "facing", "inv:" + rng.choice(items)])
                spec = {
                    "focus": focus,
                    "kind": None,
                    "name": None,
                    "k": None,
                    "offset": 0,
                    "t": t,
                    "range": None,
                }
                ok = emit(family, f"{_focus_q(focus)} at step {t}?", spec)
            elif family == "occurrence":
                kind, name = rng.choice(occ_choices(("ev", "visit", "gain"), 2))
                k = pick_k(len(tr.occ[(kind, name)]))
                if rng.random() < 0.6:
                    spec = {"focus": "step", "kind": kind, "name": name, "k": k, "offset": 0}
                    o = ORD_WORDS[k]
                    text = {
                        "visit": f"At which step did my {o} visit to {name} begin?",
                        "ev": f"At which step did I {_base(name)} for the {o} time?",
                        "gain": f"At which step did I get {item_phrase(name)} for the {o} time?",
                    }[kind]
                else:
                    spec = {"focus": "place", "kind": kind, "name": name, "k": k, "offset": 0}
                    text = f"Where was I when {_occ_clause(kind, name, k)}?"
                ok = emit(family, text, spec)
            elif family == "offset":
                kind, name = rng.choice(occ_choices(("ev",), 1))
                off = rng.choice([1, 2, 3, -1, -2])
                spec = {"focus": "action", "kind": kind, "name": name, "k": 1, "offset": off}
                ok = emit(
                    family,
                    f"What action did I take {_offset_phrase(off)} I {event_phrase(name)} for the "
                    "first time?",
                    spec,
                )
            elif family == "transition":
                kind, name = rng.choice(occ_choices(("gain", "lose"), 1))
                k = pick_k(len(tr.occ[(kind, name)]), allow_last=False)
                form = rng.randrange(3)
                if form == 0 and kind == "gain":
                    item = rng.choice(items)
                    spec = {"focus": "inv:" + item, "kind": kind, "name": name, "k": k, "offset": 0}
                    text = f"{_focus_q(spec['focus'])} when {_occ_clause(kind, name, k)}?"
                elif form == 1:
                    spec = {"focus": "facing", "kind": kind, "name": name, "k": k, "offset": -1}
                    text = f"What was I facing just before {_occ_clause(kind, name, k)}?"
                else:
                    spec = {"focus": "action", "kind": kind, "name": name, "k": k, "offset": 1}
                    text = f"What action did I take right after {_occ_clause(kind, name, k)}?"
                ok = emit(family, text, spec)
            elif family == "multihop":
                kind, name = rng.choice(occ_choices(("ev", "visit"), 2))
                k = rng.choice([k for k in (2, 3, 4, -1) if k == -1 or k <= len(tr.occ[(kind, name)])])
                off = rng.choice([2, 3, 4, 5, 6])
                focus = rng.choice(["place", "facing", "inv:" + rng.choice(items)])
                spec = {"focus": focus, "kind": kind, "name": name, "k": k, "offset": off}
                ok = emit(
                    family, f"{_focus_q(focus)} {_offset_phrase(off)} {_occ_clause(kind, name, k)}?", spec
                )
            else:  # counting
                kind, name = rng.choice(occ_choices(("ev",), 1))
                occ = tr.occ[(kind, name)]
                i = rng.randrange(len(occ))
                j = min(len(occ) - 1, i + rng.randrange(6))
                lo_min = occ[i - 1] + 1 if i else 0
                hi_max = occ[j + 1] - 1 if j + 1 < len(occ) else tr.T
                lo, hi = rng.randint(lo_min, occ[i]), rng.randint(occ[j], hi_max)
                spec = {
                    "focus": "count",
                    "kind": kind,
                    "name": name,
                    "k": None,
                    "offset": 0,
                    "range": [lo, hi],
                }
                ok = emit(
                    family, f"How many times did I {_base(name)} between step {lo} and step {hi}?", spec
                )
            made += ok
    return out


def _base(e: str) -> str:
    """Base-form phrase of an event: ``collect_wood`` → ``collect wood``."""
    if e == "collect_drink":
        return "drink water"
    if e == "wake_up":
        return "wake up"
    if e == "died":
        return "die"
    verb, _, rest = e.partition("_")
    obj = rest.replace("_", " ")
    art = "" if obj in ("wood", "stone", "coal", "iron", "diamond") else "a "
    return f"{verb} {art}{obj}"
