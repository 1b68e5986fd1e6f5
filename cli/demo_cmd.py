"""``libraryfs demo LIBDIR MOUNTPOINT``: the main job on real input (see :mod:`libraryfs.daemon.demo`)."""

from __future__ import annotations

import click

from libraryfs.cli.common import handle_errors


@click.command()
@click.argument("libdir", type=click.Path(file_okay=False), default="/var/lib/libraryfs/demo")
@click.argument("mountpoint", type=click.Path(file_okay=False), default="/mnt/library")
@click.option(
    "--words",
    type=click.IntRange(0, 100_000),
    default=600,
    show_default=True,
    help="Dictionary entries to include.",
)
@click.option(
    "--llm",
    "llm",
    type=click.Choice(["local", "none"]),
    default=None,
    help="Who writes the TOC text: 'local' starts the real local model (SmolLM2-135M, extra llm-local; "
    "stopped by `libraryfs umount`), 'none' the deterministic builder [default: as configured].",
)
@handle_errors
def demo(libdir: str, mountpoint: str, words: int, llm: str | None) -> None:
    """Build a library of real documents (python3-doc, dict-gcide), mount it, index it, navigate it."""
    from libraryfs.daemon.demo import run_demo

    counts = run_demo(libdir, mountpoint, words=words, llm=llm, echo=click.echo)
    total = counts["python_docs"] + counts["dictionary"] + counts["inbox"]
    click.echo(
        f"\n{total} entries written, mounted at {mountpoint}; unmount with `libraryfs umount {mountpoint}`"
    )


commands = [demo]
