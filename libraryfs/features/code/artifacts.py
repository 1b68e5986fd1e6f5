"""Typed artifacts: what sub-agents hand each other, as files under the mount (PAPERS.md §3).

An artifact of a run lives at ``code/.runs/<run>/<node>/<name>.json`` (JSON types) or ``….md`` (Markdown
types), written by the node that produces it and read — through the mount, so the reader's read budget pays
for it — by every node that consumes it. A type fixes the format and, for JSON, the keys that must be there
(:data:`ARTIFACT_TYPES`); :func:`read_artifact` refuses anything else with :class:`ArtifactError`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

RUNS_DIR = "code/.runs"


@dataclass(frozen=True, slots=True)
class ArtifactType:
    """Format (``json``/``md``) and, for JSON, required top-level keys with the Python type of each value."""

    fmt: str
    required: tuple[tuple[str, type], ...] = ()

    @property
    def suffix(self) -> str:
        """File suffix: ``.json`` or ``.md``."""
        return "." + self.fmt


ARTIFACT_TYPES: dict[str, ArtifactType] = {
    "TaskSpec": ArtifactType("json", (("task", str), ("repo", str), ("topology", str), ("files", list))),
    "EditPlan": ArtifactType("json", (("steps", list),)),
    "Patch": ArtifactType("json", (("summary", str), ("edits", list))),
    "Findings": ArtifactType("json", (("findings", list),)),
    "Answer": ArtifactType("md"),
    "Report": ArtifactType("md"),
}


class ArtifactError(ValueError):
    """An artifact is missing, unreadable, or not of its declared type (message says which)."""


def run_dir(run_id: str) -> str:
    """Library-relative directory of a run."""
    return f"{RUNS_DIR}/{run_id}"


def artifact_path(run_id: str, node: str, name: str, type_name: str) -> str:
    """Library-relative path of one artifact. Raises ``KeyError`` for an unknown type."""
    return f"{run_dir(run_id)}/{node}/{name}{ARTIFACT_TYPES[type_name].suffix}"


def validate(type_name: str, value: Any) -> None:
    """Raise :class:`ArtifactError` unless ``value`` is a valid ``type_name`` (a dict with the required keys
    for JSON types; non-empty text for Markdown)."""
    t = ARTIFACT_TYPES.get(type_name)
    if t is None:
        raise ArtifactError(f"unknown artifact type {type_name!r}")
    if t.fmt == "md":
        if not isinstance(value, str) or not value.strip():
            raise ArtifactError(f"{type_name}: empty text")
        return
    if not isinstance(value, dict):
        raise ArtifactError(f"{type_name}: not a JSON object")
    for key, typ in t.required:
        if not isinstance(value.get(key), typ):
            raise ArtifactError(f"{type_name}: {key!r} missing or not a {typ.__name__}")


def write_artifact(root: str, run_id: str, node: str, name: str, type_name: str, value: Any) -> str:
    """Validate and write one artifact under ``root`` (a mountpoint); returns its library-relative path."""
    validate(type_name, value)
    rel = artifact_path(run_id, node, name, type_name)
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = value if ARTIFACT_TYPES[type_name].fmt == "md" else json.dumps(value, indent=1, ensure_ascii=False)
    with open(path, "w", encoding="utf-8") as f:
        f.write(data if data.endswith("\n") else data + "\n")
    return rel


def read_artifact(root: str, run_id: str, node: str, name: str, type_name: str) -> Any:
    """Read and check one artifact. Raises :class:`ArtifactError` when it is missing or ill-typed, and lets
    ``OSError`` through otherwise (EDQUOT when the reader's budget is spent)."""
    rel = artifact_path(run_id, node, name, type_name)
    try:
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ArtifactError(f"{rel}: missing") from None
    if ARTIFACT_TYPES[type_name].fmt == "md":
        value: Any = text
    else:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise ArtifactError(f"{rel}: not JSON ({e})") from None
    validate(type_name, value)
    return value
