"""Offline learning of the card tree: ADD (a teacher distils failed traces) and REFINE (a curator
re-scores, edits, relocates, merges and demotes cards) — KACE §2 "Offline learning".

Both change the tree only through :class:`libraryfs.fs.tree.Tree` file operations (write, rename) and append
one JSON line per change to ``cards/AUDIT.jsonl``::

    {"time": 1767225600.0, "op": "add|merge|rescore|edit|relocate|demote|skip", "path": ..., ...}

Failed trace: ``correct is False``, or — without a gold answer — an exit at the fallback (no tier agreed).
Its block is (exit tier, domain), with fallback → hard. Failures that exited at *easy* (two attempts
agreed on a wrong answer) are skipped and audited: the easy tier reads no cards, so no card can reach them.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from typing import Any

from libraryfs.features.cards.cards import (
    AUDIT_PATH,
    CARD_TYPES,
    UNIVERSAL,
    Card,
    CardFormatError,
    all_card_paths,
    attic_path,
    block_paths,
    card_dir,
    card_path,
    new_card_id,
    read_card,
    write_card,
)
from libraryfs.features.cards.llm import CallError, ChatLLM
from libraryfs.fs.tree import Tree

#: Two cards of one block whose word sets overlap at least this much (Jaccard) are duplicates.
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

CURATOR_PROMPT = """You curate knowledge cards for a math solver. This card was read {uses} times; the problem
was solved {helped} times and not solved {hurt} times. Rewrite it to be more precise and more useful
(same topic). Reply with JSON only: {{"title": "...", "body": "..."}}

