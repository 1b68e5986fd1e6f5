"""``libraryfs mcp LIBDIR``: serve the library over the Model Context Protocol (docs/mcp.md)."""

from __future__ import annotations

import importlib.util
import os

import click

from libraryfs.cli.common import handle_errors
from libraryfs.cli.options import library_argument, setting_options, setting_overrides

TOKEN_ENV = "LIBRARYFS_MCP_TOKEN"  #: the HTTP bearer token (never a flag: it would show in the process list)
MCP_KEYS = (
    "mcp.transport",
    "mcp.read_only",
    "mcp.host",
    "mcp.port",
    "mcp.response_tokens",
    "mcp.max_write_bytes",
    "log.level",
)


@click.command("mcp")
@library_argument
@setting_options(*MCP_KEYS)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, exists=True),
    help=f"HTTP: file holding the bearer token (else env {TOKEN_ENV}); required off loopback.",
)
@click.option("--no-indexer", is_flag=True, help="Do not start an indexer when none runs.")
@handle_errors
def mcp_cmd(libdir: str, token_file: str | None, no_indexer: bool, **kwargs) -> None:
    """Serve LIBDIR to MCP clients (agents without a shell, hosts without /dev/fuse), beside a mount or not.
    LIBDIR may be the library's mountpoint: the library mounted there is served (a line on stderr names it).

    Settings: flags > LIBRARYFS_MCP_* environment > [mcp] in config.toml > defaults. Exit status: 0 when the
    client disconnects or on SIGTERM/SIGINT; 1 on a library, setting or bind error (one line); 2 on a
    malformed command line; 3 when the mcp extra is missing (pip install 'libraryfs[mcp]'); 4 when the store
    is damaged and 8 when it cannot be reached (README "Exit status").
    """
    if importlib.util.find_spec("mcp") is None:
        click.echo("libraryfs: this command needs the mcp extra: pip install 'libraryfs[mcp]'", err=True)
        raise SystemExit(3)
    from libraryfs.daemon.mcp_transport import run_process

    libdir = _library_of(libdir)
    token = os.environ.get(TOKEN_ENV) or None
    if token_file:
        with open(token_file) as f:
            token = f.read().strip() or None
    overrides = setting_overrides(kwargs)
    raise SystemExit(run_process(libdir, overrides, token=token, indexer=not no_indexer))


def _library_of(arg: str) -> str:
    """The library to serve for LIBDIR as typed: the library mounted at ``arg`` when ``arg`` is a libraryfs
    mountpoint (``/proc/mounts``' device field, :func:`libraryfs.layout.libdir_of_mount`; a line on stderr
    says which), else ``arg`` itself. Before, a mountpoint was opened as a library and refused with "run
    `libraryfs init` first", which would have made a second library beside the mounted one's files."""
    from libraryfs.layout import libdir_of_mount

    lib = libdir_of_mount(os.path.abspath(arg))
    if lib is None:
        return arg
    click.echo(f"libraryfs mcp: {arg} is the mountpoint of library {lib}; serving {lib}", err=True)
    return lib


commands: list = [mcp_cmd]
