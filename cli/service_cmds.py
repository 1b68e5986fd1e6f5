"""``libraryfs units install | verify``: the systemd units of a library's mount server and indexer.

The unit templates ship with the package (``daemon/systemd/{user,system}/*.service.in`` in the source tree,
``libraryfs/daemon/systemd/`` once installed; read with :mod:`importlib.resources`), with two placeholders
filled at install time with absolute paths (units have no ``$PATH`` worth trusting, rclone's mount docs):
``@LIBRARYFS@`` (this installation's ``libraryfs`` console script) and ``@KILL@`` (``kill`` for
``ExecReload``). ``verify`` runs ``systemd-analyze verify`` on the installed templates; it needs no running
systemd (Debian's ``systemd`` package is enough). Design and choices: docs/service.md.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.resources.abc import Traversable
from pathlib import Path

import click

from libraryfs.cli.common import handle_errors
from libraryfs.words import noun

UNITS = ("libraryfs@.service", "libraryfs-indexer@.service")
ENV_EXAMPLE = "libraryfs.env.example"


def templates_dir() -> Traversable:
    """The unit templates shipped as package data of :mod:`libraryfs.daemon` (``systemd/user``,
    ``systemd/system``, ``systemd/libraryfs.env.example``), from a wheel as from a source checkout.

    Raises :class:`click.ClickException` when they are missing (a broken installation).
    """
    d = importlib.resources.files("libraryfs.daemon") / "systemd"
    if not (d / "user" / (UNITS[0] + ".in")).is_file():
        raise click.ClickException(
            f"unit templates missing from the installed package ({d}): reinstall libraryfs, or pass --templates DIR"
        )
    return d


def default_unit_dir(user: bool) -> Path:
    """Where systemd looks for admin/user units: ``/etc/systemd/system`` or
    ``$XDG_CONFIG_HOME/systemd/user`` (``~/.config/systemd/user``)."""
    if user:
        base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        return Path(base) / "systemd" / "user"
    return Path("/etc/systemd/system")


def default_env_dir(user: bool) -> Path:
    """Where the units read their environment files: ``~/.config/libraryfs`` or ``/etc/libraryfs``."""
    if user:
        base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        return Path(base) / "libraryfs"
    return Path("/etc/libraryfs")


def find_executable(exe: str | None) -> str:
    """Absolute path of the ``libraryfs`` console script (``exe`` if given). Raises ClickException."""
    cand = exe or shutil.which("libraryfs")
    if not cand:
        guess = Path(sys.executable).parent / "libraryfs"
        cand = str(guess) if guess.exists() else None
    if not cand:
        raise click.ClickException(
            "the libraryfs command is not on PATH; pass --exe /absolute/path/to/libraryfs"
        )
    path = os.path.abspath(cand)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise click.ClickException(f"{path} is not an executable file")
    return path


def render(template: str, libraryfs_exe: str, kill_exe: str) -> str:
    """Fill the placeholders of one unit template; raises ClickException if one is left unfilled."""
    text = template.replace("@LIBRARYFS@", libraryfs_exe).replace("@KILL@", kill_exe)
    left = sorted(set(re.findall(r"@[A-Z_]+@", text)))
    if left:
        raise click.ClickException(
            f"unfilled {noun(len(left), 'placeholder')} {', '.join(left)} in a unit template"
        )
    return text


def rendered_units(user: bool, exe: str | None = None, templates: str | None = None) -> dict[str, str]:
    """``{unit file name: text}`` of the user or system variant, with absolute paths filled in."""
    tdir: Traversable = Path(templates) if templates else templates_dir()
    libraryfs_exe = find_executable(exe)
    kill_exe = shutil.which("kill") or "/bin/kill"
    out = {}
    for name in UNITS:
        src = tdir / ("user" if user else "system") / (name + ".in")
        try:
            out[name] = render(src.read_text(), libraryfs_exe, os.path.abspath(kill_exe))
        except OSError as e:
            raise click.ClickException(f"cannot read unit template {src}: {e.strerror}") from None
    return out


@click.group()
def units() -> None:
    """Install and check the systemd units (libraryfs@NAME, libraryfs-indexer@NAME)."""


@units.command("install")
@click.option("--user", is_flag=True, help="User units (systemctl --user) instead of system units.")
@click.option(
    "--prefix",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory to write the units into [default: ~/.config/systemd/user with --user, "
    "/etc/systemd/system without].",
)
@click.option(
    "--exe",
    type=click.Path(dir_okay=False),
    default=None,
    help="Absolute path of the libraryfs command the units run [default: the one on PATH].",
)
@click.option(
    "--templates",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Directory holding user/ and system/ unit templates [default: the ones shipped with libraryfs].",
)
@click.option(
    "--env-example/--no-env-example",
    default=True,
    show_default=True,
    help="Also write libraryfs.env.example into the environment-file directory.",
)
@click.option("--dry-run", is_flag=True, help="Print the units instead of writing them.")
@handle_errors
def install(
    user: bool, prefix: str | None, exe: str | None, templates: str | None, env_example: bool, dry_run: bool
) -> None:
    """Write the unit templates with this installation's absolute paths."""
    texts = rendered_units(user, exe, templates)
    if dry_run:
        for name, text in texts.items():
            click.echo(f"# --- {name}\n{text}")
        return
    dest = Path(prefix) if prefix else default_unit_dir(user)
    dest.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        path = dest / name
        old = path.read_text() if path.exists() else None
        if old != text:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        click.echo(f"{'unchanged' if old == text else 'updated' if old else 'wrote'} {path}")
    if env_example:
        env_dir = dest if prefix else default_env_dir(user)
        env_dir.mkdir(parents=True, exist_ok=True)
        tdir: Traversable = Path(templates) if templates else templates_dir()
        target = env_dir / ENV_EXAMPLE
        target.write_text((tdir / ENV_EXAMPLE).read_text())
        click.echo(
            f"wrote {target} (copy it to {'libraryfs.env' if not prefix else 'the env file'} and edit)"
        )
    ctl = "systemctl --user" if user else "systemctl"
    if not prefix:
        click.echo(
            f"next: {ctl} daemon-reload && {ctl} enable --now libraryfs@NAME "
            f"(after `libraryfs init {'~/.local/share' if user else '/var/lib'}/libraryfs/NAME`)"
        )


