"""Entry point of the ``libraryfs`` command.

Each command group lives in its own module and exposes ``commands``: a list of click commands/groups.
User errors are raised as :class:`click.ClickException` (one line, exit status 1) — never a traceback.
"""

from __future__ import annotations

import gc
import importlib
import re
import sys
from collections.abc import Sequence

import click

from libraryfs import __version__

#: Built-in command name → (the module under ``libraryfs.cli`` that defines it in its ``commands`` list, its
#: one-line help). A module is imported only when one of its commands runs: ``find`` and ``status`` do not
#: pay for ``mount``'s or ``demo``'s imports, and ``libraryfs --help`` lists the one-line helps without
#: importing any (no LMDB, no LLM client). tests/unit/test_cli_lazy.py checks both columns against the
#: commands themselves.
_BUILTINS: dict[str, tuple[str, str]] = {
    "init": (
        "library_cmds",
        "Create a new, empty library in LIBDIR: a new or empty directory (made mode 0700).",
    ),
    "check": ("library_cmds", "Verify the store's pages, then every invariant (fsck)."),
    "status": ("query_cmds", "Is it mounted, what is the indexer doing, what went wrong last."),
    "find": (
        "query_cmds",
        "Resolve TERM to entries and directories without the model, best first: exact file names, names the "
        "entries define (``json.dumps``, ``lru_cache``), then BM25 over names, defined names and content.",
    ),
    "index": (
        "library_cmds",
        "Run one indexing pass now, then exit (refused while an indexer daemon is running).",
    ),
    "copy": (
        "store_cmds",
        "Copy the library SRC (a library directory or its mountpoint) to a new library directory DST, record for "
        "record from one snapshot, then verify it: every table equal, `check` clean, the content hash of every "
        "file equal.",
    ),
    "mount": (
        "mount_cmds",
        "Mount LIBDIR at MOUNTPOINT and start its indexer (in the background unless --foreground).",
    ),
    "umount": (
        "mount_cmds",
        "Unmount a library (given its mountpoint or its directory) and stop its indexer, waiting for both to exit.",
    ),
    "indexer": (
        "mount_cmds",
        "Run the indexer daemon in the foreground (normally started by `libraryfs mount`).",
    ),
    "ingest": (
        "ingest_cmd",
        "Import the files under SOURCE into LIBDIR (through the mount when it is mounted).",
    ),
    "config": (
        "config_cmds",
        "Show settings (mount server, indexer, logging, the LLM endpoint, the MCP server).",
    ),
    "units": (
        "service_cmds",
        "Install and check the systemd units (libraryfs@NAME, libraryfs-indexer@NAME).",
    ),
    "solve": (
        "cards_cmds",
        "Solve PROBLEM with tiered self-consistency, reading only its (tier, domain) block of cards.",
    ),
    "cards": ("cards_cmds", "The epistemic tree of knowledge cards: learn, seed, inspect, evaluate."),
    "code": (
        "code_cmds",
        "Code index: mirror a repository as root → directory → file → symbol, route tasks.",
    ),
    "budget": ("code_cmds", "Budget contracts: verify that a delegation plan conserves its budget."),
    "episode": (
        "episode_cmds",
        "Episodic memory: steps.jsonl → units → anchor paths (steps/, visits/, by-event/, ...).",
    ),
    "recall": (
        "episode_cmds",
        "The few steps of EPISODE that answer QUESTION, packed within the token budget.",
    ),
    "answer": (
        "episode_cmds",
        "Answer QUESTION about EPISODE from the evidence recall packs within the budget (and nothing else).",
    ),
    "demo": (  # the main job on real input
        "demo_cmd",
        "Build a library of real documents (python3-doc, dict-gcide), mount it, index it, navigate it.",
    ),
    "llm": ("llm_cmds", "The local model: serve it for the indexer."),
    "mcp": (  # the library over the Model Context Protocol
        "mcp_cmd",
        "Serve LIBDIR to MCP clients (agents without a shell, hosts without /dev/fuse), beside a mount or not.",
    ),
}
#: Built-in command name → the module under ``libraryfs.cli`` that defines it.
COMMANDS = {name: module for name, (module, _help) in _BUILTINS.items()}
#: Built-in command name → its one-line help (what ``libraryfs --help`` shows before the module is imported).
SUMMARIES = {name: summary for name, (_module, summary) in _BUILTINS.items()}
#: Modules under ``libraryfs.cli`` that contribute commands (each defines ``commands: list``).
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))


