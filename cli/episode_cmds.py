"""``libraryfs episode append|build|watch|bench`` and ``libraryfs recall``: episodic memory (PAPERS.md §4)."""

from __future__ import annotations

import contextlib
import json
import time

import click

from libraryfs.cli.common import echo_json, needs_feature
from libraryfs.cli.options import library_option
from libraryfs.errors import LibraryError

_library_option = library_option(required=True)


@contextlib.contextmanager
def _builder(libdir: str, llm: bool = True):
    """An EpisodeBuilder writing through the mount when mounted, else into the store directly."""
    from libraryfs.features.episodes.builder import EpisodeBuilder
    from libraryfs.fs.store import Store
    from libraryfs.fs.tree import DirTree, StoreTree
    from libraryfs.layout import mount_info

    try:
        info = mount_info(libdir)
        store = Store(libdir)
    except LibraryError as e:
        raise click.ClickException(str(e)) from None
    tree = DirTree(info["mountpoint"]) if info else StoreTree(store)
    extractor = None
    try:
        if llm:
            from libraryfs.features.episodes.llm import make_extractor
            from libraryfs.llm import client_for

            extractor = make_extractor(client_for(libdir), store)
    except LibraryError as e:
        store.close()
        raise click.ClickException(str(e)) from None
    try:
        yield EpisodeBuilder(tree, store, extractor)
    finally:
        store.close()


def _check_ep(ep: str) -> None:
    from libraryfs.features.episodes.unitdb import check_episode_id

    try:
        check_episode_id(ep)
    except ValueError as e:
        raise click.ClickException(str(e)) from None


@click.group("episode")
def episode_group() -> None:
    """Episodic memory: steps.jsonl → units → anchor paths (steps/, visits/, by-event/, ...)."""


@episode_group.command("append")
@click.argument("episode")
@click.argument("jsonline")
@_library_option
@needs_feature("episodes")
def episode_append(episode: str, jsonline: str, libdir: str) -> None:
    """Append one step (a JSON object) to episodes/EPISODE/steps.jsonl and build its unit."""
    _check_ep(episode)
    with _builder(libdir) as b:
        try:
            rep = b.append(episode, jsonline)
        except (ValueError, json.JSONDecodeError) as e:
            raise click.ClickException(f"bad step: {e}") from None
    click.echo(rep.line())


@episode_group.command("build")
@click.argument("episode", required=False)
@click.option("--rebuild", is_flag=True, help="Drop the units and views and build from the first line.")
@click.option("--no-llm", is_flag=True, help="Deterministic extraction only.")
@_library_option
@needs_feature("episodes")
def episode_build(episode: str | None, rebuild: bool, no_llm: bool, libdir: str) -> None:
    """Build new steps of EPISODE (all episodes if omitted) and answer ask/ files."""
    with _builder(libdir, llm=not no_llm) as b:
        eps = [episode] if episode else b.episodes()
        if not eps:
            raise click.ClickException("no episodes/<id>/steps.jsonl in this library")
        for ep in eps:
            _check_ep(ep)
            try:
                click.echo(b.build(ep, rebuild=rebuild).line())
            except FileNotFoundError as e:
                raise click.ClickException(str(e)) from None
            for p in b.answer_asks(ep):
                click.echo(f"{ep}: wrote {p}")


@episode_group.command("watch")
@click.option("--interval", "interval_s", default=0.5, show_default=True, help="Seconds between polls.")
@click.option("--once", is_flag=True, help="One pass, then exit.")
@_library_option
@needs_feature("episodes")
def episode_watch(interval_s: float, once: bool, libdir: str) -> None:
    """Tail every episodes/*/steps.jsonl into units and views; answer ask/ question files."""
    with _builder(libdir) as b:
        click.echo(f"watching {libdir} episodes (Ctrl-C to stop)" if not once else "one pass")
        try:
            while True:
                for line in b.poll():
                    click.echo(f"{time.strftime('%H:%M:%S')} {line}")
                if once:
                    break
                time.sleep(interval_s)
        except KeyboardInterrupt:
            pass


@click.command("recall")
@click.argument("episode")
@click.argument("question")
@click.option(
    "--budget", "budget_tokens", default=200, show_default=True, help="Evidence budget (o200k tokens)."
)
@click.option("--json", "as_json", is_flag=True, help="Steps, scores and tokens as JSON.")
@click.option("--no-anchors", is_flag=True, help="Rank by text only (ablation).")
@_library_option
@needs_feature("episodes")
def recall_cmd(
    episode: str, question: str, budget_tokens: int, as_json: bool, no_anchors: bool, libdir: str
) -> None:
    """The few steps of EPISODE that answer QUESTION, packed within the token budget."""
    from libraryfs.features.episodes.recall import EpisodeIndex, recall
    from libraryfs.features.episodes.unitdb import UnitDB
    from libraryfs.fs.store import Store

    _check_ep(episode)
    if budget_tokens < 0:
        raise click.ClickException("--budget must be ≥ 0")
    try:
        store = Store(libdir)
    except LibraryError as e:
        raise click.ClickException(str(e)) from None
    try:
        units = UnitDB(store).units(episode)
    finally:
        store.close()
    if not units:
        raise click.ClickException(
            f"episode {episode!r} has no units (run `libraryfs episode build {episode}`)"
        )
    r = recall(EpisodeIndex(units), question, budget_tokens, use_anchors=not no_anchors)
    if as_json:
        echo_json(r.to_json())
    else:
        click.echo(r.text)


commands: list = [episode_group, recall_cmd]
