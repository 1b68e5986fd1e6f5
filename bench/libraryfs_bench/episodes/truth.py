"""Ground truth of an episode, computed from its raw step records (never from libraryfs units).

Definitions (the question kinds of the phrasing files use exactly these):

- an **event** occurs at step t when it is in the record's ``achievements`` (or ``events``);
- an **item went up/down** at t when the record's ``inventory_delta`` (else the difference of ``inventory``
  to the previous record) is positive/negative for it;
- a **vital rose/dropped** at t when ``vitals_delta`` (else the vitals' difference) is positive/negative;
- a **visit** to a label (a ``place`` or an ``area``) is a maximal run of consecutive records with that
  label; it *begins* at its first step and *ends* at its last (a visit still going on at the last record
  has no end);
- "between N and M" is N ≤ t ≤ M, "before N" is t < N, "after N" is t > N; visits counted "before N"
  are those that begin before N.
"""

from __future__ import annotations

LABEL_KINDS = ("place", "area")
VITALS = ("health", "food", "drink", "energy")


def _diff(old: dict[str, int], new: dict[str, int]) -> dict[str, int]:
    return {
        k: new.get(k, 0) - old.get(k, 0)
        for k in sorted(set(old) | set(new))
        if new.get(k, 0) != old.get(k, 0)
    }


class Truth:
    """Occurrence lists, visits and per-step values of a list of step records."""

    def __init__(self, recs: list[dict]) -> None:
        self.recs = {r["t"]: r for r in recs}
        self.T = max(self.recs)
        self.occ: dict[tuple[str, str], list[int]] = {}
        self.visits: dict[tuple[str, str], list[tuple[int, int | None]]] = {}
        prev: dict | None = None
        for r in sorted(recs, key=lambda r: r["t"]):
            t = r["t"]
            for e in r.get("achievements", r.get("events", [])):
                self.occ.setdefault(("ev", e), []).append(t)
            inv_d = r.get("inventory_delta")
            if inv_d is None:
                inv_d = _diff(prev["inventory"], r["inventory"]) if prev else {}
            vit_d = r.get("vitals_delta")
            if vit_d is None:
                vit_d = _diff(prev["vitals"], r["vitals"]) if prev else {}
            for name, v in sorted(inv_d.items()):
                self.occ.setdefault(("gain" if v > 0 else "lose", name), []).append(t)
            for name, v in sorted(vit_d.items()):
                self.occ.setdefault(("rise" if v > 0 else "drop", name), []).append(t)
            for kind in LABEL_KINDS:
                if kind not in r:
                    continue
                if prev is None or prev.get(kind) != r[kind]:
                    if prev is not None and kind in prev:
                        spans = self.visits[(kind, prev[kind])]
                        spans[-1] = (spans[-1][0], prev["t"])
                    self.visits.setdefault((kind, r[kind]), []).append((t, None))
            prev = r

    def occurrences(self, kind: str, name: str) -> list[int]:
        """Steps of every occurrence of (kind, name), in order."""
        return self.occ.get((kind, name), [])

    def names(self, kind: str, min_n: int = 1) -> list[str]:
        """Names with at least ``min_n`` occurrences of ``kind``, sorted."""
        return sorted(n for (k, n), v in self.occ.items() if k == kind and len(v) >= min_n)

    def labels(self, kind: str) -> list[str]:
        """Labels of a kind (``place``/``area``) with at least one visit, sorted."""
        return sorted(n for (k, n) in self.visits if k == kind)

    def value(self, t: int, field: str, inside: str | None = None) -> str:
        """The answer string of ``field`` at step ``t``. ``where`` is the location label of the kind other
        than ``inside`` (the label kind of the visit the question is about; ``place`` when None)."""
        r = self.recs[t]
        if field == "action":
            return r["action"]
        if field in LABEL_KINDS:
            return r[field]
        if field == "where":
            return r["area"] if inside == "place" else r["place"]
        if field == "facing":
            return r["facing"]
        if field.startswith("count:"):
            return str(r["inventory"].get(field[6:], 0))
        if field.startswith("vital:"):
            return str(r["vitals"][field[6:]])
        raise ValueError(f"unknown field {field!r}")
