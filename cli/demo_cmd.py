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
@handle_errors
def demo(libdir: str, mountpoint: str, words: int) -> None:
    """Build a library of real documents (python3-doc, dict-gcide), mount it, index it, navigate it."""
    from libraryfs.daemon.demo import run_demo

    counts = run_demo(libdir, mountpoint, words=words, echo=click.echo)
    total = counts["python_docs"] + counts["dictionary"] + counts["inbox"]
    click.echo(f"\n{total} entries mounted at {mountpoint}; unmount with `libraryfs umount {mountpoint}`")


commands = [demo]
