"""``libraryfs code add/route/run`` and ``libraryfs budget verify`` (issues 9 and 17; PAPERS.md §3).

The library is opened with :func:`libraryfs.fs.tree.open_tree` (``--library DIR``, env
``LIBRARYFS_LIBRARY``); ``--tree DIR`` writes into a plain directory instead (a mountpoint, or any
directory).
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING

import click

from libraryfs.cli.common import close_tree, handle_errors, needs_feature, open_tree
from libraryfs.cli.options import (
    FiniteFloat,
    library_option,
    llm_field_overrides,
    llm_options,
    setting_overrides,
    tree_options,
)
from libraryfs.errors import LibraryError
from libraryfs.words import count

if TYPE_CHECKING:
    from libraryfs.fs.tree import Tree

#: Exit statuses of ``code run`` beyond every command's 0–4 (README "Exit status": 2 usage, 3 missing extra,
#: 4 damaged store): the plan was refused by a gate before anything ran; the run ended with a failed agent.
EXIT_PLAN_REFUSED = 5
EXIT_AGENT_FAILED = 6


@click.group("code")
def code_group() -> None:
    """Code index: mirror a repository as root → directory → file → symbol, route tasks."""


@code_group.command("add")
@click.argument("repo", type=click.Path(exists=True, file_okay=False))
@click.option("--name", help="Name under code/ (default: the directory's name).")
@click.option("--watch", is_flag=True, help="Keep watching and re-index changed files until interrupted.")
@click.option(
    "--debounce",
    "debounce_s",
    type=FiniteFloat(min=0),
    default=0.2,
    show_default=True,
    help="Quiet time before applying changes (s).",
)
@tree_options
@needs_feature("code")
def code_add(
    repo: str, name: str | None, watch: bool, debounce_s: float, library_dir: str | None, tree_dir: str | None
) -> None:
    """Index REPO into code/<name>/ of the library (incremental on re-add)."""
    from libraryfs.features.code.index import CodeIndex
    from libraryfs.features.code.render import Renderer, load_index, repo_dir

    tree = open_tree(library_dir, tree_dir)
    root = os.path.abspath(repo)
    name = name or os.path.basename(root.rstrip("/"))
    if not name or "/" in name or name in (".", ".."):
        raise click.ClickException(f"bad repository name {name!r}: give --name")
    from libraryfs.features.code.history import CoChange

    t0 = time.perf_counter()
    index = CodeIndex.build(root, name)
    history = CoChange.from_git(root)
    index.history = history.to_list() if history is not None else []
    t_parse = time.perf_counter() - t0
    try:
        previous = load_index(tree, name)
    except (FileNotFoundError, ValueError):
        previous = None

    def read_source(rel: str) -> bytes:
        """The bytes of file ``rel`` of the repository (relative to its root); raises ``OSError``."""
        with open(os.path.join(root, rel), "rb") as f:
            return f.read()

    renderer = Renderer(tree, index, read_source)
    renderer.full(previous)
    n_sym = sum(len(fp.symbols) for fp in index.files.values())
    click.echo(
        f"indexed {name}: {len(index.files)} files, {n_sym} symbols, "
        f"{sum(len(v) for v in index.edges.imports.values())} import edges, "
        f"{sum(len(v) for v in index.edges.calls.values())} call edges, {len(index.history)} commits of history; "
        f"parse {t_parse * 1e3:.1f} ms, "
        f"total {(time.perf_counter() - t0) * 1e3:.1f} ms; {renderer.writes} files written under {repo_dir(name)}/"
    )
    if not watch:
        return
    from libraryfs.features.code.watch import CodeWatcher

    def report(changed: list[str], removed: list[str]) -> None:
        """Echo one timestamped line for an update: ``~path`` for each changed file, ``-path`` for each
        removed one."""
        parts = [f"~{p}" for p in changed] + [f"-{p}" for p in removed]
        click.echo(f"{time.strftime('%H:%M:%S')} updated {' '.join(parts)}")

    import signal

    signal.signal(
        signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt())
    )  # stop cleanly on TERM
    click.echo(f"watching {root} (Ctrl-C to stop)")
    with CodeWatcher(index, renderer, debounce_s=debounce_s, on_update=report):
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


@code_group.command("route")
@click.argument("task")
@click.option("--repo", required=True, help="Repository name under code/.")
@click.option("--json", "as_json", is_flag=True, help="Print the decision as JSON.")
@click.option("--limit", type=click.IntRange(min=0), default=10, show_default=True, help="Hits to show.")
@tree_options
@needs_feature("code")
def code_route(
    task: str, repo: str, as_json: bool, limit: int, library_dir: str | None, tree_dir: str | None
) -> None:
    """Retrieve the code TASK touches, measure it, and name the topology that fits."""
    from libraryfs.features.code.retrieve import Retriever
    from libraryfs.features.code.router import regex_route, route

    tree = open_tree(library_dir, tree_dir)
    try:
        index, history = _load_index(tree, repo)
    finally:
        close_tree(tree)
    t0 = time.perf_counter()
    retriever = Retriever(index)
    t1 = time.perf_counter()
    d = route(retriever, task, limit=limit, history=history)
    t2 = time.perf_counter()
    if as_json:
        doc = d.as_dict()
        doc.update(
            baseline=regex_route(task),
            bm25_build_ms=round((t1 - t0) * 1e3, 3),
            route_ms=round((t2 - t1) * 1e3, 3),
        )
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))
        return
    v = d.vector
    click.echo(f"{d.topology}{' (' + d.shape + ')' if d.shape else ''} — {d.rule}")
    click.echo(
        f"intent {d.intent}, query type {d.qtype}, coverage {d.coverage:.2f}; c = (d_dep {v.d_dep}, n_f {v.n_f}, "
        f"n_s {v.n_s}, h_t {v.h_t}, ρ_x {v.rho_x:.2f}); regex baseline: {regex_route(task)}; "
        f"route {(t2 - t1) * 1e3:.2f} ms"
    )
    click.echo("footprint: " + (", ".join(d.files) or "(none)"))
    for h in d.hits:
        click.echo(f"  {h.score:.4f}  {h.path}")


def _load_index(tree: Tree, repo: str):
    """The repository's index and its co-change history (``None`` without one) from the library."""
    from libraryfs.features.code.history import CoChange
    from libraryfs.features.code.render import load_index

    try:
        index = load_index(tree, repo)
    except FileNotFoundError:
        raise click.ClickException(f"no code index for {repo!r}: run `libraryfs code add` first") from None
    return index, (CoChange(index.history) if index.history else None)


