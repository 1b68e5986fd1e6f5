"""REFINE: a curator pass over the card tree that changes a card only on trace evidence (KACE §2).

Given solver traces (JSONL, :mod:`libraryfs.features.cards.solver`), REFINE

1. **re-scores** ``uses/helped/hurt`` of the cards the traces read. Counts accumulate: a trace already
   counted into a card (its key is in an active ``rescore`` record of the audit log) is not counted again,
   so a second pass over the same traces changes nothing, and a card no trace read keeps its bytes.
   These counts are co-occurrence only (every card of a block is read together); no decision uses them.
2. **merges** two cards of one directory only on interchangeable-use evidence
   (:func:`evidence.substitutions`: support − contra ≥ ``min_evidence``). The card with more net help keeps
   both provenances; the other moves to the attic.
3. **demotes** a card (to the attic) only when its net hurt evidence (:func:`evidence.card_evidence`:
   hurt − help) is ≥ ``min_evidence`` — failed readings that held it against succeeded readings of the same
   problems that did not, each problem weighted by 1/(number of cards that differ).
4. **relocates** a universal card to one domain's blocks (the tiers where its help was seen) when its net
   help in that domain and its net hurt in the others are each ≥ ``min_evidence``.
5. with a ``curator`` LLM, **rewrites** cards with some net hurt evidence below the demotion threshold.

Every change goes through :class:`audit.ChangeLog` (bytes before, reversible with :func:`audit.revert`).
Nothing else in the tree is touched: a block no trace read is left byte-identical.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from libraryfs.features.cards import answers
from libraryfs.features.cards.audit import ChangeLog, counted, moves
from libraryfs.features.cards.cards import (
    UNIVERSAL,
    Card,
    CardFormatError,
    all_card_paths,
    attic_path,
    card_path,
    read_card,
    write_card,
)
from libraryfs.features.cards.evidence import (
    CardEvidence,
    Reading,
    card_evidence,
    readings,
    substitutions,
    trace_key,
)
from libraryfs.features.cards.learn import MAX_BODY_CHARS, _ask
from libraryfs.fs.tree import Tree
from libraryfs.llm.client import ChatClient

#: Net evidence (in problems; see evidence.py) a merge, demotion or relocation needs.
MIN_EVIDENCE = 3.0

CURATOR_PROMPT = """You curate knowledge cards for a math solver. On {hurt:.1f} problems the solver failed
with this card where it succeeded without it (and the reverse on {help:.1f}). Rewrite it to be more precise
and more useful (same topic). Reply with JSON only: {{"title": "...", "body": "..."}}

