"""``libraryfs mount | umount | indexer``: the library's processes."""

from __future__ import annotations

import click

from libraryfs.cli.common import handle_errors, library_argument
from libraryfs.daemon import launcher


@click.command()
@library_argument
@click.argument("mountpoint", type=click.Path(file_okay=False))
@click.option("--foreground", "-f", is_flag=True, help="Serve in this process (systemd, debugging).")
@click.option("--no-indexer", is_flag=True, help="Do not start the indexer daemon.")
@click.option("--read-only", is_flag=True, help="Mount read-only (agents that should only read).")
@click.option("--allow-other", is_flag=True, help="Let other users access the mount (off by default).")
@click.option(
    "--timeouts",
    default=None,
    metavar="E,A,N",
    help="Kernel cache timeouts in seconds: entry, attribute, negative lookup "
    "[default: config.toml / 1,1,1].",
)
@click.option(
    "--budget",
    default=None,
    metavar="reads=N,tokens=M",
    help="Read budget: reads past it fail with EDQUOT; .libraryfs/budget shows what is left.",
)
@click.option("--llm/--no-llm", default=None, help="Indexer uses (or not) the configured LLM endpoint.")
@click.option("--nonempty", is_flag=True, help="Allow mounting over a non-empty directory.")
@handle_errors
def mount(
    libdir, mountpoint, foreground, no_indexer, read_only, allow_other, timeouts, budget, llm, nonempty
) -> None:
    """Mount LIBDIR at MOUNTPOINT and start its indexer (in the background unless --foreground)."""
    if foreground:
        raise SystemExit(
            launcher.run_foreground(
                libdir,
                mountpoint,
                indexer=not no_indexer,
                read_only=read_only,
                allow_other=allow_other,
                timeouts=timeouts,
                budget=budget,
                llm=llm,
                allow_nonempty=nonempty,
            )
        )
    info = launcher.start(
        libdir,
        mountpoint,
        indexer=not no_indexer,
        read_only=read_only,
        allow_other=allow_other,
        timeouts=timeouts,
        budget=budget,
        llm=llm,
        allow_nonempty=nonempty,
    )
    extra = f", indexer pid {info['indexer_pid']}" if info.get("indexer_pid") else ", no indexer"
    click.echo(f"mounted {info['libdir']} at {info['mountpoint']} (server pid {info['server_pid']}{extra})")


@click.command()
@click.argument("target", type=click.Path())
@click.option("--lazy", "-z", is_flag=True, help="Detach even if busy (fusermount3 -uz).")
@handle_errors
def umount(target: str, lazy: bool) -> None:
    """Unmount a library (given its mountpoint or its directory) and stop its indexer."""
    info = launcher.stop(target, lazy=lazy)
    click.echo(f"unmounted {info['mountpoint'] or info['libdir']}")


@click.command()
@library_argument
@click.option("--mountpoint", default=None, help="Where the library is mounted (inbox moves go through it).")
@click.option("--llm/--no-llm", default=None, help="Use (or not) the configured LLM endpoint.")
@handle_errors
def indexer(libdir: str, mountpoint: str | None, llm: bool | None) -> None:
    """Run the indexer daemon in the foreground (normally started by `libraryfs mount`)."""
    from libraryfs.daemon.indexer import main

    args = [libdir] + (["--mountpoint", mountpoint] if mountpoint else [])
    if llm is True:
        args.append("--llm")
    elif llm is False:
        args.append("--no-llm")
    raise SystemExit(main(args))


commands = [mount, umount, indexer]
