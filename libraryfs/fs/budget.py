"""The read budget a mount enforces: limits on read operations and tokens (``libraryfs mount --budget``).

A two-dimensional budget: ``reads`` (first reads of TOC pages and entries) and ``tokens`` (tokens returned:
a TOC page's stored o200k_base count, an entry's share of its count; :mod:`libraryfs.fs.stats`). The view
charges it *before* returning data; a charge that would pass a limit raises
:class:`~libraryfs.errors.QuotaExceeded`, which the one errno table maps to EDQUOT, and consumes nothing.
``/.libraryfs/budget`` shows :meth:`ReadBudget.to_json`. (The six-dimensional budgets of delegation plans
are CODE-AGENT's, in ``libraryfs.features.code.budget``; PAPERS.md §3.)
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping

from libraryfs.errors import QuotaExceeded
from libraryfs.fs.generated import BUDGET_FILE, CTL_DIRNAME
from libraryfs.words import noun

READ_DIMENSIONS = ("reads", "tokens")


def parse_budget_spec(spec: str) -> dict[str, int]:
    """``"reads=100,tokens=5000"`` → ``{"reads": 100, "tokens": 5000}``. Raises ``ValueError`` on an unknown
    dimension, a repeated one, or a value that is not a non-negative integer."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        key, sep, val = part.partition("=")
        key = key.strip()
        if not sep or key not in READ_DIMENSIONS:
            raise ValueError(
                f"bad budget item {part!r}: expected one of {', '.join(READ_DIMENSIONS)} as key=N"
            )
        if key in out:
            raise ValueError(f"budget {key} given twice")
        if not val.strip().isdigit():
            raise ValueError(f"budget {key} must be a non-negative integer, got {val.strip()!r}")
        out[key] = int(val)
    if not out:
        raise ValueError("empty budget spec")
    return out


class ReadBudget:
    """A mount's read budget: limits on ``reads`` (read operations) and ``tokens`` (tokens returned).

    A dimension without a limit is unlimited. Thread-safe (one lock; a charge is a few µs). The view calls
    :meth:`charge` *before* returning data; on :class:`~libraryfs.errors.QuotaExceeded` the read fails with
    EDQUOT and nothing is consumed.
    """

    def __init__(self, limits: Mapping[str, int], parent: ReadBudget | None = None) -> None:
        bad = set(limits) - set(READ_DIMENSIONS)
        if bad:
            raise ValueError(f"unknown {noun(len(bad), 'read budget dimension')}: {', '.join(sorted(bad))}")
        self.limits = {k: int(v) for k, v in limits.items()}
        self.used = {d: 0 for d in READ_DIMENSIONS}
        self.refused = 0
        self.parent = parent
        self._lock = threading.Lock()

    def charge(self, reads: int = 0, tokens: int = 0) -> None:
        """Consume ``reads`` and ``tokens`` together, or neither: raises
        :class:`~libraryfs.errors.QuotaExceeded` (EDQUOT; and counts a refusal) if either would pass its
        limit."""
        with self._lock:
            for dim, amount in (("reads", reads), ("tokens", tokens)):
                limit = self.limits.get(dim)
                if limit is not None and self.used[dim] + amount > limit:
                    self.refused += 1
                    used = self.used[dim]
                    raise QuotaExceeded(
                        f"{dim} budget exceeded: used {used:g} + {amount:g} > limit {limit:g}",
                        dimension=dim,
                        used=used,
                        requested=amount,
                        limit=limit,
                    )
            self.used["reads"] += reads
            self.used["tokens"] += tokens

    def _remaining(self) -> dict[str, int | None]:
        return {d: (self.limits[d] - self.used[d] if d in self.limits else None) for d in READ_DIMENSIONS}

    def remaining(self) -> dict[str, int | None]:
        """Left per dimension (``None`` = unlimited)."""
        with self._lock:
            return self._remaining()

    def child(self, limits: Mapping[str, int]) -> ReadBudget:
        """A sub-agent's budget carved out of this one (conservation: the child's limits are charged here
        first; raises :class:`~libraryfs.errors.QuotaExceeded` if they do not fit, ``ValueError`` if the
        child is unlimited in a dimension this budget limits)."""
        for d in self.limits:
            if d not in limits:
                raise ValueError(f"child budget must limit {d} (the parent does)")
        self.charge(reads=int(limits.get("reads", 0)), tokens=int(limits.get("tokens", 0)))
        return ReadBudget(limits, parent=self)

    def to_json(self) -> str:
        """What ``.libraryfs/budget`` shows: limits, used, remaining, refused (count of failed charges)."""
        with self._lock:
            doc = {
                "limits": dict(self.limits),
                "used": dict(self.used),
                "remaining": self._remaining(),
                "refused": self.refused,
            }
        return json.dumps(doc, indent=2) + "\n"


def budget_state(mountpoint: str) -> dict | None:
    """What ``<mountpoint>/.libraryfs/budget`` shows (:meth:`ReadBudget.to_json`: limits, used, remaining,
    refused), or ``None`` when the mount has no budget (the file is absent). Reading it costs nothing
    against the budget. Raises ``OSError`` / ``ValueError`` when the file cannot be read or parsed."""
    path = os.path.join(mountpoint, CTL_DIRNAME, BUDGET_FILE.decode())
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
