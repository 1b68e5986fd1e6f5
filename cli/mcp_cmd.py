"""``libraryfs mcp LIBDIR``: serve the library over the Model Context Protocol (docs/mcp.md)."""

from __future__ import annotations

import os

import click

from libraryfs.cli.options import library_argument
from libraryfs.errors import LibraryError

TOKEN_ENV = "LIBRARYFS_MCP_TOKEN"  #: the HTTP bearer token (never a flag: it would show in the process list)


@click.command("mcp")
@library_argument
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio (a client starts the server) or streamable HTTP.",
)
@click.option("--read-only", is_flag=True, help="Refuse every write tool (EROFS).")
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: address to bind.")
@click.option(
    "--port",
    default=8765,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="HTTP: port (0: any free one).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, exists=True),
    help=f"HTTP: file holding the bearer token (else env {TOKEN_ENV}); required off loopback.",
)
@click.option(
    "--response-tokens",
    default=8000,
    show_default=True,
    type=click.IntRange(200, 1_000_000),
    help="Token budget of one tool response (longer ones are cut with a marker).",
)
@click.option(
    "--max-write-bytes",
    default=8 << 20,
    show_default=True,
    type=click.IntRange(1, 1 << 30),
    help="Largest content write_file/edit_file accept.",
)
@click.option("--no-indexer", is_flag=True, help="Do not start an indexer when none runs.")
def mcp_cmd(
    libdir: str,
    transport: str,
    read_only: bool,
    host: str,
    port: int,
    token_file: str | None,
    response_tokens: int,
    max_write_bytes: int,
    no_indexer: bool,
) -> None:
    """Serve LIBDIR to MCP clients (agents without a shell, hosts without /dev/fuse), beside a mount or not.

    Exit status: 0 when the client disconnects or on SIGTERM/SIGINT; 1 on a library or bind error; 2 on
    bad flags; 3 when the mcp extra is missing (pip install 'libraryfs[mcp]').
    """
    try:
        import mcp  # noqa: F401
    except ImportError:
        click.echo("libraryfs: this command needs the mcp extra: pip install 'libraryfs[mcp]'", err=True)
        raise SystemExit(3) from None
    from libraryfs.daemon.mcp_transport import run_process
    from libraryfs.daemon.mcpd import ServerOptions

    token = os.environ.get(TOKEN_ENV) or None
    if token_file:
        with open(token_file) as f:
            token = f.read().strip() or None
    opts = ServerOptions(
        read_only=read_only,
        response_tokens=response_tokens,
        max_write_bytes=max_write_bytes,
        indexer=not no_indexer,
    )
    try:
        raise SystemExit(run_process(libdir, opts, transport=transport, host=host, port=port, token=token))
    except (LibraryError, OSError) as e:
        raise click.ClickException(str(e)) from None


commands: list = [mcp_cmd]
