"""Commands of the card tree (KACE, PAPERS.md §2): ``libraryfs solve`` and ``libraryfs cards
add|refine|seed|block|sim|replay|bench``.

The tree is a library's (``--library DIR`` / ``LIBRARYFS_LIBRARY`` → ``libraryfs.library.open_tree``) or a
plain directory (``--tree DIR``: a mountpoint, or any directory).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

import click

from libraryfs.cards import cards as cardsmod
from libraryfs.errors import LibraryError
from libraryfs.tree import DirTree, Tree

_LLM_ENV = {"base_url": "LIBRARYFS_LLM_BASE_URL", "model": "LIBRARYFS_LLM_MODEL", "api_key": "LIBRARYFS_LLM_API_KEY"}


def _tree_options(f):
    f = click.option("--tree", "tree_dir", type=click.Path(file_okay=False),
                     help="A plain directory holding cards/ (e.g. a mountpoint).")(f)
    f = click.option("--library", "library_dir", envvar="LIBRARYFS_LIBRARY", type=click.Path(file_okay=False),
                     help="Library directory (env LIBRARYFS_LIBRARY).")(f)
    return f


def _llm_options(prefix: str = ""):
    def deco(f):
        f = click.option(f"--{prefix}api-key", f"{prefix.replace('-', '_')}api_key", default=None,
                         help="API key (env LIBRARYFS_LLM_API_KEY).")(f)
        f = click.option(f"--{prefix}model", f"{prefix.replace('-', '_')}model", default=None,
                         help="Model name (env LIBRARYFS_LLM_MODEL).")(f)
        f = click.option(f"--{prefix}base-url", f"{prefix.replace('-', '_')}base_url", default=None,
                         help="OpenAI-compatible base URL (env LIBRARYFS_LLM_BASE_URL).")(f)
        return f

    return deco


def open_tree(library_dir: str | None, tree_dir: str | None, required: bool = True) -> Tree | None:
    """The card tree: ``--tree`` as a plain directory, else the library's tree via
    ``libraryfs.library.open_tree``. Raises ``click.ClickException`` when neither is usable."""
    if tree_dir:
        os.makedirs(tree_dir, exist_ok=True)
        return DirTree(tree_dir)
    if library_dir:
        try:
            lib = importlib.import_module("libraryfs.library")
            return lib.open_tree(library_dir)
        except (ImportError, AttributeError):
            raise click.ClickException("this build cannot open a library directly: use --tree MOUNTPOINT") from None
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
    from libraryfs.cards.llm import ChatLLM, LLMConfigError

    try:
        return ChatLLM(base_url, model, api_key, **kw)
    except LLMConfigError as e:
        raise click.ClickException(str(e)) from None


def _read_traces(paths: tuple[str, ...]) -> list[dict[str, Any]]:
    from libraryfs.cards.solver import read_traces

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
@click.option("--trace-out", type=click.Path(dir_okay=False), default=None, help="Append the JSONL trace here.")
@click.option("--temperature", type=float, default=0.7, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the whole trace as JSON.")
@_tree_options
@_llm_options()
def solve_cmd(problem, domain, gold, problem_id, trace_out, temperature, as_json, library_dir, tree_dir,
              base_url, model, api_key):
    """Solve PROBLEM with tiered self-consistency, reading only its (tier, domain) block of cards."""
    from libraryfs.cards.solver import solve

    if domain:
        try:
            cardsmod.check_slug(domain, "domain")
        except cardsmod.CardFormatError as e:
            raise click.ClickException(str(e)) from None
    tree = open_tree(library_dir, tree_dir, required=False)
    try:
        trace = solve(problem, tree, _llm(base_url, model, api_key, temperature=temperature), domain=domain,
                      problem_id=problem_id, gold=gold)
    finally:
        _close(tree)
    if trace_out:
        with open(trace_out, "a", encoding="utf-8") as f:
            f.write(json.dumps(trace, ensure_ascii=False) + "\n")
    if as_json:
        click.echo(json.dumps(trace, indent=2, ensure_ascii=False))
        return
    click.echo(f"answer: {trace['answer']}")
    click.echo(f"exit tier: {trace['exit_tier']}  domain: {trace['domain']}  calls: {trace['calls']}  "
               f"tokens: {trace['prompt_tokens']}+{trace['completion_tokens']}")
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
    from libraryfs.cards.learn import add

    tree = open_tree(library_dir, tree_dir)
    try:
        recs = add(tree, _read_traces(traces), _llm(base_url, model, api_key))
    finally:
        _close(tree)
    _summary(recs)


@cards_group.command("refine")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--min-uses", type=int, default=3, show_default=True)
@click.option("--curator/--no-curator", default=False, help="Let the LLM rewrite weak cards.")
@_tree_options
@_llm_options()
def refine_cmd(traces, min_uses, curator, library_dir, tree_dir, base_url, model, api_key):
    """REFINE: re-score cards by how the solver used them (TRACES), merge, relocate, demote, edit."""
    from libraryfs.cards.learn import refine

    tree = open_tree(library_dir, tree_dir)
    try:
        llm = _llm(base_url, model, api_key) if curator else None
        recs = refine(tree, _read_traces(traces), llm, min_uses=min_uses)
    finally:
        _close(tree)
    _summary(recs)


def _summary(recs: list[dict[str, Any]]) -> None:
    counts: dict[str, int] = {}
    for r in recs:
        counts[r["op"]] = counts.get(r["op"], 0) + 1
        click.echo(f"{r['op']:<9}{r.get('path') or r.get('trace') or ''}"
                   + (f" -> {r['to']}" if r.get("to") else "") + (f"  ({r['reason']})" if r.get("reason") else ""))
    click.echo("changes: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none")
               + f"  (audit: {cardsmod.AUDIT_PATH})")


@cards_group.command("seed")
@click.option("--champ", is_flag=True, required=True, help="Seed from champ-dataset's concepts.")
@_tree_options
def seed_cmd(champ, library_dir, tree_dir):
    """Seed the tree with champ-dataset's concepts (needs `pip install champ-dataset`)."""
    from libraryfs.cards.replay import seed_champ

    tree = open_tree(library_dir, tree_dir)
    try:
        paths = seed_champ(tree)
    except ImportError:
        raise click.ClickException("champ-dataset is not installed: pip install champ-dataset") from None
    finally:
        _close(tree)
    click.echo(f"wrote {len(paths)} cards under {cardsmod.ROOT}/")


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


