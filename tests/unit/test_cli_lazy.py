"""The CLI imports a command's module only when that command runs (issue 18: CLI latency)."""

import importlib
import json
import os
import subprocess
import sys

from libraryfs.cli.main import COMMAND_MODULES, COMMANDS


def test_the_command_map_names_every_command_of_every_module():
    defined = {}
    for module in COMMAND_MODULES:
        for cmd in importlib.import_module(f"libraryfs.cli.{module}").commands:
            defined[cmd.name] = module
    assert defined == COMMANDS


#: The ``libraryfs.cli`` modules a query command's process imports: the root group, the shared plumbing and
#: the command's own module — no other command's module (``library_cmds``' ``index`` and ``init`` build their
#: setting flags from the settings table at import).
_QUERY_MODULES = {
    "find": "query_cmds",
    "status": "query_cmds",
    "recall": "episode_cmds",
    "answer": "episode_cmds",
}


def _cli_modules_after(argv: list[str]) -> list[str]:
    code = (
        "import sys\n"
        "from libraryfs.cli.main import cli\n"
        "try:\n"
        f"    cli({argv!r}, prog_name='libraryfs')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('libraryfs.cli.')))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return eval(r.stdout.strip().splitlines()[-1])  # noqa: S307 - our own subprocess's repr of a list


def test_query_commands_import_only_their_own_command_module(tmp_path):
    """``find``/``status``/``recall``/``answer`` (run, and their ``--help``) import their own module and no
    other command's (on a missing library: the modules are imported before the library is looked at)."""
    nolib = str(tmp_path / "nolib")
    for name, module in _QUERY_MODULES.items():
        own = {
            "libraryfs.cli.main",
            "libraryfs.cli.common",
            "libraryfs.cli.options",
            f"libraryfs.cli.{module}",
        }
        args = (
            [nolib, "x"]
            if name == "find"
            else [nolib]
            if name == "status"
            else ["e1", "q", "--library", nolib]
        )
        for argv in ([name, *args], [name, "--help"]):
            assert set(_cli_modules_after(argv)) == own, argv


def test_help_lists_every_command():
    r = subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", "--help"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0
    for name in COMMANDS:
        assert f"  {name} " in r.stdout or f"  {name}\n" in r.stdout, name


#: Modules ``libraryfs --help`` must not import: the store (LMDB), the LLM client, SQLite, the features.
_HEAVY = ("lmdb", "openai", "sqlite3", "libraryfs.fs.store", "libraryfs.features", "libraryfs_bench")

_HELP_CODE = """
import json, sys
import click
from libraryfs.cli.main import cli
lazy = {}
for width in (80, 200):
    ctx = click.Context(cli, info_name="libraryfs", terminal_width=width, max_content_width=width)
    lazy[width] = cli.get_help(ctx)
heavy = tuple(sys.argv[1:]) + ("libraryfs.cli.",)
heavy = sorted(m for m in sys.modules if m.startswith(heavy) and m != "libraryfs.cli.main")
ctx = click.Context(cli, info_name="libraryfs")
for name in cli.list_commands(ctx):
    cli.get_command(ctx, name)  # every command's module (and the plugins) imported: their own help texts
eager = {}
for width in (80, 200):
    ctx = click.Context(cli, info_name="libraryfs", terminal_width=width, max_content_width=width)
    eager[width] = cli.get_help(ctx)
print(json.dumps({"lazy": lazy, "eager": eager, "heavy": heavy}))
"""


def test_help_imports_no_command_module_and_shows_the_commands_own_help():
    """``libraryfs --help`` lists every command with its one-line help from SUMMARIES, importing no command
    module (no LMDB, no LLM client, no SQLite); the text is the one the imported commands give."""
    r = subprocess.run(
        [sys.executable, "-c", _HELP_CODE, *_HEAVY], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["heavy"] == []
    assert out["lazy"] == out["eager"]
    assert "  status " in out["lazy"]["80"] and "  bench " in out["lazy"]["80"]


#: Modules no query command may import: numpy (through rank_bm25), the bpe_openai package's __init__ (it
#: decodes three vocabularies: only its extension module is loaded), the outline's parsers, the LLM package,
#: importlib.metadata (reading every distribution's entry points: ~50 ms of CPU).
#: Nor the settings table and its TOML parser (only commands taking setting flags need them, and ``status``
#: when the library has a ``config.toml`` to check), nor the modules
#: the store's read path no longer imports (socket, subprocess, shutil: a few ms each in every process).
_NOT_FOR_QUERIES = (
    "libraryfs.settings",
    "libraryfs.fs.migrations",
    "tomllib",
    "socket",
    "subprocess",
    "shutil",
    "numpy",
    "rank_bm25",
    "bpe_openai",
    "bpe_openai.compat",
    "bpe_openai._bindings",  # the tokenizer itself: a loaded recall index counts tokens by pieces
    "libraryfs.index.outline",
    "openai",
    "pathspec",  # compiles ignore files: the indexer's work (~10 ms of imports)
)

_RUN_CODE = """
import json, os, sys
before_ours = set(sys.modules)  # the interpreter's start (site, .pth files: a sandbox's imports certifi, shutil)
import libraryfs.fs.isolated as iso
from libraryfs.cli.main import cli
names = [n for n in sys.argv[1].split(",") if n not in before_ours]  # what our code imported
child_out = os.environ["CHILD_OUT"]
run_child = iso._child
def _child(fn, wfd):  # the forked reader also says what it imported (it opens the store)
    def fn_then_report():
        try:
            return fn()
        finally:
            with open(child_out, "a") as f:
                f.write(json.dumps(sorted(m for m in sys.modules if m in names)) + "\\n")
    run_child(fn_then_report, wfd)
iso._child = _child
try:
    cli(sys.argv[2:], prog_name="libraryfs")
except SystemExit as e:
    code = e.code
loaded = set(m for m in sys.modules if m in names)
if os.path.exists(child_out):
    with open(child_out) as f:
        for line in f:
            loaded |= set(json.loads(line))
print(json.dumps({"code": code, "loaded": sorted(loaded)}))
"""


def _loaded_by(*argv: str, child_out: str) -> dict:
    """What a query command imported that it must not, in its process or its forked reader."""
    r = subprocess.run(
        [sys.executable, "-c", _RUN_CODE, ",".join(_NOT_FOR_QUERIES), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CHILD_OUT": child_out},
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_query_commands_do_not_import_numpy_the_tokenizer_package_or_the_outline(tmp_path):
    from libraryfs.features.episodes.unitdb import UnitDB
    from libraryfs.fs.store import Store
    from libraryfs_bench.episodes import crafter_data
    from libraryfs_bench.episodes.bench import build_units

    libdir = str(tmp_path / "lib")
    st = Store.create(libdir)
    try:
        units = build_units(crafter_data.load_rollout(2, 1200)[:200])
        UnitDB(st).put("e1", units, {"units": len(units)})
    finally:
        st.close()
    q = "where did I last drink water?"
    for argv, allowed in (
        (["find", libdir, "water"], []),
        (["status", libdir], []),
        (["recall", "e1", q, "--library", libdir], ["bpe_openai._bindings"]),  # builds and saves the index
        (["recall", "e1", q, "--library", libdir], []),  # loads it
        (["answer", "e1", q, "--library", libdir, "--reader", "rules"], []),
    ):
        child_out = str(tmp_path / f"child-{len(os.listdir(tmp_path))}.jsonl")
        out = _loaded_by(*argv, child_out=child_out)
        assert out["code"] in (0, 1, 7, None), (argv, out)
        assert os.path.exists(child_out), argv  # the reader ran (and reported)
        assert set(out["loaded"]) <= set(allowed), (argv, out)


def _command_paths(cmd, path=()):
    """Every command path under ``cmd`` (``("cards", "add")``, …), through the root group's own loading."""
    import click

    ctx = click.Context(cmd, info_name="libraryfs")
    yield path
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None:
                yield from _command_paths(sub, (*path, name))


def test_no_rst_markup_in_any_commands_help():
    """``--help`` is for a terminal: the RST double backticks of the docstrings (````json.dumps````) are
    printed as `json.dumps`, in every command's help (the root's list, each command, each subcommand)."""
    from click.testing import CliRunner

    from libraryfs.cli.main import cli

    runner = CliRunner()
    paths = list(_command_paths(cli))
    assert len(paths) > 30 and ("find",) in paths and ("cards", "add") in paths
    for path in paths:
        r = runner.invoke(cli, [*path, "--help"], prog_name="libraryfs", terminal_width=200)
        assert r.exit_code == 0, (path, r.output)
        assert "``" not in r.output, (path, r.output)
    out = runner.invoke(cli, ["find", "--help"], prog_name="libraryfs", terminal_width=200).output
    assert "(`json.dumps`, `lru_cache`)" in out and "(`\\xNN`)" in out, out


_GC_CODE = """
import gc, sys
from libraryfs.cli.main import main
sys.argv = ["libraryfs", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(gc.isenabled(), gc.get_freeze_count() > 0, file=sys.stderr)
"""


def test_short_read_only_commands_run_without_the_cyclic_collector_and_others_with_it(tmp_path):
    """``find``/``status``/``recall``/``answer`` disable the cyclic collector and freeze their objects before
    the interpreter's shutdown (its final collections traverse everything the imports made); every other
    command keeps the collector (a long ``index``/``check`` needs it; a writer's garbage must be finalised)."""
    from libraryfs.cli.main import SHORT_READERS

    assert set(COMMANDS) >= SHORT_READERS
    nolib = str(tmp_path / "nolib")
    for argv, short in (
        (["status", nolib], True),
        (["find", nolib, "x"], True),
        (["check", nolib], False),
        (["--version"], False),
    ):
        r = subprocess.run(
            [sys.executable, "-c", _GC_CODE, *argv], capture_output=True, text=True, timeout=120
        )
        assert r.stderr.strip().splitlines()[-1] == ("False True" if short else "True False"), (
            argv,
            r.stderr,
        )
