"""``libraryfs mount | umount | indexer``: the library's processes; and the process entries of the mount server
and the indexer (``python -m libraryfs.daemon.mountd|indexer …``), which parse the same shared flags.

A process entry's errors are one line on stderr prefixed with the program (``libraryfs-mountd: library … is
already mounted by pid 1234``) and exit status 1 (4 for a damaged store) — what systemd's journal and the
launcher's log show.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import click

from libraryfs.cli.common import handle_errors
from libraryfs.cli.options import (
    FiniteFloat,
    UntouchedPath,
    library_argument,
    llm_options,
    llm_switch,
    setting_options,
    setting_overrides,
    timeouts_option,
)
from libraryfs.daemon import launcher
from libraryfs.errors import LibraryError

MOUNT_KEYS = ("mount.read_only", "mount.allow_other", "mount.budget", "mount.threads", "log.level")
INDEX_KEYS = ("index.poll_s", "index.toc_max_tokens", "log.level")


def process_errors(prog: str) -> Callable[[Callable[..., int]], Callable[..., None]]:
    """Run a process body returning an exit status; a domain error becomes ``<prog>: <message>`` on stderr
    and its exit status (1; 4 for a damaged store), no traceback."""

    def deco(f: Callable[..., int]) -> Callable[..., None]:
        """Wrap process body ``f`` so its exit status ends the process."""

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            """Run ``f`` and exit with its status; a :class:`LibraryError` is printed as ``<prog>: <message>``
            on stderr and exits with its ``exit_code`` (``functools.wraps`` keeps ``f``'s docstring as the
            command's help)."""
            try:
                status = f(*args, **kwargs)
            except LibraryError as e:
                click.echo(f"{prog}: {e}", err=True)
                status = e.exit_code
            sys.exit(status)

        return wrapper

    return deco


@click.command()
@library_argument
@click.argument("mountpoint", type=UntouchedPath(file_okay=False))
@click.option("--foreground", "-f", is_flag=True, help="Serve in this process (systemd, debugging).")
@click.option("--no-indexer", is_flag=True, help="Do not start the indexer daemon.")
@setting_options(*MOUNT_KEYS)
@timeouts_option
@llm_switch
@click.option("--nonempty", is_flag=True, help="Allow mounting over a non-empty directory.")
@handle_errors
def mount(libdir, mountpoint, foreground, no_indexer, llm, nonempty, **kwargs) -> None:
    """Mount LIBDIR at MOUNTPOINT and start its indexer (in the background unless --foreground).

    A missing MOUNTPOINT is created (with its parents), and the first line says so; it is removed again if
    the mount fails."""
    overrides = setting_overrides(kwargs)
    if foreground:
        _serve_foreground(
            libdir, mountpoint, indexer=not no_indexer, overrides=overrides, llm=llm, nonempty=nonempty
        )
    info = launcher.start(
        libdir, mountpoint, indexer=not no_indexer, llm=llm, allow_nonempty=nonempty, overrides=overrides
    )
    if info.get("created_mountpoint"):  # mount(8) would refuse a missing one: say that it was made
        click.echo(f"created mountpoint {info['mountpoint']}")
    extra = f", indexer pid {info['indexer_pid']}" if info.get("indexer_pid") else ", no indexer"
    click.echo(f"mounted {info['libdir']} at {info['mountpoint']} (server pid {info['server_pid']}{extra})")


@process_errors("libraryfs-mountd")
def _serve_foreground(libdir: str, mountpoint: str, **kw: Any) -> int:
    return launcher.run_foreground(
        libdir,
        mountpoint,
        indexer=kw["indexer"],
        overrides=kw["overrides"],
        llm=kw["llm"],
        allow_nonempty=kw["nonempty"],
    )


@click.command()
@click.argument("target", type=UntouchedPath())
@click.option(
    "--lazy",
    "-z",
    is_flag=True,
    help="Detach even if busy, or if its mount server is stopped (fusermount3 -uz).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=FiniteFloat(min=0),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the mount server and the indexer to exit.",
)
@handle_errors
def umount(target: str, lazy: bool, timeout_s: float) -> None:
    """Unmount a library (given its mountpoint or its directory) and stop its indexer, waiting for both to
    exit. A stopped mount server (SIGSTOP) is refused with exit status 9 without touching the mount; --lazy
    detaches it. An indexer still shutting down after --timeout seconds: exit status 10 (the mount is gone;
    a `mount` started meanwhile waits for that indexer to exit, then starts a fresh one)."""
    info = launcher.stop(target, lazy=lazy, timeout_s=timeout_s)
    stopped = info.get("stopped_server")
    if stopped:
        pid, how = stopped
        click.echo(
            f"detached {info['mountpoint'] or info['libdir']}; its mount server PID {pid} is {how} and "
            f"holds the library until it runs again, then exits"
            + (f" (`kill -CONT {pid}`)" if "SIGSTOP" in how else "")
            + (
                f"; so does indexer PID {info['indexer_waiting']}, waiting on it"
                if info["indexer_waiting"]
                else ""
            )
        )
        return
    where = info["mountpoint"] or info["libdir"]
    if info.get("was_mounted", True):
        click.echo(f"unmounted {where}")
    else:  # run.json named a mount that was already gone (unmounted by fusermount3 -u, umount)
        ipid = info.get("indexer_stopped")
        click.echo(f"{where} was not mounted" + (f"; stopped its indexer (pid {ipid})" if ipid else ""))


@click.command()
@library_argument
@click.option("--mountpoint", default=None, help="Where the library is mounted (inbox moves go through it).")
@click.option("--once", is_flag=True, help="One pass, then exit.")
@click.option("--full", is_flag=True, help="Re-examine every entry and directory.")
@llm_switch
@setting_options(*INDEX_KEYS)
@llm_options
@process_errors("libraryfs-indexer")
def indexer(libdir: str, mountpoint: str | None, once: bool, full: bool, llm: bool | None, **kwargs) -> int:
    """Run the indexer daemon in the foreground (normally started by `libraryfs mount`)."""
    from libraryfs.daemon.indexerd import run_process

    overrides = setting_overrides(kwargs)
    return run_process(libdir, mountpoint=mountpoint, once=once, full=full, use_llm=llm, overrides=overrides)


@click.command("mountd")
@click.argument("libdir", type=click.Path(file_okay=False))
@click.argument("mountpoint", type=click.Path(file_okay=False))
@setting_options(*MOUNT_KEYS)
@timeouts_option
@process_errors("libraryfs-mountd")
def mountd(libdir: str, mountpoint: str, **kwargs) -> int:
    """The mount server process, in the foreground (what `libraryfs mount` spawns)."""
    from libraryfs.daemon.mountd import run_process

    return run_process(libdir, mountpoint, setting_overrides(kwargs))


def mountd_main() -> None:
    """Entry of ``python -m libraryfs.daemon.mountd LIBDIR MOUNTPOINT [options]``."""
    mountd.main(prog_name="libraryfs-mountd")


def indexer_main() -> None:
    """Entry of ``python -m libraryfs.daemon.indexer LIBDIR [options]``."""
    indexer.main(prog_name="libraryfs-indexer")


commands = [mount, umount, indexer]
