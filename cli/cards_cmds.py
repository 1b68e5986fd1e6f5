"""Commands of the card tree (KACE, PAPERS.md §2): ``libraryfs solve`` and ``libraryfs cards
add|refine|revert|log|seed|block|sim|replay|bench``.

The tree is a library's (``--library DIR`` / ``LIBRARYFS_LIBRARY`` → :func:`libraryfs.fs.tree.open_tree`) or a
plain directory (``--tree DIR``: a mountpoint, or any directory). The model is reached through the shared
chat client (:func:`libraryfs.llm.client_for`; flags ``--llm-base-url``, ``--llm-model``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from libraryfs.cli.common import close_tree, needs_feature, open_tree
from libraryfs.cli.options import (
    FiniteFloat,
    llm_field_overrides,
    llm_options,
    setting_overrides,
    tree_options,
)
from libraryfs.errors import LibraryError
from libraryfs.features.cards import cards as cardsmod
from libraryfs.llm import client_for

if TYPE_CHECKING:
    from libraryfs.llm.client import ChatClient

#: What the card solver prefers where the user set nothing: sampled answers (self-consistency) and long
#: worked solutions (a longer request timeout than the indexer's one-line summaries).
CARD_LLM_DEFAULTS = {"temperature": 0.7, "timeout_s": 120.0}


def card_client(
    library_dir: str | None, kwargs: dict[str, Any], temperature: float | None = None
) -> ChatClient:
    """The shared chat client for the card commands from their ``--llm-*`` flags (popped from ``kwargs``),
    the environment and the library's ``config.toml``; :data:`CARD_LLM_DEFAULTS` where nothing is set.
    Raises ``click.ClickException`` (one line) when no endpoint is configured or a setting is bad."""
    fields = llm_field_overrides(setting_overrides(kwargs))
    if temperature is not None:
        fields["temperature"] = temperature
    try:
        return client_for(library_dir, fields, defaults=CARD_LLM_DEFAULTS, required=True)
    except LibraryError as e:
        raise click.ClickException(str(e)) from None


def _read_traces(paths: tuple[str, ...]) -> list[dict[str, Any]]:
    from libraryfs.features.cards.solver import read_traces

    out = []
    for p in paths:
        try:
            out += read_traces(p)
        except (OSError, ValueError) as e:
            raise click.ClickException(str(e)) from None
    return out


@click.command("solve")
@click.argument("problem")
@click.option("--domain", default=None, help="Block domain (default: the keyword classifier's).")
@click.option("--gold", default=None, help="Known answer: the trace then records correct true/false.")
@click.option("--id", "problem_id", default=None, help="Problem id recorded in the trace.")
@click.option(
    "--trace-out", type=click.Path(dir_okay=False), default=None, help="Append the JSONL trace here."
)
@click.option(
    "--temperature", type=FiniteFloat(min=0), default=None, help="Sampling temperature [default: 0.7]."
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole trace as JSON.")
@tree_options
@llm_options
@needs_feature("cards")
def solve_cmd(
    problem,
    domain,
    gold,
    problem_id,
    trace_out,
    temperature,
    as_json,
    library_dir,
    tree_dir,
    **kwargs,
):
    """Solve PROBLEM with tiered self-consistency, reading only its (tier, domain) block of cards."""
    from libraryfs.features.cards.solver import solve

    if domain:
        try:
            cardsmod.check_slug(domain, "domain")
        except cardsmod.CardFormatError as e:
            raise click.ClickException(str(e)) from None
    tree = open_tree(library_dir, tree_dir, required=False, what="card tree")
    try:
        trace = solve(
            problem,
            tree,
            card_client(library_dir, kwargs, temperature),
            domain=domain,
            problem_id=problem_id,
            gold=gold,
        )
    finally:
        close_tree(tree)
    if trace_out:
        with open(trace_out, "a", encoding="utf-8") as f:
            f.write(json.dumps(trace, ensure_ascii=False) + "\n")
    if as_json:
        click.echo(json.dumps(trace, indent=2, ensure_ascii=False))
        return
    click.echo(f"answer: {trace['answer']}")
    click.echo(
        f"exit tier: {trace['exit_tier']}  domain: {trace['domain']}  calls: {trace['calls']}  "
        f"tokens: {trace['prompt_tokens']}+{trace['completion_tokens']}"
    )
    click.echo(f"cards read: {len(trace['cards_read'])}")
    for p in trace["cards_read"]:
        click.echo(f"  {p}")


@click.group("cards")
def cards_group():
    """The epistemic tree of knowledge cards: learn, seed, inspect, evaluate."""


@cards_group.command("add")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@tree_options
@llm_options
@needs_feature("cards")
def add_cmd(traces, library_dir, tree_dir, **kwargs):
    """ADD: a teacher model distils failed TRACES (JSONL) into new cards, per block."""
    from libraryfs.features.cards.learn import add

    tree = open_tree(library_dir, tree_dir, what="card tree")
    try:
        recs = add(tree, _read_traces(traces), card_client(library_dir, kwargs))
    finally:
        close_tree(tree)
    _summary(recs)


@cards_group.command("refine")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--min-evidence",
    type=FiniteFloat(min=0, min_open=True),
    default=3.0,
    show_default=True,
    help="Net trace evidence (problems) a merge, demotion or relocation needs.",
)
@click.option(
    "--curator/--no-curator", default=False, help="Let the LLM rewrite cards with some hurt evidence."
)
@tree_options
@llm_options
@needs_feature("cards")
def refine_cmd(traces, min_evidence, curator, library_dir, tree_dir, **kwargs):
    """REFINE: re-score the cards TRACES read; merge, demote, relocate only on trace evidence."""
    from libraryfs.features.cards.refine import refine

    tree = open_tree(library_dir, tree_dir, what="card tree")
    try:
        llm = card_client(library_dir, kwargs) if curator else None
        recs = refine(tree, _read_traces(traces), llm, min_evidence=min_evidence)
    finally:
        close_tree(tree)
    _summary(recs)


@cards_group.command("revert")
@click.argument("change_ids", nargs=-1)
@click.option(
    "--last", type=click.IntRange(min=1), default=None, help="Revert the last N changes (reverts excluded)."
)
@tree_options
@needs_feature("cards")
def revert_cmd(change_ids, last, library_dir, tree_dir):
    """Undo CHANGE_IDS (ids from `libraryfs cards log`; a run id undoes its whole run) or the last N changes,
    restoring each file's exact bytes. Nothing is written if a file changed since (exit 1)."""
    from libraryfs.features.cards.audit import RevertError, revert

    if bool(change_ids) == (last is not None):
        raise click.UsageError("give CHANGE_ID... or --last N (not both)")
    tree = open_tree(library_dir, tree_dir)
    try:
        recs = revert(tree, list(change_ids), last)
    except RevertError as e:
        raise click.ClickException(str(e)) from None
    finally:
        close_tree(tree)
    for r in recs:
        click.echo(
            f"reverted {r['reverts']} ({r['reverted_op']}): " + ", ".join(f["path"] for f in r["files"])
        )
    click.echo(f"changes: revert {len(recs)}  (audit: {cardsmod.AUDIT_PATH})")


