"""``python -m libraryfs_bench.findability`` (to be registered as ``libraryfs bench find``)."""

from __future__ import annotations

import os

import click

from libraryfs_bench.options import local_model_option, no_plots_option, out_dir_option

DEFAULT_CORPORA = "python,gcide,code,click"
NAVIGATORS = "toc,find,grep,bm25,llm"
#: every navigator (``toc-walk``: the TOC walk without the subject index, for before/after in one run)
ALL_NAVIGATORS = NAVIGATORS + ",toc-walk"


def _custom(values: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    out = {}
    for v in values:
        name, sep, rest = v.partition("=")
        src, sep2, queries = rest.partition(",")
        if not sep or not sep2 or not name or not os.path.isdir(src) or not os.path.isfile(queries):
            raise click.BadParameter(f"{v!r}: expected NAME=DIR,QUERIES.jsonl with an existing DIR and file")
        out[name] = (os.path.abspath(src), os.path.abspath(queries))
    return out


@click.command("find")
@click.option(
    "--corpus",
    "corpus_list",
    default=DEFAULT_CORPORA,
    show_default=True,
    help="Corpora to build (python, gcide, code, click, or a --custom name), comma-separated.",
)
@click.option(
    "--custom",
    multiple=True,
    metavar="NAME=DIR,QUERIES.jsonl",
    help="A corpus of your own: DIR ingested into section NAME, queries from the JSONL file.",
)
@click.option(
    "--quick", type=click.IntRange(0), default=0, help="Only this many queries per kind × split (CI smoke)."
)
@click.option(
    "--split",
    type=click.Choice(["all", "dev", "heldout"]),
    default="all",
    show_default=True,
    help="Queries to run: tune on dev only; report all (held-out rows are reported separately).",
)
@click.option("--navigators", default=NAVIGATORS, show_default=True, help="Which navigators to run.")
@out_dir_option("bench/results/findability", "summary.json, lookups.jsonl, PNGs")
@click.option(
    "--base-url", envvar="LIBRARYFS_BENCH_BASE_URL", help="OpenAI-compatible endpoint of the LLM navigator."
)
@click.option("--model", envvar="LIBRARYFS_BENCH_MODEL", help="Model name for the LLM navigator.")
@click.option(
    "--api-key", envvar="LIBRARYFS_BENCH_API_KEY", default=None, help="API key (if the endpoint needs one)."
)
@local_model_option(
    "Serve libraryfs's real local model (SmolLM2-135M via llama-cpp-python) for the LLM navigator "
    "for the run; implies --llm-protocol text unless given."
)
@click.option(
    "--llm-protocol",
    type=click.Choice(["tools", "text"]),
    default=None,
    help="Function calling, or one-line READ/ANSWER replies for servers without it "
    "[default: tools; text with --local-model].",
)
@click.option(
    "--llm-timeout-s",
    type=click.FloatRange(1),
    default=120.0,
    show_default=True,
    help="Per-request timeout of the LLM navigator (seconds).",
)
@click.option(
    "--llm-limit",
    type=click.IntRange(0),
    default=0,
    help="LLM navigator: only this many queries per kind × split (it is slow on a CPU).",
)
@click.option(
    "--toc-max-reads",
    type=click.IntRange(1),
    default=16,
    show_default=True,
    help="Read budget of the TOC navigator per lookup.",
)
@click.option("--keep-dir", type=click.Path(file_okay=False), help="Build the libraries here and keep them.")
@no_plots_option
def find_command(
    corpus_list,
    custom,
    quick,
    split,
    navigators,
    out_dir,
    base_url,
    model,
    api_key,
    local_model,
    llm_protocol,
    llm_timeout_s,
    llm_limit,
    toc_max_reads,
    keep_dir,
    no_plots,
) -> None:
    """Findability: can an agent find the right entry from the TOCs, the finder, an LLM, or flat search?"""
    from .run import Options, run

    navs = [n.strip() for n in navigators.split(",") if n.strip()]
    bad = set(navs) - set(ALL_NAVIGATORS.split(","))
    if bad:
        raise click.BadParameter(f"unknown navigator(s): {', '.join(sorted(bad))}", param_hint="--navigators")
    if "llm" in navs and bool(base_url) != bool(model):
        raise click.BadParameter("give both --base-url and --model (or neither)", param_hint="--base-url")
    if local_model and base_url:
        raise click.BadParameter(
            "--local-model serves its own endpoint: drop --base-url", param_hint="--local-model"
        )
    protocol = llm_protocol or ("text" if local_model else "tools")

    def go(url: str | None, name: str | None) -> None:
        llm = (
            {
                "base_url": url,
                "model": name,
                "api_key": api_key,
                "protocol": protocol,
                "timeout_s": llm_timeout_s,
            }
            if url
            else None
        )
        opts = Options(
            corpora=[c.strip() for c in corpus_list.split(",") if c.strip()],
            out_dir=out_dir,
            quick=quick,
            split=split,
            navigators=navs,
            llm=llm,
            llm_limit=llm_limit,
            toc_max_reads=toc_max_reads,
            custom=_custom(custom),
            keep_dir=keep_dir,
            plots=not no_plots,
        )
        run(opts, log=lambda s: click.echo(s))

    if not local_model:
        go(base_url, model)
        return
    try:
        from libraryfs.llm.local import running
    except ImportError as e:
        raise click.ClickException(f"the local model is not available in this libraryfs ({e})") from None
    with running() as local:
        url, name = local.endpoint
        go(url, name)


def main() -> None:
    """Console entry point. SIGTERM unwinds like Ctrl-C, so the libraries built so far are unmounted."""
    import signal

    def _stop(*_a) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    find_command(prog_name="python -m libraryfs_bench.findability")
