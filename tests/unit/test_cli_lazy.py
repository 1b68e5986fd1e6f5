"""The CLI imports a command's module only when that command runs (issue 18: CLI latency)."""

import importlib
import subprocess
import sys

from libraryfs.cli.main import COMMAND_MODULES, COMMANDS


def test_the_command_map_names_every_command_of_every_module():
    defined = {}
    for module in COMMAND_MODULES:
        for cmd in importlib.import_module(f"libraryfs.cli.{module}").commands:
            defined[cmd.name] = module
    assert defined == COMMANDS


def test_find_does_not_import_the_other_command_modules(tmp_path):
    code = (
        "import sys\n"
        "from libraryfs.cli.main import cli\n"
        "try:\n"
        f"    cli(['find', {str(tmp_path / 'nolib')!r}, 'x'], prog_name='libraryfs')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('libraryfs.cli.')))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    loaded = eval(r.stdout.strip().splitlines()[-1])  # noqa: S307 - our own subprocess's repr of a list
    assert "libraryfs.cli.library_cmds" in loaded
    assert not {"libraryfs.cli.mount_cmds", "libraryfs.cli.demo_cmd", "libraryfs.cli.cards_cmds"} & set(
        loaded
    )


def test_help_lists_every_command():
    r = subprocess.run(
        [sys.executable, "-m", "libraryfs.cli.main", "--help"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0
    for name in COMMANDS:
        assert f"  {name} " in r.stdout or f"  {name}\n" in r.stdout, name
