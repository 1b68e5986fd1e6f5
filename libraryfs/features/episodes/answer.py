"""Answers to questions about an episode, read only from the packed evidence of recall.

:func:`answer` packs the evidence (:func:`~libraryfs.features.episodes.recall.recall`) and hands *only its
text* and the question to a reader:

- ``rules`` — the deterministic reader (:func:`~libraryfs.features.episodes.reader.read`): it parses the
  question into a typed query and resolves it over the facts of the evidence lines;
- ``llm``   — :class:`LLMReader`, a chat model over the same evidence text (an OpenAI-compatible endpoint
  through the project's client, :class:`libraryfs.llm.client.ChatClient`);
- ``auto``  — the deterministic reader, and the LLM reader when the first finds no answer and a client is
  given.

An answer is ``None`` ("unknown") when the evidence does not determine it.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any

from libraryfs.features.episodes.index import EpisodeIndex
from libraryfs.features.episodes.query import Query
from libraryfs.features.episodes.reader import read
from libraryfs.features.episodes.recall import Recall, recall

log = logging.getLogger(__name__)

READERS = ("auto", "rules", "llm")
ANSWER_MAX_TOKENS = 120


@functools.cache
def answer_job():
    """The chat job of :class:`LLMReader` (built on first use: importing the LLM package is not the rules
    reader's cost)."""
    from libraryfs.llm.prompts import Job

    return Job(
        name="episode_answer",
        version=1,
        system=(
            "You answer a question about an agent's episode using ONLY the evidence lines given. Each line is one "
            "step: 't=<step>' followed by key=value facts: act (action), place/area (location labels), face (what "
            "the agent faced), near (objects nearby), ev (events), gain/lose (an inventory item went up/down), "
            "rise/drop (a vital went up/down), visit/end (first/last step of a visit to a label), inv (inventory), "
            "has (one item's count), health/food/drink/energy (vitals), obs (an observation). '#k' after a name "
            "means the k-th occurrence of it in the episode. Answer with the bare value: a step number as digits, "
            "a count as digits, an action, label, object or event name exactly as written in the evidence. If the "
            "evidence does not determine the answer, answer 'unknown'. 'steps' lists the evidence steps you used."
        ),
        schema={
            "type": "object",
            "properties": {
                "answer": {"type": "string"},
                "steps": {"type": "array", "items": {"type": "integer"}},
            },
            "required": ["answer", "steps"],
            "additionalProperties": False,
        },
    )


class LLMReader:
    """Callable ``(question, evidence) -> answer or None`` over a chat model.

    ``client`` is a :class:`libraryfs.llm.client.ChatClient` (or anything with its ``complete_json(job, user,
    max_output_tokens)``). Transport failures, answers that are not the JSON asked for and the spending
    limit give None and are counted in :attr:`errors` (the last one in :attr:`last_error`).
    """

    def __init__(self, client: Any, max_output_tokens: int = ANSWER_MAX_TOKENS) -> None:
        self.client = client
        self.max_output_tokens = max_output_tokens
        self.errors = 0
        self.last_error = ""

    def __call__(self, question: str, evidence: str) -> str | None:
        """The model's answer to ``question`` from ``evidence`` (text), stripped; None for no answer
        (``unknown``/empty) or a failed request (counted in :attr:`errors`). Never raises for the model."""
        from libraryfs.llm.client import LLMError, SpendLimitReached

        self.last_error = ""
        user = f"Evidence:\n{evidence or '(none)'}\n\nQuestion: {question}"
        try:
            obj, _usage = self.client.complete_json(answer_job(), user, self.max_output_tokens)
        except (LLMError, SpendLimitReached) as e:
            self.errors += 1
            self.last_error = f"{type(e).__name__}: {e}"
            log.warning("episode answer by LLM failed: %s", self.last_error[:160])
            return None
        ans = obj.get("answer")
        if not isinstance(ans, str | int) or str(ans).strip().lower() in ("", "unknown", "none", "n/a"):
            return None
        return str(ans).strip()


@dataclass
class Answer:
    """An answer and what it was read from."""

    question: str
    answer: str | None
    reader: str  #: "rules" | "llm" | "none"
    recall: Recall
    query: Query
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """``{"question", "answer", "reader", "query", "evidence": {...}, "notes"}``."""
        return {
            "question": self.question,
            "answer": self.answer,
            "reader": self.reader,
            "query": self.query.to_json(),
            "evidence": {
                "budget_tokens": self.recall.budget_tokens,
                "tokens": self.recall.tokens,
                "steps": self.recall.steps(),
                "text": self.recall.text,
            },
            "notes": self.notes,
        }


def answer(
    idx: EpisodeIndex,
    question: str,
    budget_tokens: int = 200,
    reader: str = "auto",
    llm: LLMReader | None = None,
) -> Answer:
    """Answer ``question`` from the evidence recall packs within ``budget_tokens``.

    Raises ``ValueError`` for an unknown reader, a negative budget, or ``reader="llm"`` without ``llm``.
    """
    if reader not in READERS:
        raise ValueError(f"reader must be one of {', '.join(READERS)}")
    if reader == "llm" and llm is None:
        raise ValueError("the llm reader needs an endpoint (LIBRARYFS_LLM_BASE_URL and LIBRARYFS_LLM_MODEL)")
    r = recall(idx, question, budget_tokens)
    notes: list[str] = []
    q = r.query
    if reader in ("auto", "rules"):
        ans, q = read(question, r.text)
        if ans is not None or reader == "rules" or llm is None:
            if ans is None and not q.typed():
                notes.append("the question was not understood as a typed question")
            return Answer(question, ans, "rules" if ans is not None else "none", r, q, notes)
        notes.append("the deterministic reader found no answer in the evidence")
    ans = llm(question, r.text) if llm is not None else None
    if llm is not None and llm.last_error and ans is None:
        notes.append(f"llm reader: {llm.last_error[:200]}")
    return Answer(question, ans, "llm" if ans is not None else "none", r, q, notes)