#: Entry point group through which other distributions add commands (``libraryfs-bench``: ``bench`` and the
#: experiment subcommands). An entry point's name is the group it joins: ``bench`` (top level) or
#: ``<group>.<command>`` (e.g. ``cards.replay``).
PLUGIN_GROUP = "libraryfs.commands"
#: Top-level names whose commands may come from plugins (loaded only when one of these is asked for).
PLUGIN_PARENTS = frozenset({"bench", "cards", "code", "episode"})
#: The one-line help of the ``bench`` group of ``libraryfs-bench`` (``libraryfs --help`` does not load it).
BENCH_SUMMARY = "Benchmarks that print a table and write JSON/JSONL (and plots) to an output directory."


#: RST inline literal (````x````) in help text: shown as Markdown's `x` (the docstrings keep RST for Sphinx).
_RST_LITERAL = re.compile(r"``(.+?)``", re.S)


def plain_text(text: str) -> str:
    """``text`` for a terminal: RST inline literals (````json.dumps````) become `json.dumps`, as the help
    texts write command names (`libraryfs check`)."""
    return _RST_LITERAL.sub(r"`\1`", text)


class PlainHelpFormatter(click.HelpFormatter):
    """click's help formatter, printing every paragraph and definition through :func:`plain_text`."""

    def write_text(self, text: str) -> None:
        """A paragraph of help text (a command's docstring), its RST markup stripped before wrapping."""
        super().write_text(plain_text(text))

    def write_dl(self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        """The options' and subcommands' two-column list, its RST markup stripped before wrapping."""
        super().write_dl([(plain_text(a), plain_text(b)) for a, b in rows], col_max, col_spacing)


class PlainContext(click.Context):
    """A click context whose help is formatted by :class:`PlainHelpFormatter`."""

    formatter_class = PlainHelpFormatter


def plain_help(cmd: click.Command) -> click.Command:
    """Make ``cmd`` (and, for a group, every subcommand it holds, recursively) print its ``--help`` through
    :class:`PlainHelpFormatter`; returns ``cmd``. The root group applies it to each command it hands out
    (:meth:`_Cli.get_command`), so no command needs a class of its own. Here, not in ``cli/options.py``:
    ``libraryfs --help`` imports no other ``libraryfs.cli`` module."""
    cmd.context_class = PlainContext
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            plain_help(sub)
    return cmd


class UsageLine(click.UsageError):
    """A usage error (exit status 2, README "Exit status") told like every other error: one line on stderr,
    ``Error: <message> (`<command> --help` shows the usage)``, control characters escaped; when the command
    line asked for ``--json``, also ``{"error", "exit_code"}`` on stdout (:func:`libraryfs.cli.common.handle_errors`
    does the same for the errors of status 1 and above). click's own :meth:`~click.UsageError.show` prints the
    usage, a "Try" line and a blank line before the error."""

    def __init__(self, e: click.UsageError, as_json: bool) -> None:
        super().__init__(e.format_message(), e.ctx)
        self.as_json = as_json

    def show(self, file=None) -> None:
        """Print the line (and the JSON object); ``file`` is ignored: the line goes to stderr."""
        message = "".join(f"\\x{ord(c):02x}" if ord(c) < 32 or ord(c) == 127 else c for c in self.message)
        if self.as_json:
            from libraryfs.cli.common import echo_json  # only on this path: --help imports no command module

            echo_json({"error": message, "exit_code": self.exit_code})
        where = self.ctx.command_path if self.ctx is not None else "libraryfs"
        click.echo(f"Error: {message} (`{where} --help` shows the usage)", err=True)


#: click ≥ 8.2's error for a group run without a subcommand (it prints the group's help); none before
_NO_ARGS_HELP: tuple[type, ...] = tuple(
    c for c in [getattr(click.exceptions, "NoArgsIsHelpError", None)] if c
)


def _one_line(e: click.UsageError, argv: Sequence[str]) -> click.UsageError:
    """``e`` as a :class:`UsageLine`, asking for JSON when the command line ``argv`` holds ``--json`` as an
    option (before any ``--``); ``e`` itself when it is one already, or when it asks for the help (a group
    run without a subcommand: click's ``NoArgsIsHelpError`` prints the help, exit status 2)."""
    if isinstance(e, (UsageLine, *_NO_ARGS_HELP)):
        return e
    return UsageLine(e, "--json" in (argv[: argv.index("--")] if "--" in argv else argv))


class _Cli(click.Group):
    """The root group: a built-in command's module and the plugins are imported on first use (keeps start-up
    cheap for ``find``/``status``; ``--help`` imports none of them). Every usage error, of the root or of a
    subcommand at any depth, is shown as one line (:class:`UsageLine`)."""

    _plugins_loaded = False
    context_class = PlainContext  # --help shows no RST markup (every command gets it: get_command)

    _argv: list[str] = []  # the command line of this run (main)

    def main(self, args: Sequence[str] | None = None, *a, **k):
        """click's, remembering the command line (for :class:`UsageLine`'s ``--json``)."""
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().main(args, *a, **k)

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        """click's, with a usage error of the root's own options as a :class:`UsageLine`."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as e:
            raise _one_line(e, self._argv) from None

    def invoke(self, ctx: click.Context):
        """click's, with a usage error of a subcommand (parsing its arguments, or raised by its body) as a
        :class:`UsageLine`."""
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            raise _one_line(e, self._argv) from None

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
        """The command ``cmd_name``, importing its built-in module first and the plugins when it is theirs or
        unknown; None if none (overrides :meth:`click.Group.get_command`). Its help (and its subcommands')
        is printed without RST markup (:func:`plain_help`)."""
        self._load_builtin(cmd_name)
        if cmd_name in PLUGIN_PARENTS or cmd_name not in self.commands:  # a plugin's (or no) command
            self._load_plugins()
        cmd = super().get_command(ctx, cmd_name)
        return plain_help(cmd) if cmd is not None else None

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every top-level name, built-in or plugin, without importing a command module."""
        from importlib.metadata import entry_points

        plugins = {ep.name for ep in entry_points(group=PLUGIN_GROUP) if "." not in ep.name}
        return sorted(set(COMMANDS) | set(self.commands) | plugins | {"bench"})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's command list, with the one-line help of a command not imported yet taken from
        :data:`SUMMARIES` (or :data:`BENCH_SUMMARY`): ``libraryfs --help`` imports no command module."""
        rows: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            cmd = self.commands.get(name) or self._placeholder(name) or self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd))
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in rows])

    @staticmethod
    def _placeholder(name: str) -> click.Command | None:
        """A command carrying only the one-line help of built-in ``name`` or of ``bench``; None for a
        third-party plugin's top-level command (its help is known once it is loaded)."""
        if name in SUMMARIES:
            return click.Command(name, help=SUMMARIES[name])
        if name != "bench":
            return None
        from importlib.metadata import entry_points

        installed = any(ep.name == "bench" for ep in entry_points(group=PLUGIN_GROUP))
        return click.Command(name, help=BENCH_SUMMARY) if installed else _bench_missing


@click.command("bench", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def _bench_missing() -> None:
    """Benchmarks (install the libraryfs-bench distribution to get them)."""
    raise click.ClickException(
        "the benchmarks ship in the libraryfs-bench distribution: "
        "pip install -e bench/ (from a libraryfs source checkout)"
    )


#: The exit statuses of README "Exit status", shown by ``libraryfs --help`` (literal: ``--help`` imports no command
#: module; tests/unit/test_cli_exit_help.py checks the numbers against the constants the commands use).
EXIT_STATUS_HELP = """Exit status (README "Exit status"):

\b
   0  done (check: clean, or every problem repaired)
   1  an error, said in one line on stderr (check: problems remain)
   2  a usage error: a bad option or value, refused before anything starts
   3  a feature command whose pip extra is not installed (the line says which)
   4  the library's store is damaged (run `libraryfs check --repair`)
   5  code run: its plan was refused by a gate; nothing ran
   6  code run: an agent failed
   7  answer: unknown, the evidence does not determine the answer
   8  the library's store cannot be reached (etcd without quorum or not answering)
   9  status, umount, mount, index: the mount server is stopped (SIGSTOP)
  10  umount, mount: the indexer has not exited --timeout seconds after SIGTERM
"""


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_STATUS_HELP)
@click.version_option(__version__, prog_name="libraryfs")
def cli() -> None:
    """libraryfs: agent memory as a mounted directory, indexed by INDEX.md files."""


#: Commands that only read the library and answer within a second (issue 18 item 3: ≤ 150 ms at 10⁵ entries).
#: They run without the cyclic garbage collector and freeze what they allocated before the interpreter's
#: shutdown, whose final collections otherwise traverse every object the imports made: ~18 ms of CPU of a
#: ~160 ms ``find`` (docs/benchmarks.md "CLI latency on a quiet machine"). Only for these: a command that
#: runs long needs the collector, and one that writes must not leave a file object of a garbage cycle
#: unflushed at exit (a frozen cycle is never finalised).
SHORT_READERS = frozenset({"find", "status", "recall", "answer"})


def main() -> None:
    """Run the CLI (console script ``libraryfs``)."""
    short = len(sys.argv) > 1 and sys.argv[1] in SHORT_READERS
    if short:
        gc.disable()
    try:
        cli(prog_name="libraryfs")
    finally:
        if short:
            gc.freeze()


if __name__ == "__main__":
    main()
