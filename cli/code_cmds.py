"""``libraryfs code add/route/eval`` and ``libraryfs budget verify`` (issue 9; PAPERS.md §3).

The library is opened with :func:`libraryfs.fs.tree.open_tree` (``--library DIR``, env
``LIBRARYFS_LIBRARY``); ``--tree DIR`` writes into a plain directory instead (a mountpoint, or any
directory).
"""

from __future__ import annotations

import json
import os
import time

import click

from libraryfs.cli.common import needs_feature, open_tree
from libraryfs.cli.options import tree_options


@click.group("code")
def code_group() -> None:
    """Code index: mirror a repository as root → directory → file → symbol, route tasks."""


@code_group.command("add")
@click.argument("repo", type=click.Path(exists=True, file_okay=False))
@click.option("--name", help="Name under code/ (default: the directory's name).")
@click.option("--watch", is_flag=True, help="Keep watching and re-index changed files until interrupted.")
@click.option(
    "--debounce", "debounce_s", default=0.2, show_default=True, help="Quiet time before applying changes (s)."
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
    t0 = time.perf_counter()
    index = CodeIndex.build(root, name)
    t_parse = time.perf_counter() - t0
    try:
        previous = load_index(tree, name)
    except (FileNotFoundError, ValueError):
        previous = None

    def read_source(rel: str) -> bytes:
        with open(os.path.join(root, rel), "rb") as f:
            return f.read()

    renderer = Renderer(tree, index, read_source)
    renderer.full(previous)
    n_sym = sum(len(fp.symbols) for fp in index.files.values())
    click.echo(
        f"indexed {name}: {len(index.files)} files, {n_sym} symbols, "
        f"{sum(len(v) for v in index.edges.imports.values())} import edges, "
        f"{sum(len(v) for v in index.edges.calls.values())} call edges; parse {t_parse * 1e3:.1f} ms, "
        f"total {(time.perf_counter() - t0) * 1e3:.1f} ms; {renderer.writes} files written under {repo_dir(name)}/"
    )
    if not watch:
        return
    from libraryfs.features.code.watch import CodeWatcher

    def report(changed: list[str], removed: list[str]) -> None:
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
@click.option("--limit", default=10, show_default=True, help="Hits to show.")
@tree_options
@needs_feature("code")
def code_route(
    task: str, repo: str, as_json: bool, limit: int, library_dir: str | None, tree_dir: str | None
) -> None:
    """Retrieve the code TASK touches, measure it, and name the topology that fits."""
    from libraryfs.features.code.render import load_index
    from libraryfs.features.code.retrieve import Retriever
    from libraryfs.features.code.router import regex_route, route

    tree = open_tree(library_dir, tree_dir)
    try:
        index = load_index(tree, repo)
    except FileNotFoundError:
        raise click.ClickException(f"no code index for {repo!r}: run `libraryfs code add` first") from None
    t0 = time.perf_counter()
    retriever = Retriever(index)
    t1 = time.perf_counter()
    d = route(retriever, task, limit=limit)
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
        f"query type {d.qtype}, coverage {d.coverage:.2f}; c = (d_dep {v.d_dep}, n_f {v.n_f}, n_s {v.n_s}, "
        f"h_t {v.h_t}, ρ_x {v.rho_x:.2f}); regex baseline: {regex_route(task)}; route {(t2 - t1) * 1e3:.2f} ms"
    )
    for h in d.hits:
        click.echo(f"  {h.score:.4f}  {h.path}")


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
        raise click.ClickException(f"plan rejected: {len(r.violations)} violation(s)")


commands: list = [code_group, budget_group]
