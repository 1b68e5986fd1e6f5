"""The audit log of the card tree (``cards/AUDIT.jsonl``): every change ADD, REFINE and revert make, with the
exact bytes of each file before the change, so that any change can be undone byte for byte.

One JSON object per line::

    {"id": "20260520T101530-9f3a.4", "run": "20260520T101530-9f3a", "time": 1779272130.5,
     "op": "add|dedupe|rescore|merge|demote|relocate|edit|skip|revert", "path": ..., (op fields),
     "files": [{"path": "cards/medium/x/a.md", "before": "<text>" | null, "after_sha256": "<hex>" | null}]}

``before`` is the file's whole text before the change (``null``: it did not exist; ``before_b64`` instead
when the bytes are not UTF-8); ``after_sha256`` the SHA-256 of its bytes after (``null``: removed).
A ``skip`` record changes no file. A ``revert`` record names the change it undid (``reverts``) and has its
own ``files``, so a revert can itself be reverted. A change is *active* unless an active revert undid it;
only active changes count for :func:`moves` and :func:`counted`.

Reverting checks every file of the change still holds the bytes the change left (else a later change touched
it: :class:`RevertConflict` names that change) and writes nothing unless every check passes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from collections.abc import Callable, Iterable
from typing import Any

from libraryfs.features.cards.cards import AUDIT_PATH
from libraryfs.fs.tree import Tree


class RevertError(ValueError):
    """A revert that cannot be done: unknown change id, nothing to revert."""


class RevertConflict(RevertError):
    """A file of the change no longer holds the bytes the change left (a later change touched it)."""


def _sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _read(tree: Tree, path: str) -> bytes | None:
    return tree.read_bytes(path) if tree.exists(path) and not tree.isdir(path) else None


def _snapshot(path: str, before: bytes | None, after: bytes | None) -> dict[str, Any]:
    rec: dict[str, Any] = {"path": path, "after_sha256": _sha(after)}
    if before is None:
        rec["before"] = None
    else:
        try:
            rec["before"] = before.decode("utf-8")
        except UnicodeDecodeError:
            rec["before_b64"] = base64.b64encode(before).decode("ascii")
    return rec


def _before_bytes(f: dict[str, Any]) -> bytes | None:
    if "before_b64" in f:
        return base64.b64decode(f["before_b64"])
    return None if f.get("before") is None else f["before"].encode("utf-8")


class ChangeLog:
    """Writes the audit records of one run (one ADD, REFINE or revert call); ids ``<run>.<n>``."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.run = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)
        self.n = 0

    def _append(self, op: str, files: list[dict[str, Any]] | None, fields: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        rec = {"id": f"{self.run}.{self.n}", "run": self.run, "time": round(time.time(), 3), "op": op}
        rec.update(fields)
        if files is not None:
            rec["files"] = files
        line = json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n"
        self.tree.append_bytes(AUDIT_PATH, line.encode("utf-8"))
        return rec

    def note(self, op: str, **fields: Any) -> dict[str, Any]:
        """Record an event that changes no file (``skip``); returns the record."""
        return self._append(op, None, fields)

    def change(
        self, op: str, paths: Iterable[str], apply: Callable[[], None], **fields: Any
    ) -> dict[str, Any]:
        """Run ``apply()`` (Tree operations on ``paths`` only) and record it with each path's bytes before.

        Paths whose bytes did not change are left out of ``files``. Returns the record.
        """
        paths = list(dict.fromkeys(paths))
        before = {p: _read(self.tree, p) for p in paths}
        try:
            apply()
        except BaseException as e:  # a half-done change is still recorded (so it can be reverted)
            fields = {**fields, "error": f"{type(e).__name__}: {e}"[:300]}
            raise
        finally:
            files = []
            for p in paths:
                after = _read(self.tree, p)
                if after != before[p]:
                    files.append(_snapshot(p, before[p], after))
            rec = self._append(op, files, fields)
        return rec


def records(tree: Tree) -> list[dict[str, Any]]:
    """Every parseable record of the audit log, in order (malformed lines are skipped)."""
    if not tree.exists(AUDIT_PATH):
        return []
    out = []
    for line in tree.read_bytes(AUDIT_PATH).decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "op" in rec:
            out.append(rec)
    return out


def active_ids(recs: list[dict[str, Any]]) -> set[str]:
    """Ids of the changes in effect: not undone by a revert that is itself in effect."""
    reverters: dict[str, list[str]] = {}
    for r in recs:
        if r.get("op") == "revert" and r.get("reverts") and r.get("id"):
            reverters.setdefault(r["reverts"], []).append(r["id"])
    memo: dict[str, bool] = {}

    def active(cid: str) -> bool:  # reverts only point backwards in the log: the recursion ends
        """Whether change ``cid`` is in effect: no active revert points at it."""
        if cid not in memo:
            memo[cid] = not any(active(x) for x in reverters.get(cid, ()))
        return memo[cid]

    return {r["id"] for r in recs if r.get("id") and active(r["id"])}


def _active_records(tree: Tree) -> list[dict[str, Any]]:
    recs = records(tree)
    ids = active_ids(recs)
    # records of the first format (no id) cannot be reverted: they count as active
    return [r for r in recs if not r.get("id") or r["id"] in ids]


def moves(tree: Tree) -> dict[str, str]:
    """Where each moved card went, from the active changes: ``{old path: current path}`` (chains followed)."""
    step: dict[str, str] = {}
    for rec in _active_records(tree):
        if rec.get("op") in ("relocate", "demote") and rec.get("to"):
            step[rec["path"]] = rec["to"]
        elif rec.get("op") == "merge" and rec.get("demoted") and rec.get("to"):
            step[rec["demoted"]] = rec["to"]
    out = {}
    for src in step:
        dst, seen = src, {src}
        while dst in step and step[dst] not in seen:
            dst = step[dst]
            seen.add(dst)
        out[src] = dst
    return out


def counted(tree: Tree, moved: dict[str, str] | None = None) -> dict[str, set[str]]:
    """Trace keys already counted into each card's ``uses/helped/hurt``, by current path (active rescores)."""
    moved = moves(tree) if moved is None else moved
    out: dict[str, set[str]] = {}
    for rec in _active_records(tree):
        if rec.get("op") == "rescore" and rec.get("traces"):
            out.setdefault(moved.get(rec["path"], rec["path"]), set()).update(rec["traces"])
    return out


def _select(recs: list[dict[str, Any]], ids: list[str], last: int | None) -> list[dict[str, Any]]:
    """The changes to revert, newest first: given ids (a run id names all its changes) or the last N."""
    active = active_ids(recs)
    undoable = [r for r in recs if r.get("id") in active and r.get("files")]
    if last is not None:
        if last < 1:
            raise RevertError("--last needs a positive count")
        return [r for r in reversed(undoable) if r["op"] != "revert"][:last]
    by_id = {r["id"]: r for r in recs if r.get("id")}
    chosen: dict[str, dict[str, Any]] = {}
    runs = {r.get("run") for r in recs}
    for cid in ids:
        run = [r for r in undoable if r.get("run") == cid]
        if cid not in by_id and not run:
            if cid in runs:
                raise RevertError(f"run {cid} has no change left to revert")
            raise RevertError(f"no change {cid!r} in {AUDIT_PATH}")
        if cid in by_id and cid not in active:
            raise RevertError(f"change {cid} is already reverted")
        if cid in by_id and not by_id[cid].get("files"):
            raise RevertError(f"change {cid} ({by_id[cid]['op']}) changed no file")
        for r in run or [by_id[cid]]:
            chosen[r["id"]] = r
    order = {r["id"]: i for i, r in enumerate(recs) if r.get("id")}
    return sorted(chosen.values(), key=lambda r: order[r["id"]], reverse=True)


def _toucher(recs: list[dict[str, Any]], change: dict[str, Any], path: str) -> str:
    """The newest change after ``change`` that touched ``path`` (for a conflict message)."""
    after = False
    last = None
    for r in recs:
        if r is change:
            after = True
        elif after and any(f["path"] == path for f in r.get("files", ())):
            last = r.get("id")
    return f"change {last}" if last else "an edit outside the audit log"


def revert(tree: Tree, ids: list[str] | None = None, last: int | None = None) -> list[dict[str, Any]]:
    """Undo changes (newest first), restoring each file's exact bytes from before the change.

    ``ids``: change ids, or run ids (all the run's changes); ``last``: the last N active changes that are
    not themselves reverts. Writes nothing if any file was changed since (:class:`RevertConflict`); raises
    :class:`RevertError` on an unknown or already reverted id. Returns the ``revert`` records written.
    """
    recs = records(tree)
    todo = _select(recs, list(ids or []), last)
    if not todo:
        raise RevertError("nothing to revert")
    state: dict[str, bytes | None] = {}  # simulated current bytes, so a batch is checked before any write
    for ch in todo:
        for f in ch["files"]:
            cur = state[f["path"]] if f["path"] in state else _read(tree, f["path"])
            if _sha(cur) != f["after_sha256"]:
                raise RevertConflict(
                    f"cannot revert {ch['id']}: {f['path']} was changed since by {_toucher(recs, ch, f['path'])}"
                    " (revert that first)"
                )
            state[f["path"]] = _before_bytes(f)
    log = ChangeLog(tree)
    out = []
    for ch in todo:

        def restore(ch: dict[str, Any] = ch) -> None:
            """Put back each file of change ``ch`` as it was before it (bytes; a file the change created is
            removed)."""
            for f in ch["files"]:
                data = _before_bytes(f)
                if data is None:
                    if tree.exists(f["path"]):
                        tree.remove(f["path"])
                else:
                    tree.write_bytes(f["path"], data)

        paths = [f["path"] for f in ch["files"]]
        out.append(log.change("revert", paths, restore, reverts=ch["id"], reverted_op=ch["op"]))
    return out
