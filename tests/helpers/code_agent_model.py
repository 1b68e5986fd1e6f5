"""A scripted model for the code supervisor's roles, as a default for :class:`helpers.llm_server.LLMServer`.

It answers every ``code.<role>`` request (``payload["task"]``) with a valid answer built from what the
request carries — the code paths it was given and the inputs it consumed — so an end-to-end run can check
that artifacts flow: an editor's patch names the files it read, the integrator's patch holds every editor's
edits, the synthesizer's report names every investigator's findings. Usage is reported as characters / 4 of
the messages (as a server with a real tokenizer would report a count, not the request body's bytes).
"""

from __future__ import annotations

import json
from typing import Any

from helpers.llm_server import Reply, Request


def _files(payload: dict) -> list[str]:
    return [c["path"] for c in payload.get("code", [])]


def _answer(role: str, payload: dict) -> dict[str, Any]:
    inputs = payload.get("inputs", {})
    files = _files(payload)
    if role in ("solo", "specialist", "editor"):
        edits = [{"file": f, "change": f"scripted change for: {payload['request'][:40]}"} for f in files]
        return {"summary": f"{role}: {len(edits)} file(s)", "edits": edits}
    if role == "planner":
        return {"steps": [{"file": f, "change": "scripted step"} for f in files]}
    if role == "integrator":
        edits = [e for k in sorted(inputs) if k.startswith("patch") for e in inputs[k]["edits"]]
        return {"summary": f"integrated {len(edits)} edit(s)", "edits": edits}
    if role == "investigator":
        return {"findings": [{"path": f, "note": "scripted finding"} for f in files]}
    if role == "synthesizer":
        found = [x["path"] for k in sorted(inputs) if k.startswith("findings") for x in inputs[k]["findings"]]
        return {"text": "Report: " + ("; ".join(found) or "nothing found") + (f" ({len(files)} files read)")}
    if role == "reader":
        return {"text": "Answer from " + ", ".join(files or ["nothing"])}
    raise ValueError(f"unknown role {role!r}")


class CodeAgentModel:
    """Callable default answering the supervisor's roles; ``requests`` counts the answers it gave by role."""

    def __init__(self) -> None:
        self.requests: dict[str, int] = {}

    def __call__(self, req: Request) -> Reply:
        payload = req.payload
        task = payload.get("task", "") if isinstance(payload, dict) else ""
        if not task.startswith("code."):
            raise ValueError(f"not a code agent request: {task!r}")
        role = task.split(".", 1)[1]
        self.requests[role] = self.requests.get(role, 0) + 1
        content = json.dumps(_answer(role, payload))
        prompt_chars = sum(len(m.get("content") or "") for m in req.messages)
        return Reply(
            content,
            usage={"prompt_tokens": prompt_chars // 4 + 8, "completion_tokens": len(content) // 4 + 1},
        )