def verify_units(paths: list[str], user: bool) -> tuple[bool, list[str]]:
    """Run ``systemd-analyze [--user] verify --man=no`` on unit files; ``(ok, lines about our units)``.

    ``ok`` is False on a non-zero exit or any message naming one of our units (unknown keys are only
    warnings for systemd, but a typo in a unit is an error for us). Needs no running systemd; user mode
    gets a temporary ``XDG_RUNTIME_DIR`` when none is set. Raises ClickException if systemd-analyze is
    missing.
    """
    exe = shutil.which("systemd-analyze")
    if not exe:
        raise click.ClickException("systemd-analyze not found (apt-get install systemd)")
    dirs = sorted({os.path.dirname(os.path.abspath(p)) for p in paths})
    env = dict(os.environ, SYSTEMD_UNIT_PATH=":".join(dirs) + ":", SYSTEMD_LOG_COLOR="0")
    with tempfile.TemporaryDirectory(prefix="libraryfs-verify-") as rt:
        if user and not env.get("XDG_RUNTIME_DIR"):
            env["XDG_RUNTIME_DIR"] = rt
        cmd = (
            [exe]
            + (["--user"] if user else [])
            + ["verify", "--man=no"]
            + [os.path.abspath(p) for p in paths]
        )
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    ours = [ln for ln in lines if "libraryfs" in ln]
    return r.returncode == 0 and not ours, ours or ([] if r.returncode == 0 else lines[-5:])


@units.command("verify")
@click.option("--user", is_flag=True, help="Check the user units (systemd-analyze --user).")
@click.option(
    "--prefix",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory holding the installed units [default: where `units install` writes them].",
)
@handle_errors
def verify(user: bool, prefix: str | None) -> None:
    """Check the installed units with `systemd-analyze verify` (exit status 1 on any problem)."""
    dest = Path(prefix) if prefix else default_unit_dir(user)
    paths = [str(dest / n) for n in UNITS]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise click.ClickException(
            f"{missing[0]} not found (run `libraryfs units install"
            f"{' --user' if user else ''}{' --prefix ' + prefix if prefix else ''}`)"
        )
    ok, lines = verify_units(paths, user)
    for ln in lines:
        click.echo(ln, err=True)
    if not ok:
        raise click.ClickException(f"systemd-analyze verify found problems in the units in {dest}")
    click.echo(f"ok: {', '.join(UNITS)} in {dest} pass systemd-analyze{' --user' if user else ''} verify")


commands = [units]
