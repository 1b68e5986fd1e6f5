"""The tiered self-consistency solver over an LLM, reading only its block of the card tree (KACE §2).

``solve`` drives :func:`controller.run`: each tier's attempts are fresh chat completions whose prompt holds
the cards of block (tier, domain) — read from the tree at the exact paths :func:`cards.block_paths` gives —
and the problem. Each attempt's final answer is extracted (``\\boxed{}`` or plain) and compared with
``math-verify``. The solver only reads the tree. It returns one trace (a JSON-able dict, one JSONL line):

``{"problem_id", "problem", "domain", "gold", "exit_tier", "answer", "correct", "calls", "prompt_tokens",
"completion_tokens", "cards_read": [paths], "tiers": [{"tier", "cards": [paths], "card_tokens" (o200k tokens of
the cards in each attempt's prompt), "attempts": [{"answer",
"text", "prompt_tokens", "completion_tokens", "error"}]}]}`` — ``correct`` is ``None`` without a gold answer.
"""

from __future__ import annotations

import json
from typing import Any

from libraryfs.features.cards import answers
from libraryfs.features.cards.cards import CardFormatError, block_paths, read_card, render_context
from libraryfs.features.cards.classify import classify
from libraryfs.features.cards.controller import DEFAULT_SCHEDULE, Schedule, run
from libraryfs.fs.tree import Tree
from libraryfs.index.tokens import count_tokens
from libraryfs.llm.client import ChatClient, LLMError

SYSTEM_PROMPT = (
    "You are an expert mathematician. Solve the problem step by step, then give the final answer "
    "alone in \\boxed{}."
)
#: Attempt texts are kept in the trace up to this many characters (ADD's teacher reads them).
TRACE_TEXT_CHARS = 6000


def build_messages(problem: str, context: str, tier: str, domain: str) -> list[dict[str, str]]:
    """Chat messages of one attempt: system prompt, then the block's cards (if any) and the problem."""
    user = f"Problem:\n{problem.strip()}"
    if context:
        user = (
            f"Knowledge cards for {tier} {domain} problems (use what applies):\n\n{context.strip()}\n\n"
            + user
        )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def solve(
    problem: str,
    tree: Tree | None,
    llm: ChatClient,
    domain: str | None = None,
    schedule: Schedule = DEFAULT_SCHEDULE,
    problem_id: str | None = None,
    gold: str | None = None,
    max_card_chars: int = 12000,
) -> dict[str, Any]:
    """Solve one problem; returns its trace (see module docstring).

    ``tree`` may be ``None`` (no cards anywhere). ``domain`` defaults to the keyword classifier's.
    A failed call (``openai`` error) counts as a call with no answer. Unreadable cards are skipped and
    listed under ``card_errors``.
    """
    domain = domain or classify(problem)
    tiers: list[dict[str, Any]] = []
    card_errors: list[str] = []

    def draw(tier: str, k: int) -> list[str | None]:
        """``k`` cards of block (``tier``, this domain) for one attempt (None where none is left); errors recorded."""
        paths = block_paths(tree, tier, domain) if tree is not None else []
        cards = []
        for p in paths:
            try:
                cards.append(read_card(tree, p))  # type: ignore[arg-type]
            except (OSError, UnicodeDecodeError, CardFormatError) as e:
                card_errors.append(f"{p}: {e}")
        context = render_context(cards, max_card_chars)
        messages = build_messages(problem, context, tier, domain)
        rec: dict[str, Any] = {
            "tier": tier,
            "cards": paths,
            "card_tokens": count_tokens(context) if context else 0,
            "attempts": [],
        }
        tiers.append(rec)
        out = []
        for _ in range(k):
            att: dict[str, Any] = {"answer": None, "text": "", "prompt_tokens": 0, "completion_tokens": 0}
            try:
                reply = llm.chat(messages)
                att.update(
                    answer=answers.extract_answer(reply.text),
                    text=reply.text[:TRACE_TEXT_CHARS],
                    prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens,
                )
            except LLMError as e:
                att["error"] = f"{type(e).__name__}: {e}"[:300]
            rec["attempts"].append(att)
            out.append(att["answer"])
        return out

    d = run(draw, schedule, answers.equivalent)
    atts = [a for t in tiers for a in t["attempts"]]
    return {
        "problem_id": problem_id,
        "problem": problem,
        "domain": domain,
        "gold": gold,
        "exit_tier": d.exit_tier,
        "answer": d.answer,
        "correct": None if gold is None else answers.equivalent(gold, d.answer),
        "calls": d.calls,
        "prompt_tokens": sum(a["prompt_tokens"] for a in atts),
        "completion_tokens": sum(a["completion_tokens"] for a in atts),
        "cards_read": sorted({p for t in tiers for p in t["cards"]}),
        "card_errors": card_errors,
        "tiers": tiers,
    }


def read_traces(path: str) -> list[dict[str, Any]]:
    """Load a JSONL trace file (blank lines skipped). Raises ``ValueError`` on a malformed line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not JSON: {e}") from None
    return out
