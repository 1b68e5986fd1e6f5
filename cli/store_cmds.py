"""``libraryfs copy``: move a library between store backends (LMDB ⇄ etcd)."""

from __future__ import annotations

import click

from libraryfs.cli.common import echo_json, handle_errors, resolve_libdir, verify_pages
from libraryfs.cli.options import checked_store_url


@click.command()
@click.argument("src", type=click.Path(file_okay=False))
@click.argument("dst", type=click.Path(file_okay=False))
@click.option(
    "--store",
    "url",
    metavar="URL",
    default=None,
    callback=checked_store_url,
    help="Put DST's store on etcd: etcd://HOST:PORT[,HOST:PORT...]/PREFIX (an empty prefix). Default: LMDB "
    "in DST/store.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
@handle_errors
def copy(src: str, dst: str, url: str | None, as_json: bool) -> None:
    """Copy the library SRC (a library directory or its mountpoint) to a new library directory DST, record for
    record from one snapshot, then verify it: every table equal, `check` clean, the content hash of every
    file equal. Exit status 0 verified, 1 if `check` finds problems (the source has them too), 4 if the
    source's store is damaged, 8 if a cluster is unreachable. SRC may stay mounted: the copy is of one
    consistent snapshot. Interrupted (Ctrl-C, SIGTERM, SIGHUP) or failed, it removes what it made of DST
    (exit 1, one line); killed with SIGKILL it leaves DST with a COPY-UNFINISHED file, which a rerun names."""
    from libraryfs.fs.copy import copy_library

    libdir = resolve_libdir(src)
    # the page pre-check every command makes before LMDB maps the store (README "Exit status" 4): before,
    # a page whose header was overwritten was copied as it read ("verified: … check clean")
    verify_pages(libdir)
    try:
        report = copy_library(libdir, dst, url)
    except KeyboardInterrupt as e:
        by = f" by {e}" if str(e) else ""
        click.echo(f"libraryfs: copy interrupted{by}; removed what it had made of {dst}", err=True)
        raise SystemExit(1) from None
    if as_json:
        echo_json(vars(report))
    else:
        click.echo(report.line())
        for p in report.check_problems:
            click.echo(f"check: {p}", err=True)
    if report.check_problems:
        raise SystemExit(1)


commands = [copy]
