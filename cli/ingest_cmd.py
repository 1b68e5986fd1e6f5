"""``libraryfs ingest DIR [--into SECTION] [--watch]``: import an outside directory tree."""

from __future__ import annotations

import click

from libraryfs.cli.common import handle_errors
from libraryfs.cli.options import library_argument
from libraryfs.words import count


@click.command()
@library_argument
@click.argument("source", type=click.Path(exists=True, file_okay=False))
@click.option("--into", "section", default="", help="Section (directory) of the library to import into.")
@click.option("--watch", is_flag=True, help="Keep mirroring changes of SOURCE until interrupted (watchdog).")
@click.option("--include-hidden", is_flag=True, help="Also import dotfiles and dot-directories.")
@click.option(
    "--quiet", "-q", is_flag=True, help="No progress bar (there is none when stderr is not a terminal)."
)
@handle_errors
def ingest(libdir: str, source: str, section: str, watch: bool, include_hidden: bool, quiet: bool) -> None:
    """Import the files under SOURCE into LIBDIR (through the mount when it is mounted)."""
    from libraryfs.daemon.ingest import ingest_tree, watch_tree

    rep = ingest_tree(libdir, source, section, include_hidden=include_hidden, progress=not quiet)
    click.echo(
        f"ingested {count(rep['files'], 'file')} ({rep['bytes']:,} byte{'' if rep['bytes'] == 1 else 's'}) into "
        f"{section or '/'}; skipped {rep['skipped']}" + (f" ({rep['skipped_why']})" if rep["skipped"] else "")
    )
    if watch:
        click.echo(f"watching {source} (Ctrl-C to stop)")
        watch_tree(libdir, source, section, include_hidden=include_hidden)


commands = [ingest]
