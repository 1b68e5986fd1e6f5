"""``libraryfs bench episodes``: evidence recall and exact-match answers of episodic memory on seeded Crafter
episodes for the questions of phrasing files, against flat BM25 in the same run (docs/episodes.md)."""

from __future__ import annotations

import click

from libraryfs.errors import LibraryError
from libraryfs_bench.options import local_model_option


@click.command("bench")
@click.option(
    "--phrasings",
    "phrasing_files",
    multiple=True,
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="A phrasing file (JSON lines: kind, template, field, slots); repeat for several.",
)
@click.option("--episodes", default=6, show_default=True, help="Crafter episodes (one seed each).")
@click.option("--max-steps", default=2700, show_default=True, help="Steps per episode (+1 for step 0).")
@click.option("--first-seed", default=1000, show_default=True, help="Seed of the first episode.")
@click.option("--per-template", default=1, show_default=True, help="Questions per template per episode.")
@click.option("--out", "out_json", default="bench/results/episodes.json", show_default=True)
@click.option("--plot", "plot_png", default="docs/episodes_frontier.png", show_default=True)
@click.option(
    "--llm-reader",
    "llm_questions",
    default=0,
    show_default=True,
    help="Also measure the LLM reader on this many questions per file (first episode, 200 tokens), on the "
    "configured endpoint or, with --local-model, on the real local model.",
)
@local_model_option("Serve the local model (libraryfs[llm-local]) for --llm-reader.")
def episode_bench(
    phrasing_files: tuple[str, ...],
    episodes: int,
    max_steps: int,
    first_seed: int,
    per_template: int,
    out_json: str,
    plot_png: str,
    llm_questions: int,
    local_model: bool,
) -> None:
    """Evidence recall and exact-match answers per question family on seeded Crafter episodes, for
    questions instantiated from phrasing files: libraryfs recall against flat BM25 at the same budgets."""
    from libraryfs_bench.episodes import bench

    if llm_questions:
        _episode_llm_reader(phrasing_files, llm_questions, local_model, first_seed, max_steps)
        return

    results = []
    for path in phrasing_files:
        try:
            res = bench.run(
                path,
                episodes,
                max_steps,
                first_seed,
                per_template,
                progress=lambda s: click.echo(s, err=True),
            )
        except ImportError as e:
            raise click.ClickException(f"{e}: pip install crafter") from None
        except ValueError as e:
            raise click.ClickException(str(e)) from None
        click.echo(f"\n## {res['name']}\n")
        click.echo(bench.tables(res))
        for note in res["notes"]:
            click.echo(f"note: {note}", err=True)
        results.append(res)
    bench.save(results, out_json)
    bench.plot(results, plot_png)
    click.echo(f"\nwrote {out_json} and {plot_png}")


def _episode_llm_reader(
    phrasing_files: tuple[str, ...], n: int, local_model: bool, seed: int, max_steps: int
) -> None:
    """``libraryfs bench episodes --llm-reader N``: LLM reader vs the deterministic reader, per family."""
    import contextlib

    from libraryfs.features.episodes.answer import LLMReader
    from libraryfs.llm import client_for
    from libraryfs_bench.episodes import bench

    with contextlib.ExitStack() as stack:
        overrides = None
        if local_model:
            from libraryfs.llm import local

            try:
                overrides = stack.enter_context(local.running()).overrides()
            except local.LocalModelError as e:
                raise click.ClickException(str(e)) from None
        try:
            client = client_for(None, overrides)  # the one chat client (libraryfs/llm/client.py)
        except LibraryError as e:
            raise click.ClickException(str(e)) from None
        if client is None:
            raise click.ClickException(
                "--llm-reader needs an endpoint (LIBRARYFS_LLM_BASE_URL/MODEL) or --local-model"
            )
        for path in phrasing_files:
            reader = LLMReader(client)
            res = bench.run_llm_reader(path, reader, n, seed=seed, max_steps=max_steps)
            click.echo(f"\n## {path}: LLM reader ({client.model}) vs deterministic reader, 200 tokens\n")
            click.echo("| family (n) | LLM reader EM | deterministic reader EM |\n|---|---|---|")
            for fam, v in sorted(res["by_family"].items()):
                click.echo(f"| {fam} ({v['n']}) | {v['llm']:.2f} | {v['rules']:.2f} |")
            rows = res["rows"]
            click.echo(
                f"| all ({len(rows)}) | {sum(r['llm_ok'] for r in rows) / len(rows):.2f} | "
                f"{sum(r['rules_ok'] for r in rows) / len(rows):.2f} |\n\n{res['errors']} failed requests, "
                f"{res['seconds']} s"
            )
