"""The commands of the ``libraryfs-bench`` distribution: ``libraryfs bench …`` and the experiment subcommands
of the feature groups (``cards seed|sim|replay|bench``, ``code eval``, ``episode bench``).

They reach the ``libraryfs`` command through the entry point group ``libraryfs.commands`` (see
``bench/pyproject.toml``): the entry point's name is the group a command joins, ``bench`` for the top level.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click

from libraryfs.cli.cards_cmds import card_client
from libraryfs.cli.common import close_tree, open_tree, write_json
from libraryfs.cli.options import (
    api_key_option,
    llm_field_overrides,
    llm_options,
    setting_options,
    setting_overrides,
    tree_options,
)
from libraryfs.errors import LibraryError
from libraryfs.features.cards import cards as cardsmod
from libraryfs_bench.episodes.cli import episode_bench


@click.group()
def bench() -> None:
    """Benchmarks that print a table and write JSON/JSONL (and plots) to an output directory."""


def _probe_mount(mountpoint: str) -> bool:
    try:
        os.statvfs(mountpoint)
    except OSError:
        return False
    return os.path.ismount(mountpoint)


@contextlib.contextmanager
def _mounted_library(libdir: str | None) -> Iterator[tuple[Path, str]]:
    """Mount ``libdir`` (created if missing; None: a temporary library) on a temporary mountpoint with its
    indexer, yield (mountpoint, "mount"), unmount afterwards."""
    from libraryfs.daemon import launcher
    from libraryfs.fs.backends import is_library
    from libraryfs.fs.store import Store

    tmp = tempfile.mkdtemp(prefix="libraryfs-theorem-")
    lib = libdir or os.path.join(tmp, "library")
    if not is_library(lib):
        Store.create(lib, {}).close()
    mnt = os.path.join(tmp, "mnt")
    os.makedirs(mnt)
    launcher.start(lib, mnt)
    try:
        yield Path(mnt), "mount"
    finally:
        try:
            launcher.stop(mnt, lazy=True)
        finally:
            if libdir is None:
                shutil.rmtree(tmp, ignore_errors=True)


def _require_gcide(contents: tuple[str, ...]) -> None:
    """One line and exit status 1 before anything runs when the encyclopedia content is asked for and the
    GNU dictionary (Debian ``dict-gcide``) is not installed."""
    from libraryfs_bench.theorem import content

    if "encyclopedia" in contents:
        missing = [p for p in (content.GCIDE_INDEX, content.GCIDE_DICT) if not os.path.exists(p)]
        if missing:
            raise click.ClickException(
                f"the encyclopedia content needs the GNU dictionary ({missing[0]} is missing): "
                f"apt-get install dict-gcide, or pass --content hash,numeric"
            )


@bench.command("theorem")
@click.option(
    "--mount",
    "mount",
    type=click.Path(file_okay=False),
    default=None,
    help="Mountpoint of a mounted library: stores are written and read through it.",
)
@click.option(
    "--library",
    "library",
    type=click.Path(file_okay=False),
    default=None,
    help="Library directory: mounted on a temporary mountpoint for the run (created if missing).",
)
@click.option(
    "--dir",
    "plain_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Plain directory, no mount (development): a stand-in indexer writes INDEX.md pages.",
)
@click.option("--n", "ns", default=None, metavar="N,N,…", help="Store sizes (default: the paper's 50…5000).")
@click.option(
    "--conditions",
    default=None,
    metavar="C,C,…",
    help="FLAT, FLAT-SORTED, INDEXED, DEEP-INDEXED, INDEXED-CORRUPTED, PATH, AUTO (default: all).",
)
@click.option(
    "--trials",
    type=click.IntRange(1),
    default=None,
    help="Trials 0..K-1 for every cell (default: the paper's own trials where it has them, else 10; PATH/AUTO 3).",
)
@click.option(
    "--content",
    "contents",
    default="hash,numeric,encyclopedia",
    show_default=True,
    help="Content types to include.",
)
@click.option(
    "--large",
    is_flag=True,
    help="Add N = 1e4, 1e5, 1e6 on one store each (FLAT past 1e4 from its closed form).",
)
@click.option(
    "--steps",
    type=click.IntRange(0),
    default=1000,
    show_default=True,
    help="T of the compounding experiment (0: skip).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default="bench/results/theorem",
    show_default=True,
    help="Output directory (JSONL, JSON, PNG).",
)
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option(
    "--llm-model",
    default=None,
    envvar="LIBRARYFS_THEOREM_MODEL",
    help="Run the paper's LLM agent with this model instead of the scripted agents.",
)
@setting_options("llm.base_url", "llm.timeout_s")
@api_key_option
def theorem(
    mount,
    library,
    plain_dir,
    ns,
    conditions,
    trials,
    contents,
    large,
    steps,
    out_dir,
    no_plots,
    llm_model,
    **kwargs,
) -> None:
    """The Library Theorem benchmark (Mainen 2026) through a mounted library, beside the paper's logs.

    Without --mount/--library/--dir a temporary library is created and mounted for the run. The LLM agent's
    endpoint is the shared LLM setting (--llm-base-url, LIBRARYFS_LLM_BASE_URL; unset: OPENAI_BASE_URL, else
    OpenAI's), its key LIBRARYFS_LLM_API_KEY or OPENAI_API_KEY.
    """
    from libraryfs_bench.theorem.bench import BenchOptions, parse_conditions, parse_ns, run_benchmark

    if sum(x is not None for x in (mount, library, plain_dir)) > 1:
        raise click.ClickException("give at most one of --mount, --library, --dir")
    try:
        opts = BenchOptions(
            ns=parse_ns(ns),
            conditions=parse_conditions(conditions),
            contents=tuple(c.strip() for c in contents.split(",") if c.strip()),
            extra_trials=trials or 10,
            item_trials=trials or 3,
            paper_trials=trials is None,
            large=large,
            steps=steps,
            plots=not no_plots,
        )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    _require_gcide(opts.contents)
    llm = None
    if llm_model:
        llm = (_theorem_client(setting_overrides(kwargs)), llm_model)
    out = Path(out_dir)
    try:
        if mount is not None:
            if not _probe_mount(mount):
                raise click.ClickException(f"{mount} is not a live mount (mount a library there first)")
            run_benchmark(Path(mount), "mount", out, opts, llm=llm, log=click.echo)
        elif plain_dir is not None:
            from libraryfs_bench.theorem.reftoc import render_dir

            os.makedirs(plain_dir, exist_ok=True)
            click.echo("NOTE: plain directory, not a mount: INDEX.md pages come from the stand-in indexer")
            run_benchmark(Path(plain_dir), "dir", out, opts, toc_writer=render_dir, llm=llm, log=click.echo)
        else:
            with _mounted_library(library) as (root, via):
                click.echo(f"library mounted at {root}")
                run_benchmark(root, via, out, opts, llm=llm, log=click.echo)
    except (FileNotFoundError, RuntimeError, LibraryError) as exc:
        raise click.ClickException(str(exc)) from None


def _theorem_client(overrides: dict):
    """The shared chat client for the paper's agent: flags > environment (``LIBRARYFS_LLM_*``) > default;
    one try per request, as the paper's protocol records an API failure and stops the trial."""
    from libraryfs.llm.config import load_config
    from libraryfs_bench.theorem.llm_agent import make_client

    try:
        cfg = load_config(None, llm_field_overrides(overrides))
    except LibraryError as e:
        raise click.ClickException(str(e)) from None
    extra = (
        {"transport_attempts": cfg.transport_attempts}
        if cfg.sources["transport_attempts"] != "default"
        else {}
    )
    return make_client(cfg.base_url, cfg.api_key, cfg.timeout_s, extra)


@click.command("seed")
@click.option("--champ", is_flag=True, required=True, help="Seed from champ-dataset's concepts.")
@tree_options
def seed_cmd(champ, library_dir, tree_dir):
    """Seed the tree with champ-dataset's concepts (needs `pip install champ-dataset`)."""
    from libraryfs_bench.cards.replay import seed_champ

    tree = open_tree(library_dir, tree_dir, what="card tree")
    try:
        paths = seed_champ(tree)
    except ImportError:
        raise click.ClickException("champ-dataset is not installed: pip install champ-dataset") from None
    finally:
        close_tree(tree)
    click.echo(f"wrote {len(paths)} cards under {cardsmod.ROOT}/")


@click.command("sim")
@click.option("--problems", type=int, default=2000, show_default=True)
@click.option("--seeds", type=int, default=5, show_default=True)
@click.option(
    "--alpha", type=float, default=0.6, show_default=True, help="Beta(alpha, beta) solve probability."
)
@click.option("--beta", type=float, default=0.6, show_default=True)
@click.option("--card-lift", type=float, default=0.0, show_default=True, help="Cards' share of the gap to 1.")
@click.option("--spread", type=float, default=0.5, show_default=True, help="Wrong-answer spread in (0, 1).")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the result JSON here.")
def sim_cmd(problems, seeds, alpha, beta, card_lift, spread, out):
    """Monte-Carlo: tiered self-consistency vs Best-of-N at equal expected calls."""
    from libraryfs_bench.cards.simulate import SimConfig, format_table, simulate

    if not (0 < spread < 1) or problems < 2 or seeds < 1:
        raise click.ClickException("need 0 < spread < 1, problems >= 2, seeds >= 1")
    res = simulate(SimConfig(problems, seeds, alpha, beta, card_lift, spread))
    click.echo(format_table(res))
    write_json(out, res)


@click.command("replay")
@click.option(
    "--problems", type=int, default=None, help="First N problems (domain-interleaved); all by default."
)
@click.option("--seeds", type=int, default=50, show_default=True)
@click.option("--workers", type=int, default=2, show_default=True)
@click.option("--cache", type=click.Path(dir_okay=False), default=None, help="Answer-class cache (JSON).")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the result JSON here.")
@click.option(
    "--blocks",
    is_flag=True,
    help="Also: per-block effect of the cards (helps/hurts/no evidence) on a tuning and a held-out split, "
    "and pruning policies chosen on tuning, scored on held-out.",
)
@click.option(
    "--traces-out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the recorded answers as solver traces over a champ-seeded tree (JSONL, for cards refine).",
)
def replay_cmd(problems, seeds, workers, cache, out, blocks, traces_out):
    """Replay on champ-dataset: real recorded answers drive the agreement gates."""
    from libraryfs_bench.cards.replay import format_table, load_records, replay

    try:
        recs = load_records(problems, workers, cache, progress=True)
    except ImportError:
        raise click.ClickException("champ-dataset is not installed: pip install champ-dataset") from None
    res = replay(recs, seeds)
    click.echo(format_table(res))
    if blocks:
        from libraryfs_bench.cards.blocks import block_report, format_report

        res["by_block"] = block_report(recs, seeds)
        click.echo("")
        click.echo(format_report(res["by_block"]))
    if traces_out:
        from libraryfs_bench.cards.replay import champ_traces

        with open(traces_out, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(t) + "\n" for t in champ_traces(recs))
        click.echo(f"wrote {traces_out}")
    write_json(out, res)


@click.command("bench")
@click.argument("problems_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--best-of", type=int, default=5, show_default=True, help="N of the Best-of-N baseline.")
@click.option("--trace-out", type=click.Path(dir_okay=False), default=None, help="Append JSONL traces here.")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the result JSON here.")
@tree_options
@llm_options
def bench_cmd(problems_file, best_of, trace_out, out, library_dir, tree_dir, **kwargs):
    """Solve PROBLEMS_FILE (JSONL: {"id", "problem", "answer", "domain"?}) with the LLM: tiered vs Best-of-N."""
    from libraryfs_bench.cards.bench import format_table, load_problems, run_bench

    tree = open_tree(library_dir, tree_dir, required=False, what="card tree")
    try:
        probs = load_problems(problems_file)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    try:
        res = run_bench(probs, tree, card_client(library_dir, kwargs), best_of=best_of, trace_out=trace_out)
    finally:
        close_tree(tree)
    click.echo(format_table(res))
    write_json(out, res)


bench.add_command(bench_cmd, "cards")
bench.add_command(episode_bench, "episodes")
