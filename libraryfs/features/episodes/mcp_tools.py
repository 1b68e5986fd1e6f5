"""The episodes feature's MCP tool ``recall`` (registered through ``Feature.mcp_tools``; ``libraryfs mcp``).

``recall(episode, question, budget_tokens)`` first consumes the episode's new steps (deterministic
extraction, under the library's one episodes writer lock, :meth:`EpisodeBuilder.writing`) unless the
server is read-only, then packs the steps that answer the question within the token budget (S3Mem
recall, :func:`libraryfs.features.episodes.recall.recall`): the same answer as ``libraryfs recall``.
"""

from __future__ import annotations

from typing import Any


def register(reg: Any) -> None:
    """Add ``recall`` to ``reg`` (a :class:`libraryfs.daemon.mcp_registry.ToolRegistry`)."""

    def recall(episode: str, question: str, budget_tokens: int = 200) -> Any:
        """Recall from an episode (episodes/<id>/steps.jsonl, one JSON object per step): the few steps that
        answer `question`, packed within `budget_tokens` (o200k tokens). New steps are consumed first."""
        from libraryfs.errors import NotFound
        from libraryfs.features.episodes.builder import EPISODES_DIR, STEPS_FILE, EpisodeBuilder
        from libraryfs.features.episodes.recall import recall as do_recall
        from libraryfs.features.episodes.unitdb import check_episode_id, check_question

        check_episode_id(episode)  # ValueError: a tool error
        check_question(question)  # blank: EINVAL, as a blank `find` term
        if not 0 <= budget_tokens <= reg.budget.tokens:
            raise ValueError(f"budget_tokens must be 0–{reg.budget.tokens}")
        steps = f"/{EPISODES_DIR}/{episode}/{STEPS_FILE}".encode()

        def missing() -> NotFound:
            """ENOENT naming the steps file: a missing file (docs/mcp.md "Errors"), not a bad argument."""
            return reg.at_path(NotFound(f"episode {episode!r} has no {STEPS_FILE}"), steps)

        with reg.ops.lock:
            builder = EpisodeBuilder(reg.tree(), reg.ops.view.store)
            if not reg.ops.read_only:
                try:
                    builder.build(episode)
                except FileNotFoundError:
                    raise missing() from None
            units = builder.db.units(episode)
            if not units:
                try:
                    reg.ops.stat(steps)
                except NotFound:  # read-only: nothing was built, and there is nothing to build
                    raise missing() from None
                raise ValueError(f"episode {episode!r} has no units yet")
            r = do_recall(builder.index(episode), question, budget_tokens)
        doc = r.to_json()
        return reg.result(r.text or "(no evidence within the budget)", episode=episode, **doc)

    reg.add(recall, "recall", "Recall from an episode within a token budget", reg.READ)
