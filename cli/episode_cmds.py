"""``libraryfs episode append|build|watch|bench``, ``libraryfs recall`` and ``libraryfs answer``: episodic memory
(PAPERS.md §4).

Exit status: 0 on success; 1 for an error (one line: bad episode id, missing library, an episode without
units, a reader that cannot run); 2 for a usage error (a bad option value: ``--budget -1``); 3 when the ``episodes`` extra is not installed
(:data:`~libraryfs.cli.common.EXIT_MISSING_EXTRA`); 4 from ``answer`` when the evidence does not determine the
answer ("unknown")."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from libraryfs.cli.common import echo_json, handle_errors, needs_feature, verify_pages
from libraryfs.cli.options import FiniteFloat, library_option
from libraryfs.errors import LibraryError, NotFound

_library_option = library_option(required=True)


T = TypeVar("T")

EXIT_UNKNOWN = 7  #: ``libraryfs answer``: the evidence does not determine the answer


def _llm_reader(libdir: str):
    """An LLMReader over the library's one chat client (:func:`libraryfs.llm.client_for`), or None when no
    endpoint is configured."""
    from libraryfs.llm import client_for

    try:
        client = client_for(libdir)
    except LibraryError as e:
        raise click.ClickException(str(e)) from None
    if client is None:
        return None
    from libraryfs.features.episodes.answer import LLMReader

    return LLMReader(client)


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
    extractor = reader = None
    if llm:
        from libraryfs.features.episodes.answer import LLMReader
        from libraryfs.features.episodes.llm import make_extractor
        from libraryfs.llm import client_for

        try:
            client = client_for(libdir)  # one client: unit extraction and the answer/ files' LLM reader
        except LibraryError as e:
            store.close()
            raise click.ClickException(str(e)) from None
        extractor = make_extractor(client, store)
        reader = LLMReader(client) if client is not None else None
    try:
        yield EpisodeBuilder(tree, store, extractor, reader)
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
@click.option(
    "--interval",
    "interval_s",
    type=FiniteFloat(min=0),
    default=0.5,
    show_default=True,
    help="Seconds between polls.",
)
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


def _unit_records(episode: str, libdir: str, known: str | None) -> tuple[str, list[bytes] | None]:
    """``(key, records)``: the key an index of the episode's stored units has (its generation's,
    :func:`~libraryfs.features.episodes.indexcache.generation_key`; the digest of the records when it has
    none) and their JSON — None instead when the key is ``known`` (the saved index is current: then only
    the episode's meta record is read). One read-only transaction (works beside a live mount; pages walked
    only when the data file changed since the last clean walk, :func:`verify_pages`; the caller runs this in
    a forked child, :func:`libraryfs.fs.isolated.run_isolated`; bytes cross the pipe far cheaper than
    objects)."""
    from libraryfs.features.episodes import indexcache
    from libraryfs.features.episodes.unitdb import UnitDB
    from libraryfs.fs.lmdb_backend import store_path
    from libraryfs.fs.store import Store

    verify_pages(
        libdir
    )  # a damaged page could silently drop units from the evidence (as it did find's matches)
    store = Store(libdir, readonly=True)
    store_id = indexcache.store_identity(os.path.join(store_path(libdir), "data.mdb"))

    def need_records(gen: str | None) -> bool:
        """Whether the records must be read: no generation to key by, or not the ``known`` one."""
        return gen is None or indexcache.generation_key(store_id, gen) != known

    try:
        gen, records = UnitDB(store).snapshot(episode, need_records)
    except NotFound:  # no episode was ever built: the units table does not exist yet
        gen, records = None, []
    finally:
        store.close()
    key = (
        indexcache.records_digest(records or []) if gen is None else indexcache.generation_key(store_id, gen)
    )
    return key, (None if key == known else records)


def _episode_index(episode: str, libdir: str):
    """The unit index of an episode: the saved one when it is current
    (:mod:`~libraryfs.features.episodes.indexcache`), else built from the units and saved. The store is read
    in a forked child: LMDB crashing on a damaged page is a one-line report (a writable open would walk
    every page first: seconds at 10⁵ entries). While the child reads the episode's generation, this process
    loads the saved index."""
    from libraryfs.features.episodes import indexcache
    from libraryfs.features.episodes.index import EpisodeIndex
    from libraryfs.features.episodes.unitdb import parse_units
    from libraryfs.fs.isolated import run_isolated, start_isolated

    _check_ep(episode)
    indexcache.code_key()  # before the fork: it imports the deriving modules (the reader inherits them)
    path = indexcache.path_for(libdir, episode)
    saved = indexcache.open_saved(path)  # its key only: the records stay in the child when it is current
    wait = start_isolated(lambda: _unit_records(episode, libdir, saved.key if saved else None))
    try:
        state = saved.state() if saved is not None else None
    finally:
        key, records = wait()  # errors: one line
    if state is not None and saved is not None and saved.key == key:
        return EpisodeIndex.from_state(state)
    if records is None:  # the saved key is current but its head is damaged: read the records
        key, records = run_isolated(lambda: _unit_records(episode, libdir, None))
    units = parse_units(records or [])
    if not units:
        raise click.ClickException(
            f"episode {episode!r} has no units (run `libraryfs episode build {episode}`)"
        )
    idx = EpisodeIndex(units)
    recs = records or []
    reuse = indexcache.reusable_pieces(state, [u.t for u in units], recs) if state is not None else None
    indexcache.save(path, key, idx.state({u.t: r for u, r in zip(units, recs, strict=True)}, reuse))
    return idx


def _with_index(episode: str, libdir: str, query: Callable[[Any], T]) -> T:
    """``query(index)`` over the episode's index (:func:`_episode_index`). When a record of the saved index fails its checksum during the query
    (:class:`~libraryfs.features.episodes.indexcache.Damaged`), the file is removed and the query runs again
    over an index rebuilt from the store."""
    from libraryfs.features.episodes import indexcache

    try:
        return query(_episode_index(episode, libdir))
    except indexcache.Damaged:
        indexcache.discard(indexcache.path_for(libdir, episode))
        return query(_episode_index(episode, libdir))


def _question(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``QUESTION`` of ``recall``/``answer``: a blank one is a usage error (exit status 2), as an empty
    ``libraryfs find`` term is (``find.check_term``); before, ``recall ep ""`` printed the episode's first
    steps, exit 0."""
    from libraryfs.features.episodes.unitdb import check_question

    try:
        return check_question(value)
    except ValueError as e:
        raise click.BadParameter(str(e), ctx, param) from None