Type: {type}. Title: {title}
{body}"""


def score(
    traces: list[dict[str, Any]], moved: dict[str, str] | None = None, skip: dict[str, set[str]] | None = None
) -> dict[str, dict[str, Any]]:
    """How the solver used each card, by current path: ``{path: {"uses", "helped", "hurt", "domains",
    "traces"}}``, counting each (trace, card) once and leaving out trace keys in ``skip[path]``.

    Helped: the trace was correct (gold known) or, without gold, the tier that read the card exited on
    agreement. Hurt: otherwise. ``moved`` maps paths read in old traces to current ones (:func:`audit.moves`).
    """
    out: dict[str, dict[str, Any]] = {}
    for t in traces:
        key = trace_key(t)
        seen = set()
        for rec in t.get("tiers", []):
            for p in rec.get("cards", []):
                p = (moved or {}).get(p, p)
                if p in seen or key in (skip or {}).get(p, ()):
                    continue
                seen.add(p)
                ok = t["correct"] if t.get("correct") is not None else t.get("exit_tier") == rec.get("tier")
                s = out.setdefault(
                    p, {"uses": 0, "helped": 0, "hurt": 0, "domains": defaultdict(int), "traces": []}
                )
                s["uses"] += 1
                s["helped" if ok else "hurt"] += 1
                s["domains"][t.get("domain", "")] += 1
                s["traces"].append(key)
    return out


def _live_cards(tree: Tree, log: ChangeLog, notes: list[dict[str, Any]]) -> dict[str, Card]:
    out = {}
    for p in all_card_paths(tree):
        try:
            out[p] = read_card(tree, p)
        except (OSError, UnicodeDecodeError, CardFormatError) as e:
            notes.append(log.note("skip", path=p, reason=f"unreadable card: {e}"))
    return out


def _rescore(tree: Tree, log: ChangeLog, cards: dict[str, Card], traces, moved) -> list[dict[str, Any]]:
    out = []
    for path, s in sorted(score(traces, moved, counted(tree, moved)).items()):
        c = cards.get(path)
        if c is None:
            continue
        old = [c.uses, c.helped, c.hurt]
        c.uses, c.helped, c.hurt = c.uses + s["uses"], c.helped + s["helped"], c.hurt + s["hurt"]
        out.append(
            log.change(
                "rescore",
                [path],
                lambda c=c: write_card(tree, c),
                path=path,
                old=old,
                new=[c.uses, c.helped, c.hurt],
                traces=s["traces"],
            )
        )
    return out


def _merges(tree, log, cards, subs, ev, min_evidence) -> list[dict[str, Any]]:
    out = []
    ranked = sorted(subs.items(), key=lambda kv: (-(kv[1][0] - kv[1][1]), kv[0]))
    for (a, b), (support, contra) in ranked:
        if support - contra < min_evidence or a not in cards or b not in cards:
            continue

        def merit(p: str) -> tuple[float, int, str]:
            """Rank of a card in a merge: (net trace evidence, uses, path); the higher one is kept."""
            e = ev.get(p, CardEvidence())
            return (e.help - e.hurt, cards[p].uses, p)

        keep, other = (a, b) if merit(a) >= merit(b) else (b, a)
        k, o = cards.pop(keep), cards.pop(other)
        k.provenance += [p for p in o.provenance if p not in k.provenance]
        dst = attic_path(o)

        def apply(k: Card = k, o: Card = o, dst: str = dst) -> None:
            """Write the kept card and move the other to the attic (the logged change)."""
            write_card(tree, k)
            tree.rename(o.path, dst)

        out.append(
            log.change(
                "merge",
                [keep, other, dst],
                apply,
                path=keep,
                demoted=other,
                to=dst,
                evidence={"support": round(support, 3), "contra": round(contra, 3)},
            )
        )
        cards[keep] = k  # the kept card stays live (it may merge again); the other is gone
    return out


def _demote(tree, log, cards, ev, min_evidence) -> list[dict[str, Any]]:
    out = []
    for path in sorted(cards):
        e = ev.get(path)
        if e is None or e.net_hurt < min_evidence:
            continue
        c = cards.pop(path)
        dst = attic_path(c)
        out.append(
            log.change(
                "demote",
                [path, dst],
                lambda path=path, dst=dst: tree.rename(path, dst),
                path=path,
                to=dst,
                evidence={"hurt": round(e.hurt, 3), "help": round(e.help, 3)},
            )
        )
    return out


def _relocation(e: CardEvidence, min_evidence: float) -> tuple[str, list[str]] | None:
    """(domain, tiers) a universal card's evidence confines it to, or None."""
    net = {d: h - k for d, (k, h) in e.by_domain.items()}  # net help per domain
    for dom, gain in sorted(net.items(), key=lambda kv: (-kv[1], kv[0])):
        elsewhere = -sum(v for d, v in net.items() if d != dom)
        if not dom or gain < min_evidence or elsewhere < min_evidence:
            return None
        tiers = sorted({"hard" if t == "fallback" else t for (d, t) in e.help_tiers if d == dom})
        tiers = [t for t in tiers if t in ("medium", "hard")]
        return (dom, tiers) if tiers else None
    return None


