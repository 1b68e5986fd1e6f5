"""``libraryfs bench …``: benchmark commands. This module owns the ``bench`` group; other benchmarks add
their subcommands to :data:`bench` (``from libraryfs.cli.bench_cmds import bench``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click

from libraryfs.errors import LibraryError


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
    from libraryfs.store import Store, is_library

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


@bench.command("theorem")
@click.option("--mount", "mount", type=click.Path(file_okay=False), default=None,
              help="Mountpoint of a mounted library: stores are written and read through it.")
@click.option("--library", "library", type=click.Path(file_okay=False), default=None,
              help="Library directory: mounted on a temporary mountpoint for the run (created if missing).")
@click.option("--dir", "plain_dir", type=click.Path(file_okay=False), default=None,
              help="Plain directory, no mount (development): a stand-in indexer writes INDEX.md pages.")
@click.option("--n", "ns", default=None, metavar="N,N,…",
              help="Store sizes (default: the paper's 50…5000).")
@click.option("--conditions", default=None, metavar="C,C,…",
              help="FLAT, FLAT-SORTED, INDEXED, DEEP-INDEXED, INDEXED-CORRUPTED, PATH, AUTO (default: all).")
@click.option("--trials", type=click.IntRange(1), default=None,
              help="Trials 0..K-1 for every cell (default: the paper's own trials where it has them, else 10; PATH/AUTO 3).")
@click.option("--content", "contents", default="hash,numeric,encyclopedia", show_default=True,
              help="Content types to include.")
@click.option("--large", is_flag=True, help="Add N = 1e4, 1e5, 1e6 on one store each (FLAT past 1e4 from its closed form).")
@click.option("--steps", type=click.IntRange(0), default=1000, show_default=True,
              help="T of the compounding experiment (0: skip).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="bench/results/theorem",
              show_default=True, help="Output directory (JSONL, JSON, PNG).")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--llm-model", default=None, envvar="LIBRARYFS_THEOREM_MODEL",
              help="Run the paper's LLM agent with this model instead of the scripted agents.")
@click.option("--base-url", default=None, envvar="OPENAI_BASE_URL", help="OpenAI-compatible endpoint (LLM agent).")
@click.option("--api-key", default=None, envvar="OPENAI_API_KEY", help="API key (LLM agent).")
def theorem(mount, library, plain_dir, ns, conditions, trials, contents, large, steps, out_dir, no_plots,
            llm_model, base_url, api_key) -> None:
    """The Library Theorem benchmark (Mainen 2026) through a mounted library, beside the paper's logs.

    Without --mount/--library/--dir a temporary library is created and mounted for the run.
    """
    from libraryfs.theorem.bench import BenchOptions, parse_conditions, parse_ns, run_benchmark

    if sum(x is not None for x in (mount, library, plain_dir)) > 1:
        raise click.ClickException("give at most one of --mount, --library, --dir")
    try:
        opts = BenchOptions(
            ns=parse_ns(ns), conditions=parse_conditions(conditions),
            contents=tuple(c.strip() for c in contents.split(",") if c.strip()),
            extra_trials=trials or 10, item_trials=trials or 3, paper_trials=trials is None,
            large=large, steps=steps, plots=not no_plots,
        )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    llm = None
    if llm_model:
        from libraryfs.theorem.llm_agent import make_client

        llm = (make_client(base_url, api_key), llm_model)
    out = Path(out_dir)
    try:
        if mount is not None:
            if not _probe_mount(mount):
                raise click.ClickException(f"{mount} is not a live mount (mount a library there first)")
            run_benchmark(Path(mount), "mount", out, opts, llm=llm, log=click.echo)
        elif plain_dir is not None:
            from libraryfs.theorem.reftoc import render_dir

            os.makedirs(plain_dir, exist_ok=True)
            click.echo("NOTE: plain directory, not a mount: INDEX.md pages come from the stand-in indexer")
            run_benchmark(Path(plain_dir), "dir", out, opts, toc_writer=render_dir, llm=llm, log=click.echo)
        else:
            with _mounted_library(library) as (root, via):
                click.echo(f"library mounted at {root}")
                run_benchmark(root, via, out, opts, llm=llm, log=click.echo)
    except (FileNotFoundError, RuntimeError, LibraryError) as exc:
        raise click.ClickException(str(exc)) from None


def _add_other_benches() -> None:
    """``bench cards`` and ``bench episodes``: the same commands as ``cards bench`` / ``episode bench``."""
    from .cards_cmds import bench_cmd
    from .episode_cmds import episode_group

    bench.add_command(bench_cmd, "cards")
    bench.add_command(episode_group.commands["bench"], "episodes")


_add_other_benches()

commands: list = [bench]
