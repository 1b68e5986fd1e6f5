"""A rule-based reader: answers a question's spec from packed evidence text alone (benchmark judge).

It parses two evidence formats into per-step facts — the raw step text an agent logged
(``Step 412: action do. At (34, 40) in zone-2-2. Facing tree. Nearby: ... Inventory: ...``, what flat
retrieval returns) and the unit lines of recall (``t=412 act=do at=zone-2-2 ...`` / ``t=412 inv=...``) —
then resolves the question the way a careful reader would with only that evidence: a k-th occurrence is
read from an ordinal mark (``#k``, ``visit=k``) when the evidence carries one, else by counting the
occurrences it can see; "last" is the latest visible occurrence; a count counts visible occurrences.
An answer is None when the evidence does not contain what is needed.
"""

from __future__ import annotations

import re

_RAW = re.compile(
    r"Step (\d+): action (\w+)\. At \((-?\d+), (-?\d+)\) in ([\w-]+)\. Facing (\w+)\.(.*?)(?=Step \d+:|$)",
    re.S,
)
_LIST = {"Nearby": "near", "Events": "ev", "Gained": "gain", "Lost": "lose"}


def _names(s: str) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, k = part.partition("#")
        out[name] = int(k) if k.isdigit() else None
    return out


def parse_evidence(text: str) -> dict[int, dict]:
    """``{t: facts}`` with keys among action, place, facing, near, ev, gain, lose, inv, visit, fmt."""
    facts: dict[int, dict] = {}
    for m in _RAW.finditer(text):
        t = int(m.group(1))
        f = facts.setdefault(t, {})
        f.update(
            fmt="raw",
            action=m.group(2),
            place=m.group(5),
            facing=m.group(6),
            near={},
            ev={},
            gain={},
            lose={},
        )
        rest = m.group(7)
        for label, key in _LIST.items():
            mm = re.search(rf"{label}: ([^.]*)\.", rest)
            if mm:
                f[key] = _names(mm.group(1))
        mi = re.search(r"Inventory: ([^.]*)\.", rest)
        if mi:
            inv = {}
            for name, n in re.findall(r"([a-z_]+) (\d+)", mi.group(1)):
                inv[name] = int(n)
            f["inv"] = inv
    for line in text.splitlines():
        m = re.match(r"t=(\d+) (.*)$", line.strip())
        if not m:
            continue
        t = int(m.group(1))
        f = facts.setdefault(t, {})
        kv = dict(p.split("=", 1) for p in m.group(2).split() if "=" in p)
        if "inv" in kv:
            f["inv"] = (
                {}
                if kv["inv"] == "none"
                else {k: int(v) for k, v in (x.split(":") for x in kv["inv"].split(",") if ":" in x)}
            )
            continue
        if "act" in kv:  # a full unit line: absent lists are empty
            f.update(
                fmt="unit",
                action=kv["act"],
                place=kv.get("at", ""),
                facing=kv.get("face", ""),
                near=_names(kv.get("near", "")),
                ev=_names(kv.get("ev", "")),
                gain=_names(kv.get("gain", "")),
                lose=_names(kv.get("lose", "")),
                visit=int(kv["visit"]) if kv.get("visit", "").isdigit() else None,
            )
        else:  # a short occurrence line
            f.setdefault("fmt", "occ")
            for key in ("ev", "gain", "lose"):
                if key in kv:
                    f.setdefault(key, {}).update(_names(kv[key]))
            if "visit" in kv:
                f["place"] = kv.get("at", "")
                f["visit"] = int(kv["visit"]) if kv["visit"].isdigit() else None
    return facts


def _occurrences(facts: dict[int, dict], kind: str, name: str) -> list[tuple[int, int | None]]:
    out = []
    for t in sorted(facts):
        f = facts[t]
        if kind == "visit":
            if f.get("place") != name:
                continue
            if f.get("fmt") in ("unit", "occ"):
                if f.get("visit"):
                    out.append((t, f["visit"]))
            elif t == 0 or (t - 1 in facts and facts[t - 1].get("place") not in (None, name)):
                out.append((t, None))
        elif name in f.get(kind, {}):
            out.append((t, f[kind][name]))
    return out


def answer(spec: dict, facts: dict[int, dict]) -> str | None:
    """The reader's answer to ``spec`` (see :mod:`.questions`) from ``facts``, or None."""
    focus, kind, name, k = spec["focus"], spec.get("kind"), spec.get("name"), spec.get("k")
    if focus == "count":
        lo, hi = spec["range"]
        return str(sum(1 for t, _ in _occurrences(facts, kind, name) if lo <= t <= hi))
    if kind is None:
        anchor = spec["t"]
    else:
        occ = _occurrences(facts, kind, name)
        if not occ:
            return None
        if k == -1:
            anchor = occ[-1][0]
        else:
            marked = [t for t, kk in occ if kk == k]
            if marked:
                anchor = marked[0]
            elif all(kk is None for _, kk in occ) and len(occ) >= k:
                anchor = occ[k - 1][0]
            else:
                return None
    target = anchor + spec.get("offset", 0)
    if focus == "step":
        return str(target)
    f = facts.get(target)
    if not f:
        return None
    if focus.startswith("inv:"):
        return str(f["inv"].get(focus[4:], 0)) if "inv" in f else None
    if focus == "near":
        return (",".join(sorted(f["near"])) or "none") if "near" in f else None
    return f.get(focus) or None
