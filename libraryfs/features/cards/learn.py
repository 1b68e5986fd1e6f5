"""Offline learning of the card tree, ADD: a teacher model distils failed traces into new cards — KACE §2
"Offline learning" (REFINE is :mod:`libraryfs.features.cards.refine`).

ADD changes the tree only through :class:`libraryfs.fs.tree.Tree` file operations and records each change in
``cards/AUDIT.jsonl`` with the bytes before (:mod:`libraryfs.features.cards.audit`; reversible)::

    {"id": ..., "run": ..., "time": 1767225600.0, "op": "add|dedupe|skip", "path": ..., "files": [...]}

Failed trace: ``correct is False``, or — without a gold answer — an exit at the fallback (no tier agreed).
Its block is (exit tier, domain), with fallback → hard. Failures that exited at *easy* (two attempts
agreed on a wrong answer) are skipped and audited: the easy tier reads no cards, so no card can reach them.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

from libraryfs.features.cards.audit import ChangeLog
from libraryfs.features.cards.cards import (
    CARD_TYPES,
    Card,
    CardFormatError,
    block_paths,
    card_dir,
    new_card_id,
    read_card,
    write_card,
)
from libraryfs.fs.tree import Tree
from libraryfs.llm.client import ChatClient, LLMError

#: A card ADD proposes whose words overlap a card of its block at least this much (Jaccard) is not written
#: (its provenance joins the existing card): a guard against the teacher repeating itself, never a merge of
#: existing cards (REFINE merges only on trace evidence).
DUPLICATE_JACCARD = 0.6
MAX_TRACES_PER_BLOCK = 8
MAX_BODY_CHARS = 2000

TEACHER_PROMPT = """You maintain a library of short knowledge cards for a math solver.
Block: tier={tier}, domain={domain}. Cards already in this block: {titles}.
The solver failed on the problem below. Distil the missing knowledge into at most 2 NEW reusable cards
(a general lemma, invariant, decomposition schema or verification rule — not this problem's solution).
Reply with JSON only: {{"cards": [{{"type": "lemma|invariant|decomposition|verification", "title": "...",
"body": "..."}}]}}  (an empty list if nothing general is missing).

Problem: {problem}
{gold}Solver's answers: {wrong}
Excerpt of one failed attempt:
{excerpt}"""


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def similarity(a: Card, b: Card) -> float:
    """Jaccard similarity of the word sets of two cards' title + body (0..1)."""
    wa, wb = _words(a.title + " " + a.body), _words(b.title + " " + b.body)
    return len(wa & wb) / len(wa | wb) if wa | wb else 1.0


def is_failed(trace: dict[str, Any]) -> bool:
    """A trace ADD learns from: wrong against gold, or (no gold) no tier agreed."""
    if trace.get("correct") is not None:
        return trace["correct"] is False
    return trace.get("exit_tier") == "fallback"


def _block_cards(tree: Tree, tier: str, domain: str) -> list[Card]:
    d = card_dir(tier, domain)
    out = []
    for p in block_paths(tree, tier, domain):
        if p.startswith(d + "/"):
            try:
                out.append(read_card(tree, p))
            except (OSError, UnicodeDecodeError, CardFormatError):
                continue
    return out


def _json_reply(text: str) -> Any:
    m = re.search(r"\{.*\}", text, re.DOTALL)
    if not m:
        raise ValueError("no JSON object in reply")
    return json.loads(m.group(0))


def _ask(llm: ChatClient, prompt: str, check) -> Any:
    """One JSON request with one retry on invalid output; ``None`` if both fail."""
    for _ in range(2):
        try:
            return check(_json_reply(llm.chat([{"role": "user", "content": prompt}], temperature=0.2).text))
        except (ValueError, KeyError, TypeError, CardFormatError, LLMError):
            continue
    return None


def _check_cards(obj: Any) -> list[dict[str, str]]:
    out = []
    for c in obj["cards"]:
        if c["type"] not in CARD_TYPES or not str(c["title"]).strip() or not str(c["body"]).strip():
            raise ValueError("bad card")
        out.append(
            {
                "type": c["type"],
                "title": str(c["title"]).strip()[:120],
                "body": str(c["body"]).strip()[:MAX_BODY_CHARS],
            }
        )
    return out


def _teacher_prompt(t: dict[str, Any], tier: str, domain: str, existing: list[Card]) -> str:
    atts = [a for rec in t.get("tiers", []) for a in rec.get("attempts", [])]
    excerpt = next((a.get("text", "") for a in reversed(atts) if a.get("text")), "")[-1500:]
    return TEACHER_PROMPT.format(
        tier=tier,
        domain=domain,
        titles=[c.title for c in existing] or "none",
        problem=t.get("problem", ""),
        gold=f"Correct answer: {t['gold']}\n" if t.get("gold") else "",
        wrong=[a.get("answer") for a in atts],
        excerpt=excerpt,
    )


def _place(tree: Tree, log: ChangeLog, card: Card, existing: list[Card], by: str) -> dict[str, Any]:
    """Write a proposed card, or — when it repeats a card of its block — add its provenance there."""
    prov = card.provenance[0]
    dup = max(existing, key=lambda e: similarity(e, card), default=None)
    if dup is not None and (similarity(dup, card) >= DUPLICATE_JACCARD or dup.id == card.id):
        if prov not in dup.provenance:
            dup.provenance.append(prov)
        return log.change(
            "dedupe",
            [dup.path],
            lambda: write_card(tree, dup),
            path=dup.path,
            duplicate_title=card.title,
            trace=prov,
            by=by,
        )
    existing.append(card)
    return log.change(
        "add",
        [card.path],
        lambda: write_card(tree, card),
        path=card.path,
        block=[card.tier, card.domain],
        trace=prov,
        by=by,
    )


def add(tree: Tree, traces: list[dict[str, Any]], teacher: ChatClient) -> list[dict[str, Any]]:
    """ADD: per block, distil failed traces into new cards, de-duplicated within the block.

    Returns the audit records written. A proposed card that repeats one of its block
    (:data:`DUPLICATE_JACCARD`, or the same id) is not written; its provenance joins the existing card
    (op ``dedupe``).
    """
    log = ChangeLog(tree)
    records: list[dict[str, Any]] = []
    by_block: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for t in traces:
        if not is_failed(t):
            continue
        tier = {"medium": "medium", "hard": "hard", "fallback": "hard"}.get(t.get("exit_tier", ""))
        if tier is None:
            records.append(log.note("skip", trace=t.get("problem_id"), reason="easy exit reads no cards"))
            continue
        by_block[(tier, t["domain"])].append(t)
    by = f"teacher:{teacher.model}"
    for (tier, domain), items in sorted(by_block.items()):
        existing = _block_cards(tree, tier, domain)
        for t in items[:MAX_TRACES_PER_BLOCK]:
            got = _ask(teacher, _teacher_prompt(t, tier, domain, existing), _check_cards)
            if got is None:
                records.append(log.note("skip", trace=t.get("problem_id"), reason="teacher output invalid"))
                continue
            prov = f"trace:{t.get('problem_id') or 'anon'}"
            for c in got:
                card = Card(
                    id=new_card_id(c["title"], c["body"]),
                    type=c["type"],
                    tier=tier,
                    domain=domain,
                    title=c["title"],
                    body=c["body"],
                    provenance=[prov],
                )
                records.append(_place(tree, log, card, existing, by))
    return records