def _relocate(tree, log, cards, ev, min_evidence) -> list[dict[str, Any]]:
    out = []
    for path in sorted(cards):
        c, e = cards[path], ev.get(path)
        if c.tier != UNIVERSAL or e is None:
            continue
        where = _relocation(e, min_evidence)
        if where is None:
            continue
        dom, tiers = where
        targets = [card_path(t, dom, c.id) for t in tiers]
        if any(tree.exists(t) for t in targets):
            out.append(log.note("skip", path=path, reason=f"relocation target exists: {targets}"))
            continue
        copies = [Card(**{**c.__dict__, "tier": t, "domain": dom}) for t in tiers]

        def apply(path: str = path, copies: list[Card] = copies) -> None:
            """Write the per-tier copies and remove the original (the logged change)."""
            for cp in copies:
                write_card(tree, cp)
            tree.remove(path)

        del cards[path]
        out.append(
            log.change(
                "relocate",
                [path, *targets],
                apply,
                path=path,
                to=targets[-1],
                targets=targets,
                evidence={d: [round(x, 3) for x in v] for d, v in sorted(e.by_domain.items())},
            )
        )
    return out


def _edit(tree, log, cards, ev, curator: ChatClient, min_evidence) -> list[dict[str, Any]]:
    out = []
    for path in sorted(cards):
        c, e = cards[path], ev.get(path)
        if e is None or not 0 < e.net_hurt < min_evidence:
            continue
        prompt = CURATOR_PROMPT.format(hurt=e.hurt, help=e.help, type=c.type, title=c.title, body=c.body)
        got = _ask(
            curator,
            prompt,
            lambda o: (str(o["title"]).strip()[:120], str(o["body"]).strip()[:MAX_BODY_CHARS]),
        )
        if got and all(got) and got != (c.title, c.body):
            c.title, c.body = got
            out.append(
                log.change(
                    "edit", [path], lambda c=c: write_card(tree, c), path=path, by=f"curator:{curator.model}"
                )
            )
    return out


def evidence_of(
    tree: Tree, traces: list[dict[str, Any]]
) -> tuple[list[Reading], dict[str, CardEvidence], dict[tuple[str, str], list[float]]]:
    """The readings, per-card evidence and pair substitutions REFINE would act on (read-only)."""
    cache: dict[tuple[str, str], bool] = {}

    def equiv(gold: Any, ans: Any) -> bool:
        """Whether answer ``ans`` equals ``gold`` (math-verify, memoised per pair of strings)."""
        k = (str(gold), str(ans))
        if k not in cache:
            cache[k] = answers.equivalent(gold, ans)
        return cache[k]

    rs = readings(traces, moves(tree), equiv)
    return rs, card_evidence(rs), substitutions(rs)


def refine(
    tree: Tree,
    traces: list[dict[str, Any]],
    curator: ChatClient | None = None,
    min_evidence: float = MIN_EVIDENCE,
) -> list[dict[str, Any]]:
    """REFINE the tree from ``traces`` (see module docstring); returns the audit records written, in order.

    ``min_evidence`` (problems, > 0) is the net evidence a merge, demotion or relocation needs. Raises
    ``ValueError`` on ``min_evidence <= 0`` (a change without evidence is what REFINE must never make).
    """
    if min_evidence <= 0:
        raise ValueError("min_evidence must be > 0")
    log = ChangeLog(tree)
    moved = moves(tree)
    recs: list[dict[str, Any]] = []
    cards = _live_cards(tree, log, recs)
    recs += _rescore(tree, log, cards, traces, moved)
    _, ev, subs = evidence_of(tree, traces)
    recs += _merges(tree, log, cards, subs, ev, min_evidence)
    recs += _demote(tree, log, cards, ev, min_evidence)
    recs += _relocate(tree, log, cards, ev, min_evidence)
    if curator is not None:
        recs += _edit(tree, log, cards, ev, curator, min_evidence)
    return recs