def _budget_option(f):
    return click.option(
        "--budget",
        "budget_tokens",
        type=click.IntRange(min=0),  # -1: a usage error (exit 2) like `abc`, before anything is opened
        default=200,
        show_default=True,
        help="Evidence budget (o200k tokens, ≥ 0).",
    )(f)


@click.command("recall")
@click.argument("episode")
@click.argument("question", callback=_question)
@_budget_option
@click.option("--json", "as_json", is_flag=True, help="Steps, scores and tokens as JSON.")
@click.option("--no-anchors", is_flag=True, help="Rank by text only (ablation).")
@_library_option
@needs_feature("episodes")
@handle_errors
def recall_cmd(
    episode: str, question: str, budget_tokens: int, as_json: bool, no_anchors: bool, libdir: str
) -> None:
    """The few steps of EPISODE that answer QUESTION, packed within the token budget."""
    from libraryfs.features.episodes.recall import recall

    r = _with_index(
        episode, libdir, lambda idx: recall(idx, question, budget_tokens, use_anchors=not no_anchors)
    )
    if as_json:
        echo_json(r.to_json())
    else:
        click.echo(r.text)


@click.command("answer")
@click.argument("episode")
@click.argument("question", callback=_question)
@_budget_option
@click.option(
    "--json", "as_json", is_flag=True, help="The answer, the reader, the query and the evidence as JSON."
)
@click.option(
    "--reader",
    type=click.Choice(["auto", "rules", "llm"]),
    default="auto",
    show_default=True,
    help="rules: the deterministic reader; llm: the configured model over the evidence; auto: rules, then the "
    "model when the rules find no answer and an endpoint is configured.",
)
@_library_option
@needs_feature("episodes")
@handle_errors
def answer_cmd(
    episode: str, question: str, budget_tokens: int, as_json: bool, reader: str, libdir: str
) -> None:
    """Answer QUESTION about EPISODE from the evidence recall packs within the budget (and nothing else).

    Prints the answer; exit status 7 (and "unknown") when the evidence does not determine it.
    """
    from libraryfs.features.episodes.answer import answer

    llm = _llm_reader(libdir) if reader in ("auto", "llm") else None
    if reader == "llm" and llm is None:
        raise click.ClickException(
            "--reader llm needs an endpoint: set LIBRARYFS_LLM_BASE_URL and LIBRARYFS_LLM_MODEL"
        )
    a = _with_index(episode, libdir, lambda idx: answer(idx, question, budget_tokens, reader, llm))
    if as_json:
        echo_json(a.to_json())
    else:
        click.echo(a.answer if a.answer is not None else "unknown")
        for n in a.notes:
            click.echo(f"libraryfs answer: {n}", err=True)
    if a.answer is None:
        raise SystemExit(EXIT_UNKNOWN)


commands: list = [episode_group, recall_cmd, answer_cmd]