@cards_group.command("sim")
@click.option("--problems", type=int, default=2000, show_default=True)
@click.option("--seeds", type=int, default=5, show_default=True)
@click.option("--alpha", type=float, default=0.6, show_default=True, help="Beta(alpha, beta) solve probability.")
@click.option("--beta", type=float, default=0.6, show_default=True)
@click.option("--card-lift", type=float, default=0.0, show_default=True, help="Cards' share of the gap to 1.")
@click.option("--spread", type=float, default=0.5, show_default=True, help="Wrong-answer spread in (0, 1).")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the result JSON here.")
def sim_cmd(problems, seeds, alpha, beta, card_lift, spread, out):
    """Monte-Carlo: tiered self-consistency vs Best-of-N at equal expected calls."""
    from libraryfs.cards.simulate import SimConfig, format_table, simulate

    if not (0 < spread < 1) or problems < 2 or seeds < 1:
        raise click.ClickException("need 0 < spread < 1, problems >= 2, seeds >= 1")
    res = simulate(SimConfig(problems, seeds, alpha, beta, card_lift, spread))
    click.echo(format_table(res))
    _write_json(out, res)


@cards_group.command("replay")
@click.option("--problems", type=int, default=None, help="First N problems (domain-interleaved); all by default.")
@click.option("--seeds", type=int, default=50, show_default=True)
@click.option("--workers", type=int, default=2, show_default=True)
@click.option("--cache", type=click.Path(dir_okay=False), default=None, help="Answer-class cache (JSON).")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the result JSON here.")
def replay_cmd(problems, seeds, workers, cache, out):
    """Replay on champ-dataset: real recorded answers drive the agreement gates."""
    from libraryfs.cards.replay import format_table, load_records, replay

    try:
        recs = load_records(problems, workers, cache, progress=True)
    except ImportError:
        raise click.ClickException("champ-dataset is not installed: pip install champ-dataset") from None
    res = replay(recs, seeds)
    click.echo(format_table(res))
    _write_json(out, res)


@cards_group.command("bench")
@click.argument("problems_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--best-of", type=int, default=5, show_default=True, help="N of the Best-of-N baseline.")
@click.option("--trace-out", type=click.Path(dir_okay=False), default=None, help="Append JSONL traces here.")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the result JSON here.")
@_tree_options
@_llm_options()
def bench_cmd(problems_file, best_of, trace_out, out, library_dir, tree_dir, base_url, model, api_key):
    """Solve PROBLEMS_FILE (JSONL: {"id", "problem", "answer", "domain"?}) with the LLM: tiered vs Best-of-N."""
    from libraryfs.cards.bench import format_table, load_problems, run_bench

    tree = open_tree(library_dir, tree_dir, required=False)
    try:
        probs = load_problems(problems_file)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    try:
        res = run_bench(probs, tree, _llm(base_url, model, api_key), best_of=best_of, trace_out=trace_out)
    finally:
        _close(tree)
    click.echo(format_table(res))
    _write_json(out, res)


commands: list = [solve_cmd, cards_group]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(cards_group())
