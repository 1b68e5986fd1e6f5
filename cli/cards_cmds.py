"""Commands of the card tree (KACE, PAPERS.md §2): ``libraryfs solve`` and ``libraryfs cards
add|refine|revert|log|seed|block|sim|replay|bench``.

The tree is a library's (``--library DIR`` / ``LIBRARYFS_LIBRARY`` → ``libraryfs.layout.open_tree``) or a
plain directory (``--tree DIR``: a mountpoint, or any directory).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

import click

from libraryfs.errors import LibraryError
from libraryfs.features.cards import cards as cardsmod
from libraryfs.fs.tree import DirTree, Tree

_LLM_ENV = {
    "base_url": "LIBRARYFS_LLM_BASE_URL",
    "model": "LIBRARYFS_LLM_MODEL",
    "api_key": "LIBRARYFS_LLM_API_KEY",
}


def _tree_options(f):
    f = click.option(
        "--tree",
        "tree_dir",
        type=click.Path(file_okay=False),
        help="A plain directory holding cards/ (e.g. a mountpoint).",
    )(f)
    f = click.option(
        "--library",
        "library_dir",
        envvar="LIBRARYFS_LIBRARY",
        type=click.Path(file_okay=False),
        help="Library directory (env LIBRARYFS_LIBRARY).",
    )(f)
    return f


def _llm_options(prefix: str = ""):
    def deco(f):
        f = click.option(
            f"--{prefix}api-key",
            f"{prefix.replace('-', '_')}api_key",
            default=None,
            help="API key (env LIBRARYFS_LLM_API_KEY).",
        )(f)
        f = click.option(
            f"--{prefix}model",
            f"{prefix.replace('-', '_')}model",
            default=None,
            help="Model name (env LIBRARYFS_LLM_MODEL).",
        )(f)
        f = click.option(
            f"--{prefix}base-url",
            f"{prefix.replace('-', '_')}base_url",
            default=None,
            help="OpenAI-compatible base URL (env LIBRARYFS_LLM_BASE_URL).",
        )(f)
        return f

    return deco


def open_tree(library_dir: str | None, tree_dir: str | None, required: bool = True) -> Tree | None:
    """The card tree: ``--tree`` as a plain directory, else the library's tree via
    ``libraryfs.layout.open_tree``. Raises ``click.ClickException`` when neither is usable."""
    if tree_dir:
        os.makedirs(tree_dir, exist_ok=True)
        return DirTree(tree_dir)
    if library_dir:
        try:
            lib = importlib.import_module("libraryfs.layout")
            return lib.open_tree(library_dir)
        except (ImportError, AttributeError):
            raise click.ClickException(
                "this build cannot open a library directly: use --tree MOUNTPOINT"
            ) from None
        except (OSError, ValueError, LibraryError) as e:
            raise click.ClickException(f"cannot open library {library_dir}: {e}") from None
    if required:
        raise click.ClickException("no card tree: give --library DIR (or LIBRARYFS_LIBRARY) or --tree DIR")
    return None


def _close(tree: Tree | None) -> None:
    """Close a store-backed tree (``StoreTree.close``); a DirTree needs nothing."""
    close = getattr(tree, "close", None)
    if close is not None:
        close()


def _llm(base_url, model, api_key, **kw):
    from libraryfs.features.cards.llm import ChatLLM, LLMConfigError

    try:
        return ChatLLM(base_url, model, api_key, **kw)
    except LLMConfigError as e:
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


def _write_json(path: str | None, obj: Any) -> None:
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2)
        click.echo(f"wrote {path}")


@click.command("solve")
@click.argument("problem")
@click.option("--domain", default=None, help="Block domain (default: the keyword classifier's).")
@click.option("--gold", default=None, help="Known answer: the trace then records correct true/false.")
@click.option("--id", "problem_id", default=None, help="Problem id recorded in the trace.")
@click.option(
    "--trace-out", type=click.Path(dir_okay=False), default=None, help="Append the JSONL trace here."
)
@click.option("--temperature", type=float, default=0.7, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the whole trace as JSON.")
@_tree_options
@_llm_options()
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
    base_url,
    model,
    api_key,
):
    """Solve PROBLEM with tiered self-consistency, reading only its (tier, domain) block of cards."""
    from libraryfs.features.cards.solver import solve

    if domain:
        try:
            cardsmod.check_slug(domain, "domain")
        except cardsmod.CardFormatError as e:
            raise click.ClickException(str(e)) from None
    tree = open_tree(library_dir, tree_dir, required=False)
    try:
        trace = solve(
            problem,
            tree,
            _llm(base_url, model, api_key, temperature=temperature),
            domain=domain,
            problem_id=problem_id,
            gold=gold,
        )
    finally:
        _close(tree)
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
@_tree_options
@_llm_options()
def add_cmd(traces, library_dir, tree_dir, base_url, model, api_key):
    """ADD: a teacher model distils failed TRACES (JSONL) into new cards, per block."""
    from libraryfs.features.cards.learn import add

    tree = open_tree(library_dir, tree_dir)
    try:
        recs = add(tree, _read_traces(traces), _llm(base_url, model, api_key))
    finally:
        _close(tree)
    _summary(recs)


@cards_group.command("refine")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--min-evidence",
    type=click.FloatRange(min=0, min_open=True),
    default=3.0,
    show_default=True,
    help="Net trace evidence (problems) a merge, demotion or relocation needs.",
)
@click.option(
    "--curator/--no-curator", default=False, help="Let the LLM rewrite cards with some hurt evidence."
)
@_tree_options
@_llm_options()
def refine_cmd(traces, min_evidence, curator, library_dir, tree_dir, base_url, model, api_key):
    """REFINE: re-score the cards TRACES read; merge, demote, relocate only on trace evidence."""
    from libraryfs.features.cards.refine import refine

    tree = open_tree(library_dir, tree_dir)
    try:
        llm = _llm(base_url, model, api_key) if curator else None
        recs = refine(tree, _read_traces(traces), llm, min_evidence=min_evidence)
    finally:
        _close(tree)
    _summary(recs)


@cards_group.command("revert")
@click.argument("change_ids", nargs=-1)
@click.option(
    "--last", type=click.IntRange(min=1), default=None, help="Revert the last N changes (reverts excluded)."
)
@_tree_options
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
        _close(tree)
    for r in recs:
        click.echo(
            f"reverted {r['reverts']} ({r['reverted_op']}): " + ", ".join(f["path"] for f in r["files"])
        )
    click.echo(f"changes: revert {len(recs)}  (audit: {cardsmod.AUDIT_PATH})")


@cards_group.command("log")
@click.option("--last", type=int, default=20, show_default=True, help="Show the last N records (0: all).")
@_tree_options
def log_cmd(last, library_dir, tree_dir):
    """List the audit log's changes: id, op, path, and whether a revert undid them."""
    from libraryfs.features.cards.audit import active_ids, records

    tree = open_tree(library_dir, tree_dir)
    try:
        recs = records(tree)
    finally:
        _close(tree)
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
@_tree_options
def block_cmd(tier, domain, library_dir, tree_dir):
    """Print the exact card paths block (TIER, DOMAIN) reads, in order."""
    tree = open_tree(library_dir, tree_dir)
    try:
        paths = cardsmod.block_paths(tree, tier, cardsmod.check_slug(domain, "domain"))
    except cardsmod.CardFormatError as e:
        raise click.ClickException(str(e)) from None
    finally:
        _close(tree)
    for p in paths:
        click.echo(p)


commands: list = [solve_cmd, cards_group]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(cards_group())
