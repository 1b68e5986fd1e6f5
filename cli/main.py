"""Entry point of the ``libraryfs`` command.

Each command group lives in its own module and exposes ``commands``: a list of click commands/groups.
User errors are raised as :class:`click.ClickException` (one line, exit status 1) — never a traceback.
"""

from __future__ import annotations

import importlib

import click

from libraryfs import __version__

#: Modules under ``libraryfs.cli`` that contribute commands (each defines ``commands: list``).
COMMAND_MODULES = (
    "library_cmds",  # init, check, status, find, index
    "mount_cmds",  # mount, umount, indexer
    "ingest_cmd",  # ingest
    "config_cmds",  # config show
    "service_cmds",  # units install
    "bench_cmds",  # bench fs / theorem / cards / ...
    "cards_cmds",  # cards add/refine, solve
    "code_cmds",  # code add/route, budget verify
    "episode_cmds",  # episode append, recall
    "demo_cmd",  # demo (the main job on real input)
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="libraryfs")
def cli() -> None:
    """libraryfs: agent memory as a mounted directory, indexed by INDEX.md files."""


for _name in COMMAND_MODULES:
    _mod = importlib.import_module(f"libraryfs.cli.{_name}")
    for _cmd in _mod.commands:
        cli.add_command(_cmd)


def main() -> None:
    """Run the CLI (console script ``libraryfs``)."""
    cli(prog_name="libraryfs")


if __name__ == "__main__":
    main()