@cards_group.command("log")
@click.option(
    "--last",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Show the last N records (0: all).",
)
@tree_options
@needs_feature("cards")
def log_cmd(last, library_dir, tree_dir):
    """List the audit log's changes: id, op, path, and whether a revert undid them."""
    from libraryfs.features.cards.audit import active_ids, records

    tree = open_tree(library_dir, tree_dir)
    try:
        recs = records(tree)
    finally:
        close_tree(tree)
    active = active_ids(recs)
    for r in recs[-last:] if last > 0 else recs:
        state = "" if not r.get("id") or r["id"] in active else "  [reverted]"
        what = r.get("path") or r.get("reverts") or r.get("trace") or ""
        to = f" -> {r['to']}" if r.get("to") else ""
        click.echo(f"{r.get('id', '-'):<26} {r['op']:<9}{what}{to}{state}")


def _summary(recs: list[dict[str, Any]]) -> None:
    counts: dict[str, int] = {}
    for r in recs:
        counts[r["op"]] = counts.get(r["op"], 0) + 1
        click.echo(
            f"{r.get('id', ''):<26} {r['op']:<9}{r.get('path') or r.get('trace') or ''}"
            + (f" -> {r['to']}" if r.get("to") else "")
            + (f"  ({r['reason']})" if r.get("reason") else "")
        )
    click.echo(
        "changes: "
        + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none")
        + f"  (audit: {cardsmod.AUDIT_PATH})"
    )


@cards_group.command("block")
@click.argument("tier", type=click.Choice(cardsmod.TIERS))
@click.argument("domain")
@tree_options
@needs_feature("cards")
def block_cmd(tier, domain, library_dir, tree_dir):
    """Print the exact card paths block (TIER, DOMAIN) reads, in order."""
    tree = open_tree(library_dir, tree_dir, what="card tree")
    try:
        paths = cardsmod.block_paths(tree, tier, cardsmod.check_slug(domain, "domain"))
    except cardsmod.CardFormatError as e:
        raise click.ClickException(str(e)) from None
    finally:
        close_tree(tree)
    for p in paths:
        click.echo(p)


commands: list = [solve_cmd, cards_group]