Type: {type}. Title: {title}
{body}"""


def audit(tree: Tree, op: str, **fields: Any) -> dict[str, Any]:
    """Append one audit record (a JSON line) to ``cards/AUDIT.jsonl``; returns it."""
    rec = {"time": round(time.time(), 3), "op": op, **fields}
    tree.append_bytes(AUDIT_PATH, (json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n").encode())
    return rec


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


def _ask(llm: ChatLLM, prompt: str, check) -> Any:
    """One JSON request with one retry on invalid output; ``None`` if both fail."""
    for _ in range(2):
        try:
            return check(_json_reply(llm.chat([{"role": "user", "content": prompt}], temperature=0.2).text))
        except (ValueError, KeyError, TypeError, CardFormatError, CallError):
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


def add(tree: Tree, traces: list[dict[str, Any]], teacher: ChatLLM) -> list[dict[str, Any]]:
    """ADD: per block, distil failed traces into new cards, de-duplicated within the block.

    Returns the audit records written. A new card that duplicates one of its block
    (:data:`DUPLICATE_JACCARD`) is not written; its provenance is merged into the existing card instead.
    """
    records: list[dict[str, Any]] = []
    by_block: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for t in traces:
        if not is_failed(t):
            continue
        tier = {"medium": "medium", "hard": "hard", "fallback": "hard"}.get(t.get("exit_tier", ""))
        if tier is None:
            records.append(audit(tree, "skip", trace=t.get("problem_id"), reason="easy exit reads no cards"))
            continue
        by_block[(tier, t["domain"])].append(t)
    for (tier, domain), items in sorted(by_block.items()):
        existing = _block_cards(tree, tier, domain)
        for t in items[:MAX_TRACES_PER_BLOCK]:
            atts = [a for rec in t.get("tiers", []) for a in rec.get("attempts", [])]
            excerpt = next((a.get("text", "") for a in reversed(atts) if a.get("text")), "")[-1500:]
            prompt = TEACHER_PROMPT.format(
                tier=tier,
                domain=domain,
                titles=[c.title for c in existing] or "none",
                problem=t.get("problem", ""),
                gold=f"Correct answer: {t['gold']}\n" if t.get("gold") else "",
                wrong=[a.get("answer") for a in atts],
                excerpt=excerpt,
            )
            got = _ask(teacher, prompt, _check_cards)
            prov = f"trace:{t.get('problem_id') or 'anon'}"
            if got is None:
                records.append(
                    audit(tree, "skip", trace=t.get("problem_id"), reason="teacher output invalid")
                )
                continue
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
                dup = max(existing, key=lambda e: similarity(e, card), default=None)
                if dup is not None and (similarity(dup, card) >= DUPLICATE_JACCARD or dup.id == card.id):
                    if prov not in dup.provenance:
                        dup.provenance.append(prov)
                        write_card(tree, dup)
                    records.append(
                        audit(
                            tree,
                            "merge",
                            path=dup.path,
                            duplicate_title=card.title,
                            trace=prov,
                            by=f"teacher:{teacher.model}",
                        )
                    )
                    continue
                write_card(tree, card)
                existing.append(card)
                records.append(
                    audit(
                        tree,
                        "add",
                        path=card.path,
                        block=[tier, domain],
                        trace=prov,
                        by=f"teacher:{teacher.model}",
                    )
                )
    return records


def moves(tree: Tree) -> dict[str, str]:
    """Where each moved card went, from the audit log: ``{old path: current path}`` (chains followed)."""
    if not tree.exists(AUDIT_PATH):
        return {}
    step: dict[str, str] = {}
    for line in tree.read_bytes(AUDIT_PATH).decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
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


def score(traces: list[dict[str, Any]], moved: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """How the solver used each card, by the path it was read at:
    ``{path: {"uses", "helped", "hurt", "domains": {d: n}}}``.

    ``moved`` maps paths read in old traces to the cards' current paths (:func:`moves`).
    One use per (trace, card). Helped: the trace was correct (gold known) or, without gold, the tier that
    read the card exited on agreement. Hurt: otherwise.
    """
    out: dict[str, dict[str, Any]] = {}
    for t in traces:
        seen = set()
        for rec in t.get("tiers", []):
            for p in rec.get("cards", []):
                p = (moved or {}).get(p, p)
                if p in seen:
                    continue
                seen.add(p)
                ok = t["correct"] if t.get("correct") is not None else t.get("exit_tier") == rec.get("tier")
                s = out.setdefault(p, {"uses": 0, "helped": 0, "hurt": 0, "domains": defaultdict(int)})
                s["uses"] += 1
                s["helped" if ok else "hurt"] += 1
                s["domains"][t.get("domain", "")] += 1
    return out


def refine(
    tree: Tree,
    traces: list[dict[str, Any]],
    curator: ChatLLM | None = None,
    min_uses: int = 3,
    demote_below: float = 0.34,
    relocate_share: float = 0.8,
) -> list[dict[str, Any]]:
    """REFINE: re-score every live card from ``traces`` (counts replace the old ones), then

    1. merge near-duplicates within a block (the better-scored card keeps both provenances, the other is
       demoted);
    2. demote cards read ≥ ``min_uses`` times whose helped share is < ``demote_below`` (moved to the attic);
    3. relocate a universal card when ≥ ``relocate_share`` of its ≥ ``min_uses`` uses come from one
       domain, to the hard block of that domain;
    4. with a ``curator`` LLM, rewrite the remaining weak cards (helped share < 0.5, ≥ ``min_uses`` uses).

    Returns the audit records written.
    """
    stats = score(traces, moves(tree))
    records: list[dict[str, Any]] = []
    cards = []
    for p in all_card_paths(tree):
        try:
            cards.append(read_card(tree, p))
        except (OSError, UnicodeDecodeError, CardFormatError) as e:
            records.append(audit(tree, "skip", path=p, reason=f"unreadable card: {e}"))
    for c in cards:
        s = stats.get(c.path, {"uses": 0, "helped": 0, "hurt": 0})
        if (c.uses, c.helped, c.hurt) != (s["uses"], s["helped"], s["hurt"]):
            old = [c.uses, c.helped, c.hurt]
            c.uses, c.helped, c.hurt = s["uses"], s["helped"], s["hurt"]
            write_card(tree, c)
            records.append(audit(tree, "rescore", path=c.path, old=old, new=[c.uses, c.helped, c.hurt]))
    gone: set[str] = set()
    rank = sorted(cards, key=lambda c: (-(c.helped - c.hurt), c.id))
    for i, keep in enumerate(rank):
        if keep.path in gone:
            continue
        for other in rank[i + 1 :]:
            if other.path in gone or (other.tier, other.domain) != (keep.tier, keep.domain):
                continue
            if similarity(keep, other) >= DUPLICATE_JACCARD:
                keep.provenance += [p for p in other.provenance if p not in keep.provenance]
                write_card(tree, keep)
                tree.rename(other.path, attic_path(other))
                gone.add(other.path)
                records.append(audit(tree, "merge", path=keep.path, demoted=other.path, to=attic_path(other)))
    for c in cards:
        if c.path in gone:
            continue
        if c.uses >= min_uses and c.helped / c.uses < demote_below:
            tree.rename(c.path, attic_path(c))
            gone.add(c.path)
            records.append(audit(tree, "demote", path=c.path, to=attic_path(c), uses=c.uses, helped=c.helped))
            continue
        doms = stats.get(c.path, {}).get("domains", {})
        if c.tier == UNIVERSAL and c.uses >= min_uses and doms:
            dom, n = max(sorted(doms.items()), key=lambda kv: kv[1])
            if n / c.uses >= relocate_share and dom:
                src = c.path
                c.tier, c.domain = "hard", dom
                if tree.exists(card_path("hard", dom, c.id)):
                    c.tier = c.domain = UNIVERSAL
                else:
                    write_card(tree, c)
                    tree.remove(src)
                    gone.add(src)
                    records.append(audit(tree, "relocate", path=src, to=c.path, share=round(n / c.uses, 3)))
                    continue
        if curator is not None and c.uses >= min_uses and c.helped / c.uses < 0.5:
            got = _ask(
                curator,
                CURATOR_PROMPT.format(
                    uses=c.uses, helped=c.helped, hurt=c.hurt, type=c.type, title=c.title, body=c.body
                ),
                lambda o: (str(o["title"]).strip()[:120], str(o["body"]).strip()[:MAX_BODY_CHARS]),
            )
            if got and all(got) and got != (c.title, c.body):
                c.title, c.body = got
                write_card(tree, c)
                records.append(audit(tree, "edit", path=c.path, by=f"curator:{curator.model}"))
    return records
