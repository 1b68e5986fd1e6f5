"""Entry point of the ``libraryfs`` command.

Each command group lives in its own module and exposes ``commands``: a list of click commands/groups.
User errors are raised as :class:`click.ClickException` (one line, exit status 1) — never a traceback.
"""

from __future__ import annotations

import importlib

import click

from libraryfs import __version__

#: Built-in command name → the module under ``libraryfs.cli`` that defines it (in its ``commands`` list).
#: A module is imported only when one of its commands is asked for (or on ``--help``): ``find`` and
#: ``status`` do not pay for ``mount``'s or ``demo``'s imports. tests/unit/test_cli_lazy.py checks the map.
COMMANDS = {
    **dict.fromkeys(("init", "check", "status", "find", "index"), "library_cmds"),
    **dict.fromkeys(("mount", "umount", "indexer"), "mount_cmds"),
    "ingest": "ingest_cmd",
    "config": "config_cmds",
    "units": "service_cmds",
    **dict.fromkeys(("solve", "cards"), "cards_cmds"),
    **dict.fromkeys(("code", "budget"), "code_cmds"),
    **dict.fromkeys(("episode", "recall", "answer"), "episode_cmds"),
    "demo": "demo_cmd",  # demo (the main job on real input)
    "llm": "llm_cmds",  # llm serve (the real local model)
    "mcp": "mcp_cmd",  # mcp (the library over the Model Context Protocol)
}
#: Modules under ``libraryfs.cli`` that contribute commands (each defines ``commands: list``).
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))


#: Entry point group through which other distributions add commands (``libraryfs-bench``: ``bench`` and the
#: experiment subcommands). An entry point's name is the group it joins: ``bench`` (top level) or
#: ``<group>.<command>`` (e.g. ``cards.replay``).
PLUGIN_GROUP = "libraryfs.commands"
#: Top-level names whose commands may come from plugins (loaded only when one of these is asked for).
PLUGIN_PARENTS = frozenset({"bench", "cards", "code", "episode"})


class _Cli(click.Group):
    """The root group: built-in commands at import, plugin commands loaded on first use (keeps start-up
    cheap for ``find``/``status``)."""

    _plugins_loaded = False

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for parent in PLUGIN_PARENTS:  # the groups plugins join must be there first
            self._load_builtin(parent)
        from importlib.metadata import entry_points

        for ep in entry_points(group=PLUGIN_GROUP):
            try:
                cmd = ep.load()
            except ImportError as e:  # a broken or partial install of the plugin: its commands are absent
                click.echo(f"libraryfs: cannot load command {ep.name!r} ({e})", err=True)
                continue
            parent, _, _name = ep.name.rpartition(".")
            target = self.commands.get(parent) if parent else self
            if isinstance(target, click.Group):
                target.add_command(cmd)
        if "bench" not in self.commands:
            self.add_command(_bench_missing)

    def _load_builtin(self, cmd_name: str) -> None:
        """Import the module defining built-in command ``cmd_name`` and add its commands (once)."""
        module = COMMANDS.get(cmd_name)
        if module is None or cmd_name in self.commands:
            return
        for cmd in importlib.import_module(f"libraryfs.cli.{module}").commands:
            self.commands.setdefault(cmd.name, cmd)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        self._load_builtin(cmd_name)
        if cmd_name in PLUGIN_PARENTS:
            self._load_plugins()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for name in COMMANDS:
            self._load_builtin(name)
        self._load_plugins()
        return super().list_commands(ctx)


@click.command("bench", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def _bench_missing() -> None:
    """Benchmarks (install the libraryfs-bench distribution to get them)."""
    raise click.ClickException(
        "the benchmarks ship in the libraryfs-bench distribution: "
        "pip install -e bench/ (from a libraryfs source checkout)"
    )


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="libraryfs")
def cli() -> None:
    """libraryfs: agent memory as a mounted directory, indexed by INDEX.md files."""


def main() -> None:
    """Run the CLI (console script ``libraryfs``)."""
    cli(prog_name="libraryfs")


if __name__ == "__main__":
    main()