@code_group.command("run")
@click.argument("task")
@click.option("--repo", required=True, help="Repository name under code/.")
@library_option(
    required=True,
    dest="library_dir",
    help_text="Library directory (env LIBRARYFS_LIBRARY); it must not be mounted: each agent mounts it.",
)
@click.option(
    "--budget",
    "budget_spec",
    metavar="DIM=N,…",
    help="The run's total budget, e.g. tokens=20000,calls=6 (else: what the plan needs).",
)
@click.option("--monolithic", is_flag=True, help="Run the task as one agent instead of the routed topology.")
@click.option("--plan-only", is_flag=True, help="Build and gate the plan, print it, call no model.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@llm_options
@needs_feature("code")
@handle_errors
def code_run(task, repo, library_dir, budget_spec, monolithic, plan_only, as_json, **kwargs) -> None:
    """Route TASK, turn it into a plan of sub-agent contracts, gate it, and run it through budgeted mounts.

    Exit status: 0 done, 1 library/model error, 2 usage error, 3 the code extra is not installed, 4 the
    library's store is damaged, 5 plan refused by a gate (nothing was run), 6 the run ended with a failed
    agent."""
    from libraryfs.features.code.plan import PlanRefused, run_gates
    from libraryfs.layout import mount_info

    library = library_dir
    if mount_info(library):
        raise click.ClickException(
            f"{library} is mounted: `code run` mounts it once per agent; unmount it first"
        )
    plan = _plan_for(task, repo, library, budget_spec, monolithic)
    if plan_only:
        report = run_gates(plan)
        click.echo(json.dumps(plan.to_dict(), indent=2) if as_json else f"{plan.topology}: {report}")
        if not report.ok:
            raise SystemExit(EXIT_PLAN_REFUSED)
        return
    from libraryfs.daemon.session import mount_session
    from libraryfs.features.code.supervisor import Supervisor

    sup = Supervisor(_chat_client(library, kwargs), lambda spec: mount_session(library, spec))
    try:
        result = sup.run(plan)
    except PlanRefused as e:
        click.echo(str(e), err=True)
        raise SystemExit(EXIT_PLAN_REFUSED) from None
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        t = result.totals()
        click.echo(f"run {result.run_id}: {plan.topology}{' ' + plan.shape if plan.shape else ''}, {count(t['agents'], 'agent')}, "
                   f"{count(t['calls'], 'model call')}, {count(t['tokens'], 'token')}, {count(t['messages'], 'message')}, {t['read_tokens']} tokens read "
                   f"through the mount; result {result.final_path or '(none)'}")  # fmt: skip
        for n in result.nodes:
            click.echo(f"  {n.id:14s} {n.status:7s} calls {n.calls} tokens {n.prompt_tokens}+{n.completion_tokens} "
                       f"read {n.read_tokens}{' (truncated: EDQUOT)' if n.truncated else ''} {n.error}")  # fmt: skip
    if not result.ok:
        raise SystemExit(EXIT_AGENT_FAILED)


def _plan_for(task: str, repo: str, library: str, budget_spec: str | None, monolithic: bool):
    """Route ``task`` against the stored index and build its plan (or the monolithic one)."""
    from libraryfs.features.code.budget import Budget
    from libraryfs.features.code.plan import build_plan
    from libraryfs.features.code.retrieve import Retriever
    from libraryfs.features.code.router import route
    from libraryfs.features.code.supervisor import monolithic_plan

    tree = open_tree(library, None)
    try:
        index, history = _load_index(tree, repo)
    finally:
        close_tree(tree)
    d = route(Retriever(index), task, history=history)
    budget = None
    if budget_spec:
        try:
            budget = Budget.from_mapping(_parse_spec(budget_spec))
        except ValueError as e:
            raise click.ClickException(str(e)) from None
    plan = build_plan(task, repo, d.topology, d.files, intent=d.intent, shape=d.shape,
                      hits=[h.path for h in d.hits], budget=budget)  # fmt: skip
    if monolithic:
        plan = monolithic_plan(plan)
        if budget is not None:
            plan.budget = budget
    return plan


def _parse_spec(spec: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, val = part.partition("=")
        try:
            out[key.strip()] = float(val)
        except ValueError:
            raise ValueError(f"bad budget item {part!r}: expected dimension=number") from None
        if not sep:
            raise ValueError(f"bad budget item {part!r}: expected dimension=number")
    return out


def _chat_client(library: str, kwargs: dict):
    """The shared chat client from the ``--llm-*`` flags (popped from ``kwargs``), the environment and the
    library's ``config.toml``, with the configured hourly spend limit. Raises ``click.ClickException`` (one
    line) when no endpoint is configured or a setting is bad."""
    from libraryfs.llm import NOT_CONFIGURED, load_config

    try:
        cfg = load_config(library, llm_field_overrides(setting_overrides(kwargs)))
    except LibraryError as e:
        raise click.ClickException(str(e)) from None
    if not cfg.enabled:
        raise click.ClickException(NOT_CONFIGURED)
    from libraryfs.llm.client import ChatClient  # imports openai only when a model is configured
    from libraryfs.llm.spend import SpendLimiter

    return ChatClient(cfg, SpendLimiter(cfg.max_requests_per_hour, cfg.max_tokens_per_hour))


@click.group("budget")
def budget_group() -> None:
    """Budget contracts: verify that a delegation plan conserves its budget."""


@budget_group.command("verify")
@click.argument("plan", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def budget_verify(plan: str, as_json: bool) -> None:
    """VERIFYCONSERVATION of PLAN (.json/.yaml): exit 1 naming each offending node and dimension."""
    from libraryfs.features.code.budget import load_plan, verify_plan

    try:
        r = verify_plan(load_plan(plan))
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2))
    elif r.ok:
        click.echo(
            f"plan conserves its budget: {r.n_nodes} nodes, {r.n_edges} edges, roots: {', '.join(r.roots)}"
        )
    else:
        for v in r.violations:
            click.echo(str(v))
    if not r.ok:
        raise click.ClickException(f"plan rejected: {count(len(r.violations), 'violation')}")


commands: list = [code_group, budget_group]
